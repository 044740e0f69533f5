// Process environments, including deliberately broken ones: each failure ends its episode as
// described in process_env.h, is counted, and the next episode works.
#include "flywheel/env/process/process_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "flywheel/env/tasks/guess.h"
#include "flywheel/core/wait_for.h"
#include "flywheel/env/test_util.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

// Whether process `pid` has ended: gone, or a zombie its parent has not reaped yet.
bool Ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');  // the name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < line.size() &&
         (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

ProcessOptions Options(std::vector<std::string> extra_args = {},
                       const char* script = "examples/envs/guess_env.py") {
  ProcessOptions o;
  o.command = {"python3", testing::SourcePath(script)};
  o.command.insert(o.command.end(), extra_args.begin(), extra_args.end());
  o.copies = 1;
  o.step_timeout_seconds = 5;
  o.score_timeout_seconds = 2;
  return o;
}

ProcessOptions Faulty(const std::string& fault, std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"--fault", fault};
  args.insert(args.end(), more.begin(), more.end());
  return Options(args, "examples/envs/broken/misbehaving_env.py");
}

int64_t Counter(std::string_view name) {
  return MetricsRegistry::Global().GetCounter(name)->value();
}

// Plays a whole episode with the guess expert and expects it solved.
void ExpectSolves(Environment& env, uint64_t seed) {
  auto expert = MakeGuessExpert(GuessOptions{});
  auto summary = RunEpisode(env, *expert, TaskInstance{"guess", seed}, 20);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->total_reward, 1.0);
  EXPECT_EQ(summary->end, EpisodeEnd::kDone);
}

// Reset, one normal step, then "boom" (which fires the injected fault).
StepResult Boom(Environment& env) {
  EXPECT_TRUE(env.Reset(TaskInstance{"guess", 3}).ok());
  auto normal = env.Step("0");
  EXPECT_TRUE(normal.ok());
  EXPECT_FALSE(normal->done);
  auto r = env.Step("boom");
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : StepResult{};
}

TEST(ProcessEnvTest, PythonExampleSpeaksTheProtocol) {
  auto pool = ProcessPool::Create(Options(), 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->name(), "guess");
  EXPECT_EQ((*pool)->vocabulary().kind, VocabularySpec::kWords);
  ProcessEnv env(*pool);
  for (uint64_t seed = 0; seed < 5; ++seed) ExpectSolves(env, seed);
  // Same instance as the built-in task is not required, but the same seed must repeat.
  auto a = env.Reset(TaskInstance{"guess", 11});
  auto a1 = env.Step("8");
  auto b = env.Reset(TaskInstance{"guess", 11});
  auto b1 = env.Step("8");
  ASSERT_TRUE(a1.ok() && b1.ok());
  EXPECT_EQ(a1->observation, b1->observation);
  auto score = env.ScorePartial();
  ASSERT_TRUE(score.ok()) << score.status();
  EXPECT_EQ(*score, *b1->partial_score);
}

TEST(ProcessEnvTest, CrashEndsTheEpisodeAsEnvErrorAndTheProcessRestarts) {
  auto pool = ProcessPool::Create(Faulty("crash"), 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ProcessEnv env(*pool);
  const int64_t crashes = Counter("env.failures{kind=crashes}");
  const int64_t restarts = Counter("env.restarts");
  const StepResult r = Boom(env);
  EXPECT_TRUE(r.done);
  EXPECT_EQ(r.end, EpisodeEnd::kEnvError);
  EXPECT_THAT(r.error, HasSubstr("crashed during step"));
  EXPECT_THAT(r.error, HasSubstr("exited with code 3"));
  EXPECT_THAT(r.error, HasSubstr("injected crash"));  // the stderr tail
  EXPECT_THAT(r.error, HasSubstr("misbehaving_env.py"));
  EXPECT_EQ(Counter("env.failures{kind=crashes}"), crashes + 1);
  ExpectSolves(env, 1);
  EXPECT_EQ(Counter("env.restarts"), restarts + 1);
}

TEST(ProcessEnvTest, EachKindOfFailureIsLoggedOnceWithContext) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("capture", sink));
  {
    auto pool = ProcessPool::Create(Faulty("crash"), 4096);
    ASSERT_TRUE(pool.ok()) << pool.status();
    ProcessEnv env(*pool);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(Boom(env).end, EpisodeEnd::kEnvError);
  }
  spdlog::set_default_logger(previous);
  int warnings = 0;
  for (const std::string& line : sink->last_formatted()) {
    if (line.find("crashed during step") == std::string::npos) continue;
    ++warnings;
    EXPECT_THAT(line, HasSubstr("warning"));
    EXPECT_THAT(line, HasSubstr("misbehaving_env.py --fault crash"));  // the command
    EXPECT_THAT(line, HasSubstr("exited with code 3"));
    EXPECT_THAT(line, HasSubstr("injected crash"));
    EXPECT_THAT(line, HasSubstr("later ones are counted in env.failures{kind=crashes}"));
  }
  EXPECT_EQ(warnings, 1) << "three crashes, one warning; the rest are counted";
}

TEST(ProcessEnvTest, HangEndsAsTimeoutWithTheLastPartialScore) {
  ProcessOptions o = Faulty("hang");
  o.step_timeout_seconds = 1;  // generous: normal replies must not time out on a loaded machine
  o.score_timeout_seconds = 0.5;
  auto pool = ProcessPool::Create(o, 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ProcessEnv env(*pool);
  const int64_t timeouts = Counter("env.failures{kind=timeouts}");
  const StepResult r = Boom(env);
  EXPECT_EQ(r.end, EpisodeEnd::kTimeout);
  EXPECT_THAT(r.error, HasSubstr("step_timeout_seconds"));
  EXPECT_THAT(r.error, HasSubstr("restarting it"));
  // The hung process cannot score; the last partial score it reported stands.
  ASSERT_TRUE(r.partial_score.has_value());
  EXPECT_GT(*r.partial_score, 0);
  EXPECT_EQ(Counter("env.failures{kind=timeouts}"), timeouts + 1);
  ExpectSolves(env, 1);
}

TEST(ProcessEnvTest, SlowStepTimesOutButTheProcessStillScoresAndIsKept) {
  ProcessOptions o = Faulty("slow", {"--delay", "2.5"});
  o.step_timeout_seconds = 1;
  o.score_timeout_seconds = 5;
  auto pool = ProcessPool::Create(o, 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ProcessEnv env(*pool);
  const int64_t restarts = Counter("env.restarts");
  const StepResult r = Boom(env);
  EXPECT_EQ(r.end, EpisodeEnd::kTimeout);
  ASSERT_TRUE(r.partial_score.has_value());
  EXPECT_THAT(r.error, ::testing::Not(HasSubstr("restarting")));
  ExpectSolves(env, 1);
  EXPECT_EQ(Counter("env.restarts"), restarts) << "a slow but answering process is kept";
}

TEST(ProcessEnvTest, GarbageLineIsAProtocolErrorQuotingTheLine) {
  auto pool = ProcessPool::Create(Faulty("garbage"), 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ProcessEnv env(*pool);
  const int64_t errors = Counter("env.failures{kind=protocol_errors}");
  const StepResult r = Boom(env);
  EXPECT_EQ(r.end, EpisodeEnd::kProtocolError);
  EXPECT_THAT(r.error, HasSubstr("not valid JSON: \"this is not json\""));
  EXPECT_EQ(Counter("env.failures{kind=protocol_errors}"), errors + 1);
  ExpectSolves(env, 1);
}

TEST(ProcessEnvTest, HugeObservationIsTruncatedAndCountedAndTheEpisodeGoesOn) {
  auto pool = ProcessPool::Create(Faulty("huge"), 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ProcessEnv env(*pool);
  const int64_t truncated = Counter("env.observation_truncated");
  const StepResult r = Boom(env);
  EXPECT_EQ(r.end, EpisodeEnd::kRunning);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.observation.size(), 4096u);
  EXPECT_EQ(Counter("env.observation_truncated"), truncated + 1);
  auto next = env.Step("5");
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->truncated);
  ExpectSolves(env, 1);
}

TEST(ProcessEnvTest, LineOverTheByteLimitIsAProtocolError) {
  ProcessOptions o = Faulty("huge");
  o.max_line_bytes = 64 << 10;
  auto pool = ProcessPool::Create(o, 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ProcessEnv env(*pool);
  const StepResult r = Boom(env);
  EXPECT_EQ(r.end, EpisodeEnd::kProtocolError);
  EXPECT_THAT(r.error, HasSubstr("max_line_bytes"));
  ExpectSolves(env, 1);
}

TEST(ProcessEnvTest, ErrorReplyEndsTheEpisodeButKeepsTheProcess) {
  auto pool = ProcessPool::Create(Faulty("refuse"), 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ProcessEnv env(*pool);
  const int64_t restarts = Counter("env.restarts");
  const StepResult r = Boom(env);
  EXPECT_EQ(r.end, EpisodeEnd::kEnvError);
  EXPECT_THAT(r.error, HasSubstr("I refuse to play boom"));
  ExpectSolves(env, 1);
  EXPECT_EQ(Counter("env.restarts"), restarts);
}

TEST(ProcessEnvTest, ManyEpisodesShareFewCopies) {
  ProcessOptions o = Options();
  o.copies = 2;
  // An episode waits start + step timeout for a free copy. Starting Python takes more than a
  // second on a loaded machine, so the start timeout cannot be as short as the step's.
  o.start_timeout_seconds = 5;
  o.step_timeout_seconds = 1;
  auto pool = ProcessPool::Create(o, 4096);
  ASSERT_TRUE(pool.ok()) << pool.status();
  ProcessEnv a(*pool), b(*pool), c(*pool);
  ASSERT_TRUE(a.Reset(TaskInstance{"guess", 1}).ok());
  ASSERT_TRUE(b.Reset(TaskInstance{"guess", 2}).ok());
  // Both copies are leased: a third episode waits, then fails as env-error with the advice.
  auto r = c.Reset(TaskInstance{"guess", 3});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->end, EpisodeEnd::kEnvError);
  EXPECT_THAT(r->error, HasSubstr("env.process.copies"));
  a.Close();
  ExpectSolves(c, 3);
}

// Records what AwaitResources reports.
struct Ready {
  absl::Notification called;
  absl::Status status;
  absl::AnyInvocable<void(absl::Status)> Callback() {
    return [this](absl::Status s) {
      status = std::move(s);
      called.Notify();
    };
  }
};

TEST(ProcessEnvTest, EpisodesWaitingForACopyGetItInTurnWithoutAThread) {
  ProcessOptions o = Options();
  o.copies = 1;
  auto pool = ProcessPool::Create(o, 4096);
  ASSERT_TRUE(pool.ok());
  ProcessEnv a(*pool), b(*pool), c(*pool);
  Ready ready_a, ready_b, ready_c;
  a.AwaitResources(ready_a.Callback());
  ASSERT_TRUE(ready_a.called.HasBeenNotified()) << "an idle copy is handed over at once";
  b.AwaitResources(ready_b.Callback());
  c.AwaitResources(ready_c.Callback());
  ASSERT_TRUE(a.Reset(TaskInstance{"guess", 1}).ok());
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(ready_b.called.HasBeenNotified());  // however long they wait: no deadline
  a.Close();  // the copy goes to b, the first in line, on this thread
  ASSERT_TRUE(ready_b.called.HasBeenNotified());
  EXPECT_TRUE(ready_b.status.ok()) << ready_b.status;
  EXPECT_FALSE(ready_c.called.HasBeenNotified());
  ExpectSolves(b, 2);  // ends with Close: the copy goes to c
  ASSERT_TRUE(ready_c.called.HasBeenNotified());
  ExpectSolves(c, 3);
}

TEST(ProcessEnvTest, ACancelledWaitGetsCancelledAndTakesNoCopy) {
  ProcessOptions o = Options();
  o.copies = 1;
  auto pool = ProcessPool::Create(o, 4096);
  ASSERT_TRUE(pool.ok());
  ProcessEnv a(*pool), b(*pool), c(*pool);
  ASSERT_TRUE(a.Reset(TaskInstance{"guess", 1}).ok());
  Ready ready_b;
  b.AwaitResources(ready_b.Callback());
  b.CancelAwait();
  ASSERT_TRUE(ready_b.called.HasBeenNotified());
  EXPECT_EQ(ready_b.status.code(), absl::StatusCode::kCancelled);
  a.Close();
  ExpectSolves(c,
               2);  // the copy went back to the pool, not to the cancelled wait
}

TEST(ProcessEnvTest, InterruptEndsAHungExchangeAndEveryWaitAtOnce) {
  ProcessOptions o = Faulty("hang");
  o.step_timeout_seconds = 60;
  auto pool = ProcessPool::Create(o, 4096);
  ASSERT_TRUE(pool.ok());
  ProcessEnv hung(*pool), waiting(*pool);
  ASSERT_TRUE(hung.Reset(TaskInstance{"guess", 3}).ok());
  ASSERT_TRUE(hung.Step("0").ok());
  StepResult r;
  std::thread player([&] {  // blocks in the hung step
    absl::StatusOr<StepResult> s = hung.Step("boom");
    if (s.ok()) r = *std::move(s);
  });
  absl::SleepFor(absl::Milliseconds(300));
  Ready ready;
  waiting.AwaitResources(ready.Callback());
  const int64_t timeouts = Counter("env.failures{kind=timeouts}");
  const absl::Time interrupted = absl::Now();
  (*pool)->Interrupt();
  player.join();
  EXPECT_LT(absl::Now() - interrupted, absl::Seconds(2));
  EXPECT_EQ(r.end, EpisodeEnd::kEnvError);
  EXPECT_THAT(r.error, HasSubstr("the job is stopping"));
  EXPECT_EQ(Counter("env.failures{kind=timeouts}"),
            timeouts);  // not the environment's fault
  ASSERT_TRUE(ready.called.HasBeenNotified());
  EXPECT_EQ(ready.status.code(), absl::StatusCode::kCancelled);
  ExpectSolves(hung, 1);  // later calls run normally, on a restarted process
}

TEST(ProcessEnvTest, AProcessThatDiedWhileIdleIsRestartedBeforeTheNextEpisode) {
  auto pool = ProcessPool::Create(Options(), 4096);
  ASSERT_TRUE(pool.ok());
  pid_t pid;
  {
    auto lease = (*pool)->Acquire(absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(lease.ok());
    pid = lease->process->pid();
    (*pool)->Release(*std::move(lease), true);
  }
  kill(pid, SIGKILL);
  ASSERT_TRUE(WaitFor([pid] { return Ended(pid); }));
  ProcessEnv env(*pool);
  ExpectSolves(env, 2);  // not an env-error: the dead process was replaced at lease time
}

TEST(ProcessEnvTest, CommandThatCannotStartIsReportedAtCreation) {
  ProcessOptions o;
  o.command = {"/nonexistent/flywheel-env"};
  auto missing = ProcessPool::Create(o, 4096);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/flywheel-env"));

  auto bad = ProcessPool::Create(Options({}, "examples/envs/broken/bad_protocol_env.py"), 4096);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("hello handshake"));
  EXPECT_THAT(bad.status().message(), HasSubstr("protocol_version 0"));
}

}  // namespace
}  // namespace flywheel
