// The buffer's insert path as the gRPC service runs it, without gRPC: serialized trajectories
// from a client go through DecodeWireTrajectory (the trust boundary) and the valid ones into an
// in-memory Buffer (group assembly, table, rate limiter, selector, staleness filter), with
// samples, learner versions and straggler expiry in between. Options come from the input too.
//
// Input (fuzz_input.h): 8 option bytes, then operations:
//   0 insert: a count byte, then that many [u16 length][serialized v1.Trajectory]
//   1 sample: a batch-size byte      2 learner version: a byte      3 clock: seconds byte
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "flywheel/buffer/buffer.h"
#include "flywheel/buffer/wire_trajectory.h"
#include "flywheel/core/clock.h"
#include "fuzz_input.h"

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
  while (!in.empty()) {
    switch (in.Byte() % 4) {
      case 0: {
        std::vector<ItemMember> members;
        for (int64_t n = in.Small(1, 4); n > 0; --n) {
          bool parsed = false;
          auto wire = std::make_shared<std::string>(in.Bytes());
          absl::StatusOr<ItemMember> member = DecodeWireTrajectory(wire, proto, &parsed);
          if (member.ok()) members.push_back(*std::move(member));
        }
        std::vector<absl::Status> statuses;
        for (size_t done = 0; done < members.size();) {
          statuses.clear();
          const size_t handled = (*buffer)->InsertBatch(members, done, now, &statuses);
          Check(handled >= 1 && statuses.size() == handled);
          for (const absl::Status& s : statuses) accepted += s.ok();
          done += handled;
        }
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
    }
  }
  const BufferInfo info = (*buffer)->Info();
  Check(info.inserted <= accepted);
  (*buffer)->Close();
}

}  // namespace
}  // namespace flywheel

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flywheel::fuzz::FuzzInput in(data, size);
  flywheel::Session(in);
  return 0;
}
