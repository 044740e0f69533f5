// Crash test of durable mode on the real `flywheel serve buffer` binary: a client records
// every acknowledged insert and every consumed item; the server is killed with SIGKILL while
// inserts stream in, then restarted on the same store. The table must then hold every
// acknowledged, unconsumed id exactly once and never hand out a consumed id again.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "flywheel/buffer/client.h"
#include "flywheel/buffer/test_util.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"

namespace flywheel {
namespace {

class ServerProcess {
 public:
  // Starts `flywheel serve buffer --config config --address 127.0.0.1:0` and reads the bound
  // address from its first line of output.
  explicit ServerProcess(const std::string& config) {
    const char* binary_dir = std::getenv("FLYWHEEL_BINARY_DIR");
    const std::string binary = StrCat(binary_dir ? binary_dir : ".", "/flywheel");
    EXPECT_TRUE(std::filesystem::exists(binary)) << binary << " is not built";
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      execl(binary.c_str(), binary.c_str(), "--log-level", "warn", "serve", "buffer", "--config",
            config.c_str(), "--address", "127.0.0.1:0", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    FILE* stream = fdopen(out[0], "r");
    char line[512] = {0};
    if (fgets(line, sizeof(line), stream) != nullptr) {
      const std::string text(line);
      const std::string marker = "serving on ";
      const size_t at = text.find(marker);
      if (at != std::string::npos) {
        const size_t begin = at + marker.size();
        address_ = text.substr(begin, text.find(' ', begin) - begin);
      }
      first_line_ = text;
    }
    fclose(stream);
    EXPECT_FALSE(address_.empty()) << "server did not start: " << first_line_;
  }
  ~ServerProcess() {
    if (pid_ > 0) Kill(SIGTERM);
  }
  void Kill(int signal) {
    kill(pid_, signal);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  const std::string& address() const { return address_; }
  const std::string& first_line() const { return first_line_; }

 private:
  pid_t pid_ = -1;
  std::string address_;
  std::string first_line_;
};

std::string WireWithId(const std::string& id) {
  std::string out;
  ToProto(*testing::MakeTrajectory(id, 1, "", Role::kMain, 32)).SerializeToString(&out);
  return out;
}

// Samples until the buffer stays empty; every id handed out, in order.
std::vector<std::string> Drain(BufferClient& client) {
  std::vector<std::string> ids;
  while (true) {
    auto batch = client.Sample(128, absl::Milliseconds(300));
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok() || batch->empty()) break;
    for (const auto& item : *batch) ids.push_back(item[0].id);
  }
  return ids;
}

TEST(DurabilityTest, SigkillMidStreamLosesNoAcknowledgedItemAndRedeliversNoConsumedOne) {
  const auto dir =
      std::filesystem::temp_directory_path() / StrCat("flywheel_durability_", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string config = (dir / "buffer.toml").string();
  std::ofstream(config) << "[buffer]\ndurable = true\npath = \"" << (dir / "db").string()
                        << "\"\nmax_size = 1000000\n";

  std::set<std::string> acked, consumed, sent;
  {
    ServerProcess server(config);
    ASSERT_FALSE(server.address().empty());
    auto client = BufferClient::Connect(server.address());
    // Phase 1: 300 inserts, all acknowledged; the learner consumes 100 of them.
    std::vector<std::string> wire;
    for (int i = 0; i < 300; ++i) wire.push_back(WireWithId(StrCat("a", i)));
    auto acks = (*client)->InsertSerialized(wire, 16);
    ASSERT_TRUE(acks.ok()) << acks.status();
    for (const auto& ack : *acks) {
      ASSERT_EQ(ack.code(), 0) << ack.message();
      acked.insert(ack.id());
      sent.insert(ack.id());
    }
    while (consumed.size() < 100) {
      auto batch = (*client)->Sample(static_cast<int>(100 - consumed.size()), absl::Seconds(5));
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (const auto& item : *batch) consumed.insert(item[0].id);
    }

    // Phase 2: a pipelined stream of inserts; SIGKILL once a few hundred more are acknowledged.
    auto context = (*client)->NewContext();
    auto stream = (*client)->stub().Insert(context.get());
    std::atomic<int64_t> acked_in_stream{0};
    std::mutex acked_mu;
    std::thread reader([&] {
      v1::InsertResponse response;
      while (stream->Read(&response)) {
        std::lock_guard<std::mutex> lock(acked_mu);
        for (const auto& ack : response.acks()) {
          if (ack.code() == 0) acked.insert(ack.id());
        }
        acked_in_stream += response.acks_size();
      }
    });
    std::thread killer([&] {
      const absl::Time give_up = absl::Now() + absl::Seconds(20);
      while (acked_in_stream.load() < 300 && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      server.Kill(SIGKILL);
    });
    for (int i = 0; i < 100000; ++i) {
      v1::InsertRequest request;
      request.set_sequence(i);
      const std::string id = StrCat("b", i);
      request.add_trajectories(WireWithId(id));
      {
        std::lock_guard<std::mutex> lock(acked_mu);
        sent.insert(id);
      }
      if (!stream->Write(request)) break;
    }
    killer.join();
    stream->WritesDone();
    reader.join();
    stream->Finish();  // fails: the server is gone
    EXPECT_GE(acked_in_stream.load(), 300);
  }

  ServerProcess restarted(config);
  ASSERT_FALSE(restarted.address().empty());
  EXPECT_NE(restarted.first_line().find("durable=true"), std::string::npos);
  auto client = BufferClient::Connect(restarted.address());
  const std::vector<std::string> delivered = Drain(**client);
  std::map<std::string, int> times;
  for (const auto& id : delivered) times[id]++;
  int64_t checked = 0;
  for (const auto& id : acked) {
    if (consumed.contains(id)) continue;
    EXPECT_EQ(times[id], 1) << "acknowledged, unconsumed " << id;
    ++checked;
  }
  for (const auto& id : consumed) EXPECT_EQ(times.count(id), 0u) << "consumed " << id;
  for (const auto& [id, n] : times) {
    EXPECT_TRUE(sent.contains(id)) << "never sent: " << id;
    EXPECT_EQ(n, 1) << id;  // at most the unacknowledged tail in flight at the kill
  }
  EXPECT_GE(checked, 500);
  std::printf(
      "sent %zu, acknowledged %zu, consumed %zu before the kill; %zu delivered after "
      "the restart\n",
      sent.size(), acked.size(), consumed.size(), delivered.size());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flywheel
