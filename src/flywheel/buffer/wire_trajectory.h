// The buffer's trust boundary: a trajectory as a client sends it (a serialized
// flywheel.v1.Trajectory), parsed and validated before anything inside the buffer sees it. The
// Buffer itself trusts its input; the gRPC service and the fuzz target both come through here.
#ifndef FLYWHEEL_BUFFER_WIRE_TRAJECTORY_H_
#define FLYWHEEL_BUFFER_WIRE_TRAJECTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "flywheel/buffer/item.h"
#include "flywheel/v1/trajectory.pb.h"

namespace flywheel {

// The member to insert for `wire`, holding the parsed Trajectory and `wire` itself (stored and
// sampled as is). INVALID_ARGUMENT when the bytes are not a v1.Trajectory, hold an enum value
// this build does not know, or fail Trajectory::Validate (the message names the field).
// `proto` is scratch reused between calls (parsing keeps its repeated fields' capacity); after
// the call `*parsed` says whether the bytes parsed, and then `proto` holds them (its id names the
// trajectory in the ack even when it was refused).
absl::StatusOr<ItemMember> DecodeWireTrajectory(std::shared_ptr<std::string> wire,
                                                v1::Trajectory& proto, bool* parsed);

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_WIRE_TRAJECTORY_H_
