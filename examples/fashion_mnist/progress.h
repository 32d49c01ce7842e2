// examples/fashion_mnist/progress.h: a one-line progress bar for a training epoch on stderr:
// batches done/total, running loss, samples/s and ETA. On a terminal it redraws in place with
// '\r' at most 10 times a second; when stderr is a file or pipe it prints a plain line every
// few seconds instead (logs stay readable). Not here: anything about training itself.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace fashion_mnist {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total_batches)
      : label_(std::move(label)), total_(total_batches), tty_(isatty(fileno(stderr)) != 0), start_(now()) {}

  // Whether update() would draw now: callers use it to skip reading the loss (a device sync)
  // when nothing will be shown.
  bool due(int64_t done) const {
    const double since = now() - last_draw_;
    return done == total_ || since >= (tty_ ? 0.1 : 5.0);
  }

  void update(int64_t done, int64_t samples, double running_loss) {
    if (!due(done)) return;
    last_draw_ = now();
    const double elapsed = last_draw_ - start_;
    const double rate = elapsed > 0 ? double(samples) / elapsed : 0.0;
    const double eta = done > 0 ? elapsed * double(total_ - done) / double(done) : 0.0;
    constexpr int kWidth = 24;
    const int filled = total_ > 0 ? int(kWidth * done / total_) : kWidth;
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "%s%s [%s] %lld/%lld loss %.4f  %.0f samples/s  %s %s%s", tty_ ? "\r" : "", label_.c_str(),
                 bar.c_str(), (long long)done, (long long)total_, running_loss, rate, done == total_ ? "took" : "ETA",
                 format_seconds(done == total_ ? elapsed : eta).c_str(), tty_ ? "\x1b[K" : "\n");
    if (tty_ && done == total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

  static std::string format_seconds(double s) {
    char buf[32];
    if (s < 60) {
      std::snprintf(buf, sizeof buf, "%.1fs", s);
    } else {
      std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
    }
    return buf;
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  std::string label_;
  int64_t total_;
  bool tty_;
  double start_;
  double last_draw_ = -1e9;
};

}  // namespace fashion_mnist
