// flywheel bench buffer: the trajectory buffer against the durable streams people use for this,
// at the same job.
//
//   (a) in-process: 8 producer threads insert, 1 consumer samples (queue), payloads shared;
//   (b) gRPC on loopback, durable (every ack after a synced RocksDB WAL write): 8 client
//       streams pipeline inserts, one learner stream samples, keeps one request ahead and parses
//       every trajectory;
//   (c) Redis Streams (bench/buffer_redis.cc): XADDs pipelined in the same writes and window,
//       XREADGROUP … NOACK with the next read pipelined behind the XDEL;
//   (d) NATS JetStream (bench/buffer_nats.cc): a work-queue stream on file storage, acknowledged
//       asynchronous publishes within the same window, a pull consumer;
//   (e) (c) with `appendfsync always`: Redis at the durability of (b), every write synced before
//       it is acknowledged. (c), Redis's default, acknowledges up to a second before the data is
//       on disk.
// Items are serialized flywheel.v1.Trajectory messages of about 1 KiB and 64 KiB. Latency is
// per item, from the producer's send to the consumer's receipt.
//
// Each network system runs `rounds` times at capacity, the order of the systems reversed every
// round (machine drift falls on each side alike); items/s are medians over rounds. Latency at
// capacity is mostly queueing, so the p99 that is compared comes from further runs at one
// offered load for all, `load_fraction` (0.5) of the slowest system's median capacity, paced
// open-loop (bench/buffer_peer.h, Pacer).
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "bench/buffer_nats.h"
#include "bench/buffer_peer.h"
#include "bench/buffer_redis.h"
#include "bench/registry.h"
#include "flywheel/buffer/buffer.h"
#include "flywheel/buffer/client.h"
#include "flywheel/buffer/service.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"

namespace flywheel::bench {
namespace {

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

// ---------------------------------------------------------------- (b) gRPC, durable
absl::StatusOr<CaseResult> RunGrpc(const std::string& dir, const std::string& base,
                                   int64_t item_bytes, const BufferLoad& load, bool durable) {
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
  const int64_t per_producer = load.per_producer();
  const int64_t total = load.total();
  RunRecord run(load);
  std::vector<std::thread> threads;
  for (int p = 0; p < load.producers; ++p) {
    threads.emplace_back([&, p] {
      const Pacer pacer = run.pacer();
      auto client = BufferClient::Connect(server->address()).value();
      auto context = client->NewContext();
      auto stream = client->stub().Insert(context.get());
      Window win(load.window);
      std::thread acks([&] {
        v1::InsertResponse response;
        int64_t acked = 0;
        while (acked < per_producer && stream->Read(&response)) {
          for (const auto& ack : response.acks()) {
            if (ack.code() != 0) run.failed = true;
          }
          acked += response.acks_size();
          win.Release(response.acks_size());
        }
      });
      for (int64_t i = 0, n = 0; i < per_producer; i += n) {
        n = pacer.WaitForNextWrite(i, std::min(load.per_request, per_producer - i));
        win.Acquire(n);
        v1::InsertRequest request;
        request.set_sequence(i);
        for (int64_t k = 0; k < n; ++k) {
          request.add_trajectories(Stamp(base, StrCat("p", p, "-", i + k), pacer.SendTime(i + k)));
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
  request.set_max_batch(static_cast<int32_t>(load.batch));
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
      run.latencies_us.push_back(LatencyUs(wire.data(), wire.size(), now));
    }
    got += response.items_size();
  }
  run.stop();
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
  return run.Finish("gRPC", got, item_bytes);
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

// A network system of the comparison: how to run it on a load, or why it is skipped.
struct NetworkSystem {
  std::string key;    // JSON key prefix: grpc_durable, redis, nats
  std::string label;  // table
  std::string skipped;
  std::function<absl::StatusOr<CaseResult>(const BufferLoad&)> run;
  std::vector<CaseResult> capacity_runs, paced_runs;

  double capacity() const {
    std::vector<double> v;
    for (const CaseResult& r : capacity_runs) v.push_back(r.items_per_s);
    return Median(v);
  }
  // The median run over `runs` of one figure.
  static double MedianOf(const std::vector<CaseResult>& runs, double CaseResult::*field) {
    std::vector<double> v;
    for (const CaseResult& r : runs) v.push_back(r.*field);
    return Median(v);
  }
  nlohmann::json ToJson() const {
    nlohmann::json out = {{"items_per_s", capacity()},
                          {"mb_per_s", MedianOf(capacity_runs, &CaseResult::mb_per_s)},
                          {"p50_us_at_capacity", MedianOf(capacity_runs, &CaseResult::p50_us)},
                          {"p99_us_at_capacity", MedianOf(capacity_runs, &CaseResult::p99_us)},
                          {"p50_us", MedianOf(paced_runs, &CaseResult::p50_us)},
                          {"p99_us", MedianOf(paced_runs, &CaseResult::p99_us)}};
    out["rounds"] = nlohmann::json::array();
    for (const CaseResult& r : capacity_runs) out["rounds"].push_back(r.ToJson());
    out["paced_rounds"] = nlohmann::json::array();
    for (const CaseResult& r : paced_runs) out["paced_rounds"].push_back(r.ToJson());
    return out;
  }
};

// Runs every system that is not skipped `rounds` times on `load`, reversing their order each
// round, and appends the results to each system's `runs`.
absl::Status RunAlternating(std::vector<NetworkSystem>& systems, const BufferLoad& load,
                            int64_t rounds, std::vector<CaseResult> NetworkSystem::*runs) {
  for (int64_t round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < systems.size(); ++k) {
      NetworkSystem& system = systems[round % 2 == 0 ? k : systems.size() - 1 - k];
      if (!system.skipped.empty()) continue;
      absl::StatusOr<CaseResult> r = system.run(load);
      if (!r.ok()) {
        return absl::Status(r.status().code(),
                            StrCat(system.label, ", round ", round + 1, ": ", r.status().message()));
      }
      (system.*runs).push_back(*r);
    }
  }
  return absl::OkStatus();
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
  const int64_t batch = args.GetInt("batch", 4096);  // consumer batch, every system
  const bool skip_redis = args.GetInt("skip_redis", 0) != 0;
  const bool skip_nats = args.GetInt("skip_nats", 0) != 0;
  const bool skip_grpc = args.GetInt("skip_grpc", 0) != 0;
  const int64_t rounds = std::max<int64_t>(1, args.GetInt("rounds", quick ? 1 : 3));
  const double load_fraction = args.GetDouble("load_fraction", 0.5);
  const double paced_scale = args.GetDouble("paced_scale", 0.25);  // of network_items
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

  BenchReport report;
  report.config = {
      {"producers", producers},
      {"durable", durable},
      {"consumer_batch", batch},
      {"scale", scale},
      {"consumers", 1},
      {"rounds", rounds},
      {"load_fraction", load_fraction},
      {"paced_items_fraction", paced_scale},
      {"window_items_per_producer", {{"1KiB", sizes[0].window}, {"64KiB", sizes[1].window}}},
      {"items_per_write", {{"1KiB", sizes[0].per_request}, {"64KiB", sizes[1].per_request}}},
      {"inprocess_items",
       {{"1KiB", sizes[0].inprocess_items}, {"64KiB", sizes[1].inprocess_items}}},
      {"network_items", {{"1KiB", sizes[0].network_items}, {"64KiB", sizes[1].network_items}}},
      {"inprocess", "queue, max_size 8192, payload shared by shared_ptr"},
      {"grpc", "durable (ack after synced RocksDB WAL, group commit), queue; consumer keeps one "
               "Sample request ahead"},
      {"redis",
       "redis-server appendonly yes, appendfsync everysec; XADD pipelined like the gRPC "
       "producers (the same items per write and window); XREADGROUP COUNT consumer_batch NOACK, "
       "the XDEL of a batch and the next read pipelined in one write before the batch is parsed"},
      {"redis_fsync_always", "the same with appendfsync always (synced before acknowledged)"},
      {"nats",
       "nats-server -js, file storage, work-queue retention; js_PublishAsync with MaxPending = "
       "window (acknowledged publishes); pull consumer, Fetch consumer_batch, explicit acks sent "
       "without waiting"},
      {"order", "the network systems' order reversed every round; items/s medians over rounds"},
      {"latency",
       "per item, send time to consumer receipt; p99_us / p50_us at one offered load for every "
       "system (load_fraction of the slowest system's median capacity, open-loop pacing, send "
       "time = due time); *_at_capacity: the capacity runs (queueing)"},
      {"consumer", "parses every trajectory (learner work) in (b), (c) and (d)"}};
  report.table = {{"case", "items/s", "MB/s", "p50 us", "p99 us", "vs gRPC"}};
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
    report.ratios[StrCat("inprocess_items_per_s_", size.name)] = a.items_per_s;
    report.table.push_back(Row(StrCat("(a) in-process ", size.name), a, "-"));
    if (skip_network) continue;

    std::vector<NetworkSystem> systems(4);
    systems[0] = {"grpc_durable", "(b) gRPC durable", skip_grpc ? "--param skip_grpc=1" : "",
                  [&](const BufferLoad& load) {
                    return RunGrpc(dir, base, item_bytes, load, durable);
                  },
                  {},
                  {}};
    systems[1] = {"redis", "(c) Redis Streams", skip_redis ? "--param skip_redis=1" : RedisSkipReason(),
                  [&](const BufferLoad& load) {
                    return RunRedisStreams(dir + "/redis", base, item_bytes, load, "everysec");
                  },
                  {},
                  {}};
    systems[2] = {"nats", "(d) NATS JetStream", skip_nats ? "--param skip_nats=1" : NatsSkipReason(),
                  [&](const BufferLoad& load) {
                    return RunNatsJetStream(dir + "/nats", base, item_bytes, load);
                  },
                  {},
                  {}};
    systems[3] = {"redis_fsync_always", "(e) Redis Streams, fsync always",
                  skip_redis ? "--param skip_redis=1" : RedisSkipReason(),
                  [&](const BufferLoad& load) {
                    return RunRedisStreams(dir + "/redis", base, item_bytes, load, "always");
                  },
                  {},
                  {}};
    BufferLoad load;
    load.items = static_cast<int64_t>(size.network_items * scale);
    load.producers = producers;
    load.window = size.window;
    load.per_request = size.per_request;
    load.batch = batch;
    RETURN_IF_ERROR(RunAlternating(systems, load, rounds, &NetworkSystem::capacity_runs));
    double slowest = 0;
    for (const NetworkSystem& system : systems) {
      if (!system.skipped.empty()) continue;
      slowest = slowest == 0 ? system.capacity() : std::min(slowest, system.capacity());
    }
    BufferLoad paced = load;
    paced.offered_items_per_s = load_fraction * slowest;
    paced.items = std::max<int64_t>(producers, static_cast<int64_t>(load.items * paced_scale));
    RETURN_IF_ERROR(RunAlternating(systems, paced, rounds, &NetworkSystem::paced_runs));
    report.results[StrCat("offered_items_per_s_", size.name)] = paced.offered_items_per_s;

    const NetworkSystem& grpc = systems[0];
    for (const NetworkSystem& system : systems) {
      const std::string key = StrCat(system.key, "_", size.name);
      if (!system.skipped.empty()) {
        report.results[key] = {{"skipped", system.skipped}};
        report.table.push_back({StrCat(system.label, " ", size.name), "skipped", "", "", "", ""});
        continue;
      }
      report.results[key] = system.ToJson();
      const bool compared = &system != &grpc && grpc.skipped.empty();
      CaseResult row;
      row.items_per_s = system.capacity();
      row.mb_per_s = NetworkSystem::MedianOf(system.capacity_runs, &CaseResult::mb_per_s);
      row.p50_us = NetworkSystem::MedianOf(system.paced_runs, &CaseResult::p50_us);
      row.p99_us = NetworkSystem::MedianOf(system.paced_runs, &CaseResult::p99_us);
      const double ratio = compared ? grpc.capacity() / system.capacity() : 1.0;
      report.table.push_back(Row(StrCat(system.label, " ", size.name), row,
                                 compared ? fmt::format("{:.2f}x", ratio) : "-"));
      if (!compared) continue;
      const double p99_ratio = report.results[StrCat("grpc_durable_", size.name)]["p99_us"]
                                   .get<double>() / row.p99_us;
      report.ratios[StrCat("ratio_vs_", system.key, "_", size.name)] = ratio;
      report.ratios[StrCat("p99_vs_", system.key, "_", size.name)] = p99_ratio;
      summary += fmt::format("{}{}: gRPC durable {:.2f}x {} items/s, p99 gRPC/{} at {:.0f} "
                             "items/s {:.2f}",
                             summary.empty() ? "" : "; ", size.name, ratio, system.key,
                             system.key, paced.offered_items_per_s, p99_ratio);
    }
  }
  for (const auto& [key, reason] :
       {std::pair{"redis_skipped", RedisSkipReason()}, std::pair{"nats_skipped", NatsSkipReason()}}) {
    if (!reason.empty()) {
      report.config[key] = reason;
      std::printf("buffer bench: %s\n", reason.c_str());
    }
  }
  std::filesystem::remove_all(dir);
  report.summary = summary.empty() ? "no network system compared" : summary;
  return report;
}

}  // namespace flywheel::bench
