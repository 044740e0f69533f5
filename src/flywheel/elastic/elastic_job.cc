#include "flywheel/elastic/elastic_job.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "flywheel/actor/actor_metrics.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/core/emulated_device.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/elastic/elastic_cell.h"
#include "flywheel/elastic/elastic_core.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/env_factory.h"
#include "flywheel/runtime/policy_eval.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/policy_text.h"
#include "flywheel/runtime/run_stop.h"

namespace flywheel {
namespace {

// How long one blocking buffer call waits before its loop rechecks whether to stop.
constexpr absl::Duration kBufferPoll = absl::Milliseconds(100);

class ElasticJob {
 public:
  explicit ElasticJob(const JobConfig& config) : config_(config) {}
  ~ElasticJob() { Shutdown(); }

  absl::Status Init(const EmbeddedJobOptions& options);
  absl::StatusOr<EmbeddedJobResult> Train(const EmbeddedJobOptions& options);

 private:
  absl::Status MakeBuffer();
  CoreLinks CoreLinksFor(const EmbeddedJobOptions& options);
  CellLinks CellLinksFor(int index);
  // Every cell's episodes go through here: an episode handed between cells must arrive once.
  absl::Status Sink(Trajectory t);
  // The cells' threads end (they have seen "finished" or the job failed), then the rest.
  void Shutdown();
  nlohmann::json Ledger(const std::vector<ElasticCellResult>& cells);

  const JobConfig config_;
  std::unique_ptr<EnvFactory> factory_;
  std::unique_ptr<EnvExecutor> executor_;
  PolicyText text_;  // the tokenizer and turn format the actors borrow
  ModelOptions model_options_;
  std::unique_ptr<Buffer> buffer_;
  c10::intrusive_ptr<c10d::Store> store_;      // every step's group forms over it
  std::shared_ptr<PublishedWeights> weights_;  // the core's, read by the cells
  std::unique_ptr<ElasticCore> core_;
  std::vector<std::unique_ptr<ElasticCell>> cells_;
  std::vector<std::thread> threads_;                    // one per cell
  std::vector<absl::StatusOr<ElasticCellResult>> ran_;  // by cell, once its thread ended
  std::vector<int64_t> env_steps_at_start_;  // ActorMetrics' env-call histogram at the start
  std::atomic<bool> stopping_{false};        // the sink refuses episodes from now on
  std::atomic<int64_t> inserted_{0};
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> inserted_ids_ ABSL_GUARDED_BY(mu_);
  int64_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
};

absl::Status ElasticJob::MakeBuffer() {
  BufferOptions options = config_.buffer;
  options.group_size = config_.actor.group_size;
  options.min_group_size = std::min(options.min_group_size, config_.actor.group_size);
  options.durable = false;
  options.remember_ids = 0;  // in process no insert is retried: no ids to remember
  // The staleness bound is applied to each step's data as it is added to the step's queue; the
  // buffer drops nothing, so that every admitted group reaches a step and admission (which
  // counts the groups the steps consumed) never waits for a group that was thrown away.
  options.max_staleness = -1;
  // Admission, not backpressure, bounds the pipeline: whatever was admitted must fit.
  const int64_t admitted_groups = (config_.learner.max_staleness + 1) * config_.run.batch_groups;
  options.max_size = std::max(options.max_size, admitted_groups + config_.actor.episodes_in_flight *
                                                                      config_.scheduler.cells);
  ASSIGN_OR_RETURN(buffer_, Buffer::Create(options));
  return absl::OkStatus();
}

CoreLinks ElasticJob::CoreLinksFor(const EmbeddedJobOptions& options) {
  CoreLinks links;
  links.sample = [this](
                     int max_groups,
                     absl::Duration wait) -> absl::StatusOr<std::vector<std::vector<Trajectory>>> {
    absl::StatusOr<std::vector<SampledItem>> items =
        buffer_->Sample(max_groups, absl::Now() + wait);
    if (absl::IsDeadlineExceeded(items.status())) return std::vector<std::vector<Trajectory>>();
    RETURN_IF_ERROR(items.status());
    std::vector<std::vector<Trajectory>> groups;
    for (const SampledItem& sampled : *items) {
      std::vector<Trajectory>& group = groups.emplace_back();
      for (const ItemMember& member : sampled.item->members) group.push_back(*member.trajectory);
    }
    return groups;
  };
  links.waiting_groups = [this] { return buffer_->Info().table.size; };
  links.publish = [this](std::shared_ptr<const WeightSnapshot> snapshot) {
    weights_->Publish(std::move(snapshot));
    return absl::OkStatus();
  };
  links.store = store_;
  links.model_options = model_options_;
  // Cells of this process answer at once: they look at their role every tick.
  links.heartbeat_interval =
      absl::Seconds(std::min(config_.scheduler.heartbeat_seconds, config_.scheduler.tick_seconds));
  links.resume = options.resume;
  links.progress = options.progress;
  links.progress_is_terminal = options.progress_is_terminal;
  return links;
}

CellLinks ElasticJob::CellLinksFor(int index) {
  CellLinks links;
  links.scheduler = &core_->channel();
  links.name = StrCat("cell thread ", index);
  links.connect_store = [this](const v1::RegisterResponse&) { return store_; };
  links.connect_weights =
      [this](const v1::RegisterResponse&) -> absl::StatusOr<std::shared_ptr<WeightsSource>> {
    return weights_;
  };
  links.insert = [this](Trajectory t) { return Sink(std::move(t)); };
  links.desk = &core_->desk();
  links.factory = factory_.get();
  links.executor = executor_.get();
  links.text = &text_;
  links.model_options = model_options_;
  links.seed = static_cast<uint64_t>(config_.run.seed) * 1000003u;
  return links;
}

absl::Status ElasticJob::Init(const EmbeddedJobOptions& options) {
  RETURN_IF_ERROR(CheckElasticConfig(config_));
  ASSIGN_OR_RETURN(factory_, EnvFactory::Create(config_.env));
  executor_ = std::make_unique<EnvExecutor>(EnvExecutor::OptionsFor(config_.env));
  ASSIGN_OR_RETURN(text_, MakePolicyText(config_, *factory_));
  ASSIGN_OR_RETURN(model_options_,
                   ResolveModelOptions(config_, *text_.tokenizer, text_.tokenizer_name));
  RETURN_IF_ERROR(MakeBuffer());
  store_ = c10::make_intrusive<c10d::HashStore>();
  weights_ = std::make_shared<PublishedWeights>();
  ASSIGN_OR_RETURN(core_, ElasticCore::Create(config_, CoreLinksFor(options)));
  const int satellites = static_cast<int>(config_.scheduler.cells - config_.scheduler.core_cells);
  for (int i = 0; i < satellites; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<ElasticCell> cell,
                     ElasticCell::Create(config_, CellLinksFor(i)));
    cells_.push_back(std::move(cell));
  }
  return absl::OkStatus();
}

absl::Status ElasticJob::Sink(Trajectory t) {
  {
    absl::MutexLock lock(&mu_);
    if (!inserted_ids_.insert(t.id).second) ++duplicates_;
  }
  auto trajectory = std::make_shared<const Trajectory>(std::move(t));
  while (true) {
    // Episodes that end while the run winds down (the cells' last Suspend) are still kept.
    if (stopping_.load()) return absl::CancelledError("the job is stopping");
    absl::Status status = buffer_->Insert(trajectory, absl::Now() + kBufferPoll);
    if (absl::IsDeadlineExceeded(status)) continue;  // backpressure: try again
    if (status.ok()) inserted_.fetch_add(1);
    return status;
  }
}

void ElasticJob::Shutdown() {
  if (core_ != nullptr) {
    core_->plane().SetFinished();  // the cells leave
    core_->Shutdown();             // a cell in a step that cannot complete any more is told so
  }
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  stopping_.store(true);
  if (buffer_ != nullptr) buffer_->Close();
  cells_.clear();
  if (executor_ != nullptr) executor_->Close([this] { factory_->Interrupt(); });
}

nlohmann::json ElasticJob::Ledger(const std::vector<ElasticCellResult>& cells) {
  int64_t dispatched = 0, failed = 0, cancelled = core_->desk().Holding();
  int64_t generated = 0, discarded = 0;
  for (const ElasticCellResult& c : cells) {
    dispatched += c.episodes_dispatched;
    failed += c.episodes_failed;
    cancelled += c.episodes_cancelled_at_stop;
    generated += c.tokens_generated;
    discarded += c.tokens_discarded;
  }
  int64_t duplicates = 0;
  {
    absl::MutexLock lock(&mu_);
    duplicates = duplicates_;
  }
  const BufferInfo info = buffer_->Info();
  return {{"episodes_dispatched", dispatched},
          {"episodes_inserted", inserted_.load()},
          {"episodes_failed", failed},
          {"episodes_cancelled_at_stop", cancelled},
          {"episodes_duplicated", duplicates},
          {"tokens_generated", generated},
          {"tokens_discarded", discarded},
          {"env_step_seconds", ActorMetrics::Get().EnvStepSecondsSince(env_steps_at_start_)},
          {"groups",
           {{"sampled", info.sampled},
            {"left_in_buffer", info.table.size},
            {"dropped_stale", info.dropped_stale},
            {"dropped_incomplete", info.dropped_incomplete_group}}}};
}

absl::StatusOr<EmbeddedJobResult> ElasticJob::Train(const EmbeddedJobOptions& options) {
  env_steps_at_start_ = ActorMetrics::Get().env_step_seconds->BucketCounts();
  ran_.resize(cells_.size());
  for (size_t i = 0; i < cells_.size(); ++i) {
    threads_.emplace_back([this, i] {
      ran_[i] = cells_[i]->Run();
      if (!ran_[i].ok()) {
        core_->Fail(Annotate(ran_[i].status(), StrCat("elastic job, cell ", cells_[i]->id())));
      }
    });
  }
  const RunStop stop(config_.run.max_wall_seconds, options.stop, absl::Now());
  absl::StatusOr<CoreResult> trained = core_->Train(stop);
  core_->Shutdown();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::vector<ElasticCellResult> cells;
  for (size_t i = 0; i < ran_.size(); ++i) {
    if (!ran_[i].ok()) {
      return Annotate(ran_[i].status(), StrCat("elastic job, cell ", cells_[i]->id()));
    }
    cells.push_back(*ran_[i]);
  }
  RETURN_IF_ERROR(trained.status());

  EmbeddedJobResult result;
  result.steps = trained->steps;
  result.final_step = trained->final_step;
  result.last_reward = trained->last_reward;
  result.last_success = trained->last_success;
  result.best_success = trained->best_success;
  result.summary = trained->summary;
  result.summary.update(Ledger(cells));
  if (config_.run.eval_episodes > 0 && result.summary["stopped_by"] != "signal") {
    ASSIGN_OR_RETURN(std::shared_ptr<const WeightSnapshot> weights, core_->Snapshot());
    ASSIGN_OR_RETURN(
        PolicyEvalResult eval,
        EvaluatePolicy(config_, *factory_, text_, std::move(weights), config_.run.eval_episodes,
                       static_cast<uint64_t>(config_.run.seed)));
    result.eval = eval;
    result.summary["eval"] = eval.ToJson();
  }
  RETURN_IF_ERROR(core_->run_dir().WriteSummary(result.summary));
  return result;
}

}  // namespace

absl::StatusOr<EmbeddedJobResult> RunElasticJob(const JobConfig& config,
                                                const EmbeddedJobOptions& options) {
  SetEmulatedSlowdown(config.run.emulated_slowdown);
  ElasticJob job(config);
  RETURN_IF_ERROR(job.Init(options));
  return job.Train(options);
}

}  // namespace flywheel
