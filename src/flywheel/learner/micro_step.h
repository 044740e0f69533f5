// One micro-step of a streaming learner step: a packed micro-batch with un-normalised loss
// weights, tagged with the step and the policy version it trains from. The queue that makes
// them is scheduler/micro_step_queue.h; the cells that run them hold a StreamingLearner.
#ifndef FLYWHEEL_LEARNER_MICRO_STEP_H_
#define FLYWHEEL_LEARNER_MICRO_STEP_H_

#include <cstdint>

#include "flywheel/learner/packer.h"

namespace flywheel {

struct MicroStep {
  int64_t id = 0;       // dense within its step, in the order the queue made them
  int64_t step = 0;     // the optimiser step it belongs to
  int64_t version = 0;  // policy version of the weights the step starts from (and must run on)
  // loss_weights are u_t (PackerOptions::normalise_weights = false): the step's normaliser D is
  // applied once, to the gradient summed over the step's participants.
  PackedMicroBatch batch;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_MICRO_STEP_H_
