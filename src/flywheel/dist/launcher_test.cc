#include "flywheel/dist/launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "flywheel/core/strings.h"

namespace flywheel::dist {
namespace {

// Runs the ranks as `sh -c SCRIPT`; the appended rank flags become $0 … $5 of the script.
class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / StrCat("flywheel_launcher_test_", getpid());
    std::filesystem::create_directories(dir_);
    out_fd_ = open((dir_ / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    err_fd_ = open((dir_ / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  }
  void TearDown() override {
    close(out_fd_);
    close(err_fd_);
    std::filesystem::remove_all(dir_);
  }

  LaunchOptions Shell(int nproc, const std::string& script) {
    LaunchOptions options;
    options.nproc = nproc;
    options.program = "/bin/sh";
    options.args = {"-c", script};
    options.grace_period = absl::Seconds(5);
    options.stdout_fd = out_fd_;
    options.stderr_fd = err_fd_;
    return options;
  }

  std::string Read(const char* name) {
    std::ifstream in(dir_ / name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Waits until the launcher's stdout holds `text` `count` times.
  bool AwaitOutput(const std::string& text, int count, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      const std::string out = Read("stdout");
      int found = 0;
      for (size_t at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) {
        ++found;
      }
      if (found >= count) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  std::filesystem::path dir_;
  int out_fd_ = -1;
  int err_fd_ = -1;
};

TEST_F(LauncherTest, EveryLineIsPrefixedWithItsRank) {
  LaunchOptions options = Shell(2, R"(echo "hello $RANK of $WORLD_SIZE"; echo "oops $RANK" >&2;
                                      echo "args $*"; printf "no newline $RANK")");
  options.rendezvous = "127.0.0.1:29999";
  auto result = Launch(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 0);
  EXPECT_EQ(result->first_failed_rank, -1);
  const std::string out = Read("stdout");
  const std::string err = Read("stderr");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string p = StrCat("[rank ", rank, "] ");
    EXPECT_NE(out.find(StrCat(p, "hello ", rank, " of 2\n")), std::string::npos) << out;
    EXPECT_NE(out.find(StrCat(p, "no newline ", rank, "\n")), std::string::npos) << out;
    EXPECT_NE(err.find(StrCat(p, "oops ", rank, "\n")), std::string::npos) << err;
    // sh -c puts the first appended word in $0: "$*" is what follows it.
    EXPECT_NE(out.find(StrCat(p, "args 2 --rank ", rank, " --rendezvous 127.0.0.1:29999\n")),
              std::string::npos)
        << out;
  }
  // Nothing unprefixed.
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) EXPECT_EQ(line.rfind("[rank ", 0), 0u) << line;
}

TEST_F(LauncherTest, RankArgsAppendTheRendezvousFlags) {
  LaunchOptions options;
  options.nproc = 4;
  options.args = {"learner", "job.toml"};
  EXPECT_EQ(RankArgs(options, 3, "h:1"),
            (std::vector<std::string>{"learner", "job.toml", "--world-size", "4", "--rank", "3",
                                      "--rendezvous", "h:1"}));
  options.append_rank_flags = false;
  EXPECT_EQ(RankArgs(options, 3, "h:1"), (std::vector<std::string>{"learner", "job.toml"}));
}

TEST_F(LauncherTest, TheFirstFailureIsTheExitCodeAndTheOthersAreStopped) {
  const absl::Time start = absl::Now();
  auto result = Launch(Shell(3, R"(if [ "$RANK" = 1 ]; then exit 7; fi; exec sleep 60)"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(result->exit_code, 7);
  EXPECT_EQ(result->first_failed_rank, 1);
  for (int rank : {0, 2}) {
    const int status = result->wait_status[rank];
    ASSERT_TRUE(WIFSIGNALED(status)) << "rank " << rank << " status " << status;
    EXPECT_EQ(WTERMSIG(status), SIGTERM);
  }
  EXPECT_NE(Read("stderr").find("rank 1 exited with code 7; stopping the other ranks"),
            std::string::npos)
      << Read("stderr");
}

TEST_F(LauncherTest, RanksThatIgnoreSigtermAreKilledAfterTheGracePeriod) {
  LaunchOptions options = Shell(2, R"(if [ "$RANK" = 1 ]; then
                                        while [ ! -e "$MARK" ]; do sleep 0.05; done; exit 5; fi
                                      trap "" TERM; touch "$MARK"; sleep 60)");
  setenv("MARK", (dir_ / "ignoring").c_str(), 1);
  options.grace_period = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  auto result = Launch(options);
  unsetenv("MARK");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ(result->exit_code, 5);
  ASSERT_TRUE(WIFSIGNALED(result->wait_status[0]));
  EXPECT_EQ(WTERMSIG(result->wait_status[0]), SIGKILL);
}

TEST_F(LauncherTest, ASignalledRankExitsWith128PlusTheSignal) {
  auto result = Launch(Shell(2, R"(if [ "$RANK" = 0 ]; then kill -9 $$; fi; exec sleep 60)"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 128 + SIGKILL);
  EXPECT_EQ(result->first_failed_rank, 0);
}

TEST_F(LauncherTest, SigintAndSigtermAreForwardedToEveryRank) {
  for (int signal : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(strsignal(signal));
    ASSERT_EQ(ftruncate(out_fd_, 0), 0);
    // Each rank stops cleanly on the signal (as flywheel learner does) and says so.
    LaunchOptions options = Shell(2, R"(trap 'echo "stopping on $SIG"; exit 0' INT TERM
                                        echo ready; while :; do sleep 0.05; done)");
    setenv("SIG", signal == SIGINT ? "INT" : "TERM", 1);
    std::optional<absl::StatusOr<LaunchResult>> result;
    std::thread launcher([&] { result.emplace(Launch(options)); });
    ASSERT_TRUE(AwaitOutput("] ready", 2, absl::Seconds(20))) << Read("stdout");
    kill(getpid(), signal);  // the launcher's handler owns the signal while it runs
    launcher.join();
    unsetenv("SIG");
    ASSERT_TRUE(result->ok()) << result->status();
    EXPECT_EQ((*result)->exit_code, 0);
    const std::string out = Read("stdout");
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_NE(
          out.find(StrCat("[rank ", rank, "] stopping on ", signal == SIGINT ? "INT" : "TERM")),
          std::string::npos)
          << out;
    }
  }
}

TEST_F(LauncherTest, BadOptionsAreRejected) {
  LaunchOptions options;
  options.args = {"learner"};
  options.nproc = 0;
  EXPECT_EQ(Launch(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.nproc = 2;
  options.rendezvous = "nohost";
  EXPECT_EQ(Launch(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.rendezvous = "";
  options.args = {};
  EXPECT_EQ(Launch(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = Shell(1, "true");
  options.program = "/nonexistent/flywheel";
  auto result = Launch(options);
  EXPECT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("/nonexistent/flywheel"), absl::string_view::npos)
      << result.status();
}

}  // namespace
}  // namespace flywheel::dist
