// SIGINT/SIGTERM as a stop request for the long-running commands (learner, actor): while a
// StopSignals exists, either signal sets stop() instead of killing the process, whichever
// thread the kernel delivers it to (libraries start threads before main, so blocking the
// signals in one thread is not enough). One instance at a time.
#ifndef FLYWHEEL_CLI_STOP_SIGNALS_H_
#define FLYWHEEL_CLI_STOP_SIGNALS_H_

#include <signal.h>

#include <atomic>

namespace flywheel::cli {

class StopSignals {
 public:
  StopSignals() {
    Flag().store(false);
    struct sigaction action = {};
    action.sa_handler = &StopSignals::Handle;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~StopSignals() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  const std::atomic<bool>& stop() const { return Flag(); }

 private:
  static std::atomic<bool>& Flag() {
    static std::atomic<bool> flag{false};  // lock-free: safe to set in a signal handler
    return flag;
  }
  static void Handle(int /*signal*/) { Flag().store(true); }

  struct sigaction previous_int_ = {};
  struct sigaction previous_term_ = {};
};

}  // namespace flywheel::cli

#endif  // FLYWHEEL_CLI_STOP_SIGNALS_H_
