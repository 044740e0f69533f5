#include "flywheel/core/config.h"

#include <algorithm>
#include <cctype>
#include <fstream>


namespace flywheel::config {
namespace {

constexpr std::string_view kOverrideSource = "--set";

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string_view LastComponent(std::string_view path) {
  const size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

}  // namespace

namespace internal {

std::string NodeTypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return StrCat("string \"", node.as_string()->get(), "\"");
    case toml::node_type::integer:
      return StrCat("integer ", node.as_integer()->get());
    case toml::node_type::floating_point:
      return StrCat("float ", node.as_floating_point()->get());
    case toml::node_type::boolean:
      return node.as_boolean()->get() ? "boolean true" : "boolean false";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date/time";
  }
}

std::string FormatLocation(std::string_view source, const toml::node& node) {
  // Values that came from --set carry that as their path; file values carry the file name.
  const auto& region = node.source();
  if (region.path != nullptr && !region.path->empty()) source = *region.path;
  if (region.begin.line == 0 || source == kOverrideSource) return StrCat(source, ": ");
  return StrCat(source, ":", region.begin.line, ": ");
}

}  // namespace internal

absl::StatusOr<toml::table> ParseToml(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return absl::InvalidArgumentError(StrCat(source, ":", where.line, ":", where.column,
                                                   ": TOML syntax error: ", e.description()));
  }
}

absl::StatusOr<toml::table> ParseTomlFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot open config file ", path));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseToml(text, path);
}

absl::Status ApplyOverride(toml::table& table, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    return absl::InvalidArgumentError(
        StrCat("--set ", assignment, ": expected KEY=VALUE, e.g. --set learner.lr=3e-4"));
  }
  const std::string_view path = Trim(assignment.substr(0, eq));
  const std::string_view text = Trim(assignment.substr(eq + 1));
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    parts.emplace_back(path.substr(start, dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  for (const auto& part : parts) {
    if (part.empty()) {
      return absl::InvalidArgumentError(StrCat("--set ", assignment, ": empty key in '",
                                                     path, "'"));
    }
  }

  // Read the value as TOML when it parses as one; otherwise take it as a bare string.
  toml::table holder;
  try {
    holder = toml::parse(StrCat("v = ", text), kOverrideSource);
  } catch (const toml::parse_error&) {
    std::ostringstream quoted;  // re-parse as a quoted string so it, too, is marked "--set"
    quoted << toml::value<std::string>(std::string(text));
    holder = toml::parse(StrCat("v = ", quoted.str()), kOverrideSource);
  }

  toml::table* current = &table;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    toml::node* child = current->get(parts[i]);
    if (child == nullptr) {
      current = current->insert(parts[i], toml::table{}).first->second.as_table();
    } else if (child->is_table()) {
      current = child->as_table();
    } else {
      return absl::InvalidArgumentError(StrCat(
          "--set ", assignment, ": ", Join(parts.begin(), parts.begin() + i + 1, "."),
          " is a value, not a section"));
    }
  }
  current->insert_or_assign(parts.back(), std::move(*holder.get("v")));
  return absl::OkStatus();
}

std::string ClosestKey(std::string_view key, std::span<const std::string> candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, key.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    const size_t d = EditDistance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

void Reader::CheckUnknownKeys() {
  for (const auto& [key, node] : table_) {
    const std::string_view name = key.str();
    if (std::find(local_keys_.begin(), local_keys_.end(), name) != local_keys_.end()) continue;
    const std::string path = Path(name);
    std::string suggestion;
    // A typo within the section first, then the same key placed in another section.
    const std::string near = ClosestKey(name, local_keys_);
    if (!near.empty()) {
      suggestion = Path(near);
    } else if (all_keys_ != nullptr) {
      for (const auto& full : *all_keys_) {
        if (LastComponent(full) == name) {
          suggestion = full;
          break;
        }
      }
      if (suggestion.empty()) suggestion = ClosestKey(path, *all_keys_);
    }
    errors_.push_back(StrCat(
        internal::FormatLocation(source_, node), "unknown key ", path,
        suggestion.empty() ? "" : StrCat(", did you mean ", suggestion, "?")));
  }
}

absl::Status Reader::status() const {
  if (errors_.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(Join(errors_, "\n"));
}

void Writer::Line(std::string_view key, const std::string& value, std::string_view doc) {
  std::string line = StrCat(key, " = ", value);
  if (!doc.empty()) {
    line.resize(std::max<size_t>(line.size() + 1, 32), ' ');
    line += StrCat("# ", doc);
  }
  lines_.push_back(std::move(line));
}

std::string Writer::Text() const {
  std::string out;
  if (!prefix_.empty() && !lines_.empty()) out += StrCat("[", prefix_, "]\n");
  for (const auto& line : lines_) out += StrCat(line, "\n");
  for (const auto& section : sections_) {
    if (!out.empty() && !section.empty()) out += "\n";
    out += section;
  }
  return out;
}

}  // namespace flywheel::config
