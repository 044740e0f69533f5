#include "flywheel/dist/liveness.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel::dist {
namespace {

constexpr char kLeft[] = "left";

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

std::string Describe(const Liveness::Peer& peer) {
  switch (peer.state) {
    case Liveness::State::kStopped:
      return fmt::format("rank {} stopped (no heartbeat for {:.1f} s)", peer.id, Seconds(peer.age));
    case Liveness::State::kLeft:
      return StrCat("rank ", peer.id, " left the group");
    case Liveness::State::kNeverSeen:
      return StrCat("rank ", peer.id, " never sent a heartbeat (not started?)");
    case Liveness::State::kAlive:
      break;
  }
  return StrCat("rank ", peer.id, " is alive");
}

}  // namespace

absl::Status LivenessOptions::Validate() const {
  if (interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("liveness: interval must be > 0");
  }
  if (stale_after < 2 * interval) {
    return absl::InvalidArgumentError(StrCat("liveness: stale_after (", Seconds(stale_after),
                                             " s) must be at least twice the heartbeat interval (",
                                             Seconds(interval), " s)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Liveness>> Liveness::Start(c10::intrusive_ptr<c10d::Store> store,
                                                          int my_id, std::vector<int> peers,
                                                          LivenessOptions options) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<Liveness> liveness(
      new Liveness(std::move(store), my_id, std::move(peers), std::move(options)));
  RETURN_IF_ERROR(liveness->Beat());
  liveness->thread_ = std::thread([l = liveness.get()] { l->Run(); });
  return liveness;
}

Liveness::Liveness(c10::intrusive_ptr<c10d::Store> store, int my_id, std::vector<int> peers,
                   LivenessOptions options)
    : store_(std::move(store)),
      id_(my_id),
      options_(std::move(options)),
      peers_(std::move(peers)) {}

Liveness::~Liveness() { Stop(); }

std::string Liveness::Key(int id) const { return StrCat(options_.key_prefix, id); }

absl::Status Liveness::Beat() {
  const std::string now = StrCat(absl::ToUnixMicros(absl::Now()));
  absl::Status s = TorchCall(StrCat("liveness: heartbeat of rank ", id_), [&] {
    store_->set(Key(id_), std::vector<uint8_t>(now.begin(), now.end()));
  });
  if (s.ok()) beats_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  beat_error_ = s;
  return s;
}

void Liveness::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time next = absl::Now() + options_.interval;
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      if (mu_.AwaitWithDeadline(absl::Condition(&stopping), next)) return;
    }
    (void)Beat();  // a failure is kept in beat_error_ and shown by Explain
  }
}

void Liveness::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  (void)TorchCall("liveness: leaving",
                  [&] { store_->set(Key(id_), std::vector<uint8_t>(kLeft, kLeft + 4)); });
}

void Liveness::SetPeers(std::vector<int> peers) {
  absl::MutexLock lock(&mu_);
  peers_ = std::move(peers);
}

absl::StatusOr<std::vector<Liveness::Peer>> Liveness::Check() {
  std::vector<int> ids;
  {
    absl::MutexLock lock(&mu_);
    ids = peers_;
  }
  std::vector<Peer> peers;
  const absl::Time now = absl::Now();
  for (int id : ids) {
    if (id == id_) continue;
    std::string value;
    bool present = false;
    RETURN_IF_ERROR(TorchCall(StrCat("liveness: reading the heartbeat of rank ", id), [&] {
      present = store_->check({Key(id)});
      if (present) {
        std::vector<uint8_t> bytes = store_->get(Key(id));
        value.assign(bytes.begin(), bytes.end());
      }
    }));
    Peer peer;
    peer.id = id;
    int64_t micros = 0;
    if (!present) {
      peer.state = State::kNeverSeen;
    } else if (value == kLeft) {
      peer.state = State::kLeft;
    } else if (absl::SimpleAtoi(value, &micros)) {
      peer.age = now - absl::FromUnixMicros(micros);
      peer.state = peer.age > options_.stale_after ? State::kStopped : State::kAlive;
    } else {
      return absl::DataLossError(
          StrCat("liveness: heartbeat of rank ", id, " is not a time: '", value, "'"));
    }
    peers.push_back(peer);
  }
  return peers;
}

absl::Status Liveness::Explain(const absl::Status& collective_error) {
  if (collective_error.ok()) return collective_error;
  const auto annotated = [&](std::string_view note) {
    return absl::Status(collective_error.code(), StrCat(collective_error.message(), "; ", note));
  };
  // A peer killed just now still has a young heartbeat: look again when the youngest-looking
  // candidate would have turned stale, until the deadline.
  const absl::Time deadline = absl::Now() + options_.stale_after + options_.interval;
  while (true) {
    absl::StatusOr<std::vector<Peer>> peers = Check();
    if (!peers.ok()) {
      if (options_.store_host < 0 || options_.store_host == id_) {
        return annotated(StrCat("heartbeats unreadable: ", peers.status().message()));
      }
      return annotated(StrCat("rank ", options_.store_host,
                              " probably stopped: the store it hosts is unreachable (",
                              peers.status().message(), ")"));
    }
    if (peers->empty()) return collective_error;  // nobody else to blame
    std::vector<std::string> gone;
    std::vector<std::string> never_seen;
    absl::Duration min_left = absl::InfiniteDuration();  // until the next alive peer turns stale
    for (const Peer& peer : *peers) {
      if (peer.state == State::kStopped || peer.state == State::kLeft)
        gone.push_back(Describe(peer));
      if (peer.state == State::kNeverSeen) never_seen.push_back(Describe(peer));
      if (peer.state == State::kAlive)
        min_left = std::min(min_left, options_.stale_after - peer.age);
    }
    if (!gone.empty()) return annotated(Join(gone, "; "));
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      if (!never_seen.empty()) return annotated(Join(never_seen, "; "));
      absl::Status beat;
      {
        absl::MutexLock lock(&mu_);
        beat = beat_error_;
      }
      if (!beat.ok()) return annotated(StrCat("this rank's own ", beat.message()));
      return annotated(StrCat("every peer's heartbeat is fresh (none older than ",
                              Seconds(options_.stale_after), " s): no rank stopped"));
    }
    // Heartbeats are written every interval: a live peer's is never older than that (plus the
    // store round trip), so the soonest a dead one can be told apart is when it passes
    // stale_after.
    absl::SleepFor(std::min(std::max(min_left, absl::ZeroDuration()) + absl::Milliseconds(10),
                            deadline - now));
  }
}

}  // namespace flywheel::dist
