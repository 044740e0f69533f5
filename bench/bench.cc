#include "bench/bench.h"

#if FLYWHEEL_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <torch/cuda.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "flywheel/core/strings.h"

namespace flywheel::bench {

int64_t BenchArgs::GetInt(const std::string& key, int64_t fallback) const {
  auto it = params.find(key);
  return it == params.end() ? fallback : std::stoll(it->second);
}

double BenchArgs::GetDouble(const std::string& key, double fallback) const {
  auto it = params.find(key);
  return it == params.end() ? fallback : std::stod(it->second);
}

std::string BenchArgs::GetString(const std::string& key, const std::string& fallback) const {
  auto it = params.find(key);
  return it == params.end() ? fallback : it->second;
}

double Percentile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  const double pos = q * static_cast<double>(samples.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  return samples[lo] + (pos - static_cast<double>(lo)) * (samples[hi] - samples[lo]);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string PythonPeerSkipReason(const std::string& python, bool cuda) {
  const char* check = cuda ? "import torch; assert torch.cuda.is_available()" : "import torch";
  if (std::system(StrCat(python, " -c '", check, "' >/dev/null 2>&1").c_str()) == 0) return "";
  if (cuda) {
    return StrCat(python, " has no torch that sees a GPU: python variant skipped (--param "
                  "peer_python=INTERPRETER names another)");
  }
  return StrCat(python, " has no torch (Debian package python3-torch): python variant skipped");
}

absl::StatusOr<nlohmann::json> RunPythonPeer(const BenchArgs& args, const std::string& script,
                                             const std::string& arguments, int64_t threads,
                                             const std::string& out_path,
                                             const std::string& environment,
                                             const std::string& python) {
  const std::string cmd =
      StrCat(environment, environment.empty() ? "" : " ", "OPENBLAS_NUM_THREADS=", threads,
             " OMP_NUM_THREADS=", threads, " ", python,
             " '", args.source_dir, "/", script, "' ", arguments, " > '", out_path, "'");
  const int rc = std::system(cmd.c_str());
  std::ifstream in(out_path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (rc != 0) {
    return absl::InternalError(StrCat("python peer failed (exit ", rc, "): ", cmd, "\n", text));
  }
  auto json = nlohmann::json::parse(text, nullptr, false);
  if (json.is_discarded()) return absl::InternalError(StrCat("python peer printed no JSON: ", text));
  return json;
}

absl::Status EmitReport(const std::string& bench, const BenchArgs& args,
                        const BenchReport& report) {
  nlohmann::json out = {{"bench", bench},
                        {"machine", MachineInfo()},
                        {"config", report.config},
                        {"results", report.results}};
  for (const auto& [key, value] : report.ratios.items()) out[key] = value;

  if (!report.table.empty()) {
    std::vector<size_t> widths;
    for (const auto& row : report.table) {
      widths.resize(std::max(widths.size(), row.size()), 0);
      for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
    }
    for (size_t r = 0; r < report.table.size(); ++r) {
      std::string line;
      for (size_t c = 0; c < report.table[r].size(); ++c) {
        line += fmt::format("{:<{}}  ", report.table[r][c], widths[c]);
      }
      std::cout << line << "\n";
      if (r == 0) {
        size_t total = 0;
        for (size_t w : widths) total += w + 2;
        std::cout << std::string(total, '-') << "\n";
      }
    }
  }
  std::cout << bench << ": " << report.summary << "\n";

  if (!args.out_path.empty()) {
    const std::string tmp = args.out_path + ".tmp";
    {
      std::ofstream f(tmp);
      if (!f) return absl::UnavailableError(StrCat("cannot write ", tmp));
      f << out.dump(2) << "\n";
      if (!f.flush()) return absl::DataLossError(StrCat("short write to ", tmp));
    }
    std::error_code ec;
    std::filesystem::rename(tmp, args.out_path, ec);
    if (ec) return absl::UnavailableError(StrCat("rename ", tmp, ": ", ec.message()));
    std::cout << "wrote " << args.out_path << "\n";
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ParseIntList(const BenchArgs& args, const std::string& key,
                                                  const std::string& fallback) {
  const std::string text = args.GetString(key, fallback);
  std::vector<int64_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(item, &v) || v <= 0) {
      return absl::InvalidArgumentError(StrCat(
          "--param ", key, " wants positive integers separated by commas, got '", text, "'"));
    }
    out.push_back(v);
  }
  return out;
}

void SynchronizeDevice(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

void ReleaseCachedDeviceMemory(const c10::Device& device) {
#if FLYWHEEL_CUDA
  if (!device.is_cuda()) return;
  torch::cuda::synchronize(device.index());
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

void SetQwen3_0_6BShape(ModelOptions& m) {
  m.vocab_size = 151936;
  m.hidden_size = 1024;
  m.num_layers = 28;
  m.num_heads = 16;
  m.num_kv_heads = 8;
  m.head_dim = 128;
  m.intermediate_size = 3072;
  m.rope_theta = 1e6;
  m.rms_norm_eps = 1e-6;
  m.qk_norm = true;
  m.tie_embeddings = true;
}

}  // namespace flywheel::bench
