// examples/speedup_report/report.h: the report's rows and what is written from them: the
// Markdown table (stdout and report.md), results.csv, results.json and speedup.svg (a bar per
// row: samples/s against its reference row, rows not run listed with the reason). Numbers are
// formatted here only; they are measured in run.h. Not here: the measurements, the row table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "examples/speedup_report/run.h"

namespace speedup {

struct Row {
  std::string model{};         // "cnn" or "mlp"
  std::string group{};         // the technique: "data loading", "batch size", ...
  std::string name{};          // the row: "2 workers", ...
  std::string kind = "train";  // "train" (samples/s of training) or "inference" (of the test set)
  std::string device = "cpu";
  std::string reference{};    // the row's name it is compared with (same model); empty: none
  std::string status = "ok";  // "ok", "not run (no GPU)", "not run (no mpirun)", "failed: ..."
  Measured m{};
  bool compared = false;  // speedup and dacc are set
  double speedup = 0;     // samples/s over the reference's
  double dacc = 0;        // test accuracy minus the reference's, in points
  bool ok() const { return status == "ok"; }
};

inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

inline std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

inline std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '<')
      out += "&lt;";
    else if (ch == '>')
      out += "&gt;";
    else if (ch == '&')
      out += "&amp;";
    else if (ch == '"')
      out += "&quot;";
    else
      out += ch;
  }
  return out;
}

inline std::string markdown_table(const std::vector<Row>& rows) {
  std::string out =
      "| model | technique | row | device | samples/s | s / epoch | peak MiB | test acc | speedup | acc change | "
      "notes |\n| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const Row& r : rows) {
    std::string note = r.m.note;
    if (r.kind == "inference")
      note = "inference (s / epoch: one pass over the test set)" + (note.empty() ? "" : "; " + note);
    if (r.reference != "baseline" && !r.reference.empty() && r.ok()) {
      note = "vs " + r.reference + (note.empty() ? "" : "; " + note);
    }
    if (!r.ok()) {
      out += "| " + r.model + " | " + r.group + " | " + r.name + " | " + r.device + " | " + r.status + " | | | | | | " +
             note + " |\n";
      continue;
    }
    out += "| " + r.model + " | " + r.group + " | " + r.name + " | " + r.device + " | " +
           fmt("%.0f", r.m.samples_per_s) + " | " + fmt(r.m.seconds < 1 ? "%.3f" : "%.2f", r.m.seconds) + " | " +
           fmt("%.1f", r.m.peak_mib) + " | " + fmt("%.2f%%", 100 * r.m.test_acc) + " | " +
           (r.compared ? fmt("%.2fx", r.speedup) : std::string()) + " | " +
           (r.compared ? fmt("%+.2f", r.dacc) : std::string()) + " | " + note + " |\n";
  }
  return out;
}

inline std::string results_csv(const std::vector<Row>& rows) {
  std::string out =
      "model,technique,row,kind,device,status,samples_per_s,seconds_per_epoch,peak_mib,test_acc,latency_ms,reference,"
      "speedup,acc_change_points,notes\n";
  for (const Row& r : rows) {
    const bool ok = r.ok();
    out += csv_field(r.model) + "," + csv_field(r.group) + "," + csv_field(r.name) + "," + r.kind + "," + r.device +
           "," + csv_field(r.status) + "," + (ok ? fmt("%.1f", r.m.samples_per_s) : "") + "," +
           (ok ? fmt("%.4f", r.m.seconds) : "") + "," + (ok ? fmt("%.2f", r.m.peak_mib) : "") + "," +
           (ok ? fmt("%.4f", r.m.test_acc) : "") + "," + (ok && r.m.latency_ms > 0 ? fmt("%.3f", r.m.latency_ms) : "") +
           "," + csv_field(r.reference) + "," + (r.compared ? fmt("%.4f", r.speedup) : "") + "," +
           (r.compared ? fmt("%.2f", r.dacc) : "") + "," + csv_field(r.m.note) + "\n";
  }
  return out;
}

// Non-finite numbers become null (JSON has no NaN).
inline nlohmann::json json_number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

inline std::string results_json(const std::vector<Row>& rows, const nlohmann::json& run) {
  nlohmann::json out = {{"run", run}, {"rows", nlohmann::json::array()}};
  for (const Row& r : rows) {
    nlohmann::json j = {{"model", r.model},   {"technique", r.group}, {"row", r.name},           {"kind", r.kind},
                        {"device", r.device}, {"status", r.status},   {"reference", r.reference}};
    if (r.ok()) {
      j["samples_per_s"] = json_number(r.m.samples_per_s);
      j["seconds_per_epoch"] = json_number(r.m.seconds);
      j["peak_mib"] = json_number(r.m.peak_mib);
      j["test_acc"] = json_number(r.m.test_acc);
      if (r.m.latency_ms > 0) j["latency_ms"] = json_number(r.m.latency_ms);
    }
    if (r.compared) {
      j["speedup"] = json_number(r.speedup);
      j["acc_change_points"] = json_number(r.dacc);
    }
    j["notes"] = r.m.note;
    out["rows"].push_back(std::move(j));
  }
  return out.dump(2) + "\n";
}

// One horizontal bar per compared row (speedup on a linear axis with the 1x line), grouped by
// model; rows not run are listed in grey with their reason, at 0.
inline std::string speedup_svg(const std::vector<Row>& rows, const std::string& title, const std::string& subtitle) {
  std::vector<const Row*> shown;
  for (const Row& r : rows)
    if (r.compared || !r.ok()) shown.push_back(&r);
  double top = 2;
  for (const Row* r : shown)
    if (r->compared) top = std::max(top, r->speedup);
  top = std::ceil(top * 2) / 2;
  const int label_w = 380, plot_w = 460, right_w = 150, row_h = 18, head = 64;
  const int width = label_w + plot_w + right_w, height = head + row_h * int(shown.size()) + 40;
  auto x_of = [&](double s) { return label_w + plot_w * std::min(s, top) / top; };
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) + "\" height=\"" +
                    std::to_string(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += "<text x=\"10\" y=\"22\" font-size=\"16\" font-weight=\"bold\">" + xml_escape(title) + "</text>\n";
  out += "<text x=\"10\" y=\"42\" fill=\"#444\">" + xml_escape(subtitle) + "</text>\n";
  const int plot_bottom = head + row_h * int(shown.size());
  for (double t = 0; t <= top + 1e-9; t += top > 4 ? 1.0 : 0.5) {
    const double x = x_of(t);
    out += "<line x1=\"" + fmt("%.1f", x) + "\" y1=\"" + std::to_string(head - 6) + "\" x2=\"" + fmt("%.1f", x) +
           "\" y2=\"" + std::to_string(plot_bottom) + "\" stroke=\"" + (t == 1.0 ? "#000" : "#ddd") + "\"/>\n";
    out += "<text x=\"" + fmt("%.1f", x) + "\" y=\"" + std::to_string(plot_bottom + 16) +
           "\" text-anchor=\"middle\" fill=\"#444\">" + fmt("%gx", t) + "</text>\n";
  }
  out += "<text x=\"" + std::to_string(label_w + plot_w / 2) + "\" y=\"" + std::to_string(plot_bottom + 32) +
         "\" text-anchor=\"middle\" fill=\"#444\">samples/s over the reference row (training; inference for "
         "the inference rows)</text>\n";
  for (size_t i = 0; i < shown.size(); ++i) {
    const Row& r = *shown[i];
    const int y = head + row_h * int(i);
    const std::string label = r.model + ": " + r.group + ": " + r.name + (r.kind == "inference" ? " (inference)" : "");
    out += "<text x=\"" + std::to_string(label_w - 6) + "\" y=\"" + std::to_string(y + 13) + "\" text-anchor=\"end\"" +
           (r.ok() ? "" : " fill=\"#999\"") + ">" + xml_escape(label) + "</text>\n";
    if (!r.ok()) {
      // Right of the 1x line, which would cut through the text.
      out += "<text x=\"" + fmt("%.1f", x_of(1.0) + 4) + "\" y=\"" + std::to_string(y + 13) + "\" fill=\"#999\">" +
             xml_escape(r.status) + "</text>\n";
      continue;
    }
    const double x1 = x_of(r.speedup);
    const char* color = r.speedup >= 1.05 ? "#2e7d32" : (r.speedup <= 0.95 ? "#c62828" : "#9e9e9e");
    out += "<rect x=\"" + std::to_string(label_w) + "\" y=\"" + std::to_string(y + 3) + "\" width=\"" +
           fmt("%.1f", x1 - label_w) + "\" height=\"" + std::to_string(row_h - 6) + "\" fill=\"" + color + "\"/>\n";
    out += "<text x=\"" + fmt("%.1f", std::max(x1, x_of(1.0)) + 4) + "\" y=\"" + std::to_string(y + 13) + "\">" +
           fmt("%.2fx", r.speedup) + "  " + fmt("%+.1f pts", r.dacc) + "</text>\n";
  }
  return out + "</svg>\n";
}

}  // namespace speedup
