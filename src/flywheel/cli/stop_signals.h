// SIGINT/SIGTERM as a stop request for the long-running commands (learner, actor). Construct
// it before any other thread starts: it blocks the two signals in the calling thread (new
// threads inherit the mask) and waits for them on a thread of its own, which sets stop().
#ifndef FLYWHEEL_CLI_STOP_SIGNALS_H_
#define FLYWHEEL_CLI_STOP_SIGNALS_H_

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <thread>

namespace flywheel::cli {

class StopSignals {
 public:
  StopSignals() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    waiter_ = std::thread([this] {
      const timespec poll = {0, 200 * 1000 * 1000};  // recheck done_ five times a second
      while (!done_.load()) {
        const int signal = sigtimedwait(&signals_, nullptr, &poll);
        if (signal > 0) {
          signal_.store(signal);
          stop_.store(true);
        }
      }
    });
  }
  ~StopSignals() {
    done_.store(true);
    waiter_.join();
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  const std::atomic<bool>& stop() const { return stop_; }
  int signal() const { return signal_.load(); }

 private:
  sigset_t signals_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::atomic<int> signal_{0};
  std::thread waiter_;
};

}  // namespace flywheel::cli

#endif  // FLYWHEEL_CLI_STOP_SIGNALS_H_
