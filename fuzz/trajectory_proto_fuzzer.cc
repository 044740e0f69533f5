// A trajectory as it crosses the network (proto/flywheel/v1/trajectory.proto): parsed, mapped
// to the in-memory Trajectory (FromProto) and validated, as the buffer service does with every
// insert and the learner's client with every sample. A trajectory that validates must survive
// the round trip to the wire unchanged and build a prefix tree as the tree job does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "flywheel/core/trajectory.h"
#include "flywheel/core/trajectory_proto.h"
#include "flywheel/trajectory/trajectory_tree.h"
#include "quiet_protobuf.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  flywheel::fuzz::SilenceProtobufLog();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flywheel::v1::Trajectory proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<flywheel::Trajectory> t = flywheel::FromProto(proto);
  if (!t.ok()) return 0;
  t->DebugString();
  if (!t->Validate().ok()) return 0;
  t->NumTrainable();
  if (t->MinVersion() > t->MaxVersion()) std::abort();
  absl::StatusOr<flywheel::Trajectory> back = flywheel::FromProto(flywheel::ToProto(*t));
  if (!back.ok() || !(*back == *t)) std::abort();
  const std::vector<flywheel::Trajectory> paths = {*t};
  flywheel::TrajectoryTree::FromTrajectories(paths).ok();
  return 0;
}
