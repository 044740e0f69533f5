# Every dependency comes from a Debian 12 package (scripts/setup installs them; on a machine without
# them, scripts/gpu-build unpacks the same packages from scripts/gpu-bundle into a prefix).
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

# A LibTorch outside /usr (a torch wheel) ships header folders of its own (fmt/ among them) that
# must not stand in for the ones flywheel links: scripts/gpu-build names its package prefix's
# include folder here, searched before any target's.
set(FLYWHEEL_INCLUDE_FIRST "" CACHE PATH "Header folder searched before every dependency's")
if(FLYWHEEL_INCLUDE_FIRST)
  include_directories(BEFORE SYSTEM "${FLYWHEEL_INCLUDE_FIRST}")
endif()

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
  # CUDA and NCCL, as the LibTorch was built: a CUDA build (Python's cu* wheels, a CUDA libtorch
  # zip) defines the torch_cuda / c10_cuda targets, and torch_cuda carries USE_C10D_NCCL when c10d
  # has its NCCL process group (ProcessGroupNCCL.hpp is empty without that define). Debian's CPU
  # LibTorch has neither, and then nothing is defined: sources test `#if FLYWHEEL_CUDA`.
  option(FLYWHEEL_USE_NCCL "Use c10d's NCCL process group when the LibTorch has one" ON)
  set(FLYWHEEL_CUDA OFF)
  if(TARGET torch_cuda OR TARGET c10_cuda OR TORCH_CUDA_LIBRARIES)
    set(FLYWHEEL_CUDA ON)
  endif()
  set(FLYWHEEL_NCCL OFF)
  set(_flywheel_nccl_note "")
  if(FLYWHEEL_CUDA AND TARGET torch_cuda)
    get_target_property(_flywheel_torch_cuda_defs torch_cuda INTERFACE_COMPILE_DEFINITIONS)
    if(_flywheel_torch_cuda_defs MATCHES "USE_C10D_NCCL")
      if(FLYWHEEL_USE_NCCL)
        set(FLYWHEEL_NCCL ON)
      else()
        set(_flywheel_nccl_note " (available; off by -DFLYWHEEL_USE_NCCL=OFF)")
      endif()
    endif()
  endif()
  # dist/ runs on c10d's Gloo process group, whose header is empty without USE_C10D_GLOO (a
  # definition torch_cpu carries when its LibTorch has Gloo): fail here rather than in the compiler.
  if(TARGET torch_cpu)
    get_target_property(_flywheel_torch_cpu_defs torch_cpu INTERFACE_COMPILE_DEFINITIONS)
    if(NOT _flywheel_torch_cpu_defs MATCHES "USE_C10D_GLOO")
      message(FATAL_ERROR "flywheel: the LibTorch in ${Torch_DIR} was built without c10d's Gloo "
                          "process group (torch_cpu does not define USE_C10D_GLOO); dist/ needs it")
    endif()
  endif()
  if(FLYWHEEL_CUDA)
    add_compile_definitions(FLYWHEEL_CUDA=1)
  endif()
  if(FLYWHEEL_NCCL)
    add_compile_definitions(FLYWHEEL_NCCL=1)
  endif()
  message(STATUS "flywheel: LibTorch ${Torch_VERSION} from ${Torch_DIR}; "
                 "CUDA ${FLYWHEEL_CUDA}, NCCL ${FLYWHEEL_NCCL}${_flywheel_nccl_note}")
endif()

if(FLYWHEEL_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
find_package(benchmark CONFIG QUIET)

