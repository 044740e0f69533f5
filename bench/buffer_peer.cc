#include "bench/buffer_peer.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "bench/bench.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"

namespace flywheel::bench {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

nlohmann::json CaseResult::ToJson() const {
  return {{"items_per_s", items_per_s},
          {"mb_per_s", mb_per_s},
          {"p50_us", p50_us},
          {"p99_us", p99_us},
          {"items", items}};
}

CaseResult Summarize(int64_t items, int64_t item_bytes, double seconds,
                     std::vector<double> latencies_us) {
  CaseResult r;
  r.items = items;
  r.items_per_s = static_cast<double>(items) / seconds;
  r.mb_per_s = r.items_per_s * static_cast<double>(item_bytes) / 1e6;
  r.p50_us = Percentile(latencies_us, 0.50);
  r.p99_us = Percentile(std::move(latencies_us), 0.99);
  return r;
}

RunRecord::RunRecord(const BufferLoad& load)
    : load_(load), start_(std::chrono::steady_clock::now()), start_ns_(NowNs()) {
  latencies_us.reserve(load.total());
}

void RunRecord::stop() { seconds_ = SecondsSince(start_); }

absl::StatusOr<CaseResult> RunRecord::Finish(const std::string& system, int64_t got,
                                             int64_t item_bytes) {
  if (failed || got < load_.total()) {
    return absl::InternalError(
        StrCat(system, " case: ", got, " of ", load_.total(), " items arrived"));
  }
  return Summarize(got, item_bytes, seconds_, std::move(latencies_us));
}

Pacer::Pacer(double items_per_s, int64_t start_ns)
    : interval_ns_(items_per_s > 0 ? 1e9 / items_per_s : 0), start_ns_(start_ns) {}

void Pacer::WaitUntilDue(int64_t i) const {
  if (interval_ns_ == 0) return;
  const int64_t wait_ns = SendTime(i) - NowNs();
  if (wait_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(wait_ns));
}

int64_t Pacer::WaitForNextWrite(int64_t i, int64_t most) const {
  if (interval_ns_ == 0) return most;
  WaitUntilDue(i);
  const int64_t due = static_cast<int64_t>(static_cast<double>(NowNs() - start_ns_) / interval_ns_);
  return std::clamp<int64_t>(due + 1 - i, 1, most);
}

int64_t Pacer::SendTime(int64_t i) const {
  if (interval_ns_ == 0) return NowNs();
  return start_ns_ + static_cast<int64_t>(std::llround(static_cast<double>(i) * interval_ns_));
}

void Window::Acquire(int64_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return free_ >= n; });
  free_ -= n;
}

void Window::Release(int64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_ += n;
  }
  cv_.notify_one();
}

Trajectory MakePayload(int64_t bytes) {
  auto build = [](int64_t tokens) {
    Trajectory t;
    // Moved in rather than assigned from literals: GCC 12 reports a false -Wstringop-overflow
    // for the inlined assignment of a short literal here.
    t.id = std::string("payload");
    t.group_id = std::string("g");
    for (int i = 0; i < 8; ++i) t.AppendPrompt(100 + i);
    for (int64_t i = 8; i < tokens; ++i) {
      t.AppendGenerated(static_cast<int32_t>(1000 + i % 30000), -0.25f, 3);
    }
    t.turn_ends = {static_cast<int32_t>(tokens)};
    t.turn_rewards = {1.0f};
    return t;
  };
  int64_t tokens = std::max<int64_t>(16, bytes / 8);
  for (int iter = 0; iter < 3; ++iter) {
    const int64_t size = static_cast<int64_t>(ToProto(build(tokens)).ByteSizeLong());
    tokens = std::max<int64_t>(16, tokens * bytes / size);
  }
  return build(tokens);
}

namespace {
void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
}  // namespace

std::string Stamp(const std::string& base, const std::string& id, int64_t created_ns) {
  std::string out;
  out.reserve(base.size() + id.size() + 16);
  out = base;
  out.push_back(0x0a);  // field 1 (id), length-delimited
  AppendVarint(id.size(), &out);
  out += id;
  out.push_back(static_cast<char>(0xf8));  // field 31 (created_unix_ns), varint
  out.push_back(0x01);
  AppendVarint(static_cast<uint64_t>(created_ns), &out);
  return out;
}

int64_t ParseCreated(const char* data, size_t size) {
  v1::Trajectory t;
  if (!t.ParseFromArray(data, static_cast<int>(size))) return 0;
  return t.created_unix_ns();
}

double LatencyUs(const char* data, size_t size, int64_t now_ns) {
  return static_cast<double>(now_ns - ParseCreated(data, size)) / 1e3;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

absl::StatusOr<ServerProcess> ServerProcess::Start(const std::string& binary,
                                                   const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(StrCat("fork for ", binary, " failed"));
  if (pid == 0) {
    const int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, STDOUT_FILENO);
    dup2(devnull, STDERR_FILENO);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return ServerProcess(pid);
}

bool ServerProcess::Running() {
  if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) != 0) pid_ = -1;  // exited (and reaped)
  return pid_ > 0;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
}

std::string FindBinary(const std::vector<std::string>& candidates) {
  for (const std::string& path : candidates) {
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

}  // namespace flywheel::bench
