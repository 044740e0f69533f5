// Redis Streams as a delivered-once trajectory queue, used the way a competent user would for
// throughput: producers pipeline XADDs in the same writes and window as the gRPC producers; the
// consumer reads with XREADGROUP … NOACK (no pending-entries list: nothing is redelivered, as
// nothing is from a queue that removes what it hands out) and keeps one read ahead — the XDEL of
// a batch and the read of the next go out in one write before the batch is parsed, as flywheel's
// consumer keeps one Sample request ahead.
#include "bench/buffer_redis.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "flywheel/core/strings.h"

#ifdef FLYWHEEL_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

namespace flywheel::bench {
#ifndef FLYWHEEL_HAVE_HIREDIS
std::string RedisSkipReason() { return "built without hiredis (apt-get install libhiredis-dev)"; }

absl::StatusOr<CaseResult> RunRedisStreams(const std::string&, const std::string&, int64_t,
                                           const BufferLoad&, const std::string&) {
  return absl::FailedPreconditionError(RedisSkipReason());
}
#else
namespace {
std::string RedisBinary() {
  return FindBinary({"/usr/bin/redis-server", "/usr/local/bin/redis-server"});
}
}  // namespace

std::string RedisSkipReason() {
  return RedisBinary().empty() ? "redis-server not found (apt-get install redis-server)" : "";
}

namespace {

// One hiredis connection, freed with the object.
struct RedisConnection {
  redisContext* c = nullptr;
  explicit RedisConnection(int port) {
    c = redisConnect("127.0.0.1", port);
    if (c != nullptr && c->err) {
      redisFree(c);
      c = nullptr;
    }
  }
  ~RedisConnection() {
    if (c != nullptr) redisFree(c);
  }
  bool Flush() {
    int done = 0;
    while (!done) {
      if (redisBufferWrite(c, &done) != REDIS_OK) return false;
    }
    return true;
  }
  // Reads the next reply; nullptr on a broken connection. The caller frees it.
  redisReply* Read() {
    void* reply = nullptr;
    if (redisGetReply(c, &reply) != REDIS_OK) return nullptr;
    return static_cast<redisReply*>(reply);
  }
};

absl::Status WaitForRedis(ServerProcess& server, int port) {
  for (int i = 0; i < 250; ++i) {
    if (!server.Running()) return absl::UnavailableError("redis-server exited at start");
    RedisConnection connection(port);
    if (connection.c != nullptr) {
      auto* reply = static_cast<redisReply*>(redisCommand(connection.c, "PING"));
      const bool ok = reply != nullptr && reply->type == REDIS_REPLY_STATUS;
      if (reply) freeReplyObject(reply);
      if (ok) return absl::OkStatus();
    }
    usleep(20000);
  }
  return absl::UnavailableError(StrCat("redis-server did not answer on port ", port));
}

void Produce(int port, int p, const std::string& stream, const std::string& base,
             const BufferLoad& load, const Pacer& pacer, std::atomic<bool>* failed) {
  RedisConnection redis(port);
  if (redis.c == nullptr) {
    *failed = true;
    return;
  }
  int64_t in_flight = 0;
  auto read_one = [&] {
    redisReply* reply = redis.Read();
    if (reply == nullptr || reply->type == REDIS_REPLY_ERROR) *failed = true;
    if (reply) freeReplyObject(reply);
    --in_flight;
  };
  const int64_t per_producer = load.per_producer();
  for (int64_t i = 0, n = 0; i < per_producer && !*failed; i += n) {
    n = pacer.WaitForNextWrite(i, std::min(load.per_request, per_producer - i));
    while (in_flight + n > load.window && !*failed) read_one();
    for (int64_t k = 0; k < n; ++k) {
      const std::string wire = Stamp(base, StrCat("p", p, "-", i + k), pacer.SendTime(i + k));
      redisAppendCommand(redis.c, "XADD %s * d %b", stream.c_str(), wire.data(), wire.size());
    }
    in_flight += n;
    if (!redis.Flush()) *failed = true;
  }
  while (in_flight > 0 && !*failed) read_one();
}

void AppendRead(redisContext* c, const std::string& stream, int64_t batch) {
  redisAppendCommand(c,
                     "XREADGROUP GROUP learners learner COUNT %lld BLOCK 30000 NOACK STREAMS %s >",
                     static_cast<long long>(batch), stream.c_str());
}

}  // namespace

absl::StatusOr<CaseResult> RunRedisStreams(const std::string& dir, const std::string& base,
                                           int64_t item_bytes, const BufferLoad& load,
                                           const std::string& fsync) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int port = FreePort();
  absl::StatusOr<ServerProcess> server =
      ServerProcess::Start(RedisBinary(), {"--bind", "127.0.0.1", "--port", std::to_string(port),
                                           "--dir", dir, "--appendonly", "yes", "--appendfsync",
                                           fsync, "--save", "", "--protected-mode", "yes"});
  if (!server.ok()) return server.status();
  if (absl::Status s = WaitForRedis(*server, port); !s.ok()) return s;
  const std::string stream = "trajectories";
  RedisConnection consumer(port);
  if (consumer.c == nullptr) return absl::UnavailableError("cannot connect to redis-server");
  freeReplyObject(redisCommand(consumer.c, "XGROUP CREATE %s learners $ MKSTREAM", stream.c_str()));

  const int64_t total = load.total();
  RunRecord run(load);
  std::vector<std::thread> producers;
  for (int p = 0; p < load.producers; ++p) {
    producers.emplace_back(
        [&, p] { Produce(port, p, stream, base, load, run.pacer(), &run.failed); });
  }
  int64_t got = 0;
  AppendRead(consumer.c, stream, load.batch);
  while (got < total && !run.failed) {
    redisReply* reply = consumer.Read();
    if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements == 0) {
      if (reply) freeReplyObject(reply);
      break;
    }
    const int64_t now = NowNs();
    redisReply* entries = reply->element[0]->element[1];
    // The delete of this batch and the read of the next go out before this batch is parsed.
    std::vector<const char*> argv = {"XDEL", stream.c_str()};
    std::vector<size_t> lens = {4, stream.size()};
    for (size_t i = 0; i < entries->elements; ++i) {
      argv.push_back(entries->element[i]->element[0]->str);
      lens.push_back(entries->element[i]->element[0]->len);
    }
    redisAppendCommandArgv(consumer.c, static_cast<int>(argv.size()), argv.data(), lens.data());
    got += static_cast<int64_t>(entries->elements);
    if (got < total) AppendRead(consumer.c, stream, load.batch);
    if (!consumer.Flush()) run.failed = true;
    for (size_t i = 0; i < entries->elements; ++i) {
      redisReply* value = entries->element[i]->element[1]->element[1];
      run.latencies_us.push_back(LatencyUs(value->str, value->len, now));
    }
    freeReplyObject(reply);
    redisReply* deleted = consumer.Read();  // the XDEL's count
    if (deleted == nullptr || deleted->type != REDIS_REPLY_INTEGER) run.failed = true;
    if (deleted) freeReplyObject(deleted);
  }
  run.stop();
  for (auto& t : producers) t.join();
  return run.Finish("Redis", got, item_bytes);
}
#endif  // FLYWHEEL_HAVE_HIREDIS

}  // namespace flywheel::bench
