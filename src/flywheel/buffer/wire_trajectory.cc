#include "flywheel/buffer/wire_trajectory.h"

#include <utility>

#include "flywheel/core/trajectory_proto.h"

namespace flywheel {

absl::StatusOr<ItemMember> DecodeWireTrajectory(std::shared_ptr<std::string> wire,
                                                v1::Trajectory& proto, bool* parsed) {
  *parsed = proto.ParseFromString(*wire);
  if (!*parsed) return absl::InvalidArgumentError("not a serialized flywheel.v1.Trajectory");
  absl::StatusOr<Trajectory> trajectory = FromProto(proto);
  if (!trajectory.ok()) return absl::InvalidArgumentError(trajectory.status().message());
  if (absl::Status s = trajectory->Validate(); !s.ok()) return s;
  return ItemMember{std::make_shared<const Trajectory>(std::move(*trajectory)), std::move(wire), 0};
}

}  // namespace flywheel
