#include "flywheel/observe/prometheus_text.h"

#include <cmath>
#include <map>
#include <vector>

#include "absl/strings/str_split.h"
#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

// [a-zA-Z_:][a-zA-Z0-9_:]* for names, [a-zA-Z_][a-zA-Z0-9_]* for label names: anything else
// becomes '_'.
std::string Sanitise(std::string_view text, bool colon_allowed) {
  std::string out(text);
  for (size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                    (colon_allowed && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) out[i] = '_';
  }
  return out;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// "{reason=stale,kind=x}" -> {"reason=\"stale\"", "kind=\"x\""}.
std::vector<std::string> Labels(std::string_view name) {
  std::vector<std::string> labels;
  const size_t open = name.find('{');
  if (open == std::string_view::npos) return labels;
  std::string_view inside = name.substr(open + 1);
  if (!inside.empty() && inside.back() == '}') inside.remove_suffix(1);
  for (absl::string_view piece : absl::StrSplit(ToAbsl(inside), ',', absl::SkipEmpty())) {
    const std::string_view pair = ToStd(piece);
    const size_t eq = pair.find('=');
    const std::string_view key = pair.substr(0, eq);
    const std::string_view value = eq == std::string_view::npos ? "" : pair.substr(eq + 1);
    labels.push_back(StrCat(Sanitise(key, false), "=\"", EscapeLabelValue(value), "\""));
  }
  return labels;
}

std::string LabelSet(std::vector<std::string> labels, std::string_view extra = {}) {
  if (!extra.empty()) labels.emplace_back(extra);
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) out += (i ? "," : "") + labels[i];
  return out + "}";
}

std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return StrCat(v);
}

struct Family {
  std::string type;
  std::string registry_name;  // the family as the registry names it, for the default help
  std::vector<std::string> lines;
};

}  // namespace

std::string PrometheusText(const MetricsView& view) {
  std::map<std::string, Family> families;  // by exposed name: sorted, each family's series together
  auto family = [&](std::string_view name, std::string_view type, std::string_view suffix) {
    const std::string_view registry_family = MetricFamily(name);
    std::string exposed = "flywheel_" + Sanitise(registry_family, true);
    if (!suffix.empty() &&
        !(exposed.size() >= suffix.size() &&
          exposed.compare(exposed.size() - suffix.size(), suffix.size(), suffix) == 0)) {
      exposed += suffix;
    }
    Family& f = families[exposed];
    f.type = type;
    f.registry_name = std::string(registry_family);
    return std::pair<std::string, Family*>(exposed, &f);
  };
  for (const auto& [name, value] : view.counters) {
    auto [exposed, f] = family(name, "counter", "_total");
    f->lines.push_back(StrCat(exposed, LabelSet(Labels(name)), " ", value));
  }
  for (const auto& [name, value] : view.gauges) {
    auto [exposed, f] = family(name, "gauge", "");
    f->lines.push_back(StrCat(exposed, LabelSet(Labels(name)), " ", Number(value)));
  }
  for (const auto& [name, h] : view.histograms) {
    auto [exposed, f] = family(name, "histogram", "");
    const std::vector<std::string> labels = Labels(name);
    int64_t cumulative = 0;
    for (size_t b = 0; b < h.counts.size(); ++b) {
      cumulative += h.counts[b];
      const std::string le = b < h.bounds.size() ? Number(h.bounds[b]) : "+Inf";
      f->lines.push_back(
          StrCat(exposed, "_bucket", LabelSet(labels, StrCat("le=\"", le, "\"")), " ", cumulative));
    }
    f->lines.push_back(StrCat(exposed, "_sum", LabelSet(labels), " ", Number(h.sum)));
    f->lines.push_back(StrCat(exposed, "_count", LabelSet(labels), " ", cumulative));
  }
  std::string out;
  for (const auto& [exposed, f] : families) {
    auto help = view.help.find(f.registry_name);
    out += StrCat("# HELP ", exposed, " ",
                  EscapeHelp(help != view.help.end() ? help->second : f.registry_name), "\n");
    out += StrCat("# TYPE ", exposed, " ", f.type, "\n");
    for (const std::string& line : f.lines) out += line + "\n";
  }
  return out;
}

}  // namespace flywheel
