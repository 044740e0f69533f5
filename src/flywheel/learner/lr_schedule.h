// Linear warm-up then cosine decay of the learning rate, by optimiser step (0-based):
//
//   step < warmup:  lr · (step + 1) / warmup
//   otherwise:      p = min(1, (step − warmup) / max(1, total − warmup))
//                   lr · (r + (1 − r) · ½ (1 + cos(π p)))          r = min_lr_ratio
//
// (Loshchilov & Hutter 2017, SGDR, without restarts; the warm-up of Goyal et al. 2017.)
#ifndef FLYWHEEL_LEARNER_LR_SCHEDULE_H_
#define FLYWHEEL_LEARNER_LR_SCHEDULE_H_

#include <cstdint>

namespace flywheel {

struct LrSchedule {
  double lr = 1e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.1;

  double At(int64_t step) const;
};

}  // namespace flywheel

#endif  // FLYWHEEL_LEARNER_LR_SCHEDULE_H_
