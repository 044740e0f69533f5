// flywheel bench buffer: the trajectory buffer against Redis Streams at the same job.
//
//   (a) in-process: 8 producer threads insert, 1 consumer samples (queue), payloads shared;
//   (b) gRPC on loopback, durable (every ack after a synced RocksDB WAL write): 8 client
//       streams pipeline inserts, one learner stream samples and parses every trajectory;
//   (c) redis-server started here on 127.0.0.1 (appendonly yes, appendfsync everysec):
//       8 producers XADD (pipelined, the same window), one consumer XREADGROUP + XACK + XDEL
//       and parses every trajectory.
// Items are serialized flywheel.v1.Trajectory messages of about 1 KiB and 64 KiB. Latency is
// per item, from the producer's send to the consumer's receipt.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "bench/registry.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/buffer/client.h"
#include "flywheel/buffer/service.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"

#ifdef FLYWHEEL_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

namespace flywheel::bench {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct CaseResult {
  double items_per_s = 0;
  double mb_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  int64_t items = 0;
  nlohmann::json ToJson() const {
    return {{"items_per_s", items_per_s},
            {"mb_per_s", mb_per_s},
            {"p50_us", p50_us},
            {"p99_us", p99_us},
            {"items", items}};
  }
};

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

// A trajectory whose serialized form is about `bytes` long.
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

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// `base` with its id and created_unix_ns overridden: protobuf keeps the last value of a
// singular field, so appending the two fields is what serializing the changed message gives.
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

// Parses a sampled trajectory as the learner would and returns its send time.
int64_t ParseCreated(const char* data, size_t size) {
  v1::Trajectory t;
  if (!t.ParseFromArray(data, static_cast<int>(size))) return 0;
  return t.created_unix_ns();
}

// ---------------------------------------------------------------- (a) in-process
CaseResult RunInProcess(const Trajectory& payload, int64_t item_bytes, int64_t items, int producers,
                        int64_t max_size) {
  BufferOptions options;
  options.max_size = max_size;
  options.remember_ids = 0;  // in process no insert is retried (and the payloads share one id)
  auto buffer = Buffer::Create(options).value();
  // One payload per producer, shared by all its items: items cost their bookkeeping, not a
  // copy, and producers do not contend on one reference count (real trajectories are distinct).
  std::vector<std::shared_ptr<const Trajectory>> shared;
  for (int p = 0; p < producers; ++p) shared.push_back(std::make_shared<const Trajectory>(payload));
  std::vector<double> latencies;
  latencies.reserve(items);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  const int64_t per_producer = items / producers;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      const absl::Time deadline = absl::Now() + absl::Minutes(10);
      for (int64_t i = 0; i < per_producer; ++i) {
        if (!buffer->Insert(shared[p], deadline).ok()) return;
      }
    });
  }
  int64_t got = 0;
  const int64_t total = per_producer * producers;
  while (got < total) {
    auto batch = buffer->Sample(1024, absl::Now() + absl::Seconds(30));
    if (!batch.ok()) break;
    const int64_t now = absl::GetCurrentTimeNanos();
    for (const SampledItem& s : *batch) {
      latencies.push_back(static_cast<double>(now - s.item->inserted_unix_ns) / 1e3);
    }
    got += static_cast<int64_t>(batch->size());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& t : threads) t.join();
  return Summarize(got, item_bytes, seconds, std::move(latencies));
}

// A bounded count of items in flight per producer stream (the pipelining window).
class Window {
 public:
  explicit Window(int64_t size) : free_(size) {}
  void Acquire(int64_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return free_ >= n; });
    free_ -= n;
  }
  void Release(int64_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_ += n;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t free_;
};

// ---------------------------------------------------------------- (b) gRPC, durable
absl::StatusOr<CaseResult> RunGrpc(const std::string& base, int64_t item_bytes, int64_t items,
                                   int producers, int64_t window, int64_t per_request,
                                   const std::string& dir, bool durable, int64_t batch) {
  BufferOptions options;
  options.max_size = 1 << 20;
  options.durable = durable;
  options.path = dir + "/grpc_db";
  std::filesystem::remove_all(options.path);
  ASSIGN_OR_RETURN(std::unique_ptr<Buffer> buffer, Buffer::Create(options));
  BufferServerOptions server_options;
  server_options.limits.max_message_bytes = 256 << 20;
  ASSIGN_OR_RETURN(auto server,
                   BufferServer::Start(std::shared_ptr<Buffer>(std::move(buffer)), server_options));
  const int64_t per_producer = items / producers;
  const int64_t total = per_producer * producers;
  std::atomic<bool> failed{false};
  std::vector<double> latencies;
  latencies.reserve(total);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      auto client = BufferClient::Connect(server->address()).value();
      auto context = client->NewContext();
      auto stream = client->stub().Insert(context.get());
      Window win(window);
      std::thread acks([&] {
        v1::InsertResponse response;
        int64_t acked = 0;
        while (acked < per_producer && stream->Read(&response)) {
          for (const auto& ack : response.acks()) {
            if (ack.code() != 0) failed = true;
          }
          acked += response.acks_size();
          win.Release(response.acks_size());
        }
      });
      for (int64_t i = 0; i < per_producer; i += per_request) {
        const int64_t n = std::min(per_request, per_producer - i);
        win.Acquire(n);
        v1::InsertRequest request;
        request.set_sequence(i);
        for (int64_t k = 0; k < n; ++k) {
          request.add_trajectories(Stamp(base, StrCat("p", p, "-", i + k), NowNs()));
        }
        if (!stream->Write(request)) break;
      }
      stream->WritesDone();
      acks.join();
      stream->Finish();
    });
  }
  // The learner: keeps one batch request ahead, parses every trajectory.
  auto client = BufferClient::Connect(server->address()).value();
  auto context = client->NewContext();
  auto stream = client->stub().Sample(context.get());
  v1::SampleRequest request;
  request.set_max_batch(static_cast<int32_t>(batch));
  request.set_timeout_ms(30000);
  stream->Write(request);
  int64_t got = 0;
  v1::SampleResponse response;
  while (got < total) {
    stream->Write(request);
    if (!stream->Read(&response) || response.items_size() == 0) break;
    const int64_t now = NowNs();
    for (const auto& item : response.items()) {
      const std::string& wire = item.trajectories(0);
      latencies.push_back(static_cast<double>(now - ParseCreated(wire.data(), wire.size())) / 1e3);
    }
    got += response.items_size();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (server->buffer().store() != nullptr) {
    const DurableStore& store = *server->buffer().store();
    std::printf("buffer bench: gRPC %lld items, %lld batches appended, %lld WAL syncs, "
                "WAL CRC32C by %s\n",
                static_cast<long long>(got), static_cast<long long>(store.batches()),
                static_cast<long long>(store.syncs()), DurableStore::checksum_implementation());
  }
  stream->WritesDone();
  context->TryCancel();
  for (auto& t : threads) t.join();
  server->Shutdown();
  if (failed || got < total) {
    return absl::InternalError(StrCat("gRPC case: ", got, " of ", total, " items arrived"));
  }
  return Summarize(got, item_bytes, seconds, std::move(latencies));
}

#ifdef FLYWHEEL_HAVE_HIREDIS
// ---------------------------------------------------------------- (c) Redis Streams
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
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

class RedisServer {
 public:
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(const std::string& binary,
                                                            const std::string& dir) {
    auto server = std::unique_ptr<RedisServer>(new RedisServer());
    server->port_ = FreePort();
    std::filesystem::create_directories(dir);
    const std::string port = std::to_string(server->port_);
    server->pid_ = fork();
    if (server->pid_ == 0) {
      const int devnull = open("/dev/null", O_WRONLY);
      dup2(devnull, STDOUT_FILENO);
      execl(binary.c_str(), binary.c_str(), "--bind", "127.0.0.1", "--port", port.c_str(), "--dir",
            dir.c_str(), "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--protected-mode", "yes", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      if (redisContext* c = server->Connect(); c != nullptr) {
        redisReply* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
        const bool ok = reply != nullptr && reply->type == REDIS_REPLY_STATUS;
        if (reply) freeReplyObject(reply);
        redisFree(c);
        if (ok) return server;
      }
      usleep(20000);
    }
    return absl::UnavailableError(StrCat("redis-server did not answer on port ", port));
  }
  ~RedisServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  redisContext* Connect() const {
    redisContext* c = redisConnect("127.0.0.1", port_);
    if (c == nullptr || c->err) {
      if (c) redisFree(c);
      return nullptr;
    }
    return c;
  }

 private:
  RedisServer() = default;
  pid_t pid_ = -1;
  int port_ = 0;
};

absl::StatusOr<CaseResult> RunRedis(const RedisServer& redis, const std::string& base,
                                    int64_t item_bytes, int64_t items, int producers,
                                    int64_t window, int64_t per_request,
                                    const std::string& stream_name, int64_t batch) {
  {
    redisContext* c = redis.Connect();
    freeReplyObject(redisCommand(c, "XGROUP CREATE %s learners $ MKSTREAM", stream_name.c_str()));
    redisFree(c);
  }
  const int64_t per_producer = items / producers;
  const int64_t total = per_producer * producers;
  std::atomic<bool> failed{false};
  std::vector<double> latencies;
  latencies.reserve(total);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      redisContext* c = redis.Connect();
      if (c == nullptr) {
        failed = true;
        return;
      }
      // The gRPC producer's pattern with hiredis pipelining: XADDs go out `per_request` per
      // write, at most `window` items unanswered. (Flushing every XADD on its own would cost
      // Redis one read event per item, which the gRPC side does not pay per item either.)
      int64_t in_flight = 0;
      auto read_one = [&] {
        void* reply = nullptr;
        if (redisGetReply(c, &reply) != REDIS_OK || reply == nullptr ||
            static_cast<redisReply*>(reply)->type == REDIS_REPLY_ERROR) {
          failed = true;
        }
        if (reply) freeReplyObject(reply);
        --in_flight;
      };
      for (int64_t i = 0; i < per_producer && !failed; i += per_request) {
        const int64_t n = std::min(per_request, per_producer - i);
        while (in_flight + n > window && !failed) read_one();
        for (int64_t k = 0; k < n; ++k) {
          const std::string wire = Stamp(base, StrCat("p", p, "-", i + k), NowNs());
          redisAppendCommand(c, "XADD %s * d %b", stream_name.c_str(), wire.data(), wire.size());
        }
        in_flight += n;
        int done = 0;
        while (!done && !failed) {
          if (redisBufferWrite(c, &done) != REDIS_OK) failed = true;
        }
      }
      while (in_flight > 0 && !failed) read_one();
      redisFree(c);
    });
  }
  redisContext* c = redis.Connect();
  int64_t got = 0;
  while (got < total && !failed) {
    redisReply* reply = static_cast<redisReply*>(
        redisCommand(c, "XREADGROUP GROUP learners learner COUNT %lld BLOCK 30000 STREAMS %s >",
                     static_cast<long long>(batch), stream_name.c_str()));
    if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements == 0) {
      if (reply) freeReplyObject(reply);
      break;
    }
    const int64_t now = NowNs();
    redisReply* entries = reply->element[0]->element[1];
    std::vector<std::string> ids;
    ids.reserve(entries->elements);
    for (size_t i = 0; i < entries->elements; ++i) {
      redisReply* entry = entries->element[i];
      ids.emplace_back(entry->element[0]->str, entry->element[0]->len);
      redisReply* value = entry->element[1]->element[1];
      latencies.push_back(static_cast<double>(now - ParseCreated(value->str, value->len)) / 1e3);
    }
    got += static_cast<int64_t>(entries->elements);
    freeReplyObject(reply);
    // Acknowledge and delete what was consumed (a queue), pipelined.
    std::vector<const char*> argv = {"XACK", stream_name.c_str(), "learners"};
    std::vector<size_t> lens = {4, stream_name.size(), 8};
    for (const auto& id : ids) {
      argv.push_back(id.data());
      lens.push_back(id.size());
    }
    redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
    argv[0] = "XDEL";
    argv.erase(argv.begin() + 2);
    lens[0] = 4;
    lens.erase(lens.begin() + 2);
    redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
    for (int k = 0; k < 2; ++k) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK) failed = true;
      if (r) freeReplyObject(r);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  redisFree(c);
  for (auto& t : threads) t.join();
  if (failed || got < total) {
    return absl::InternalError(StrCat("Redis case: ", got, " of ", total, " items arrived"));
  }
  return Summarize(got, item_bytes, seconds, std::move(latencies));
}
#endif  // FLYWHEEL_HAVE_HIREDIS

std::string FindRedisServer() {
  for (const char* path : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

std::vector<std::string> Row(const std::string& name, const CaseResult& r,
                             const std::string& ratio) {
  return {name,
          fmt::format("{:.0f}", r.items_per_s),
          fmt::format("{:.1f}", r.mb_per_s),
          fmt::format("{:.0f}", r.p50_us),
          fmt::format("{:.0f}", r.p99_us),
          ratio};
}

}  // namespace

absl::StatusOr<BenchReport> RunBufferBench(const BenchArgs& args) {
  const int producers = static_cast<int>(args.GetInt("producers", 8));
  const int64_t window = args.GetInt("window", 256);  // items in flight per producer
  struct Size {
    std::string name;
    int64_t bytes;
    int64_t inprocess_items, network_items, per_request, window;
  };
  const bool quick = args.quick;
  // Knobs for experiments; the reported configuration is the default.
  const bool durable = args.GetInt("durable", 1) != 0;
  const bool skip_inprocess = args.GetInt("skip_inprocess", 0) != 0;
  const double scale = args.GetDouble("scale", 1.0);
  const bool skip_network = args.GetInt("skip_network", 0) != 0;
  const int64_t batch = args.GetInt("batch", 4096);  // consumer batch, both (b) and (c)
  const bool skip_redis = args.GetInt("skip_redis", 0) != 0;
  const bool skip_grpc = args.GetInt("skip_grpc", 0) != 0;
  const std::string only_size = args.GetString("size", "");  // "1KiB" or "64KiB": that one only
  const std::vector<Size> sizes = {
      {"1KiB", 1024, quick ? 80000 : 4000000, quick ? 8000 : 400000, 32, window},
      {"64KiB", 65536, quick ? 8000 : 200000, quick ? 800 : 20000,
       args.GetInt("per_request_64KiB", 1), std::min<int64_t>(window, 16)},
  };
  const std::string dir =
      (std::filesystem::temp_directory_path() / StrCat("flywheel_buffer_bench_", getpid()))
          .string();
  std::filesystem::create_directories(dir);
  const std::string redis_binary = FindRedisServer();

  BenchReport report;
  report.config = {
      {"producers", producers},
      {"durable", durable},
      {"consumer_batch", batch},
      {"scale", scale},
      {"consumers", 1},
      {"window_items_per_producer", {{"1KiB", sizes[0].window}, {"64KiB", sizes[1].window}}},
      {"items_per_grpc_request", {{"1KiB", sizes[0].per_request}, {"64KiB", sizes[1].per_request}}},
      {"inprocess_items",
       {{"1KiB", sizes[0].inprocess_items}, {"64KiB", sizes[1].inprocess_items}}},
      {"network_items", {{"1KiB", sizes[0].network_items}, {"64KiB", sizes[1].network_items}}},
      {"inprocess", "queue, max_size 8192, payload shared by shared_ptr"},
      {"grpc", "durable (ack after synced RocksDB WAL, group commit), queue"},
      {"redis",
       "redis-server appendonly yes, appendfsync everysec; XADD pipelined like the gRPC "
       "producers (the same items per write and window); XREADGROUP COUNT consumer_batch + "
       "XACK + XDEL"},
      {"latency", "per item, producer send to consumer receipt"},
      {"consumer", "parses every trajectory (learner work) in (b) and (c)"}};
  report.table = {{"case", "items/s", "MB/s", "p50 us", "p99 us", "vs redis"}};
  std::string summary;
  for (const Size& size : sizes) {
    if (!only_size.empty() && only_size != size.name) continue;
    const Trajectory payload = MakePayload(size.bytes);
    std::string base;
    ToProto(payload).SerializeToString(&base);
    const int64_t item_bytes = static_cast<int64_t>(base.size());

    const CaseResult a =
        skip_inprocess
            ? CaseResult{}
            : RunInProcess(payload, item_bytes, static_cast<int64_t>(size.inprocess_items * scale),
                           producers, 8192);
    report.results[StrCat("inprocess_", size.name)] = a.ToJson();
    report.table.push_back(Row(StrCat("(a) in-process ", size.name), a, "-"));

    if (skip_network) continue;
    CaseResult b;
    if (!skip_grpc) {
      ASSIGN_OR_RETURN(b, RunGrpc(base, item_bytes, static_cast<int64_t>(size.network_items * scale),
                                  producers, size.window, size.per_request, dir, durable, batch));
    }
    report.results[StrCat("grpc_durable_", size.name)] = b.ToJson();

    std::optional<CaseResult> c;
#ifdef FLYWHEEL_HAVE_HIREDIS
    if (!redis_binary.empty() && !skip_redis) {
      ASSIGN_OR_RETURN(auto redis, RedisServer::Start(redis_binary, dir + "/redis"));
      ASSIGN_OR_RETURN(
          c, RunRedis(*redis, base, item_bytes, static_cast<int64_t>(size.network_items * scale),
                      producers, size.window, size.per_request, StrCat("trajectories_", size.name),
                      batch));
    }
#endif
    if (c.has_value()) {
      const double ratio = b.items_per_s / c->items_per_s;
      report.results[StrCat("grpc_durable_", size.name)]["ratio_vs_redis"] = ratio;
      report.results[StrCat("redis_", size.name)] = c->ToJson();
      report.results[StrCat("redis_", size.name)]["ratio_vs_redis"] = 1.0;
      report.ratios[StrCat("ratio_vs_redis_", size.name)] = ratio;
      report.ratios[StrCat("p99_vs_redis_", size.name)] = b.p99_us / c->p99_us;
      report.table.push_back(
          Row(StrCat("(b) gRPC durable ", size.name), b, fmt::format("{:.2f}x", ratio)));
      report.table.push_back(Row(StrCat("(c) Redis Streams ", size.name), *c, "1.00x"));
      summary += fmt::format("{}{}: gRPC durable {:.2f}x Redis items/s, p99 {:.0f} vs {:.0f} us",
                             summary.empty() ? "" : "; ", size.name, ratio, b.p99_us, c->p99_us);
    } else {
      report.table.push_back(Row(StrCat("(b) gRPC durable ", size.name), b, "n/a"));
      summary += fmt::format("{}{}: gRPC durable {:.0f} items/s (Redis skipped)",
                             summary.empty() ? "" : "; ", size.name, b.items_per_s);
    }
    report.ratios[StrCat("inprocess_items_per_s_", size.name)] = a.items_per_s;
  }
  if (redis_binary.empty()) {
    report.config["redis_skipped"] = "redis-server not found (apt-get install redis-server)";
    std::printf("buffer bench: redis-server not found; case (c) skipped\n");
  }
#ifndef FLYWHEEL_HAVE_HIREDIS
  report.config["redis_skipped"] = "built without hiredis (libhiredis-dev)";
  std::printf("buffer bench: built without hiredis; case (c) skipped\n");
#endif
  std::filesystem::remove_all(dir);
  report.summary = summary;
  return report;
}

}  // namespace flywheel::bench
