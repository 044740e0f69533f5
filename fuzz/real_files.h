// The real Hugging Face files some targets fuzz against (third_party/tokenizers/, fetched by
// scripts/setup): found under $FLYWHEEL_SOURCE_DIR, else the source tree the target was built
// from. A target that cannot load its file says so and exits: it fuzzes nothing without it.
#ifndef FLYWHEEL_FUZZ_REAL_FILES_H_
#define FLYWHEEL_FUZZ_REAL_FILES_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"

namespace flywheel::fuzz {

inline std::string SourcePath(const std::string& relative) {
  const char* dir = std::getenv("FLYWHEEL_SOURCE_DIR");
  return std::string(dir != nullptr ? dir : FLYWHEEL_SOURCE_DIR_DEFAULT) + "/" + relative;
}

inline void ExitUnlessOk(const absl::Status& status, const std::string& what) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s: %s (scripts/setup fetches third_party/tokenizers/)\n", what.c_str(),
               std::string(status.message()).c_str());
  std::exit(1);
}

}  // namespace flywheel::fuzz

#endif  // FLYWHEEL_FUZZ_REAL_FILES_H_
