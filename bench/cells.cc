#include "bench/cells.h"

namespace flywheel::bench {

void PlaceOnCells(JobConfig& job, TrainMode mode, int64_t cells, int64_t rollout_cells,
                  int64_t max_staleness) {
  job.run.mode = mode;
  job.run.max_pipeline_batches = 0;
  job.learner.checkpoint_every = 0;
  job.learner.max_staleness = max_staleness;
  job.learner.sharding = ShardingMode::kNone;
  switch (mode) {
    case TrainMode::kColocated:
      job.actor.num_actors = cells;
      job.learner.world_size = cells;
      break;
    case TrainMode::kAsync:
      job.actor.num_actors = rollout_cells;
      job.learner.world_size = cells - rollout_cells;
      job.run.max_pipeline_batches = static_cast<double>(max_staleness + 1);
      break;
    case TrainMode::kElastic:
      job.actor.num_actors = 1;
      job.learner.world_size = 1;
      job.scheduler.cells = cells;
      break;
  }
}

}  // namespace flywheel::bench
