#include "flywheel/runtime/learner_leases.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "flywheel/core/strings.h"

namespace flywheel {

int64_t LearnerLeases::Admit(std::vector<std::vector<Trajectory>>& groups) {
  int64_t skipped = 0;
  std::vector<std::vector<Trajectory>> kept;
  kept.reserve(groups.size());
  for (std::vector<Trajectory>& group : groups) {
    std::vector<Trajectory> members;
    for (Trajectory& t : group) {
      if (!held_.insert(t.id).second) {
        ++skipped;
        continue;
      }
      members.push_back(std::move(t));
    }
    if (!members.empty()) kept.push_back(std::move(members));
  }
  groups = std::move(kept);
  return skipped;
}

void LearnerLeases::Consume(const std::vector<std::string>& ids, std::string_view reason) {
  for (const std::string& id : ids) {
    held_.insert(id);
    pending_.push_back({id, std::string(reason)});
  }
}

void LearnerLeases::Acknowledged(size_t count) {
  count = std::min(count, acknowledgeable_);
  acknowledgeable_ -= count;
  for (size_t i = 0; i < count; ++i) held_.erase(pending_[i].id);
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(count));
}

absl::Status LearnerLeases::Write(const std::string& dir) const {
  nlohmann::json pending = nlohmann::json::array();
  for (const Consumed& c : pending_) pending.push_back({{"id", c.id}, {"reason", c.reason}});
  const std::string path = (std::filesystem::path(dir) / kCheckpointFile).string();
  std::ofstream out(path);
  out << nlohmann::json{{"pending", pending}}.dump() << "\n";
  out.close();
  if (!out) return absl::InternalError(StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status LearnerLeases::Read(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kCheckpointFile).string();
  if (!std::filesystem::exists(path)) return absl::OkStatus();
  std::ifstream in(path);
  nlohmann::json record = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.contains("pending") || !record["pending"].is_array()) {
    return absl::DataLossError(
        StrCat(path, ": not a lease record ({\"pending\": [{\"id\", \"reason\"}, …]})"));
  }
  for (const nlohmann::json& c : record["pending"]) {
    if (!c.is_object() || !c.contains("id") || !c["id"].is_string()) {
      return absl::DataLossError(StrCat(path, ": a pending entry without an \"id\" string"));
    }
    const std::string id = c["id"].get<std::string>();
    held_.insert(id);
    pending_.push_back({id, c.value("reason", std::string("trained"))});
  }
  acknowledgeable_ = pending_.size();
  return absl::OkStatus();
}

}  // namespace flywheel
