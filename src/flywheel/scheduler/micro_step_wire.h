// A micro-step on the wire (proto/flywheel/v1/scheduler_service.proto, WireMicroStep): what the
// scheduler service sends a cell in another process when it claims one. Every tensor travels as
// its raw little-endian bytes with a dtype name and a shape, so the receiving cell rebuilds the
// bit-identical PackedMicroBatch (the streaming equality holds across processes).
//
//   core: MicroStep ──MicroStepToWire──▶ WireMicroStep ──gRPC──▶ MicroStepFromWire ──▶ cell
//
// Decoding trusts nothing: a dtype other than the field's, a shape other than [rows, length],
// a byte count other than prod(shape) · element size, a bool byte other than 0 / 1, document
// lengths that do not fit their row: each is kInvalidArgument naming the micro-step and the
// field, never a crash.
#ifndef FLYWHEEL_SCHEDULER_MICRO_STEP_WIRE_H_
#define FLYWHEEL_SCHEDULER_MICRO_STEP_WIRE_H_

#include <torch/torch.h>

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "flywheel/learner/micro_step.h"
#include "flywheel/v1/scheduler_service.pb.h"

namespace flywheel {

// A CPU copy of `tensor` as raw bytes. Supported dtypes: float32, float64, int32, int64, bool.
absl::Status TensorToWire(const torch::Tensor& tensor, v1::WireTensor* out);
// Rebuilds a tensor; errors name `field`.
absl::StatusOr<torch::Tensor> TensorFromWire(const v1::WireTensor& wire, std::string_view field);

absl::Status MicroStepToWire(const MicroStep& micro_step, v1::WireMicroStep* out);
absl::StatusOr<MicroStep> MicroStepFromWire(const v1::WireMicroStep& wire);

}  // namespace flywheel

#endif  // FLYWHEEL_SCHEDULER_MICRO_STEP_WIRE_H_
