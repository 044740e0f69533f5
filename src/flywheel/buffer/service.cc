#include "flywheel/buffer/service.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <deque>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "flywheel/buffer/auth.h"
#include "flywheel/buffer/wire_trajectory.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"

namespace flywheel {
namespace {

constexpr size_t kMaxQueuedRequests = 256;

grpc::StatusCode ToGrpcCode(absl::StatusCode code) {
  return static_cast<grpc::StatusCode>(static_cast<int>(code));
}

// Requests read from an insert stream, waiting for the stream's worker. Bounded: when the
// worker falls behind (buffer full), the reader stops reading and gRPC flow control pushes
// back on the client.
class RequestQueue {
 public:
  bool Push(v1::InsertRequest request) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](RequestQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
          return q->closed_ || q->queue_.size() < kMaxQueuedRequests;
        },
        this));
    if (closed_) return false;
    queue_.push_back(std::move(request));
    return true;
  }
  // Everything queued (at least one request), or empty once finished and drained.
  std::vector<v1::InsertRequest> PopAll() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](RequestQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
          return q->closed_ || q->finished_ || !q->queue_.empty();
        },
        this));
    std::vector<v1::InsertRequest> out;
    if (closed_) return out;
    out.reserve(queue_.size());
    for (auto& r : queue_) out.push_back(std::move(r));
    queue_.clear();
    return out;
  }
  void Finish() {
    absl::MutexLock lock(&mu_);
    finished_ = true;
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

 private:
  absl::Mutex mu_;
  std::deque<v1::InsertRequest> queue_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // the client half-closed
  bool closed_ ABSL_GUARDED_BY(mu_) = false;    // the worker gave up (write failed)
};

}  // namespace

BufferServiceImpl::BufferServiceImpl(std::shared_ptr<Buffer> buffer, std::string auth_token)
    : buffer_(std::move(buffer)),
      auth_token_(std::move(auth_token)),
      invalid_(MetricsRegistry::Global().GetCounter("buffer.dropped{reason=invalid}")) {}

grpc::Status BufferServiceImpl::CheckAuth(const grpc::ServerContext* context) const {
  return CheckBearerToken(context, auth_token_, "buffer");
}

bool BufferServiceImpl::HandleRequests(
    std::vector<v1::InsertRequest>& requests,
    grpc::ServerReaderWriter<v1::InsertResponse, v1::InsertRequest>* stream) {
  struct Slot {
    size_t request;
    int index;
  };
  std::vector<ItemMember> members;
  std::vector<Slot> slots;
  std::vector<v1::InsertResponse> responses(requests.size());
  std::vector<int> outstanding(requests.size(), 0);  // trajectories not yet acknowledged
  absl::Time deadline = absl::InfiniteFuture();
  // One message reused for every trajectory: parsing clears it, which keeps the repeated
  // fields' capacity, so they are not allocated and grown again per trajectory.
  v1::Trajectory proto;
  for (size_t r = 0; r < requests.size(); ++r) {
    v1::InsertRequest& request = requests[r];
    const int64_t timeout_ms = request.timeout_ms() > 0 ? request.timeout_ms() : 60000;
    deadline = std::min(deadline, absl::Now() + absl::Milliseconds(timeout_ms));
    for (int i = 0; i < request.trajectories_size(); ++i) {
      v1::InsertAck* ack = responses[r].add_acks();
      ack->set_sequence(request.sequence() + static_cast<uint64_t>(i));
      auto wire = std::make_shared<std::string>(std::move(*request.mutable_trajectories(i)));
      bool parsed = false;
      absl::StatusOr<ItemMember> member = DecodeWireTrajectory(std::move(wire), proto, &parsed);
      if (parsed) ack->set_id(proto.id());
      if (!member.ok()) {
        invalid_->Increment();
        ack->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
        ack->set_message(parsed ? std::string(member.status().message())
                                : StrCat("trajectories[", i, "]: ", member.status().message()));
        continue;
      }
      members.push_back(std::move(*member));
      slots.push_back({r, i});
      ++outstanding[r];
    }
  }
  size_t next_response = 0;
  // Acks of every request that is complete go out together in one message (fewer writes;
  // a synchronous Write with buffer_hint would not complete until a later write).
  auto flush = [&]() {
    v1::InsertResponse merged;
    std::vector<v1::InsertAck*> moved;
    while (next_response < responses.size() && outstanding[next_response] == 0) {
      // The acks change owner (no copy, no allocation).
      auto* acks = responses[next_response].mutable_acks();
      moved.resize(static_cast<size_t>(acks->size()));
      acks->ExtractSubrange(0, acks->size(), moved.data());
      for (v1::InsertAck* ack : moved) merged.mutable_acks()->AddAllocated(ack);
      ++next_response;
    }
    return merged.acks_size() == 0 || stream->Write(merged);
  };
  std::vector<absl::Status> statuses;
  size_t done = 0;
  while (done < members.size()) {
    if (!flush()) return false;
    statuses.clear();
    const size_t n = buffer_->InsertBatch(members, done, deadline, &statuses);
    for (size_t k = 0; k < n; ++k) {
      const Slot& slot = slots[done + k];
      if (!statuses[k].ok()) {
        v1::InsertAck* ack = responses[slot.request].mutable_acks(slot.index);
        ack->set_code(static_cast<int>(statuses[k].code()));
        ack->set_message(std::string(statuses[k].message()));
      }
      --outstanding[slot.request];
    }
    done += n;
  }
  return flush();
}

grpc::Status BufferServiceImpl::Insert(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::InsertResponse, v1::InsertRequest>* stream) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  RequestQueue queue;
  std::thread worker([&] {
    while (true) {
      std::vector<v1::InsertRequest> requests = queue.PopAll();
      if (requests.empty()) return;
      if (!HandleRequests(requests, stream)) {
        queue.Close();
        return;
      }
    }
  });
  v1::InsertRequest request;
  while (stream->Read(&request)) {
    if (!queue.Push(std::move(request))) break;
    request.Clear();
  }
  queue.Finish();
  worker.join();
  return grpc::Status::OK;
}

grpc::Status BufferServiceImpl::Sample(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::SampleResponse, v1::SampleRequest>* stream) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  v1::SampleRequest request;
  while (stream->Read(&request)) {
    const int64_t timeout_ms = request.timeout_ms() > 0 ? request.timeout_ms() : 1000;
    const int64_t max_batch = request.max_batch() > 0 ? request.max_batch() : 1;
    auto batch = buffer_->Sample(max_batch, absl::Now() + absl::Milliseconds(timeout_ms));
    v1::SampleResponse response;
    if (!batch.ok()) {
      if (batch.status().code() != absl::StatusCode::kDeadlineExceeded) {
        return grpc::Status(ToGrpcCode(batch.status().code()),
                            std::string(batch.status().message()));
      }
    } else {
      response.mutable_items()->Reserve(static_cast<int>(batch->size()));
      for (const SampledItem& sampled : *batch) {
        v1::SampledItem* out = response.add_items();
        for (const ItemMember& m : sampled.item->members) {
          if (m.wire != nullptr && sampled.item.use_count() == 1 && m.wire.use_count() == 1) {
            // The table let go of the item (consumed) and nothing else holds its bytes. The
            // fence orders this move after the other holders' reads (their release decrements).
            std::atomic_thread_fence(std::memory_order_acquire);
            *out->add_trajectories() = std::move(*m.wire);
          } else if (m.wire != nullptr) {
            out->add_trajectories(*m.wire);
          } else {
            ToProto(*m.trajectory).SerializeToString(out->add_trajectories());
          }
        }
        out->set_times_sampled(sampled.times_sampled);
        out->set_probability(sampled.probability);
        out->set_lag(sampled.lag);
      }
    }
    if (!stream->Write(response)) break;
  }
  return grpc::Status::OK;
}

grpc::Status BufferServiceImpl::ServerInfo(grpc::ServerContext* context,
                                           const v1::ServerInfoRequest*,
                                           v1::ServerInfoResponse* response) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  const BufferInfo info = buffer_->Info();
  response->set_size(info.table.size);
  response->set_max_size(info.table.max_size);
  response->set_inserts(info.table.inserts);
  response->set_samples(info.table.samples);
  response->set_learner_version(info.table.learner_version);
  response->set_pending_groups(info.pending_groups);
  response->set_insert_rate(info.insert_rate);
  response->set_sample_rate(info.sample_rate);
  response->set_insert_blocked_s(static_cast<double>(info.table.insert_blocked_ns) * 1e-9);
  response->set_sample_blocked_s(static_cast<double>(info.table.sample_blocked_ns) * 1e-9);
  auto& dropped = *response->mutable_dropped();
  dropped["stale"] = info.dropped_stale;
  dropped["incomplete_group"] = info.dropped_incomplete_group;
  dropped["late_group_member"] = info.dropped_late_group_member;
  dropped["evicted"] = info.dropped_evicted;
  dropped["invalid"] = invalid_->value();
  response->set_durable(info.durable);
  response->set_recovered(info.recovered);
  response->set_description(buffer_->DebugString());
  return grpc::Status::OK;
}

grpc::Status BufferServiceImpl::SetLearnerVersion(grpc::ServerContext* context,
                                                  const v1::SetLearnerVersionRequest* request,
                                                  v1::SetLearnerVersionResponse*) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  buffer_->SetLearnerVersion(request->version());
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<BufferServer>> BufferServer::Start(
    std::shared_ptr<Buffer> buffer, const BufferServerOptions& options) {
  const size_t colon = options.address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("buffer address \"", options.address, "\" is not host:port"));
  }
  std::unique_ptr<BufferServer> server(new BufferServer());
  server->host_ = options.address.substr(0, colon);
  if (server->host_ != "127.0.0.1" && server->host_ != "localhost" && server->host_ != "[::1]" &&
      options.auth_token.empty()) {
    spdlog::warn(
        "buffer: serving on {} without an auth token: anyone who can reach it can "
        "insert and sample",
        options.address);
  }
  server->buffer_ = std::move(buffer);
  server->service_ = std::make_unique<BufferServiceImpl>(server->buffer_, options.auth_token);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        StrCat("buffer: cannot listen on ", options.address,
               " (buffer.address / --address): in use or not a local address?"));
  }
  return server;
}

std::string BufferServer::address() const { return StrCat(host_, ":", port_); }

void BufferServer::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  buffer_->Close();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

void BufferServer::Wait() { server_->Wait(); }

BufferServer::~BufferServer() { Shutdown(); }

absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read auth token file ", path));
  std::string token;
  std::getline(in, token);
  const size_t begin = token.find_first_not_of(" \t\r\n");
  const size_t end = token.find_last_not_of(" \t\r\n");
  if (begin == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("auth token file ", path, " is empty"));
  }
  return token.substr(begin, end - begin + 1);
}

}  // namespace flywheel
