// Happens-before edges of abseil's synchronisation for ThreadSanitizer.
//
// TSan reports a race wherever two threads touch memory without an ordering it has seen. It sees
// the pthread calls it intercepts and the atomics of instrumented code, but Debian's abseil is
// not built with TSan: absl::Mutex, CondVar and Notification order their threads with atomics and
// futexes inside libabsl_synchronization.so, out of its sight, so every field guarded by an
// absl::Mutex would be reported as a race. Linked into the tests of the -fsanitize=thread build
// only (cmake/flywheel.cmake), this file defines their out-of-line entry points itself. Each one
// calls the library's own (dlsym(RTLD_NEXT)) and tells TSan the edge:
//
//   Lock / LockWhen… / TryLock (taken)  ─▶ __tsan_acquire(mu) after      unlock → release(mu)
//   Await… / CondVar::Wait…             ─▶ release(mu) before, acquire(mu) after
//   a Condition of Await… / LockWhen…   ─▶ acquire(mu) before each evaluation, release after
//   Notification::Notify                ─▶ release(flag) before; WaitForNotification… acquire(flag)
//
// The library's own calls between these functions go through the PLT, so they are seen too. What
// TSan loses is lock-order (deadlock) checking of these mutexes, not race detection. The symbol
// names are those of abseil 20220623 (Debian 12); a missing one aborts with its name.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

#define FLYWHEEL_STRINGIFY_(x) #x
#define FLYWHEEL_STRINGIFY(x) FLYWHEEL_STRINGIFY_(x)

// "_ZN4absl" + <length><inline namespace> + `rest`, e.g. rest = "5Mutex4LockEv".
template <typename F>
F Real(const char* prefix, const char* rest) {
  const std::string ns = FLYWHEEL_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = prefix + std::to_string(ns.size()) + ns + rest;
  void* f = dlsym(RTLD_NEXT, name.c_str());
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found in abseil: update %s\n", name.c_str(),
                 __FILE__);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

#define REAL(type, prefix, rest)                     \
  static const auto real = Real<type>(prefix, rest); \
  (void)0

void Acquire(const void* p) { __tsan_acquire(const_cast<void*>(p)); }
void Release(const void* p) { __tsan_release(const_cast<void*>(p)); }

// A condition evaluated with the mutex held, and TSan told so. abseil evaluates a waiter's
// condition inside Await / LockWhen (on the waiter's thread once it holds the mutex again, or on
// an unlocking thread), before the wrapper below returns and can call Acquire.
class AcquiringCondition {
 public:
  AcquiringCondition(absl::Mutex* mu, const absl::Condition& cond) : mu_(mu), cond_(&cond) {}
  absl::Condition Get() { return absl::Condition(&Eval, this); }

 private:
  // Release after too: the waiter may give the mutex up again inside the call when false.
  static bool Eval(AcquiringCondition* c) {
    Acquire(c->mu_);
    const bool holds = c->cond_->Eval();
    Release(c->mu_);
    return holds;
  }
  absl::Mutex* mu_;
  const absl::Condition* cond_;
};

// The flag Notify sets and HasBeenNotified reads (inline, so instrumented, with acquire order).
const void* Flag(const absl::Notification* n) {
  static_assert(sizeof(absl::Notification) == 2 * sizeof(void*),
                "absl::Notification is no longer {Mutex mutex_; atomic<bool> notified_yet_;}");
  return reinterpret_cast<const char*>(n) + sizeof(absl::Mutex);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(void (*)(Mutex*), "_ZN4absl", "5Mutex4LockEv");
  real(this);
  Acquire(this);
}
void Mutex::ReaderLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(void (*)(Mutex*), "_ZN4absl", "5Mutex10ReaderLockEv");
  real(this);
  Acquire(this);
}
bool Mutex::TryLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(Mutex*), "_ZN4absl", "5Mutex7TryLockEv");
  const bool taken = real(this);
  if (taken) Acquire(this);
  return taken;
}
bool Mutex::ReaderTryLock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(Mutex*), "_ZN4absl", "5Mutex13ReaderTryLockEv");
  const bool taken = real(this);
  if (taken) Acquire(this);
  return taken;
}
void Mutex::Unlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(void (*)(Mutex*), "_ZN4absl", "5Mutex6UnlockEv");
  Release(this);
  real(this);
}
void Mutex::ReaderUnlock() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(void (*)(Mutex*), "_ZN4absl", "5Mutex12ReaderUnlockEv");
  Release(this);
  real(this);
}
void Mutex::LockWhen(const Condition& cond) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(void (*)(Mutex*, const Condition&), "_ZN4absl", "5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, AcquiringCondition(this, cond).Get());
  Acquire(this);
}
void Mutex::ReaderLockWhen(const Condition& cond) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(void (*)(Mutex*, const Condition&), "_ZN4absl", "5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, AcquiringCondition(this, cond).Get());
  Acquire(this);
}
// The timed forms hold the mutex on return whether or not the condition became true.
bool Mutex::LockWhenWithTimeout(const Condition& cond,
                                Duration timeout) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(Mutex*, const Condition&, Duration), "_ZN4absl",
       "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool r = real(this, AcquiringCondition(this, cond).Get(), timeout);
  Acquire(this);
  return r;
}
bool Mutex::LockWhenWithDeadline(const Condition& cond,
                                 Time deadline) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(Mutex*, const Condition&, Time), "_ZN4absl",
       "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool r = real(this, AcquiringCondition(this, cond).Get(), deadline);
  Acquire(this);
  return r;
}
bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond,
                                      Duration timeout) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(Mutex*, const Condition&, Duration), "_ZN4absl",
       "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool r = real(this, AcquiringCondition(this, cond).Get(), timeout);
  Acquire(this);
  return r;
}
bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond,
                                       Time deadline) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(Mutex*, const Condition&, Time), "_ZN4absl",
       "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool r = real(this, AcquiringCondition(this, cond).Get(), deadline);
  Acquire(this);
  return r;
}
// Await releases the mutex while it waits and holds it again on return.
void Mutex::Await(const Condition& cond) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(void (*)(Mutex*, const Condition&), "_ZN4absl", "5Mutex5AwaitERKNS0_9ConditionE");
  Release(this);
  real(this, AcquiringCondition(this, cond).Get());
  Acquire(this);
}
bool Mutex::AwaitWithTimeout(const Condition& cond,
                             Duration timeout) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(Mutex*, const Condition&, Duration), "_ZN4absl",
       "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Release(this);
  const bool r = real(this, AcquiringCondition(this, cond).Get(), timeout);
  Acquire(this);
  return r;
}
bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(Mutex*, const Condition&, Time), "_ZN4absl",
       "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Release(this);
  const bool r = real(this, AcquiringCondition(this, cond).Get(), deadline);
  Acquire(this);
  return r;
}

void CondVar::Wait(Mutex* mu) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(void (*)(CondVar*, Mutex*), "_ZN4absl", "7CondVar4WaitEPNS0_5MutexE");
  Release(mu);
  real(this, mu);
  Acquire(mu);
}
bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(CondVar*, Mutex*, Duration), "_ZN4absl",
       "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Release(mu);
  const bool r = real(this, mu, timeout);
  Acquire(mu);
  return r;
}
bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  REAL(bool (*)(CondVar*, Mutex*, Time), "_ZN4absl",
       "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Release(mu);
  const bool r = real(this, mu, deadline);
  Acquire(mu);
  return r;
}

void Notification::Notify() {
  REAL(void (*)(Notification*), "_ZN4absl", "12Notification6NotifyEv");
  Release(Flag(this));
  real(this);
}
void Notification::WaitForNotification() const {
  REAL(void (*)(const Notification*), "_ZNK4absl", "12Notification19WaitForNotificationEv");
  real(this);
  Acquire(Flag(this));
}
bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  REAL(bool (*)(const Notification*, Duration), "_ZNK4absl",
       "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const bool notified = real(this, timeout);
  if (notified) Acquire(Flag(this));
  return notified;
}
bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  REAL(bool (*)(const Notification*, Time), "_ZNK4absl",
       "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE");
  const bool notified = real(this, deadline);
  if (notified) Acquire(Flag(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
