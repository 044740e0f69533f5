// NATS JetStream as a durable trajectory queue, the other kind of stream people use for this: a
// work-queue stream on file storage (a message is removed once its consumer acknowledges it),
// producers publishing asynchronously with at most `window` publishes unacknowledged by the
// server (js_PublishAsync, MaxPending), and one pull consumer fetching up to `batch` messages a
// request, acknowledging each (a work queue requires explicit acks; they are sent without waiting
// for the server's confirmation).
#include "bench/buffer_nats.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "flywheel/core/strings.h"

#ifdef FLYWHEEL_HAVE_NATS
#include <nats/nats.h>
#endif

namespace flywheel::bench {
#ifndef FLYWHEEL_HAVE_NATS
std::string NatsSkipReason() {
  return "built without the NATS C client (apt-get install libnats-dev)";
}

absl::StatusOr<CaseResult> RunNatsJetStream(const std::string&, const std::string&, int64_t,
                                            const BufferLoad&) {
  return absl::FailedPreconditionError(NatsSkipReason());
}
#else
namespace {
std::string NatsBinary() {
  return FindBinary(
      {"/usr/bin/nats-server", "/usr/sbin/nats-server", "/usr/local/bin/nats-server"});
}
}  // namespace

std::string NatsSkipReason() {
  return NatsBinary().empty() ? "nats-server not found (apt-get install nats-server)" : "";
}

namespace {

absl::Status NatsError(const std::string& what, natsStatus s,
                       jsErrCode code = static_cast<jsErrCode>(0)) {
  return absl::InternalError(StrCat(
      "NATS ", what, ": ", natsStatus_GetText(s),
      code != 0 ? StrCat(" (JetStream error ", static_cast<int>(code), ")") : std::string()));
}

// A connection and its JetStream context, destroyed with the object.
struct JetStream {
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  ~JetStream() {
    if (js != nullptr) jsCtx_Destroy(js);
    if (nc != nullptr) natsConnection_Destroy(nc);
  }
  natsStatus Connect(const std::string& url, jsOptions* options) {
    natsStatus s = natsConnection_ConnectTo(&nc, url.c_str());
    if (s == NATS_OK) s = natsConnection_JetStream(&js, nc, options);
    return s;
  }
};

void OnPublishError(jsCtx*, jsPubAckErr*, void* closure) {
  *static_cast<std::atomic<bool>*>(closure) = true;
}

void Produce(const std::string& url, int p, const std::string& base, const BufferLoad& load,
             const Pacer& pacer, std::atomic<bool>* failed) {
  jsOptions options;
  jsOptions_Init(&options);
  options.PublishAsync.MaxPending = load.window;  // the same window as every other producer
  options.PublishAsync.ErrHandler = OnPublishError;
  options.PublishAsync.ErrHandlerClosure = failed;
  options.PublishAsync.StallWait = 30000;
  JetStream stream;
  if (stream.Connect(url, &options) != NATS_OK) {
    *failed = true;
    return;
  }
  const int64_t per_producer = load.per_producer();
  // The client library writes publishes in batches of its own; pacing is per item.
  for (int64_t i = 0; i < per_producer && !*failed; ++i) {
    pacer.WaitUntilDue(i);
    const std::string wire = Stamp(base, StrCat("p", p, "-", i), pacer.SendTime(i));
    if (js_PublishAsync(stream.js, "trajectories", wire.data(), static_cast<int>(wire.size()),
                        nullptr) != NATS_OK) {
      *failed = true;
    }
  }
  jsPubOptions wait;
  jsPubOptions_Init(&wait);
  wait.MaxWait = 60000;
  if (js_PublishAsyncComplete(stream.js, &wait) != NATS_OK) *failed = true;
}

absl::Status WaitForNats(ServerProcess& server, const std::string& url) {
  for (int i = 0; i < 250; ++i) {
    if (!server.Running()) return absl::UnavailableError("nats-server exited at start");
    natsConnection* nc = nullptr;
    if (natsConnection_ConnectTo(&nc, url.c_str()) == NATS_OK) {
      natsConnection_Destroy(nc);
      return absl::OkStatus();
    }
    usleep(20000);
  }
  return absl::UnavailableError(StrCat("nats-server did not answer at ", url));
}

}  // namespace

absl::StatusOr<CaseResult> RunNatsJetStream(const std::string& dir, const std::string& base,
                                            int64_t item_bytes, const BufferLoad& load) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int port = FreePort();
  const std::string url = StrCat("nats://127.0.0.1:", port);
  absl::StatusOr<ServerProcess> server = ServerProcess::Start(
      NatsBinary(), {"-a", "127.0.0.1", "-p", std::to_string(port), "-js", "-sd", dir});
  if (!server.ok()) return server.status();
  if (absl::Status s = WaitForNats(*server, url); !s.ok()) return s;

  JetStream consumer;
  natsStatus s = consumer.Connect(url, nullptr);
  if (s != NATS_OK) return NatsError("connect", s);
  jsErrCode code = static_cast<jsErrCode>(0);
  jsStreamConfig config;
  jsStreamConfig_Init(&config);
  const char* subjects[] = {"trajectories"};
  config.Name = "TRAJECTORIES";
  config.Subjects = subjects;
  config.SubjectsLen = 1;
  config.Storage = js_FileStorage;
  config.Retention = js_WorkQueuePolicy;
  jsStreamInfo* info = nullptr;
  s = js_AddStream(&info, consumer.js, &config, nullptr, &code);
  if (s != NATS_OK) return NatsError("add stream", s, code);
  jsStreamInfo_Destroy(info);
  jsSubOptions sub_options;
  jsSubOptions_Init(&sub_options);
  sub_options.Config.AckPolicy = js_AckExplicit;
  // Acks are sent without waiting, so a few batches may be unconfirmed at once; the server's
  // default of 1,000 would cut every fetch short and hold the request until it expires.
  sub_options.Config.MaxAckPending = 4 * load.batch;
  natsSubscription* sub = nullptr;
  s = js_PullSubscribe(&sub, consumer.js, "trajectories", "learner", nullptr, &sub_options, &code);
  if (s != NATS_OK) return NatsError("pull subscribe", s, code);
  // A fetched batch of 64 KiB items is far above the client's default pending limit (64 MiB).
  natsSubscription_SetPendingLimits(sub, -1, -1);

  const int64_t total = load.total();
  RunRecord run(load);
  std::vector<std::thread> producers;
  for (int p = 0; p < load.producers; ++p) {
    producers.emplace_back([&, p] { Produce(url, p, base, load, run.pacer(), &run.failed); });
  }
  // Fetch takes what is stored at once (a no-wait request); only when the stream is drained does
  // it wait, and then for one message, so that a fetch neither blocks for a full batch nor
  // returns empty in a busy loop.
  int64_t got = 0;
  bool drained = false;
  while (got < total && !run.failed) {
    natsMsgList list{};
    if (drained) {
      s = natsSubscription_Fetch(&list, sub, 1, 30000, &code);
    } else {
      jsFetchRequest request;
      jsFetchRequest_Init(&request);
      request.Batch = static_cast<int>(std::min(load.batch, total - got));
      request.NoWait = true;              // the server answers at once with what it has
      request.Expires = 5'000'000'000LL;  // bounds the client's wait for that answer
      s = natsSubscription_FetchRequest(&list, sub, &request);
    }
    // A no-wait fetch ends with "not found" or a timeout once it has taken what was stored,
    // with or without messages.
    if (list.Count == 0) {
      if (drained || (s != NATS_NOT_FOUND && s != NATS_TIMEOUT)) break;
      drained = true;
      continue;
    }
    drained = false;
    const int64_t now = NowNs();
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* msg = list.Msgs[i];
      run.latencies_us.push_back(LatencyUs(natsMsg_GetData(msg), natsMsg_GetDataLength(msg), now));
      if (natsMsg_Ack(msg, nullptr) != NATS_OK) run.failed = true;
    }
    got += list.Count;
    natsMsgList_Destroy(&list);
  }
  run.stop();
  for (auto& t : producers) t.join();
  natsSubscription_Destroy(sub);
  if (got < total && s != NATS_OK) {
    return absl::InternalError(StrCat("NATS JetStream case: ", got, " of ", total,
                                      " items arrived (fetch: ", natsStatus_GetText(s), ")"));
  }
  return run.Finish("NATS JetStream", got, item_bytes);
}
#endif  // FLYWHEEL_HAVE_NATS

}  // namespace flywheel::bench
