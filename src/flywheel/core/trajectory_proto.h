// Lossless conversion between the in-memory Trajectory and its wire form (proto/flywheel/v1).
#ifndef FLYWHEEL_CORE_TRAJECTORY_PROTO_H_
#define FLYWHEEL_CORE_TRAJECTORY_PROTO_H_

#include "absl/status/statusor.h"
#include "flywheel/core/trajectory.h"
#include "flywheel/v1/trajectory.pb.h"

namespace flywheel {

void ToProto(const Trajectory& trajectory, v1::Trajectory* proto);
v1::Trajectory ToProto(const Trajectory& trajectory);

// Fails only on enum values this build does not know (a newer peer); it does not Validate().
absl::StatusOr<Trajectory> FromProto(const v1::Trajectory& proto);

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_TRAJECTORY_PROTO_H_
