#include "flywheel/runtime/learner_group.h"

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "absl/strings/str_format.h"
#include "flywheel/core/host_port.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/dist/communicator.h"
#include "flywheel/dist/liveness.h"
#include "flywheel/dist/rendezvous.h"

namespace flywheel {

struct LearnerGroup::State {
  std::unique_ptr<dist::Rendezvous> rendezvous;
  c10::intrusive_ptr<c10d::Store> heartbeat_store;  // Liveness's own connection
  std::unique_ptr<dist::Liveness> liveness;
  std::unique_ptr<dist::Communicator> comm;  // over PrefixStore("learner/", the store)
};

LearnerGroup::LearnerGroup(LearnerGroupOptions options)
    : options_(std::move(options)), state_(std::make_unique<State>()) {}

dist::Communicator* LearnerGroup::communicator() { return state_->comm.get(); }

absl::Status LearnerGroupOptions::Validate() const {
  if (world_size < 1) {
    return absl::InvalidArgumentError(StrCat("--world-size ", world_size, " must be >= 1"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(StrCat("--rank ", rank, " is outside the world of ",
                                             world_size, " ranks (--world-size ", world_size,
                                             "): it must be in 0..", world_size - 1));
  }
  if (world_size > 1 && rendezvous.empty()) {
    return absl::InvalidArgumentError(
        StrCat("--world-size ", world_size, " needs --rendezvous HOST:PORT (rank 0's store)"));
  }
  return absl::OkStatus();
}

absl::Status ApplyWorldSize(int world_size, const std::string& config_file, JobConfig& config) {
  if (config.learner.world_size != 1 && config.learner.world_size != world_size) {
    return absl::InvalidArgumentError(
        StrCat("--world-size ", world_size, " but learner.world_size = ",
               config.learner.world_size, " in ", config_file,
               ": make them equal (or leave learner.world_size at 1)"));
  }
  config.learner.world_size = world_size;
  return absl::OkStatus();
}

std::string TextDigest(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (const unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", hash);
}

std::string JobConfigHash(const JobConfig& config) { return TextDigest(FormatJobConfig(config)); }

absl::StatusOr<std::unique_ptr<LearnerGroup>> LearnerGroup::Join(
    const LearnerGroupOptions& options, const JobConfig& config) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<LearnerGroup> g(new LearnerGroup(options));
  dist::RendezvousOptions rendezvous;
  RETURN_IF_ERROR(
      ParseHostPort(options.rendezvous, &rendezvous.host, &rendezvous.port, "rendezvous address"));
  rendezvous.world_size = options.world_size;
  rendezvous.rank = options.rank;
  rendezvous.timeout = absl::ToChronoMilliseconds(options.connect_timeout);
  rendezvous.config_hash = JobConfigHash(config);
  ASSIGN_OR_RETURN(g->state_->rendezvous, dist::Rendezvous::Join(rendezvous));
  ASSIGN_OR_RETURN(g->state_->heartbeat_store, g->state_->rendezvous->Connect());
  std::vector<int> peers(options.world_size);
  std::iota(peers.begin(), peers.end(), 0);
  ASSIGN_OR_RETURN(g->state_->liveness, dist::Liveness::Start(g->state_->heartbeat_store, options.rank, peers,
                                                       dist::LivenessOptions{}));
  dist::CommunicatorOptions comm;
  comm.name = "learner group";
  comm.timeout = absl::ToChronoMilliseconds(options.collective_timeout);
  auto store = c10::make_intrusive<c10d::PrefixStore>("learner/", g->state_->rendezvous->store());
  ASSIGN_OR_RETURN(g->state_->comm,
                   dist::Communicator::Create(store, options.rank, options.world_size, comm));
  return g;
}

LearnerGroup::~LearnerGroup() { Close(); }

absl::Status LearnerGroup::Explain(const absl::Status& error) {
  if (error.ok() || state_->liveness == nullptr) return error;
  return state_->liveness->Explain(error);
}

void LearnerGroup::Close() {
  if (closed_) return;
  closed_ = true;
  state_->comm.reset();
  if (state_->liveness != nullptr) state_->liveness->Stop();
  if (state_->rendezvous != nullptr) {
    state_->rendezvous->Close(absl::Now() + options_.close_wait);
  }
}

}  // namespace flywheel
