// `flywheel bench NAME --out FILE.json`: comparisons that run both sides in one invocation and
// report the ratio (absolute times on a shared machine are noise).
//
// A benchmark is a function from BenchArgs to a BenchReport; bench_main.cc lists them. The
// report is written as one JSON object: bench, machine, config, per-variant results, ratios
// as top-level keys; a small table and a one-line summary go to stdout.
#ifndef FLYWHEEL_BENCH_BENCH_H_
#define FLYWHEEL_BENCH_BENCH_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "flywheel/model/model_options.h"

namespace flywheel::bench {

struct BenchArgs {
  std::string out_path;            // --out; empty: print only
  bool quick = false;              // --quick: a short run for smoke tests
  std::map<std::string, std::string> params;  // --param key=value, benchmark-specific
  std::string source_dir;          // repository root (scripts in bench/ live here)

  // Typed access to --param values with a default.
  int64_t GetInt(const std::string& key, int64_t fallback) const;
  double GetDouble(const std::string& key, double fallback) const;
  std::string GetString(const std::string& key, const std::string& fallback) const;
};

struct BenchReport {
  nlohmann::json config = nlohmann::json::object();   // every knob that shapes the figures
  nlohmann::json results = nlohmann::json::object();  // per variant
  nlohmann::json ratios = nlohmann::json::object();   // named by the issue; top-level keys
  // Rows of the printed table: first row is the header.
  std::vector<std::vector<std::string>> table;
  std::string summary;  // one line
};

using BenchFn = std::function<absl::StatusOr<BenchReport>(const BenchArgs&)>;

struct BenchEntry {
  std::string name;
  std::string help;
  BenchFn run;
};

// cores, threads, LibTorch version and BLAS where linked.
nlohmann::json MachineInfo();

// Assembles the JSON object, writes it to args.out_path (atomically) and prints table + summary.
absl::Status EmitReport(const std::string& bench, const BenchArgs& args, const BenchReport& report);

// Percentile of `samples` (q in [0, 1]); sorts a copy.
double Percentile(std::vector<double> samples, double q);
// Percentile(samples, 0.5): the figure reported over alternating rounds; 0 when empty.
inline double Median(std::vector<double> samples) { return Percentile(std::move(samples), 0.5); }

// Seconds of steady-clock time since `start`.
double SecondsSince(std::chrono::steady_clock::time_point start);

// --param KEY as positive integers separated by commas (`fallback` when it is not given).
absl::StatusOr<std::vector<int64_t>> ParseIntList(const BenchArgs& args, const std::string& key,
                                                  const std::string& fallback);

// Waits until the work queued on `device` (a GPU) is done, so that a timing covers it; nothing on
// the CPU.
void SynchronizeDevice(const c10::Device& device);

// Hands the blocks LibTorch's CUDA allocator keeps cached back to the driver (a no-op elsewhere):
// before a peer process needs the same GPU's memory.
void ReleaseCachedDeviceMemory(const c10::Device& device);

// Qwen3-0.6B's shape from its config.json (vocab 151936, hidden 1024, 28 layers, 16 heads of 128,
// 8 kv heads, intermediate 3072, q/k norms, tied embeddings), the GPU benchmarks' model.
void SetQwen3_0_6BShape(ModelOptions& m);

// Python peers run under Debian's interpreter, the one python3-torch is installed for.
inline constexpr char kPeerPython[] = "/usr/bin/python3";

// Empty when `python` can import torch (and, with `cuda`, sees a GPU); otherwise the message
// saying why a peer is skipped.
std::string PythonPeerSkipReason(const std::string& python = kPeerPython, bool cuda = false);

// Runs `script` (relative to the repository) with `arguments` under `python`, with LibTorch
// and BLAS limited to `threads`, and parses the JSON it writes to `out_path`. `environment`
// ("NAME=value …") is set for the peer's process only.
absl::StatusOr<nlohmann::json> RunPythonPeer(const BenchArgs& args, const std::string& script,
                                             const std::string& arguments, int64_t threads,
                                             const std::string& out_path,
                                             const std::string& environment = "",
                                             const std::string& python = kPeerPython);

}  // namespace flywheel::bench

#endif  // FLYWHEEL_BENCH_BENCH_H_
