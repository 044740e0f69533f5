// Which trajectory ids a buffer holds, and which it let go of recently: what makes inserts
// idempotent. An actor retries an insert whose call failed (the connection broke, the buffer
// died); when the buffer had committed it before the failure, the retry carries an id the
// buffer already knows, and it is acknowledged without a second copy.
//
//   TryClaim(id) ─ new ─▶ in flight ─ Commit ──▶ held ─ Consume ─▶ consumed (remembered, FIFO)
//                                   └ Abandon ─▶ forgotten (the insert failed: may be retried)
//                ─ in flight / held / consumed: not new (wait for in flight; the rest are
//                  duplicates)
//
// Held ids are every id the buffer holds: in the table, in a pending group, leased to a learner.
// Consumed ids (trained, dropped, handed out) are remembered up to `remember_consumed`, the
// oldest forgotten first: a retry older than that many consumptions is not recognised. After a
// restart the held ids come back from the store's items and the consumed ones from its bounded
// record (durable_store.h). Not thread-safe: the Buffer serialises it.
#ifndef FLYWHEEL_BUFFER_ID_LEDGER_H_
#define FLYWHEEL_BUFFER_ID_LEDGER_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace flywheel {

class IdLedger {
 public:
  explicit IdLedger(int64_t remember_consumed) : remember_consumed_(remember_consumed) {}

  enum class Claim { kNew, kInFlight, kDuplicate };
  // kNew: `id` was unknown and is now in flight (exactly one of Commit / Abandon follows).
  Claim TryClaim(absl::string_view id);
  // In flight -> held. No-op in any other state (a member consumed before its insert returned
  // stays consumed).
  void Commit(absl::string_view id);
  // In flight -> unknown. No-op in any other state.
  void Abandon(absl::string_view id);
  // Any state (or unknown) -> consumed, remembered among the last `remember_consumed`.
  void Consume(absl::string_view id);
  // After a restart: an id the store holds.
  void RestoreHeld(absl::string_view id);

  bool IsHeld(absl::string_view id) const;
  bool IsConsumed(absl::string_view id) const;
  int64_t held() const { return held_; }
  int64_t remembered() const { return static_cast<int64_t>(consumed_order_.size()); }

 private:
  enum class State : uint8_t { kInFlight, kHeld, kConsumed };

  const int64_t remember_consumed_;
  absl::flat_hash_map<std::string, State> ids_;
  std::deque<std::string> consumed_order_;  // oldest first, to bound the consumed ids
  int64_t held_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_ID_LEDGER_H_
