// Compares flywheel's logits for Hugging Face model directories with reference logits
// (hf_parity.h): for each DIR, DIR.reference.json holds {"tokens": [...], "logits": [[...], ...]}.
// Prints one JSON line per model; exits 1 when an error or disagreement (packed, decode,
// engine vs learner, packed vs single) exceeds --tolerance (times the reference's largest logit
// when --relative is given).
//
//   hf_logits_check --device cuda --dtype bfloat16 --tolerance 1e-3 /tmp/parity/qwen3 ...
//
// scripts/gpu/hf_parity.py writes transformers' references on the GPU machine; hf_logits_test.sh
// runs it on the CPU against testdata/hf_tiny_checkpoints.py's.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "flywheel/model/hf_parity.h"

namespace flywheel {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"flywheel's logits of Hugging Face model directories against reference logits"};
  std::vector<std::string> dirs;
  std::string device = "cpu", dtype = "float32";
  double tolerance = 0;
  bool relative = false;
  int64_t prefill = 8;
  app.add_option("dirs", dirs, "model directories, each with DIR.reference.json")->required();
  app.add_option("--device", device, "model.device: cpu | cuda | cuda:N");
  app.add_option("--dtype", dtype, "model.dtype: float32 | bfloat16");
  app.add_option("--tolerance", tolerance, "largest error allowed (0: report only)");
  app.add_flag("--relative", relative, "the tolerance is relative to the largest |logit|");
  app.add_option("--prefill", prefill, "tokens prefilled before one-token decode steps");
  CLI11_PARSE(app, argc, argv);

  bool within = true;
  for (const std::string& dir : dirs) {
    const std::string path = dir + ".reference.json";
    std::ifstream in(path);
    const nlohmann::json ref = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!in || ref.is_discarded() || !ref.contains("tokens") || !ref.contains("logits")) {
      std::fprintf(stderr, "%s: not a JSON object with \"tokens\" and \"logits\"\n", path.c_str());
      return 2;
    }
    std::vector<torch::Tensor> rows;
    for (const auto& row : ref["logits"]) {
      rows.push_back(torch::tensor(row.get<std::vector<double>>(), torch::kFloat64));
    }
    absl::StatusOr<HfParity> parity =
        MeasureHfParity(dir, ref["tokens"].get<std::vector<int64_t>>(), torch::stack(rows),
                        device, dtype, prefill);
    if (!parity.ok()) {
      std::fprintf(stderr, "%s\n", parity.status().ToString().c_str());
      return 2;
    }
    const double scale = relative ? parity->max_abs_logit : 1.0;
    const bool ok = tolerance <= 0 || (parity->packed_max_error <= tolerance * scale &&
                                       parity->decode_max_error <= tolerance * scale &&
                                       parity->engine_vs_learner_logprob <= tolerance * scale &&
                                       parity->packed_vs_single <= tolerance * scale);
    within = within && ok;
    nlohmann::json line = {{"model", dir},
                           {"device", device},
                           {"dtype", dtype},
                           {"packed_max_error", parity->packed_max_error},
                           {"decode_max_error", parity->decode_max_error},
                           {"engine_vs_learner_logprob", parity->engine_vs_learner_logprob},
                           {"packed_vs_single", parity->packed_vs_single},
                           {"max_abs_logit", parity->max_abs_logit},
                           {"within_tolerance", ok}};
    // The reference's own error against exact (float32) logits, where it says (hf_parity.py's
    // bfloat16 references): the floor for any bfloat16 implementation compared with it.
    if (ref.contains("vs_float32")) line["reference_vs_float32"] = ref["vs_float32"];
    std::printf("%s\n", line.dump().c_str());
  }
  return within ? 0 : 1;
}

}  // namespace
}  // namespace flywheel

int main(int argc, char** argv) { return flywheel::Main(argc, argv); }
