// The Prometheus text exposition format (version 0.0.4) of the metrics registry, as served at
// /metrics by every long-running process (--metrics-listen).
//
// Names: "flywheel_" + the family with dots as underscores; counters end in "_total";
// labels come from the braces ("buffer.dropped{reason=stale}" ->
// flywheel_buffer_dropped_total{reason="stale"}); histograms give cumulative `_bucket{le=…}`
// series, `_sum` and `_count`. Every family gets # HELP (its help text, or the registry name)
// and # TYPE lines, its series together, as the format requires.
#ifndef FLYWHEEL_OBSERVE_PROMETHEUS_TEXT_H_
#define FLYWHEEL_OBSERVE_PROMETHEUS_TEXT_H_

#include <string>
#include <string_view>

#include "flywheel/core/metrics.h"

namespace flywheel {

inline constexpr std::string_view kPrometheusContentType =
    "text/plain; version=0.0.4; charset=utf-8";

std::string PrometheusText(const MetricsView& view);

}  // namespace flywheel

#endif  // FLYWHEEL_OBSERVE_PROMETHEUS_TEXT_H_
