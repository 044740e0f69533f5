// uPlot (https://github.com/leeoniya/uPlot, MIT), embedded into the binary at build time from
// third_party/uplot/ (fetched by scripts/setup) so that a report inlines it and needs no network.
#ifndef FLYWHEEL_OBSERVE_UPLOT_ASSETS_H_
#define FLYWHEEL_OBSERVE_UPLOT_ASSETS_H_

#include <string_view>

namespace flywheel {

std::string_view UplotJs();   // dist/uPlot.iife.min.js: defines the global uPlot
std::string_view UplotCss();  // dist/uPlot.min.css

}  // namespace flywheel

#endif  // FLYWHEEL_OBSERVE_UPLOT_ASSETS_H_
