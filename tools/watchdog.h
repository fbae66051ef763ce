// Watchdog: a run that outlives its bound leaves evidence and exits, instead of hanging until an
// outer timeout kills it without a word. While armed, a thread waits for the destructor; if
// `seconds` pass first it calls `on_expiry` (print what the run was doing) and exits the process
// with status 3. Shared by the load tools and benchmarks (loadgen_tcp, api_host_path_bench).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace attnrt::tools {

class Watchdog {
 public:
  Watchdog(double seconds, std::function<void()> on_expiry)
      : thread_([this, seconds, on_expiry = std::move(on_expiry)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done_; })) {
            return;
          }
          if (on_expiry) on_expiry();
          std::fflush(stdout);
          std::fflush(stderr);
          std::_Exit(3);
        }) {}
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
  std::thread thread_;  // last: started once the members it uses exist
};

}  // namespace attnrt::tools
