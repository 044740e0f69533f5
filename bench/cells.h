// A job laid out on C model replicas ("cells", one thread and one intra-op thread each) in each
// mode, as `flywheel bench elastic` compares them and `flywheel bench sim` validates them:
//
//   colocated  C actors and C learner ranks, taking turns
//   async      `rollout_cells` actors and C − rollout_cells ranks, admitting up to η + 1 batches
//              (run.max_pipeline_batches: the bound the elastic job admits by)
//   elastic    scheduler.cells = C (one actor and one rank per cell)
//
// under one staleness bound η, without checkpoints or sharding (not what is compared).
#ifndef FLYWHEEL_BENCH_CELLS_H_
#define FLYWHEEL_BENCH_CELLS_H_

#include <cstdint>

#include "flywheel/runtime/job_config.h"

namespace flywheel::bench {

void PlaceOnCells(JobConfig& job, TrainMode mode, int64_t cells, int64_t rollout_cells,
                  int64_t max_staleness);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_CELLS_H_
