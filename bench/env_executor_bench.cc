// Many episodes waiting on a slow environment: EnvExecutor (a few workers plus a timer queue)
// against the alternatives, on the same episodes, seeds and latency model.
//   blocking_pool       the same number of threads, each running an episode to the end and
//                       sleeping through its latency (what a synchronous actor does)
//   thread_per_episode  one thread per episode sleeping through its latency (same overlap,
//                       paid for with a thread, and its stack, per episode)
//   event_loop          the strong design: one thread, an epoll loop on a timerfd that wakes at
//                       the earliest due episode and runs its next step (what an asyncio or
//                       libuv actor does), no locks, no hand-offs between threads
// Every variant's environments and policies are built before its timed region. The point of the
// executor is throughput at equal threads against the pool, matching the other two with a few
// threads that can also run steps that block (a process environment holds a worker).
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <queue>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "bench/registry.h"
#include "flywheel/core/status_macros.h"
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

// One episode's environment, policy and task, built before any timed region.
struct Episode {
  std::unique_ptr<Environment> env;
  std::unique_ptr<Policy> policy;
  TaskInstance task;
  std::string observation;  // the last result's, what the policy acts on next (event loop)
  double reward = 0;
};

// `wait_clock`: RealClock() for the variants that sleep through latency in Step, nullptr for
// those that get it in StepResult::latency and wait it themselves.
std::vector<std::unique_ptr<Episode>> MakeEpisodes(const Setup& s, Clock* wait_clock) {
  TaskSource tasks("guess", 1, 1);
  std::vector<std::unique_ptr<Episode>> episodes;
  for (int64_t i = 0; i < s.episodes; ++i) {
    auto e = std::make_unique<Episode>();
    e->env = NewEnv(s, wait_clock);
    e->policy = MakeGuessExpert(GuessOptions{});
    e->task = tasks.Next();
    episodes.push_back(std::move(e));
  }
  return episodes;
}

double MeanReward(const std::vector<std::unique_ptr<Episode>>& episodes) {
  double reward = 0;
  for (const auto& e : episodes) reward += e->reward / static_cast<double>(episodes.size());
  return reward;
}

// Runs one whole episode synchronously; the latency wrapper sleeps on the real clock.
void PlayBlocking(Episode& e) {
  auto summary = RunEpisode(*e.env, *e.policy, e.task, 100);
  e.reward = summary.ok() ? summary->total_reward : 0;
}

double RunBlockingPool(const Setup& s, int threads, double& reward) {
  auto episodes = MakeEpisodes(s, RealClock());
  std::atomic<size_t> next{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t i = next++; i < episodes.size(); i = next++) PlayBlocking(*episodes[i]);
    });
  }
  for (auto& t : pool) t.join();
  const double seconds = SecondsSince(start);
  reward = MeanReward(episodes);
  return seconds;
}

double RunThreadPerEpisode(const Setup& s, double& reward) {
  auto episodes = MakeEpisodes(s, RealClock());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (auto& e : episodes) threads.emplace_back([e = e.get()] { PlayBlocking(*e); });
  for (auto& t : threads) t.join();
  const double seconds = SecondsSince(start);
  reward = MeanReward(episodes);
  return seconds;
}

// One thread: a min-heap of episodes by the time their last step's latency ends, and an epoll
// wait on a timerfd armed for the earliest. When an episode is due its policy acts and its
// environment steps at once (the latency comes back in the result, not slept through).
absl::StatusOr<double> RunEventLoop(const Setup& s, double& reward) {
  auto episodes = MakeEpisodes(s, nullptr);
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  const int timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (epoll_fd < 0 || timer_fd < 0) return absl::InternalError("epoll or timerfd unavailable");
  epoll_event watch{};
  watch.events = EPOLLIN;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, timer_fd, &watch);
  using Due = std::pair<absl::Time, Episode*>;
  auto later = [](const Due& a, const Due& b) { return a.first > b.first; };
  std::priority_queue<Due, std::vector<Due>, decltype(later)> due(later);
  int64_t finished = 0;
  // Books a step's result: the episode ends, or is due again when its latency has passed.
  auto settle = [&](Episode* e, const absl::StatusOr<StepResult>& r) {
    if (r.ok()) e->reward += r->reward;
    if (!r.ok() || r->done) {
      ++finished;
    } else {
      e->observation = r->observation;
      due.push({absl::Now() + r->latency, e});
    }
  };
  const auto start = std::chrono::steady_clock::now();
  for (auto& ep : episodes) {
    Episode* e = ep.get();
    absl::StatusOr<StepResult> r = e->env->Reset(e->task);
    if (r.ok()) e->policy->Begin(e->task, r->observation);
    settle(e, r);
  }
  while (finished < s.episodes && !due.empty()) {
    const absl::Duration wait = due.top().first - absl::Now();
    if (wait > absl::ZeroDuration()) {
      itimerspec when{};
      const int64_t ns = absl::ToInt64Nanoseconds(wait);
      when.it_value.tv_sec = ns / 1'000'000'000;
      when.it_value.tv_nsec = ns % 1'000'000'000;
      timerfd_settime(timer_fd, 0, &when, nullptr);
      epoll_event event;
      epoll_wait(epoll_fd, &event, 1, -1);
      uint64_t expirations;
      [[maybe_unused]] ssize_t n = read(timer_fd, &expirations, sizeof(expirations));
    }
    const absl::Time now = absl::Now();
    while (!due.empty() && due.top().first <= now) {
      Episode* e = due.top().second;
      due.pop();
      settle(e, e->env->Step(e->policy->Act(e->observation)));
    }
  }
  const double seconds = SecondsSince(start);
  close(timer_fd);
  close(epoll_fd);
  reward = MeanReward(episodes);
  return seconds;
}

// Every episode in flight at once, driven by completion callbacks.
double RunExecutor(const Setup& s, double& reward) {
  auto episodes = MakeEpisodes(s, nullptr);
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
  reward = MeanReward(episodes);
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
  // The variants run in turn, `rounds` times, the first rotating; medians are reported.
  const int64_t rounds = std::max<int64_t>(1, args.GetInt("rounds", args.quick ? 1 : 3));
  std::vector<std::function<absl::StatusOr<double>(double&)>> variants = {
      [&](double& r) -> absl::StatusOr<double> { return RunExecutor(s, r); },
      [&](double& r) -> absl::StatusOr<double> { return RunBlockingPool(s, s.workers, r); },
      [&](double& r) -> absl::StatusOr<double> { return RunThreadPerEpisode(s, r); },
      [&](double& r) { return RunEventLoop(s, r); }};
  std::vector<std::vector<double>> seconds(variants.size());
  std::vector<double> rewards(variants.size());
  for (int64_t round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < variants.size(); ++k) {
      const size_t v = (k + round) % variants.size();
      ASSIGN_OR_RETURN(const double t, variants[v](rewards[v]));
      seconds[v].push_back(t);
    }
  }
  const double t_exec = Percentile(seconds[0], 0.5), t_pool = Percentile(seconds[1], 0.5),
               t_tpe = Percentile(seconds[2], 0.5), t_loop = Percentile(seconds[3], 0.5);
  report.config["rounds"] = rounds;
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
  add("executor", t_exec, exec_threads, rewards[0]);
  add("blocking_pool", t_pool, s.workers, rewards[1]);
  add("thread_per_episode", t_tpe, s.episodes, rewards[2]);
  add("event_loop", t_loop, 1, rewards[3]);
  const double vs_pool = t_pool / t_exec;
  const double vs_tpe = t_tpe / t_exec;
  report.ratios["throughput_vs_blocking_pool"] = vs_pool;
  report.ratios["throughput_vs_thread_per_episode"] = vs_tpe;
  report.ratios["throughput_vs_event_loop"] = t_loop / t_exec;
  report.ratios["threads_saved_vs_thread_per_episode"] =
      static_cast<double>(s.episodes) / exec_threads;
  report.summary = fmt::format(
      "executor with {} threads: {:.1f}x the throughput of a blocking pool of {} threads, "
      "{:.2f}x that of {} threads (one per episode), {:.2f}x that of a one-thread event loop",
      exec_threads, vs_pool, s.workers, vs_tpe, s.episodes, t_loop / t_exec);
  return report;
}

}  // namespace flywheel::bench
