// Everything besides the model that a checkpoint holds so that training resumed from it continues
// bit-identically given the same data: the optimiser's state (AdamW moments), step and policy
// version, the torch CPU random generator, and the learner's own data RNG when it has one. The
// CUDA generators are not captured: the learner step draws no random numbers on the device.
#ifndef FLYWHEEL_LEARNER_TRAINER_STATE_H_
#define FLYWHEEL_LEARNER_TRAINER_STATE_H_

#include <random>
#include <string>

#include "absl/status/status.h"
#include "flywheel/learner/optimizer.h"

namespace flywheel {

inline constexpr const char* kTrainerStateFile = "trainer_state.pt";

// Writes `dir`/trainer_state.pt (a torch serialize archive).
absl::Status WriteTrainerState(const std::string& dir, const Optimizer& optimizer,
                               const std::mt19937_64* data_rng = nullptr);

// Restores what WriteTrainerState wrote into an optimiser built over the same parameters.
absl::Status ReadTrainerState(const std::string& dir, Optimizer& optimizer,
                              std::mt19937_64* data_rng = nullptr);

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_TRAINER_STATE_H_
