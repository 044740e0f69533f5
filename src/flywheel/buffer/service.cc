#include "flywheel/buffer/service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <thread>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "flywheel/buffer/wire_trajectory.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/core/trajectory_proto.h"
#include "flywheel/rpc/auth.h"

namespace flywheel {
namespace {

constexpr size_t kMaxQueuedRequests = 256;

grpc::StatusCode ToGrpcCode(absl::StatusCode code) {
  return static_cast<grpc::StatusCode>(static_cast<int>(code));
}

// Requests read from an insert stream, waiting for the stream's worker. Bounded by count and by
// bytes (a request larger than the byte bound is let in alone): when the worker falls behind
// (buffer full), the reader stops reading and gRPC flow control pushes back on the client.
// `queued_bytes` is the server-wide gauge of what every stream holds this way.
class RequestQueue {
 public:
  RequestQueue(int64_t max_bytes, Gauge* queued_bytes)
      : max_bytes_(max_bytes), queued_bytes_(queued_bytes) {}
  ~RequestQueue() { queued_bytes_->Add(-static_cast<double>(bytes_)); }

  // `size`: the request's ByteSizeLong().
  bool Push(v1::InsertRequest request, int64_t size) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](RequestQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
          return q->closed_ || q->queue_.empty() ||
                 (q->queue_.size() < kMaxQueuedRequests && q->bytes_ < q->max_bytes_);
        },
        this));
    if (closed_) return false;
    queue_.push_back(std::move(request));
    sizes_.push_back(size);
    bytes_ += size;
    queued_bytes_->Add(static_cast<double>(size));
    return true;
  }
  // Everything queued (at least one request), or empty once finished and drained. The bytes
  // stay counted until Done(): the worker holds them while it inserts.
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
  // The worker is done with the oldest `n` requests popped.
  void Done(size_t n) {
    absl::MutexLock lock(&mu_);
    int64_t freed = 0;
    for (size_t i = 0; i < n && !sizes_.empty(); ++i) {
      freed += sizes_.front();
      sizes_.pop_front();
    }
    bytes_ -= freed;
    queued_bytes_->Add(-static_cast<double>(freed));
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
  const int64_t max_bytes_;
  Gauge* const queued_bytes_;
  absl::Mutex mu_;
  std::deque<v1::InsertRequest> queue_ ABSL_GUARDED_BY(mu_);
  std::deque<int64_t> sizes_ ABSL_GUARDED_BY(mu_);  // of every request not yet Done
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;          // their sum
  bool finished_ ABSL_GUARDED_BY(mu_) = false;      // the client half-closed
  bool closed_ ABSL_GUARDED_BY(mu_) = false;        // the worker gave up (write failed)
};

}  // namespace

BufferServerOptions BufferServerOptions::FromConfig(const BufferOptions& buffer) {
  BufferServerOptions options;
  options.address = buffer.address;
  options.limits.max_message_bytes = buffer.max_message_bytes;
  options.limits.max_concurrent_calls = static_cast<int>(
      std::clamp<int64_t>(buffer.max_concurrent_calls, 0, std::numeric_limits<int>::max() / 2));
  options.limits.max_streams_per_connection = static_cast<int>(std::clamp<int64_t>(
      buffer.max_streams_per_connection, 0, std::numeric_limits<int>::max()));
  options.limits.memory_quota_bytes = buffer.memory_quota_bytes;
  options.limits.idle_timeout = absl::Seconds(buffer.idle_stream_timeout_s);
  return options;
}

BufferServiceImpl::BufferServiceImpl(std::shared_ptr<Buffer> buffer,
                                     const BufferServerOptions& options)
    : buffer_(std::move(buffer)),
      auth_token_(options.security.auth_token),
      max_queued_bytes_per_stream_(options.max_queued_bytes_per_stream),
      limiter_("buffer", options.limits, "buffer."),
      invalid_(MetricsRegistry::Global().GetCounter("buffer.dropped{reason=invalid}")),
      queued_bytes_(MetricsRegistry::Global().GetGauge(
          "buffer.insert_stream_bytes",
          "bytes read from insert streams and not yet inserted, all streams (each at most "
          "max_queued_bytes_per_stream or one request)")) {}

grpc::Status BufferServiceImpl::CheckAuth(const grpc::ServerContext* context) const {
  return CheckBearerToken(context, auth_token_, "buffer");
}

bool BufferServiceImpl::HandleRequests(
    std::vector<v1::InsertRequest>& requests,
    grpc::ServerReaderWriter<v1::InsertResponse, v1::InsertRequest>* stream, CallSlot& slot) {
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
    const size_t first = next_response;
    while (next_response < responses.size() && outstanding[next_response] == 0) {
      // The acks change owner (no copy, no allocation).
      auto* acks = responses[next_response].mutable_acks();
      moved.resize(static_cast<size_t>(acks->size()));
      acks->ExtractSubrange(0, acks->size(), moved.data());
      for (v1::InsertAck* ack : moved) merged.mutable_acks()->AddAllocated(ack);
      ++next_response;
    }
    if (merged.acks_size() > 0) {
      auto writing = slot.Writing();
      if (!stream->Write(merged)) return false;
    }
    slot.Owe(-static_cast<int64_t>(next_response - first));
    return true;
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
  CallSlot slot = limiter_.Admit(context, CallKind::kStream);
  if (!slot.admitted()) return slot.refusal();
  RequestQueue queue(max_queued_bytes_per_stream_, queued_bytes_);
  std::thread worker([&] {
    while (true) {
      std::vector<v1::InsertRequest> requests = queue.PopAll();
      if (requests.empty()) return;
      const bool written = HandleRequests(requests, stream, slot);
      queue.Done(requests.size());
      if (!written) {
        queue.Close();
        return;
      }
    }
  });
  v1::InsertRequest request;
  grpc::Status refused = grpc::Status::OK;
  while (stream->Read(&request)) {
    const int64_t bytes = static_cast<int64_t>(request.ByteSizeLong());
    // What came before is still inserted and acknowledged; the stream then ends with this.
    refused = slot.RefuseIfTooLarge(bytes);
    if (!refused.ok()) break;
    slot.Received();
    slot.Owe(1);
    if (!queue.Push(std::move(request), bytes)) break;
    request.Clear();
  }
  queue.Finish();
  worker.join();
  return refused;
}

grpc::Status BufferServiceImpl::Sample(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::SampleResponse, v1::SampleRequest>* stream) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  CallSlot slot = limiter_.Admit(context, CallKind::kStream);
  if (!slot.admitted()) return slot.refusal();
  v1::SampleRequest request;
  while (stream->Read(&request)) {
    if (grpc::Status s = slot.RefuseIfTooLarge(static_cast<int64_t>(request.ByteSizeLong()));
        !s.ok()) {
      return s;
    }
    slot.Received();
    slot.Owe(1);
    const int64_t timeout_ms = request.timeout_ms() > 0 ? request.timeout_ms() : 1000;
    const int64_t max_batch = request.max_batch() > 0 ? request.max_batch() : 1;
    auto batch = buffer_->Sample(max_batch, absl::Now() + absl::Milliseconds(timeout_ms),
                                 request.lease_owner());
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
    {
      auto writing = slot.Writing();
      if (!stream->Write(response)) break;
    }
    slot.Owe(-1);
  }
  return grpc::Status::OK;
}

grpc::Status BufferServiceImpl::ServerInfo(grpc::ServerContext* context,
                                           const v1::ServerInfoRequest*,
                                           v1::ServerInfoResponse* response) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (!slot.admitted()) return slot.refusal();
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
  response->set_duplicate_inserts(info.duplicate_inserts);
  response->set_leased(info.leased);
  response->set_acknowledged(info.acknowledged);
  response->set_released(info.released);
  response->set_description(buffer_->DebugString());
  return grpc::Status::OK;
}

grpc::Status BufferServiceImpl::SetLearnerVersion(grpc::ServerContext* context,
                                                  const v1::SetLearnerVersionRequest* request,
                                                  v1::SetLearnerVersionResponse*) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  CallSlot slot = limiter_.Admit(context, CallKind::kUnary);
  if (!slot.admitted()) return slot.refusal();
  buffer_->SetLearnerVersion(request->version());
  return grpc::Status::OK;
}

grpc::Status BufferServiceImpl::Acknowledge(grpc::ServerContext* context,
                                            const v1::AcknowledgeRequest* request,
                                            v1::AcknowledgeResponse* response) {
  if (grpc::Status s = CheckAuth(context); !s.ok()) return s;
  if (request->lease_owner().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "buffer acknowledge: lease_owner is empty (the learner's run name)");
  }
  std::vector<DurableStore::Consumed> consumed;
  consumed.reserve(static_cast<size_t>(request->consumed_size()));
  for (const v1::ConsumedTrajectory& c : request->consumed()) {
    consumed.push_back({c.id(), c.reason().empty() ? "trained" : c.reason()});
  }
  const absl::flat_hash_set<std::string> keep(request->keep().begin(), request->keep().end());
  absl::StatusOr<Buffer::AcknowledgeResult> result = buffer_->Acknowledge(
      request->lease_owner(), consumed, request->release_others(), keep);
  if (!result.ok()) {
    return grpc::Status(ToGrpcCode(result.status().code()),
                        StrCat("buffer acknowledge: ", result.status().message()));
  }
  response->set_consumed(result->consumed);
  response->set_released(result->released);
  response->set_unknown(result->unknown);
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<BufferServer>> BufferServer::Start(
    std::shared_ptr<Buffer> buffer, const BufferServerOptions& options) {
  const size_t colon = options.address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("buffer address \"", options.address, "\" is not host:port"));
  }
  RETURN_IF_ERROR(options.limits.Validate("buffer."));
  if (options.max_queued_bytes_per_stream < 1) {
    return absl::InvalidArgumentError("buffer: max_queued_bytes_per_stream must be >= 1");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   MakeServerCredentials(options.security, options.address, "buffer"));
  std::unique_ptr<BufferServer> server(new BufferServer());
  server->host_ = options.address.substr(0, colon);
  server->buffer_ = std::move(buffer);
  server->service_ = std::make_unique<BufferServiceImpl>(server->buffer_, options);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  // The handlers refuse (and count) messages above max_message_bytes themselves.
  options.limits.ApplyTo(builder, "buffer", MessageSizeCheck::kByHandler);
  builder.SetMaxSendMessageSize(static_cast<int>(options.limits.max_message_bytes));
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

}  // namespace flywheel
