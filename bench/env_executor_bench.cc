// Many episodes waiting on a slow environment: EnvExecutor (a few workers plus a timer queue)
// against the two obvious alternatives, on the same episodes, seeds and latency model.
//   blocking_pool       the same number of threads, each running an episode to the end and
//                       sleeping through its latency (what a synchronous actor does)
//   thread_per_episode  one thread per episode sleeping through its latency (the fair peer:
//                       same overlap, paid for with a thread, and its stack, per episode)
// The point of the executor is the first ratio (throughput at equal threads) while matching
// the peer's throughput with far fewer threads.
#include <chrono>
#include <deque>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "bench/registry.h"
#include "flywheel/core/strings.h"
#include "flywheel/env/env_executor.h"
#include "flywheel/env/latency/latency_env.h"
#include "flywheel/env/task_source.h"
#include "flywheel/env/tasks/guess.h"

namespace flywheel::bench {
namespace {

struct Setup {
  int64_t episodes;
  int workers;
  LatencyOptions latency;
};

std::unique_ptr<Environment> NewEnv(const Setup& s, Clock* wait_clock) {
  auto factory = LatencyModelFactory::Create(s.latency);
  return std::make_unique<LatencyEnv>(std::make_unique<GuessEnv>(GuessOptions{}), *factory, nullptr,
                                      wait_clock);
}

// Runs one whole episode synchronously; the latency wrapper sleeps on the real clock.
double PlayBlocking(const Setup& s, const TaskInstance& task) {
  auto env = NewEnv(s, RealClock());
  auto policy = MakeGuessExpert(GuessOptions{});
  auto summary = RunEpisode(*env, *policy, task, 100);
  return summary.ok() ? summary->total_reward : 0;
}

double RunBlockingPool(const Setup& s, int threads, double& reward) {
  TaskSource tasks("guess", 1, 1);
  std::deque<TaskInstance> queue;
  for (int64_t i = 0; i < s.episodes; ++i) queue.push_back(tasks.Next());
  absl::Mutex mu;
  double total = 0;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (true) {
        TaskInstance task;
        {
          absl::MutexLock lock(&mu);
          if (queue.empty()) return;
          task = queue.front();
          queue.pop_front();
        }
        const double r = PlayBlocking(s, task);
        absl::MutexLock lock(&mu);
        total += r;
      }
    });
  }
  for (auto& t : pool) t.join();
  reward = total / s.episodes;
  return SecondsSince(start);
}

double RunThreadPerEpisode(const Setup& s, double& reward) {
  TaskSource tasks("guess", 1, 1);
  std::vector<double> rewards(s.episodes);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < s.episodes; ++i) {
    threads.emplace_back([&, i, task = tasks.Next()] { rewards[i] = PlayBlocking(s, task); });
  }
  for (auto& t : threads) t.join();
  reward = 0;
  for (double r : rewards) reward += r / s.episodes;
  return SecondsSince(start);
}

// Every episode in flight at once, driven by completion callbacks.
double RunExecutor(const Setup& s, double& reward) {
  struct Episode {
    std::unique_ptr<Environment> env;
    std::unique_ptr<Policy> policy;
    TaskInstance task;
    double reward = 0;
  };
  TaskSource tasks("guess", 1, 1);
  std::vector<std::unique_ptr<Episode>> episodes;
  for (int64_t i = 0; i < s.episodes; ++i) {
    auto e = std::make_unique<Episode>();
    e->env = NewEnv(s, nullptr);
    e->policy = MakeGuessExpert(GuessOptions{});
    e->task = tasks.Next();
    episodes.push_back(std::move(e));
  }
  absl::Mutex mu;
  int64_t finished = 0;
  EnvExecutor executor({.num_workers = s.workers, .clock = RealClock()});
  std::function<void(Episode*, absl::StatusOr<StepResult>)> on_result =
      [&](Episode* e, absl::StatusOr<StepResult> r) {
        if (r.ok()) e->reward += r->reward;
        if (!r.ok() || r->done) {
          absl::MutexLock lock(&mu);
          ++finished;
          return;
        }
        executor.StartStep(
            e->env.get(), e->policy->Act(r->observation),
            [&on_result, e](absl::StatusOr<StepResult> next) { on_result(e, std::move(next)); });
      };
  const auto start = std::chrono::steady_clock::now();
  for (auto& ep : episodes) {
    Episode* e = ep.get();
    executor.StartReset(e->env.get(), e->task, [&on_result, e](absl::StatusOr<StepResult> r) {
      if (r.ok()) e->policy->Begin(e->task, r->observation);
      on_result(e, std::move(r));
    });
  }
  {
    absl::MutexLock lock(&mu);
    auto done = [&]() { return finished == s.episodes; };
    mu.AwaitWithTimeout(absl::Condition(&done), absl::Minutes(10));
  }
  const double seconds = SecondsSince(start);
  executor.Close();
  reward = 0;
  for (auto& e : episodes) reward += e->reward / s.episodes;
  return seconds;
}

}  // namespace

absl::StatusOr<BenchReport> RunEnvExecutorBench(const BenchArgs& args) {
  Setup s;
  s.episodes = args.GetInt("episodes", args.quick ? 40 : 400);
  s.workers = static_cast<int>(args.GetInt("workers", 2));
  s.latency.model = LatencyKind::kLognormal;
  s.latency.mean_ms = args.GetDouble("mean_ms", args.quick ? 5 : 20);
  s.latency.sigma = args.GetDouble("sigma", 1.0);

  BenchReport report;
  report.config = {
      {"task", "guess (range 16), expert policy"},
      {"episodes", s.episodes},
      {"workers", s.workers},
      {"latency",
       {{"model", "lognormal"}, {"mean_ms", s.latency.mean_ms}, {"sigma", s.latency.sigma}}}};
  double r_exec = 0, r_pool = 0, r_tpe = 0;
  const double t_exec = RunExecutor(s, r_exec);
  const double t_pool = RunBlockingPool(s, s.workers, r_pool);
  const double t_tpe = RunThreadPerEpisode(s, r_tpe);
  const int64_t exec_threads = s.workers + 1;  // workers + timer thread
  auto add = [&](const std::string& name, double seconds, int64_t threads, double reward) {
    report.results[name] = {{"seconds", seconds},
                            {"episodes_per_second", s.episodes / seconds},
                            {"threads", threads},
                            {"mean_reward", reward}};
    report.table.push_back({name, fmt::format("{:.3f}", seconds),
                            fmt::format("{:.1f}", s.episodes / seconds), std::to_string(threads),
                            fmt::format("{:.3f}", reward)});
  };
  report.table = {{"variant", "seconds", "episodes/s", "threads", "mean reward"}};
  add("executor", t_exec, exec_threads, r_exec);
  add("blocking_pool", t_pool, s.workers, r_pool);
  add("thread_per_episode", t_tpe, s.episodes, r_tpe);
  const double vs_pool = t_pool / t_exec;
  const double vs_tpe = t_tpe / t_exec;
  report.ratios["throughput_vs_blocking_pool"] = vs_pool;
  report.ratios["throughput_vs_thread_per_episode"] = vs_tpe;
  report.ratios["threads_saved_vs_thread_per_episode"] =
      static_cast<double>(s.episodes) / exec_threads;
  report.summary = fmt::format(
      "executor with {} threads: {:.1f}x the throughput of a blocking pool of {} threads, "
      "{:.2f}x that of {} threads (one per episode)",
      exec_threads, vs_pool, s.workers, vs_tpe, s.episodes);
  return report;
}

}  // namespace flywheel::bench
