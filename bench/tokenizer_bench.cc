// `flywheel bench tokenizer`: encode throughput of flywheel's tokenizer.json BPE (HfTokenizer)
// against Hugging Face's `tokenizers` library (Rust, through its Node binding, which
// scripts/setup fetches), one thread each, on the same corpus (TokenizerCorpus: English, code,
// CJK, emoji, scripts, white space, numbers, special tokens, long words), for Qwen3's and
// Llama-3's real tokenizer.json.
//
// Per round and tokenizer the two sides take turns (the first side alternates between rounds):
//   flywheel   Encode of every string with the word cache emptied (cold), then again (warm);
//   reference  a fresh node process loads the tokenizer (not timed), then times encodeBatch of
//              all strings (cold: HF's BPE cache is new), encodeBatch again (warm), and encode()
//              string by string (warm). TOKENIZERS_PARALLELISM=false keeps encodeBatch on one
//              thread; its CPU time is reported beside the wall time to show it.
// Both caches hold 10,000 words (HF's default). The peer is the reference's faster warm path;
// ratio_vs_hf_tokenizers is flywheel's warm MB/s over the peer's, medians over the rounds
// (ratio_cpu_seconds compares the CPU seconds of the same passes: flywheel's thread against the
// node process). mismatches counts the strings whose ids differ from the reference's in any
// round.
#include <time.h>
#include <unistd.h>

#include <filesystem>

#include "bench/registry.h"
#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/tokenizer/hf_tokenizer.h"
#include "flywheel/tokenizer/reference_tokenizer.h"
#include "flywheel/tokenizer/tokenizer_corpus.h"

namespace flywheel::bench {
namespace {

// Seconds per round, wall clock and CPU time.
struct Times {
  std::vector<double> wall;
  std::vector<double> cpu;
  void Add(double w, double c) {
    wall.push_back(w);
    cpu.push_back(c);
  }
  nlohmann::json Json() const { return {{"wall_seconds", wall}, {"cpu_seconds", cpu}}; }
};

double Mbps(size_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e6 : 0.0; }

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// One pass over the corpus on this thread; adds its times, fills `ids` when given.
absl::Status EncodePass(const HfTokenizer& tok, const std::vector<CorpusText>& corpus,
                        std::vector<std::vector<int64_t>>* ids, Times* times) {
  std::vector<int64_t> out;
  const auto start = std::chrono::steady_clock::now();
  const double cpu = ThreadCpuSeconds();
  for (size_t i = 0; i < corpus.size(); ++i) {
    out.clear();
    RETURN_IF_ERROR(tok.EncodeInto(corpus[i].text, &out));
    if (ids != nullptr) (*ids)[i] = out;
  }
  times->Add(SecondsSince(start), ThreadCpuSeconds() - cpu);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BenchReport> RunTokenizerBench(const BenchArgs& args) {
  const int64_t strings = args.GetInt("strings", args.quick ? 2000 : 12000);
  const int64_t rounds = args.GetInt("rounds", args.quick ? 1 : 5);
  RETURN_IF_ERROR(CheckReferenceInstalled(args.source_dir));
  const std::vector<CorpusText> corpus = TokenizerCorpus(static_cast<size_t>(strings));
  const size_t bytes = CorpusBytes(corpus);
  nlohmann::json texts = nlohmann::json::array();
  for (const CorpusText& t : corpus) texts.push_back(t.text);
  const std::filesystem::path work =
      std::filesystem::temp_directory_path() / StrCat("flywheel_tokenizer_bench_", getpid());
  std::filesystem::create_directories(work);

  BenchReport report;
  report.config = {{"corpus_strings", strings},
                   {"corpus_bytes", bytes},
                   {"corpus_seed", 2024},
                   {"rounds", rounds},
                   {"threads", 1},
                   {"word_cache_capacity", 10000},
                   {"reference", "tokenizers 0.22.2 (Rust) via @anush008/tokenizers 0.6.0 (Node)"},
                   {"reference_env", "TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1"},
                   {"timed", "encode loops only: not loading, not node's start-up"}};
  report.table = {{"tokenizer", "flywheel cold MB/s", "flywheel warm MB/s", "HF batch cold MB/s",
                   "HF batch warm MB/s", "HF encode() MB/s", "ratio (warm)", "ratio (CPU s)",
                   "mismatches"}};
  std::vector<std::string> summary;
  for (const std::string name : {"qwen3", "llama3"}) {
    HfTokenizerOptions options;
    options.cache_capacity = 10000;
    ASSIGN_OR_RETURN(std::unique_ptr<HfTokenizer> tok,
                     LoadHfTokenizer(TokenizerJsonPath(args.source_dir, name), options));
    const nlohmann::json request = {
        {"mode", "bench"},
        {"tokenizers", {{{"name", name}, {"path", TokenizerJsonPath(args.source_dir, name)}}}},
        {"texts", texts}};
    Times our_cold, our_warm, their_cold, their_warm, their_single;
    size_t mismatches = 0;
    std::vector<std::vector<int64_t>> ids(corpus.size());
    for (int64_t round = 0; round < rounds; ++round) {
      nlohmann::json reference;
      for (int turn = 0; turn < 2; ++turn) {
        if ((turn == 0) == (round % 2 == 0)) {  // flywheel first in even rounds
          tok->mutable_cache().Clear();
          RETURN_IF_ERROR(EncodePass(*tok, corpus, nullptr, &our_cold));
          RETURN_IF_ERROR(EncodePass(*tok, corpus, &ids, &our_warm));
        } else {
          ASSIGN_OR_RETURN(
              nlohmann::json response,
              RunReferenceTokenizer(args.source_dir, request, work.string(),
                                    "TOKENIZERS_PARALLELISM=false RAYON_NUM_THREADS=1"));
          reference = std::move(response[name]);
          their_cold.Add(reference["batch_cold_seconds"], reference["batch_cold_cpu_seconds"]);
          their_warm.Add(reference["batch_warm_seconds"], reference["batch_warm_cpu_seconds"]);
          their_single.Add(reference["single_warm_seconds"], reference["single_warm_cpu_seconds"]);
        }
      }
      size_t round_mismatches = 0;
      for (size_t i = 0; i < corpus.size(); ++i) {
        if (ids[i] != reference["ids"][i].get<std::vector<int64_t>>()) ++round_mismatches;
      }
      mismatches = std::max(mismatches, round_mismatches);
    }
    auto median_mbps = [&](const std::vector<double>& seconds) {
      return Mbps(bytes, Percentile(seconds, 0.5));
    };
    const double our_cold_mbps = median_mbps(our_cold.wall);
    const double our_warm_mbps = median_mbps(our_warm.wall);
    const double their_cold_mbps = median_mbps(their_cold.wall);
    const double batch_mbps = median_mbps(their_warm.wall);
    const double single_mbps = median_mbps(their_single.wall);
    const bool batch_is_peer = batch_mbps >= single_mbps;
    const Times& peer = batch_is_peer ? their_warm : their_single;
    const double ratio = our_warm_mbps / median_mbps(peer.wall);
    // The same comparison in CPU seconds: less sensitive to a busy machine's scheduling.
    const double cpu_ratio = Percentile(peer.cpu, 0.5) / Percentile(our_warm.cpu, 0.5);
    size_t tokens = 0;
    for (const auto& v : ids) tokens += v.size();
    report.results[name] = {{"flywheel",
                             {{"cold_mb_per_s", our_cold_mbps},
                              {"warm_mb_per_s", our_warm_mbps},
                              {"cold", our_cold.Json()},
                              {"warm", our_warm.Json()}}},
                            {"hf_tokenizers",
                             {{"encode_batch_cold_mb_per_s", their_cold_mbps},
                              {"encode_batch_warm_mb_per_s", batch_mbps},
                              {"encode_warm_mb_per_s", single_mbps},
                              {"peer", batch_is_peer ? "encodeBatch" : "encode"},
                              {"encode_batch_cold", their_cold.Json()},
                              {"encode_batch_warm", their_warm.Json()},
                              {"encode_warm", their_single.Json()}}},
                            {"ratio_cold", our_cold_mbps / their_cold_mbps},
                            {"ratio_cpu_seconds", cpu_ratio},
                            {"tokens", tokens}};
    report.ratios["ratio_vs_hf_tokenizers"][name] = ratio;
    report.ratios["mismatches"][name] = mismatches;
    report.table.push_back(
        {name, fmt::format("{:.1f}", our_cold_mbps), fmt::format("{:.1f}", our_warm_mbps),
         fmt::format("{:.1f}", their_cold_mbps), fmt::format("{:.1f}", batch_mbps),
         fmt::format("{:.1f}", single_mbps), fmt::format("{:.2f}x", ratio),
         fmt::format("{:.2f}x", cpu_ratio), std::to_string(mismatches)});
    summary.push_back(fmt::format("{} {:.2f}x ({} mismatches)", name, ratio, mismatches));
  }
  std::filesystem::remove_all(work);
  report.summary =
      StrCat("encode MB/s vs HF tokenizers, one thread, warm caches: ", Join(summary, ", "));
  return report;
}

}  // namespace flywheel::bench
