#include "flywheel/trajectory/call_log.h"

#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

using nlohmann::json;

template <typename T>
T Get(const json& j, const char* key) {
  return j.at(key).get<T>();
}

template <typename T>
T GetOr(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<T>();
}

// A number of type T, checked: nlohmann's get<T>() casts whatever number it finds, and casting a
// double outside T's range (a token id of 1e300) is undefined behaviour, not an error.
template <typename T>
T Number(const json& v, std::string_view what) {
  if constexpr (std::is_integral_v<T>) {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{std::numeric_limits<T>::max()}
                                 : v.get<int64_t>() >= int64_t{std::numeric_limits<T>::min()} &&
                                       v.get<int64_t>() <= int64_t{std::numeric_limits<T>::max()}) {
        return static_cast<T>(v.get<int64_t>());
      }
    }
    throw std::invalid_argument(StrCat(what, ": ", v.is_number() ? v.dump() : v.type_name(),
                                       " is not an integer in [", std::numeric_limits<T>::min(),
                                       ", ", std::numeric_limits<T>::max(), "]"));
  } else {
    if (!v.is_number()) throw std::invalid_argument(StrCat(what, ": not a number"));
    return static_cast<T>(v.get<double>());
  }
}

template <typename T>
T NumberOr(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : Number<T>(*it, key);
}

template <typename T>
std::vector<T> Numbers(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  if (!it->is_array()) throw std::invalid_argument(StrCat(key, ": not an array"));
  std::vector<T> out;
  out.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    out.push_back(Number<T>((*it)[i], StrCat(key, "[", i, "]")));
  }
  return out;
}

LlmCall ParseCall(const json& j) {
  LlmCall call;
  call.call_id = Get<std::string>(j, "call_id");
  auto role = ParseRole(GetOr<std::string>(j, "role", "main"));
  if (!role.ok()) throw std::invalid_argument(std::string(ToStd(role.status().message())));
  call.role = *role;
  call.context = Numbers<int32_t>(j, "context");
  call.generated = Numbers<int32_t>(j, "generated");
  call.logprobs = Numbers<float>(j, "logprobs");
  call.versions = Numbers<int64_t>(j, "versions");
  call.start_unix_ns = NumberOr<int64_t>(j, "start_unix_ns", 0);
  call.end_unix_ns = NumberOr<int64_t>(j, "end_unix_ns", 0);
  return call;
}

void ParseOutcome(const json& j, Execution& e) {
  e.group_id = GetOr<std::string>(j, "group_id", "");
  e.task_id = GetOr<std::string>(j, "task_id", "");
  e.env_name = GetOr<std::string>(j, "env_name", "");
  auto termination = ParseTermination(GetOr<std::string>(j, "termination", "done"));
  if (!termination.ok()) {
    throw std::invalid_argument(std::string(ToStd(termination.status().message())));
  }
  e.termination = *termination;
  if (j.contains("final_reward") && !j["final_reward"].is_null()) {
    e.final_reward = Number<float>(j["final_reward"], "final_reward");
  }
  if (j.contains("partial_score") && !j["partial_score"].is_null()) {
    e.partial_score = Number<float>(j["partial_score"], "partial_score");
  }
}

}  // namespace

absl::StatusOr<std::vector<Execution>> ReadCallLog(std::istream& in, std::string_view source) {
  std::vector<Execution> executions;
  std::map<std::string, size_t> index;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const json j = json::parse(line);
      const std::string id = Get<std::string>(j, "execution_id");
      auto [it, inserted] = index.try_emplace(id, executions.size());
      if (inserted) {
        executions.emplace_back();
        executions.back().execution_id = id;
      }
      Execution& e = executions[it->second];
      const std::string type = Get<std::string>(j, "type");
      if (type == "call") {
        e.calls.push_back(ParseCall(j));
      } else if (type == "execution") {
        ParseOutcome(j, e);
      } else {
        throw std::invalid_argument(
            StrCat("unknown type \"", type, "\" (expected \"call\" or \"execution\")"));
      }
    } catch (const std::exception& ex) {
      return absl::InvalidArgumentError(StrCat(source, ":", line_no, ": ", ex.what()));
    }
  }
  for (const Execution& e : executions) {
    if (auto s = e.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(StrCat(source, ": ", s.message()));
    }
  }
  return executions;
}

void WriteCallLog(const std::vector<Execution>& executions, std::ostream& out) {
  for (const Execution& e : executions) {
    for (const LlmCall& c : e.calls) {
      json j = {{"type", "call"},
                {"execution_id", e.execution_id},
                {"call_id", c.call_id},
                {"role", std::string(RoleName(c.role))},
                {"context", c.context},
                {"generated", c.generated},
                {"logprobs", c.logprobs},
                {"versions", c.versions},
                {"start_unix_ns", c.start_unix_ns},
                {"end_unix_ns", c.end_unix_ns}};
      out << j.dump() << "\n";
    }
    json outcome = {{"type", "execution"},
                    {"execution_id", e.execution_id},
                    {"group_id", e.group_id},
                    {"task_id", e.task_id},
                    {"env_name", e.env_name},
                    {"termination", std::string(TerminationName(e.termination))}};
    if (e.final_reward) outcome["final_reward"] = *e.final_reward;
    if (e.partial_score) outcome["partial_score"] = *e.partial_score;
    out << outcome.dump() << "\n";
  }
}

}  // namespace flywheel
