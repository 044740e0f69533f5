// Test helper for tests whose peers are real processes (a SIGKILL must hit a process, not a
// thread): starts the test binary itself again as a child that runs only the tests matching a
// filter, with extra environment variables telling it its part.
#ifndef FLYWHEEL_DIST_SPAWN_SELF_TEST_UTIL_H_
#define FLYWHEEL_DIST_SPAWN_SELF_TEST_UTIL_H_

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "flywheel/core/strings.h"

extern char** environ;

namespace flywheel::testing {

// Runs /proc/self/exe --gtest_filter=`gtest_filter` with this process's environment plus
// `extra_env` ("NAME=value"), its stdout to /dev/null and its stderr into `stderr_path`.
inline absl::StatusOr<pid_t> SpawnSelf(const std::string& gtest_filter,
                                       const std::vector<std::string>& extra_env,
                                       const std::string& stderr_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe";
  std::string filter = StrCat("--gtest_filter=", gtest_filter);
  char* argv[] = {exe.data(), filter.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return absl::InternalError(StrCat("posix_spawn: ", std::strerror(rc)));
  return pid;
}

// A child's stderr file, whole (empty when it does not exist).
inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_DIST_SPAWN_SELF_TEST_UTIL_H_
