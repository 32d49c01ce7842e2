// examples/training_strategies/lr_plot.h: pictures of learning-rate curves (one value per
// optimizer step): ascii_plot() draws one curve as a small character plot for the terminal,
// lr_curves_svg() draws all curves in one hand-written SVG: the learning rate on a log scale
// and each curve divided by its peak on a linear scale, one polyline per strategy, epoch ticks
// and a legend. Not here: training, or writing files (main.cpp writes them atomically).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace training_strategies {

// Up to 2 points per bucket (the lowest and the highest, in step order) when a curve has more
// steps than buckets: a drop or a spike survives, and the SVG stays small for long runs.
inline std::vector<std::pair<int64_t, double>> decimate(const std::vector<double>& y, int64_t buckets) {
  std::vector<std::pair<int64_t, double>> out;
  const int64_t n = int64_t(y.size());
  if (n <= 2 * buckets) {
    for (int64_t i = 0; i < n; ++i) out.emplace_back(i, y[size_t(i)]);
    return out;
  }
  for (int64_t b = 0; b < buckets; ++b) {
    const int64_t begin = b * n / buckets, end = (b + 1) * n / buckets;
    int64_t lo = begin, hi = begin;
    for (int64_t i = begin; i < end; ++i) {
      if (y[size_t(i)] < y[size_t(lo)]) lo = i;
      if (y[size_t(i)] > y[size_t(hi)]) hi = i;
    }
    out.emplace_back(std::min(lo, hi), y[size_t(std::min(lo, hi))]);
    if (lo != hi) out.emplace_back(std::max(lo, hi), y[size_t(std::max(lo, hi))]);
  }
  return out;
}

// A width x height character plot of y (one value per step), y from 0 (or its minimum when
// negative) to its maximum: each column covers width/steps steps and is filled from their
// lowest to their highest value, so sudden drops show as vertical bars. The x axis marks
// epoch boundaries with '+'.
inline std::string ascii_plot(const std::vector<double>& y, int width, int height, int64_t steps_per_epoch) {
  if (y.empty() || width < 2 || height < 2) return "  (no steps)\n";
  const int64_t n = int64_t(y.size());
  const double hi_v = *std::max_element(y.begin(), y.end());
  const double lo = std::min(0.0, *std::min_element(y.begin(), y.end()));
  const double hi = hi_v > lo ? hi_v : lo + 1;
  auto row_of = [&](double v) {
    const long r = std::lround((hi - v) / (hi - lo) * (height - 1));
    return int(std::clamp<long>(r, 0, height - 1));
  };
  std::vector<std::string> grid(size_t(height), std::string(size_t(width), ' '));
  for (int c = 0; c < width; ++c) {
    const int64_t begin = int64_t(c) * n / width;
    const int64_t end = std::max(begin + 1, int64_t(c + 1) * n / width);
    if (begin >= n) break;
    double mn = y[size_t(begin)], mx = mn;
    for (int64_t i = begin; i < end && i < n; ++i) mn = std::min(mn, y[size_t(i)]), mx = std::max(mx, y[size_t(i)]);
    for (int r = row_of(mx); r <= row_of(mn); ++r) grid[size_t(r)][size_t(c)] = '*';
  }
  std::string out;
  char label[32];
  for (int r = 0; r < height; ++r) {
    const bool labelled = r == 0 || r == height - 1 || r == (height - 1) / 2;
    if (labelled) {
      std::snprintf(label, sizeof label, "%9.3g |", hi - (hi - lo) * r / (height - 1));
    } else {
      std::snprintf(label, sizeof label, "%9s |", "");
    }
    std::string line = label + grid[size_t(r)];
    line.erase(line.find_last_not_of(' ') + 1);  // no trailing blanks (the label always has '|')
    out += line + "\n";
  }
  std::string axis(size_t(width), '-');
  if (steps_per_epoch > 0) {
    for (int64_t s = steps_per_epoch; s < n; s += steps_per_epoch) axis[size_t(s * width / n)] = '+';
  }
  out += std::string(10, ' ') + "+" + axis + "\n";
  const std::string right = std::to_string(n) + " steps (+: epoch)";
  std::string bottom = std::string(11, ' ') + "0";
  const size_t end_col = 11 + size_t(width);
  if (bottom.size() + 1 + right.size() <= end_col) {
    bottom.resize(end_col - right.size(), ' ');
  } else {
    bottom += ' ';
  }
  out += bottom + right + "\n";
  return out;
}

struct Curve {
  std::string name;
  std::vector<double> values;  // one per step
};

inline std::string xml_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

// All curves in two panels (log-scale learning rate; learning rate / its peak) and a legend.
inline std::string lr_curves_svg(const std::vector<Curve>& curves, int64_t steps_per_epoch, const std::string& title) {
  constexpr double kPanelW = 380, kPanelH = 300, kTop = 56, kLeft = 64, kGap = 76, kLegendW = 200;
  const double legend_h = 18.0 * double(curves.size()) + 20;
  const double width = kLeft + 2 * kPanelW + kGap + 24 + kLegendW;
  const double height = std::max(kTop + kPanelH + 56, kTop + legend_h + 10);
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  static const char* kDashes[] = {"none", "7,3", "2,2"};
  auto color = [](size_t i) { return kColors[i % 10]; };
  auto dash = [](size_t i) { return kDashes[(i / 10) % 3]; };

  int64_t steps = 1;
  double min_pos = 1e300, max_v = 0;
  for (const Curve& c : curves) {
    steps = std::max<int64_t>(steps, int64_t(c.values.size()));
    for (double v : c.values) {
      if (v > 0) min_pos = std::min(min_pos, v);
      max_v = std::max(max_v, v);
    }
  }
  if (max_v <= 0) min_pos = 1e-3, max_v = 1e-2;
  double dec_lo = std::floor(std::log10(min_pos)), dec_hi = std::ceil(std::log10(max_v));
  if (dec_hi <= dec_lo) dec_hi = dec_lo + 1;

  std::ostringstream svg;
  svg.precision(6);
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << (kLeft + kPanelW + kGap / 2) << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">"
      << xml_escape(title) << "</text>\n";

  // One panel: frame, y ticks (given as value -> label), x ticks at epoch boundaries, curves.
  auto panel = [&](double x0, const char* ylabel, const std::vector<std::pair<double, std::string>>& yticks,
                   const auto& y_of) {
    const double px0 = x0, px1 = x0 + kPanelW, py0 = kTop, py1 = kTop + kPanelH;
    auto X = [&](double step) { return px0 + (px1 - px0) * step / double(std::max<int64_t>(1, steps - 1)); };
    svg << "<rect x=\"" << px0 << "\" y=\"" << py0 << "\" width=\"" << kPanelW << "\" height=\"" << kPanelH
        << "\" fill=\"none\" stroke=\"#888\"/>\n";
    for (const auto& [v, text] : yticks) {
      const double y = py1 - (py1 - py0) * v;
      svg << "<line x1=\"" << px0 << "\" x2=\"" << px1 << "\" y1=\"" << y << "\" y2=\"" << y << "\" stroke=\"#eee\"/>\n"
          << "<text x=\"" << px0 - 5 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << text << "</text>\n";
    }
    if (steps_per_epoch > 0) {
      const int64_t epochs = (steps + steps_per_epoch - 1) / steps_per_epoch;
      const int64_t every = std::max<int64_t>(1, epochs / 10);
      for (int64_t e = 0; e <= epochs; e += every) {
        const double x = X(double(std::min(e * steps_per_epoch, steps - 1)));
        svg << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << py1 << "\" y2=\"" << py1 + 4
            << "\" stroke=\"#888\"/>\n"
            << "<text x=\"" << x << "\" y=\"" << py1 + 16 << "\" text-anchor=\"middle\">" << e << "</text>\n";
      }
    }
    svg << "<text x=\"" << (px0 + px1) / 2 << "\" y=\"" << py1 + 32 << "\" text-anchor=\"middle\">epoch (" << steps
        << " optimizer steps)</text>\n"
        << "<text x=\"" << px0 << "\" y=\"" << py0 - 8 << "\" font-size=\"12\">" << ylabel << "</text>\n";
    for (size_t i = 0; i < curves.size(); ++i) {
      const Curve& c = curves[i];
      if (c.values.empty()) continue;
      double peak = 0;
      for (double v : c.values) peak = std::max(peak, v);
      svg << "<polyline fill=\"none\" stroke=\"" << color(i) << "\" stroke-width=\"1.6\" stroke-dasharray=\"" << dash(i)
          << "\" points=\"";
      for (const auto& [step, v] : decimate(c.values, int64_t(kPanelW))) {
        const double frac = std::clamp(y_of(v, peak), 0.0, 1.0);
        svg << X(double(step)) << "," << py1 - (py1 - py0) * frac << " ";
      }
      svg << "\"/>\n";
    }
  };

  std::vector<std::pair<double, std::string>> log_ticks;
  const double decades = dec_hi - dec_lo;
  const int tick_every = decades > 8 ? 2 : 1;
  for (double d = dec_lo; d <= dec_hi; d += tick_every) {
    char t[16];
    std::snprintf(t, sizeof t, "1e%d", int(d));
    log_ticks.emplace_back((d - dec_lo) / decades, t);
  }
  panel(kLeft, "learning rate (log scale)", log_ticks,
        [&](double v, double) { return v > 0 ? (std::log10(v) - dec_lo) / decades : 0.0; });
  std::vector<std::pair<double, std::string>> lin_ticks;
  for (int k = 0; k <= 4; ++k) lin_ticks.emplace_back(k / 4.0 / 1.05, std::to_string(k * 25) + "%");
  panel(kLeft + kPanelW + kGap, "learning rate / its peak", lin_ticks,
        [](double v, double peak) { return peak > 0 ? v / peak / 1.05 : 0.0; });

  const double lx = kLeft + 2 * kPanelW + kGap + 24;
  svg << "<text x=\"" << lx << "\" y=\"" << kTop - 8 << "\" font-size=\"12\">strategy</text>\n";
  for (size_t i = 0; i < curves.size(); ++i) {
    const double y = kTop + 8 + 18.0 * double(i);
    svg << "<line x1=\"" << lx << "\" x2=\"" << lx + 26 << "\" y1=\"" << y << "\" y2=\"" << y << "\" stroke=\""
        << color(i) << "\" stroke-width=\"2\" stroke-dasharray=\"" << dash(i) << "\"/>\n"
        << "<text x=\"" << lx + 32 << "\" y=\"" << y + 4 << "\">" << xml_escape(curves[i].name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace training_strategies
