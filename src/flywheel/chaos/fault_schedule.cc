#include "flywheel/chaos/fault_schedule.h"

#include "flywheel/core/strings.h"

namespace flywheel::chaos {

const char* FaultKindName(Fault::Kind kind) {
  switch (kind) {
    case Fault::Kind::kKill:
      return "kill";
    case Fault::Kind::kFreeze:
      return "freeze";
    case Fault::Kind::kDelay:
      return "delay";
    case Fault::Kind::kRefuse:
      return "refuse";
    case Fault::Kind::kCut:
      return "cut";
  }
  return "?";
}

namespace {
std::string Ms(absl::Duration d) {
  return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(1)));
}
}  // namespace

std::string Fault::DebugString() const {
  switch (kind) {
    case Kind::kKill:
      return StrCat("kill ", target, " (down ", Ms(duration), ")");
    case Kind::kFreeze:
      return StrCat("freeze ", target, " for ", Ms(duration));
    case Kind::kDelay:
      return StrCat("proxy delay ", Ms(delay), " for ", Ms(duration));
    case Kind::kRefuse:
      return StrCat("proxy refuses connections for ", Ms(duration));
    case Kind::kCut:
      return "proxy cuts every connection (and the 200 ms of traffic in flight)";
  }
  return "?";
}

absl::Duration FaultSchedule::Uniform(absl::Duration lo, absl::Duration hi) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  return lo + (hi - lo) * u(rng_);
}

absl::Duration FaultSchedule::NextGap() {
  std::exponential_distribution<double> gap(1.0 / absl::ToDoubleSeconds(options_.mean_gap));
  return absl::Seconds(gap(rng_));
}

Fault FaultSchedule::Next(const std::vector<std::string>& targets) {
  const double weights[] = {options_.kill_weight, options_.freeze_weight, options_.delay_weight,
                            options_.refuse_weight, options_.cut_weight};
  std::discrete_distribution<int> pick(std::begin(weights), std::end(weights));
  Fault fault;
  fault.kind = static_cast<Fault::Kind>(pick(rng_));
  if ((fault.kind == Fault::Kind::kKill || fault.kind == Fault::Kind::kFreeze) && targets.empty()) {
    fault.kind = Fault::Kind::kCut;
  }
  switch (fault.kind) {
    case Fault::Kind::kKill:
    case Fault::Kind::kFreeze: {
      std::uniform_int_distribution<size_t> who(0, targets.size() - 1);
      fault.target = targets[who(rng_)];
      fault.duration = fault.kind == Fault::Kind::kKill
                           ? Uniform(absl::ZeroDuration(), options_.max_restart_pause)
                           : Uniform(options_.min_freeze, options_.max_freeze);
      break;
    }
    case Fault::Kind::kDelay:
      fault.duration = Uniform(options_.min_proxy_fault, options_.max_proxy_fault);
      fault.delay = Uniform(options_.min_delay, options_.max_delay);
      break;
    case Fault::Kind::kRefuse:
      fault.duration = Uniform(options_.min_proxy_fault, options_.max_proxy_fault);
      break;
    case Fault::Kind::kCut:
      break;
  }
  return fault;
}

}  // namespace flywheel::chaos
