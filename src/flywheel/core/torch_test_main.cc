// main() of the test executables that link LibTorch (cmake/flywheel.cmake): glibc's malloc tuned
// for tensors before any test runs, as `flywheel` tunes it at its start (malloc_tuning.h).
// Without it a test that trains pays the page faults `flywheel train` does not: the repair
// learning test took 48.7 s instead of 39.2 s, the tree job's 127 s instead of 51 s.
#include <gtest/gtest.h>

#include "flywheel/core/malloc_tuning.h"

int main(int argc, char** argv) {
  flywheel::TuneMallocForTensors();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
