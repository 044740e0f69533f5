// A one-pass decoder from a serialized flywheel.v1.Trajectory to a Trajectory, for the insert
// path of the buffer service.
//
// Parsing with protobuf and converting with FromProto walks each per-token array twice and
// copies it once more (about 12% of the CPU of a durable 64 KiB insert). This decodes the wire
// format straight into the Trajectory's vectors, sized by a count of the packed elements. It
// accepts only the encoding flywheel's writers produce — known fields with their wire types,
// packed arrays, ASCII strings, role and termination in range — and returns false for
// anything else (unknown fields, unpacked arrays, non-ASCII strings, malformed bytes), where
// the caller falls back to protobuf + FromProto, which accept or reject exactly as before.
// When it returns true the result equals FromProto of protobuf's parse of the same bytes.
#ifndef FLYWHEEL_BUFFER_TRAJECTORY_WIRE_H_
#define FLYWHEEL_BUFFER_TRAJECTORY_WIRE_H_

#include <string_view>

#include "flywheel/core/trajectory.h"

namespace flywheel {

// True: `out` holds the decoded trajectory (not yet validated). False: use the protobuf path;
// `out` is then unspecified.
bool DecodeTrajectoryWire(std::string_view wire, Trajectory* out);

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_TRAJECTORY_WIRE_H_
