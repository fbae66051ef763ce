// Progress of a long run (a tuning sweep, a self-test, a load run) with an estimate of the time
// left, on stderr and only when stderr is a terminal: a pipe, a file or a test log gets nothing.
// The estimate is the elapsed time scaled by the work left, in whatever units the caller counts
// (points, cases, seconds of load). Thread safety: one thread updates a Progress.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace attnrt::tools {

class Progress {
 public:
  // `total` units of work; `what` names the run ("sweep", "check").
  Progress(std::string what, double total)
      : what_(std::move(what)), total_(total), enabled_(isatty(fileno(stderr)) == 1) {}
  ~Progress() { Done(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` units of `total` finished; `note` says which (e.g. "rate 500 window 200 us").
  void Update(double done, const std::string& note = "") {
    if (!enabled_) return;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    std::string left = "?";
    if (done > 0 && done <= total_) left = FormatSeconds(elapsed * (total_ - done) / done);
    std::fprintf(stderr, "\r\033[K%s: %.0f%% (%s elapsed, ~%s left)%s%s", what_.c_str(),
                 total_ > 0 ? 100.0 * done / total_ : 100.0, FormatSeconds(elapsed).c_str(),
                 left.c_str(), note.empty() ? "" : ": ", note.c_str());
    std::fflush(stderr);
    shown_ = true;
  }
  // Clears the line, so that what is printed next starts on a clean one.
  void Done() {
    if (!shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
  }
  bool enabled() const { return enabled_; }

  static std::string FormatSeconds(double s) {
    char buf[32];
    if (s < 60) {
      std::snprintf(buf, sizeof buf, "%.0f s", s);
    } else if (s < 3600) {
      std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s) / 60,
                    static_cast<int>(s) % 60);
    } else {
      std::snprintf(buf, sizeof buf, "%d h %02d min", static_cast<int>(s) / 3600,
                    static_cast<int>(s) / 60 % 60);
    }
    return buf;
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_;
  double total_;
  bool enabled_;
  bool shown_ = false;
  Clock::time_point start_ = Clock::now();
};

}  // namespace attnrt::tools
