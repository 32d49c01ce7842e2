// examples/fashion_mnist/report.h: what the trainer writes about its epochs: the per-epoch
// record, log.jsonl (one JSON object per epoch) and curves.svg (a small hand-written plot of
// train/test loss and test accuracy), both rewritten whole and atomically (temp + rename) each
// epoch, and a compact text form of the history that the checkpoint carries so a resumed run
// redraws the same curves. Not here: training, checkpoints themselves (checkpoint.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/serialize.h"

namespace fashion_mnist {

struct EpochRecord {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0, test_loss = 0, test_acc = 0, lr = 0, seconds = 0, samples_per_s = 0;
  double loss_scale = 1;      // the GradScaler's scale at the end of the epoch (1 without --amp f16)
  int64_t skipped_steps = 0;  // optimizer steps the scaler skipped in this epoch (Inf/NaN gradients)
};

// The engine's atomic write (engine/serialize.h: temp file, fsync, rename, fsync of the folder).
using brisk::write_file_atomic;

inline std::string log_jsonl(const std::vector<EpochRecord>& history) {
  std::string out;
  char line[512];
  for (const EpochRecord& r : history) {
    std::snprintf(line, sizeof line,
                  "{\"epoch\": %lld, \"train_loss\": %.6f, \"test_loss\": %.6f, \"test_acc\": %.4f, \"lr\": %.6g, "
                  "\"seconds\": %.3f, \"samples_per_s\": %.1f, \"loss_scale\": %.9g, \"skipped_steps\": %lld}\n",
                  (long long)r.epoch, r.train_loss, r.test_loss, r.test_acc, r.lr, r.seconds, r.samples_per_s,
                  r.loss_scale, (long long)r.skipped_steps);
    out += line;
  }
  return out;
}

// History as "epoch,train_loss,...;epoch,..." with full precision (checkpoint metadata).
inline std::string history_to_string(const std::vector<EpochRecord>& history) {
  std::string out;
  char buf[256];
  for (const EpochRecord& r : history) {
    std::snprintf(buf, sizeof buf, "%lld,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%.17g,%lld;", (long long)r.epoch,
                  r.train_loss, r.test_loss, r.test_acc, r.lr, r.seconds, r.samples_per_s, r.loss_scale,
                  (long long)r.skipped_steps);
    out += buf;
  }
  return out;
}

inline std::vector<EpochRecord> history_from_string(const std::string& text) {
  std::vector<EpochRecord> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (item.empty()) continue;
    EpochRecord r;
    long long epoch = 0, skipped = 0;
    // 9 fields; checkpoints from before --amp have the first 7.
    const int n = std::sscanf(item.c_str(), "%lld,%lf,%lf,%lf,%lf,%lf,%lf,%lf,%lld", &epoch, &r.train_loss,
                              &r.test_loss, &r.test_acc, &r.lr, &r.seconds, &r.samples_per_s, &r.loss_scale, &skipped);
    if (n != 7 && n != 9) throw std::runtime_error("checkpoint: malformed history entry '" + item + "'");
    r.epoch = epoch;
    r.skipped_steps = skipped;
    out.push_back(r);
  }
  return out;
}

// Two panels side by side: losses (train solid, test dashed) and test accuracy (%), epochs on x.
inline std::string curves_svg(const std::vector<EpochRecord>& history, const std::string& title) {
  constexpr double kW = 320, kH = 240, kLeft = 48, kRight = 12, kTop = 28, kBottom = 32;
  std::ostringstream svg;
  svg.precision(5);
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << 2 * kW << "\" height=\"" << kH + 20
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kW << "\" y=\"14\" text-anchor=\"middle\" font-size=\"13\">" << title << "</text>\n";
  const double n = std::max<double>(1, double(history.size()));

  struct Series {
    std::vector<double> y;
    const char* color;
    const char* dash;
    const char* name;
  };
  auto panel = [&](double x0, const std::vector<Series>& series, const char* ylabel, bool percent) {
    double lo = 1e300, hi = -1e300;
    for (const Series& s : series)
      for (double v : s.y) lo = std::min(lo, v), hi = std::max(hi, v);
    if (lo > hi) lo = 0, hi = 1;
    if (hi - lo < 1e-9) hi = lo + 1e-3;
    const double pad = 0.05 * (hi - lo);
    lo -= pad, hi += pad;
    const double px0 = x0 + kLeft, px1 = x0 + kW - kRight, py0 = kTop, py1 = kH - kBottom + 20;
    auto X = [&](double i) { return n <= 1 ? (px0 + px1) / 2 : px0 + (px1 - px0) * i / (n - 1); };
    auto Y = [&](double v) { return py1 - (py1 - py0) * (v - lo) / (hi - lo); };
    svg << "<rect x=\"" << px0 << "\" y=\"" << py0 << "\" width=\"" << px1 - px0 << "\" height=\"" << py1 - py0
        << "\" fill=\"none\" stroke=\"#888\"/>\n";
    for (int k = 0; k <= 4; ++k) {  // y ticks
      const double v = lo + (hi - lo) * k / 4;
      char tick[32];
      std::snprintf(tick, sizeof tick, percent ? "%.1f" : "%.3f", percent ? v * 100 : v);
      svg << "<text x=\"" << px0 - 4 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">" << tick << "</text>\n";
    }
    for (size_t i = 0; i < history.size(); ++i) {  // x ticks: epoch numbers
      svg << "<text x=\"" << X(double(i)) << "\" y=\"" << py1 + 14 << "\" text-anchor=\"middle\">" << history[i].epoch
          << "</text>\n";
    }
    svg << "<text x=\"" << (px0 + px1) / 2 << "\" y=\"" << py1 + 27 << "\" text-anchor=\"middle\">epoch</text>\n"
        << "<text x=\"" << px0 + 4 << "\" y=\"" << py0 - 4 << "\">" << ylabel << "</text>\n";
    double legend_y = py0 + 14;
    for (const Series& s : series) {
      svg << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\" stroke-dasharray=\"" << s.dash
          << "\" points=\"";
      for (size_t i = 0; i < s.y.size(); ++i) svg << X(double(i)) << "," << Y(s.y[i]) << " ";
      svg << "\"/>\n";
      for (size_t i = 0; i < s.y.size(); ++i) {
        svg << "<circle cx=\"" << X(double(i)) << "\" cy=\"" << Y(s.y[i]) << "\" r=\"2.5\" fill=\"" << s.color
            << "\"/>\n";
      }
      svg << "<text x=\"" << px1 - 6 << "\" y=\"" << legend_y << "\" text-anchor=\"end\" fill=\"" << s.color << "\">"
          << s.name << "</text>\n";
      legend_y += 14;
    }
  };

  Series train{{}, "#1f77b4", "none", "train loss"}, test{{}, "#d62728", "5,3", "test loss"};
  Series acc{{}, "#2ca02c", "none", "test accuracy"};
  for (const EpochRecord& r : history) {
    train.y.push_back(r.train_loss);
    test.y.push_back(r.test_loss);
    acc.y.push_back(r.test_acc);
  }
  panel(0, {train, test}, "loss", false);
  panel(kW, {acc}, "test accuracy (%)", true);
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace fashion_mnist
