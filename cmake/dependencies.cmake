# Every dependency comes from a Debian 12 package (scripts/setup installs them).
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
# OpenSSL's libcrypto (libssl-dev) parses the TLS files a process is given, to fail early.
find_package(OpenSSL REQUIRED)
find_package(RocksDB CONFIG REQUIRED)
find_package(tomlplusplus CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
# Google Highway (libhwy-dev): portable SIMD with runtime dispatch for the CPU decoder's kernels.
find_package(hwy CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
# tokenizer.json: RE2 (libre2-dev) runs the pre-tokenizer regex in linear time; ICU (libicu-dev)
# gives NFC and the Unicode properties of added-token matching.
pkg_check_modules(RE2 REQUIRED IMPORTED_TARGET re2)
find_package(ICU REQUIRED COMPONENTS uc)

if(NOT FLYWHEEL_TORCH_FREE)
  # Debian's libtorch-dev (CPU) by default; a CUDA LibTorch with -DTorch_DIR=<libtorch>/share/cmake/Torch.
  find_package(Torch REQUIRED)
  # Debian's Caffe2 config re-creates a `gflags` target without a library location; give it one.
  if(TARGET gflags)
    get_target_property(_gflags_location gflags IMPORTED_LOCATION)
    if(NOT _gflags_location)
      find_library(FLYWHEEL_GFLAGS_LIBRARY gflags REQUIRED)
      set_target_properties(gflags PROPERTIES IMPORTED_LOCATION "${FLYWHEEL_GFLAGS_LIBRARY}")
    endif()
  endif()
  # TORCH_CXX_FLAGS carries the C++ ABI define; it must match for every TU that sees torch types.
  separate_arguments(FLYWHEEL_TORCH_CXX_FLAGS UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  message(STATUS "flywheel: LibTorch ${Torch_VERSION} from ${Torch_DIR}")
endif()

if(FLYWHEEL_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
find_package(benchmark CONFIG QUIET)

