// The buffer's insert path as the gRPC service runs it, without gRPC: serialized trajectories
// from a client go through DecodeWireTrajectory (the trust boundary) and the valid ones into an
// in-memory Buffer (group assembly, table, rate limiter, selector, staleness filter), with
// samples, learner versions and straggler expiry in between, and the remote learner's side:
// leased samples, acknowledgements and releases, and retried inserts of ids the buffer already
// knows (idempotent by trajectory id). Options come from the input too.
//
// Input (fuzz_input.h): 9 option bytes, then operations:
//   0 insert: a count byte, then that many [u16 length][serialized v1.Trajectory]
//   1 sample: a batch-size byte      2 learner version: a byte      3 clock: seconds byte
//   4 leased sample: a batch-size byte
//   5 acknowledge: a count byte (that many of the leased ids, oldest first, plus one never
//     sampled), a byte whose bit 0 releases the owner's other leases
//   6 retry: a byte choosing an accepted trajectory to insert again
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/buffer/buffer.h"
#include "flywheel/buffer/wire_trajectory.h"
#include "flywheel/core/clock.h"
#include "fuzz_input.h"
#include "quiet_protobuf.h"

namespace flywheel {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

BufferOptions Options(fuzz::FuzzInput& in) {
  BufferOptions o;
  o.max_size = in.Small(1, 8);
  o.rate_limiter = in.Byte() % 2 ? RateLimiterKind::kRatio : RateLimiterKind::kQueue;
  o.selector = static_cast<SelectorKind>(in.Byte() % 4);
  o.remover = in.Byte() % 2 ? RemoverKind::kFifo : RemoverKind::kBlock;
  o.group_size = in.Small(1, 4);
  o.min_group_size = in.Small(1, o.group_size);
  o.max_staleness = in.Small(-1, 4);
  o.max_times_sampled = in.Small(0, 3);
  o.samples_per_insert = 1.0;
  o.error_buffer = static_cast<double>(o.max_size);
  o.straggler_timeout_s = 5;
  o.remember_ids = in.Small(0, 8);
  return o;
}

void Session(fuzz::FuzzInput& in) {
  VirtualClock clock;
  absl::StatusOr<std::unique_ptr<Buffer>> buffer =
      Buffer::Create(Options(in), &clock, /*start_group_timer=*/false);
  if (!buffer.ok()) return;
  // Nothing may wait: a full table or an empty one answers at once.
  const absl::Time now = absl::InfinitePast();
  v1::Trajectory proto;
  int64_t accepted = 0;
  std::vector<ItemMember> inserted;  // accepted members, for retries
  std::deque<std::string> leased;    // ids handed out under a lease, oldest first
  auto insert = [&](std::vector<ItemMember>& members) {
    std::vector<absl::Status> statuses;
    for (size_t done = 0; done < members.size();) {
      statuses.clear();
      const size_t handled = (*buffer)->InsertBatch(members, done, now, &statuses);
      Check(handled >= 1 && statuses.size() == handled);
      for (size_t k = 0; k < handled; ++k) {
        if (!statuses[k].ok()) continue;
        ++accepted;
        if (inserted.size() < 64) inserted.push_back(members[done + k]);
      }
      done += handled;
    }
  };
  while (!in.empty()) {
    switch (in.Byte() % 7) {
      case 0: {
        std::vector<ItemMember> members;
        for (int64_t n = in.Small(1, 4); n > 0; --n) {
          bool parsed = false;
          auto wire = std::make_shared<std::string>(in.Bytes());
          absl::StatusOr<ItemMember> member = DecodeWireTrajectory(wire, proto, &parsed);
          if (member.ok()) members.push_back(*std::move(member));
        }
        insert(members);
        break;
      }
      case 1: {
        absl::StatusOr<std::vector<SampledItem>> items = (*buffer)->Sample(in.Small(1, 4), now);
        if (items.ok()) {
          for (const SampledItem& s : *items) Check(!s.item->members.empty());
        }
        break;
      }
      case 2:
        (*buffer)->SetLearnerVersion(in.Byte());
        break;
      case 3:
        clock.Advance(absl::Seconds(in.Byte()));
        (*buffer)->ExpireGroups();
        break;
      case 4: {
        absl::StatusOr<std::vector<SampledItem>> items =
            (*buffer)->Sample(in.Small(1, 4), now, "learner");
        if (!items.ok()) break;
        for (const SampledItem& s : *items) {
          Check(!s.item->members.empty());
          for (const ItemMember& m : s.item->members) leased.push_back(m.trajectory->id);
        }
        break;
      }
      case 5: {
        std::vector<DurableStore::Consumed> consumed;
        for (int64_t n = in.Small(0, 3); n > 0 && !leased.empty(); --n) {
          consumed.push_back({leased.front(), "trained"});
          leased.pop_front();
        }
        consumed.push_back({"never-sampled", "trained"});
        const bool release_others = in.Byte() & 1;
        absl::StatusOr<Buffer::AcknowledgeResult> result =
            (*buffer)->Acknowledge("learner", consumed, release_others);
        if (result.ok()) {
          Check(result->consumed + result->unknown <= static_cast<int64_t>(consumed.size()));
          Check(result->unknown >= 1);  // "never-sampled"
        }
        if (release_others) leased.clear();
        break;
      }
      case 6: {
        if (inserted.empty()) break;
        std::vector<ItemMember> again = {inserted[in.Byte() % inserted.size()]};
        insert(again);
        break;
      }
    }
  }
  const BufferInfo info = (*buffer)->Info();
  Check(info.inserted + info.duplicate_inserts <= accepted);
  Check(info.leased >= 0 && info.acknowledged <= info.inserted);
  (*buffer)->Close();
}

}  // namespace
}  // namespace flywheel

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  flywheel::fuzz::SilenceProtobufLog();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flywheel::fuzz::FuzzInput in(data, size);
  flywheel::Session(in);
  return 0;
}
