# Small helpers so that a component or a test is one line of CMake (as LevelDB's leveldb_test()).

# flywheel_library(NAME SRCS a.cc b.cc DEPS lib1 lib2 [TORCH])
# A component library. TORCH adds LibTorch and the shared precompiled torch header.
function(flywheel_library name)
  cmake_parse_arguments(ARG "TORCH" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  list(LENGTH ARG_SRCS sources)
  if(sources EQUAL 1)  # a batch of one gains nothing and costs ccache reuse (flywheel_test)
    set_target_properties(${name} PROPERTIES UNITY_BUILD OFF)
  endif()
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
  if(ARG_TORCH)
    flywheel_use_torch(${name})
  endif()
endfunction()

# Links LibTorch and reuses one precompiled header of the torch API for the target.
function(flywheel_use_torch target)
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  target_compile_options(${target} PUBLIC ${FLYWHEEL_TORCH_CXX_FLAGS})
  if(TARGET flywheel_torch_pch)
    target_precompile_headers(${target} REUSE_FROM flywheel_torch_pch)
  endif()
endfunction()

# flywheel_test(NAME [DEPS lib1 lib2] [SRCS extra.cc] [LABELS slow] [TIMEOUT s] [PROCESSORS n]
#               [TORCH] [ALONE])
# NAME.cc beside the code is the test source. PROCESSORS: the cores the test keeps busy, which
# `ctest -j` counts against its limit, so that fewer tests run beside it. ALONE: an executable
# of its own also in unity builds, for a test that needs its own target (compile definitions,
# dependencies) or re-executes itself.
function(flywheel_test name)
  if(NOT FLYWHEEL_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "TORCH;ALONE" "TIMEOUT;PROCESSORS" "DEPS;SRCS;LABELS" ${ARGN})
  if(FLYWHEEL_UNITY_BUILD AND NOT ARG_SRCS AND NOT ARG_ALONE)
    _flywheel_grouped_test(${name} "${ARG_DEPS}" "${ARG_TORCH}")
  else()
    add_executable(${name} ${name}.cc ${ARG_SRCS})
    # A batch of one or two files gains nothing, and CMake's batch files name the checkout's
    # absolute path, which keeps ccache from serving them to another checkout.
    set_target_properties(${name} PROPERTIES UNITY_BUILD OFF)
    target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock)
    _flywheel_test_main(${name} "${ARG_TORCH}")
    add_test(NAME ${name} COMMAND ${name})
  endif()
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "FLYWHEEL_SOURCE_DIR=${PROJECT_SOURCE_DIR};FLYWHEEL_BINARY_DIR=${PROJECT_BINARY_DIR}"
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
  if(ARG_PROCESSORS)
    set_tests_properties(${name} PROPERTIES PROCESSORS ${ARG_PROCESSORS})
  endif()
  if(ARG_TIMEOUT)
    set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  else()
    set_tests_properties(${name} PROPERTIES TIMEOUT 300)
  endif()
  flywheel_scale_test_times()
endfunction()

# A test executable's main(), sanitizer support and LibTorch: a torch test's main tunes malloc
# for tensors as `flywheel` does (core/torch_test_main.cc), so that a test that trains runs at
# the speed of `flywheel train`.
function(_flywheel_test_main target torch)
  if(TARGET flywheel_tsan_absl_sync)
    target_link_libraries(${target} PRIVATE flywheel_tsan_absl_sync)
  endif()
  if(torch)
    target_link_libraries(${target} PRIVATE flywheel_torch_test_main)
    flywheel_use_torch(${target})
  else()
    target_link_libraries(${target} PRIVATE GTest::gtest_main)
  endif()
endfunction()

# With FLYWHEEL_UNITY_BUILD the tests of a directory are two executables, DIR_torch_tests and
# DIR_tests (the torch-free ones), compiled in unity batches: alone, each torch test spent about
# 20 s instantiating the same LibTorch templates, and each torch-free one parsed GoogleTest and
# abseil again and was linked on its own. ctest still has one test per file, NAME, which runs
# that executable on the file's own test suites (--gtest_filter); a suite name may therefore be
# used by one file of a directory only. Without unity builds every test is an executable of its
# own.
function(_flywheel_grouped_test name deps torch)
  file(RELATIVE_PATH dir ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  string(REGEX REPLACE "^src/flywheel/" "" dir "${dir}")
  if(torch)
    set(group "${dir}_torch_tests")
  else()
    set(group "${dir}_tests")
  endif()
  string(REGEX REPLACE "[^A-Za-z0-9]" "_" group "${group}")
  if(NOT TARGET ${group})
    add_executable(${group})
    target_link_libraries(${group} PRIVATE GTest::gtest GTest::gmock)
    _flywheel_test_main(${group} "${torch}")
  endif()
  target_sources(${group} PRIVATE ${name}.cc)
  target_link_libraries(${group} PRIVATE ${deps})

  file(READ ${name}.cc text)
  string(REGEX MATCHALL "(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\\([ \t\n]*[A-Za-z0-9_]+,"
         found "${text}")
  get_property(taken GLOBAL PROPERTY FLYWHEEL_SUITES_${group})
  set(suites "")
  foreach(match IN LISTS found)
    string(REGEX REPLACE ".*\\([ \t\n]*([A-Za-z0-9_]+),$" "\\1" suite "${match}")
    if(suite IN_LIST suites)
      continue()
    endif()
    if(suite IN_LIST taken)
      message(FATAL_ERROR "${name}.cc: test suite ${suite} is also used by another test of "
                          "${group}; give it a name of its own")
    endif()
    list(APPEND suites ${suite})
  endforeach()
  if(NOT suites)
    message(FATAL_ERROR "${name}.cc: no TEST(Suite, Name) found")
  endif()
  set_property(GLOBAL APPEND PROPERTY FLYWHEEL_SUITES_${group} ${suites})
  set(filter "")
  foreach(suite IN LISTS suites)
    string(APPEND filter "${suite}.*:*/${suite}.*:")  # parameterised suites: Prefix/Suite.Name
  endforeach()
  string(REGEX REPLACE ":$" "" filter "${filter}")
  add_test(NAME ${name} COMMAND ${group} --gtest_filter=${filter})
endfunction()

# With FLYWHEEL_TEST_TIME_SCALE above 1 (an instrumented build, several times slower), every test
# of the calling directory gets its TIMEOUT multiplied and the environment variable of the same
# name, which the tests multiply their own deadlines and run budgets by. Done once per directory,
# at its end, so that it also reaches the tests that add_test and set_tests_properties made there.
function(flywheel_scale_test_times)
  if(FLYWHEEL_TEST_TIME_SCALE EQUAL 1)
    return()
  endif()
  get_property(scheduled DIRECTORY PROPERTY FLYWHEEL_TEST_TIMES_SCALED)
  if(NOT scheduled)
    set_property(DIRECTORY PROPERTY FLYWHEEL_TEST_TIMES_SCALED TRUE)
    cmake_language(DEFER CALL _flywheel_scale_directory_test_times)
  endif()
endfunction()

function(_flywheel_scale_directory_test_times)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    get_test_property(${test} TIMEOUT timeout)
    if(NOT timeout)
      set(timeout 1500)  # ctest's default
    endif()
    math(EXPR timeout "${timeout} * ${FLYWHEEL_TEST_TIME_SCALE}")
    set_tests_properties(${test} PROPERTIES TIMEOUT ${timeout})
    set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT
                 "FLYWHEEL_TEST_TIME_SCALE=${FLYWHEEL_TEST_TIME_SCALE}")
  endforeach()
endfunction()

# One precompiled header of the torch C++ API, reused by every torch target (torch/torch.h alone
# costs ~15 s of parsing per translation unit). Defined before the components so that every
# target can reuse it, whatever the order of the subdirectories.
function(flywheel_define_torch_pch)
  add_library(flywheel_torch_pch STATIC ${PROJECT_SOURCE_DIR}/src/flywheel/model/torch_pch.cc)
  target_link_libraries(flywheel_torch_pch PUBLIC ${TORCH_LIBRARIES})
  target_compile_options(flywheel_torch_pch PUBLIC ${FLYWHEEL_TORCH_CXX_FLAGS})
  target_precompile_headers(flywheel_torch_pch PRIVATE <torch/torch.h>)
endfunction()
