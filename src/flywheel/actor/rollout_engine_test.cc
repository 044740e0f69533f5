#include "flywheel/actor/rollout_engine.h"

#include <map>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/model/attention_layout.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

ModelOptions Tiny(int64_t seed) {
  ModelOptions o;
  o.vocab_size = 64;
  o.hidden_size = 32;
  o.num_layers = 2;
  o.num_heads = 4;
  o.num_kv_heads = 2;
  o.intermediate_size = 64;
  o.max_seq_len = 128;
  o.seed = seed;
  return o;
}

// The learner's model (unfused parameters) and the snapshot published from it.
Transformer LearnerModel(int64_t seed) {
  auto model = MakeTransformer(Tiny(seed));
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

std::shared_ptr<const WeightSnapshot> Snapshot(int64_t seed, int64_t version) {
  auto snapshot = MakeSnapshot(LearnerModel(seed), version);
  EXPECT_TRUE(snapshot.ok()) << snapshot.status();
  return *snapshot;
}

// Every test runs on both decode backends (the CPU decoder and LibTorch ops), and on LibTorch
// ops with the fixed-shape decode step that a GPU replays as a CUDA graph (decode_graphs.h; on
// a CPU it runs eagerly, padded rows and keys included).
struct EngineKind {
  DecodeBackend backend;
  DecodeGraphMode graphs;
  const char* name;
  friend void PrintTo(const EngineKind& kind, std::ostream* os) { *os << kind.name; }
};

class RolloutEngineTest : public ::testing::TestWithParam<EngineKind> {
 public:
  static RolloutEngineOptions Options() {
    RolloutEngineOptions options;
    options.backend = kind_.backend;
    options.decode_graphs = kind_.graphs;
    return options;
  }

 protected:
  void SetUp() override { kind_ = GetParam(); }

 private:
  static inline EngineKind kind_{DecodeBackend::kAuto, DecodeGraphMode::kAuto, ""};
};

std::unique_ptr<RolloutEngine> Engine(std::shared_ptr<const WeightSnapshot> s, KvOnSwap mode,
                                      int64_t initial_capacity = 256) {
  RolloutEngineOptions options = RolloutEngineTest::Options();
  options.kv_on_swap = mode;
  options.initial_slots = 2;  // grows while sequences join
  options.initial_capacity = initial_capacity;
  auto engine = RolloutEngine::Create(options, std::move(s));
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(*engine);
}

std::vector<int64_t> RandomTokens(int64_t n, int64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out(n);
  for (auto& t : out) t = static_cast<int64_t>(rng() % 64);
  return out;
}

// The learner's view: forward of the whole sequence, then TokenLogprobs of each next token.
torch::Tensor LearnerLogprobs(const Transformer& model, const std::vector<int64_t>& tokens,
                              const SamplingParams& params) {
  torch::NoGradGuard no_grad;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const auto t = torch::tensor(tokens, torch::kInt64).unsqueeze(0);
  const auto logits = model->forward(t, CausalLayout(1, n));
  return TokenLogprobs(logits.narrow(1, 0, n - 1), t.narrow(1, 1, n - 1), params)[0];
}

// Episodes of several lengths alternate "generate until the turn ends" and "append an
// observation"; sequences join and leave between steps; the weights change in the middle.
// Every recorded log-prob must equal the learner-side forward under the version that produced
// it: on-policy the importance ratio is 1.
TEST_P(RolloutEngineTest, RecordedLogprobsEqualLearnerForwardAcrossASwap) {
  auto v1 = Snapshot(1, 1);
  auto v2 = Snapshot(2, 2);
  std::map<int64_t, Transformer> versions = {{1, LearnerModel(1)}, {2, LearnerModel(2)}};
  auto engine = Engine(v1, KvOnSwap::kRecompute, /*initial_capacity=*/8);
  SequenceOptions so;
  so.sampling.temperature = 0.8;
  so.sampling.top_k = 40;
  so.sampling.top_p = 0.95;

  struct Episode {
    SequenceId id;
    int turns_left;
    int64_t turn_length;
  };
  std::vector<Episode> episodes;
  std::map<SequenceId, std::vector<GeneratedToken>> recorded;
  std::map<SequenceId, std::vector<int64_t>> final_tokens;
  auto start = [&](int64_t prompt_len, int turns, int64_t turn_length, uint64_t seed) {
    so.seed = seed;
    auto id = engine->AddSequence(RandomTokens(prompt_len, seed), so);
    ASSERT_TRUE(id.ok()) << id.status();
    ASSERT_TRUE(engine->StartTurn(*id, {turn_length, {}}).ok());
    episodes.push_back({*id, turns, turn_length});
  };
  start(3, 2, 7, 11);
  start(10, 3, 4, 12);
  start(1, 1, 15, 13);
  int64_t step = 0;
  while (!episodes.empty()) {
    if (step == 2) start(6, 2, 5, 14);  // joins mid-flight
    if (step == 6) engine->PublishSnapshot(v2);
    auto tokens = engine->Step();
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    for (const auto& g : *tokens) {
      recorded[g.sequence].push_back(g);
      if (g.end == TurnEnd::kNone) continue;
      auto it = std::find_if(episodes.begin(), episodes.end(),
                             [&](const Episode& e) { return e.id == g.sequence; });
      if (--it->turns_left == 0) {
        final_tokens[g.sequence] = *engine->Tokens(g.sequence);
        ASSERT_TRUE(engine->RemoveSequence(g.sequence).ok());  // leaves mid-flight
        episodes.erase(it);
      } else {
        ASSERT_TRUE(engine->AppendTokens(g.sequence, RandomTokens(3 + step % 4, step)).ok());
        ASSERT_TRUE(engine->StartTurn(g.sequence, {it->turn_length, {}}).ok());
      }
    }
    ++step;
  }
  ASSERT_EQ(final_tokens.size(), 4u);
  int64_t checked = 0;
  std::set<int64_t> seen_versions;
  for (const auto& [id, tokens] : final_tokens) {
    std::map<int64_t, torch::Tensor> learner;
    for (const auto& [v, m] : versions) learner[v] = LearnerLogprobs(m, tokens, so.sampling);
    for (const auto& g : recorded[id]) {
      ASSERT_EQ(tokens[g.position], g.token);
      const float expected = learner[g.version][g.position - 1].item<float>();
      EXPECT_NEAR(g.logprob, expected, 1e-4)
          << "sequence " << id << " position " << g.position << " version " << g.version;
      seen_versions.insert(g.version);
      ++checked;
    }
  }
  EXPECT_EQ(seen_versions, (std::set<int64_t>{1, 2}));
  EXPECT_GT(checked, 50);
}

TEST_P(RolloutEngineTest, KeepModeTagsVersionsAndKeepsEarlierTokensExact) {
  auto v1 = Snapshot(1, 1);
  auto v2 = Snapshot(2, 2);
  auto engine = Engine(v1, KvOnSwap::kKeep);
  SequenceOptions so;
  so.seed = 5;
  auto id = *engine->AddSequence(RandomTokens(4, 1), so);
  ASSERT_TRUE(engine->StartTurn(id, {10, {}}).ok());
  std::vector<GeneratedToken> got;
  for (int i = 0; i < 10; ++i) {
    if (i == 5) engine->PublishSnapshot(v2);
    auto step = engine->Step();
    ASSERT_TRUE(step.ok());
    got.insert(got.end(), step->begin(), step->end());
  }
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(got.back().end, TurnEnd::kMaxNewTokens);
  const auto learner = LearnerLogprobs(LearnerModel(1), *engine->Tokens(id), so.sampling);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(got[i].version, i < 5 ? 1 : 2);
    if (i < 5) {
      EXPECT_NEAR(got[i].logprob, learner[got[i].position - 1].item<float>(), 1e-4);
    }
  }
  EXPECT_EQ(engine->version(), 2);
  EXPECT_EQ(engine->num_generating(), 0);
}

// Two turns of each prompt: 8 tokens, 5 appended (tool output), 6 more. `ids` empty: each prompt
// in an engine of its own; otherwise all in one engine, where prompts of one length are
// prefilled in one forward and the appended tokens of every sequence in another (at different
// cached lengths).
std::vector<std::vector<GeneratedToken>> TwoTurns(const std::vector<std::vector<int64_t>>& prompts,
                                                  bool together) {
  std::vector<std::vector<GeneratedToken>> out(prompts.size());
  std::unique_ptr<RolloutEngine> shared;
  if (together) shared = Engine(Snapshot(1, 1), KvOnSwap::kKeep);
  std::vector<std::pair<RolloutEngine*, SequenceId>> seqs;
  std::vector<std::unique_ptr<RolloutEngine>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RolloutEngine* engine = shared.get();
    if (!together) engine = alone.emplace_back(Engine(Snapshot(1, 1), KvOnSwap::kKeep)).get();
    SequenceOptions so;
    so.seed = 40 + i;
    so.sampling.temperature = 0.9;
    auto id = engine->AddSequence(prompts[i], so);
    EXPECT_TRUE(id.ok()) << id.status();
    seqs.emplace_back(engine, *id);
  }
  for (int turn = 0; turn < 2; ++turn) {
    for (auto& [engine, id] : seqs) {
      if (turn == 1) {
        EXPECT_TRUE(engine->AppendTokens(id, RandomTokens(5, 99)).ok());
      }
      EXPECT_TRUE(engine->StartTurn(id, {turn == 0 ? 8 : 6, {}}).ok());
    }
    for (auto& [engine, id] : seqs) {
      while (engine->num_generating() > 0) {
        auto step = engine->Step();
        EXPECT_TRUE(step.ok()) << step.status();
        for (const auto& g : *step) {
          for (size_t i = 0; i < seqs.size(); ++i) {
            if (seqs[i].first == engine && seqs[i].second == g.sequence) out[i].push_back(g);
          }
        }
      }
    }
  }
  return out;
}

TEST_P(RolloutEngineTest, BatchedPrefillEqualsEachSequenceAlone) {
  const std::vector<std::vector<int64_t>> prompts = {RandomTokens(6, 1), RandomTokens(6, 2),
                                                     RandomTokens(9, 3), RandomTokens(6, 4),
                                                     RandomTokens(9, 5)};
  const auto together = TwoTurns(prompts, true);
  const auto alone = TwoTurns(prompts, false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(together[i].size(), 14u) << "sequence " << i;
    ASSERT_EQ(alone[i].size(), 14u) << "sequence " << i;
    for (size_t t = 0; t < together[i].size(); ++t) {
      EXPECT_EQ(together[i][t].token, alone[i][t].token) << "sequence " << i << " token " << t;
      EXPECT_EQ(together[i][t].position, alone[i][t].position);
      EXPECT_NEAR(together[i][t].logprob, alone[i][t].logprob, 1e-5)
          << "sequence " << i << " token " << t;
    }
  }
}

std::vector<int64_t> Generate(uint64_t seed, int64_t n) {
  auto engine = Engine(Snapshot(1, 1), KvOnSwap::kKeep);
  SequenceOptions so;
  so.seed = seed;
  auto id = *engine->AddSequence(RandomTokens(5, 2), so);
  // A second sequence in the batch must not disturb the first one's draws.
  auto other = *engine->AddSequence(RandomTokens(3, 3), SequenceOptions{{}, seed + 100});
  EXPECT_TRUE(engine->StartTurn(id, {n, {}}).ok());
  EXPECT_TRUE(engine->StartTurn(other, {n, {}}).ok());
  while (engine->num_generating() > 0) EXPECT_TRUE(engine->Step().ok());
  return *engine->Tokens(id);
}

TEST_P(RolloutEngineTest, SameSeedSameTokens) {
  EXPECT_EQ(Generate(7, 20), Generate(7, 20));
  EXPECT_NE(Generate(7, 20), Generate(8, 20));
}

TEST_P(RolloutEngineTest, StopTokenEndsTheTurn) {
  auto engine = Engine(Snapshot(1, 1), KvOnSwap::kKeep);
  auto id = *engine->AddSequence({1, 2}, {});
  std::vector<int64_t> every_token(64);
  std::iota(every_token.begin(), every_token.end(), 0);
  ASSERT_TRUE(engine->StartTurn(id, {50, every_token}).ok());
  auto step = *engine->Step();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].end, TurnEnd::kStopToken);
  EXPECT_TRUE(engine->Step()->empty());  // nothing generating
}

TEST_P(RolloutEngineTest, BadRequestsAreClearErrors) {
  auto engine = Engine(Snapshot(1, 1), KvOnSwap::kKeep);
  EXPECT_THAT(engine->AddSequence({}, {}).status().message(), HasSubstr("at least one prompt"));
  EXPECT_THAT(engine->AddSequence({64}, {}).status().message(),
              HasSubstr("outside the vocabulary"));
  EXPECT_EQ(engine->AppendTokens(99, {1}).code(), absl::StatusCode::kNotFound);
  auto id = *engine->AddSequence({1}, {});
  EXPECT_EQ(engine->AppendTokens(id, std::vector<int64_t>(200, 1)).code(),
            absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(engine->StartTurn(id, {5, {}}).ok());
  EXPECT_EQ(engine->AppendTokens(id, {1}).code(), absl::StatusCode::kFailedPrecondition);
  SequenceOptions bad;
  bad.sampling.top_p = 0;
  EXPECT_THAT(engine->AddSequence({1}, bad).status().message(), HasSubstr("sampling.top_p"));
}

TEST_P(RolloutEngineTest, GenerationStopsAtMaxSeqLen) {
  auto engine = Engine(Snapshot(1, 1), KvOnSwap::kKeep);
  auto id = *engine->AddSequence(RandomTokens(120, 1), {});
  ASSERT_TRUE(engine->StartTurn(id, {100, {}}).ok());
  std::vector<GeneratedToken> got;
  while (engine->num_generating() > 0) {
    auto step = *engine->Step();
    got.insert(got.end(), step.begin(), step.end());
  }
  ASSERT_EQ(got.size(), 8u);
  EXPECT_EQ(got.back().end, TurnEnd::kMaxLength);
  EXPECT_EQ(engine->StartTurn(id, {1, {}}).code(), absl::StatusCode::kOutOfRange);
}

// The learner publishes from its own thread while the actor keeps stepping: the swap lands
// between two steps and later tokens carry the new version.
TEST_P(RolloutEngineTest, SnapshotPublishedFromAnotherThreadIsTakenBetweenSteps) {
  auto engine = Engine(Snapshot(1, 1), KvOnSwap::kKeep);
  auto v2 = Snapshot(2, 2);
  auto id = *engine->AddSequence({1, 2, 3}, {});
  ASSERT_TRUE(engine->StartTurn(id, {100, {}}).ok());
  ASSERT_TRUE(engine->Step().ok());
  std::thread learner([&] { engine->PublishSnapshot(v2); });
  learner.join();
  engine->PublishSnapshot(Snapshot(1, 1));  // an older version never replaces a newer one
  auto step = engine->Step();
  ASSERT_TRUE(step.ok());
  ASSERT_EQ(step->size(), 1u);
  EXPECT_EQ((*step)[0].version, 2);
  EXPECT_EQ(engine->version(), 2);
}

TEST_P(RolloutEngineTest, ActorsOnThreadsShareOnlyTheSnapshot) {
  auto v1 = Snapshot(1, 1);
  std::vector<std::vector<int64_t>> results(3);
  std::vector<std::thread> threads;
  for (int a = 0; a < 3; ++a) {
    threads.emplace_back([&, a] {
      RolloutEngineOptions options = RolloutEngineTest::Options();
      options.intra_op_threads = 1;
      auto engine = std::move(*RolloutEngine::Create(options, v1));
      auto id = *engine->AddSequence(RandomTokens(4, 9), SequenceOptions{{}, 77});
      EXPECT_TRUE(engine->StartTurn(id, {12, {}}).ok());
      while (engine->num_generating() > 0) EXPECT_TRUE(engine->Step().ok());
      results[a] = *engine->Tokens(id);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
}

INSTANTIATE_TEST_SUITE_P(Backends, RolloutEngineTest,
                         ::testing::Values(
                             EngineKind{DecodeBackend::kCpu, DecodeGraphMode::kOff, "Cpu"},
                             EngineKind{DecodeBackend::kTorch, DecodeGraphMode::kOff, "Torch"},
                             EngineKind{DecodeBackend::kTorch, DecodeGraphMode::kOn,
                                        "TorchFixedShape"}),
                         [](const auto& info) {
                           return std::string(info.param.name);
                         });

// A snapshot of float64 weights (MakeSnapshot keeps float32).
std::shared_ptr<const WeightSnapshot> Float64Snapshot(int64_t seed, int64_t version) {
  auto snapshot = std::make_shared<WeightSnapshot>();
  snapshot->version = version;
  snapshot->model = LearnerModel(seed);
  snapshot->model->to(torch::kFloat64);
  return snapshot;
}

// The CPU decoder only takes float32 CPU weights: asking for it with others is a clear error,
// and `auto` falls back to LibTorch ops.
TEST(RolloutEngineBackendTest, CpuBackendNeedsFloat32CpuWeights) {
  auto snapshot = Float64Snapshot(1, 1);
  RolloutEngineOptions options;
  options.backend = DecodeBackend::kCpu;
  EXPECT_THAT(RolloutEngine::Create(options, snapshot).status().message(),
              HasSubstr("actor.backend = \"cpu\" needs float32 weights"));
  options.backend = DecodeBackend::kAuto;
  auto engine = RolloutEngine::Create(options, snapshot);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_THAT((*engine)->DebugString(), HasSubstr("backend=torch"));
  auto id = *(*engine)->AddSequence({1, 2}, {});
  ASSERT_TRUE((*engine)->StartTurn(id, {3, {}}).ok());
  while ((*engine)->num_generating() > 0) ASSERT_TRUE((*engine)->Step().ok());
}

// A CPU engine refuses, with a message, to swap to weights it cannot run.
TEST(RolloutEngineBackendTest, CpuEngineRejectsASwapToOtherWeights) {
  RolloutEngineOptions options;
  options.backend = DecodeBackend::kCpu;
  auto engine = *RolloutEngine::Create(options, Snapshot(1, 1));
  EXPECT_THAT(engine->DebugString(), HasSubstr("backend=cpu"));
  engine->PublishSnapshot(Float64Snapshot(2, 2));
  auto id = *engine->AddSequence({1, 2}, {});
  ASSERT_TRUE(engine->StartTurn(id, {3, {}}).ok());
  EXPECT_THAT(std::string(engine->Step().status().message()), HasSubstr("actor.backend"));
}

// auto: no cache before the first Step; that Step measures both backends on its batch, keeps the
// faster, and generates exactly what an engine forced to that backend generates.
TEST(RolloutEngineBackendTest, AutoChoosesByMeasurementAtTheFirstStep) {
  RolloutEngineOptions options;
  auto snapshot = Snapshot(1, 1);
  auto run = [&](DecodeBackend backend, std::unique_ptr<RolloutEngine>* keep) {
    options.backend = backend;
    auto engine = *RolloutEngine::Create(options, snapshot);
    std::vector<SequenceId> ids;
    for (int64_t i = 0; i < 3; ++i) {
      ids.push_back(*engine->AddSequence({1, 2, 3 + i}, {{}, static_cast<uint64_t>(7 + i)}));
      EXPECT_TRUE(engine->StartTurn(ids.back(), {5, {}}).ok());
    }
    EXPECT_TRUE(engine->RemoveSequence(ids[0]).ok());  // before any backend exists
    if (backend == DecodeBackend::kAuto) {
      EXPECT_EQ(engine->backend(), DecodeBackend::kAuto);
      EXPECT_THAT(engine->DebugString(), HasSubstr("backend=auto (undecided)"));
    }
    while (engine->num_generating() > 0) EXPECT_TRUE(engine->Step().ok());
    std::vector<std::vector<int64_t>> tokens;
    for (size_t i = 1; i < ids.size(); ++i) tokens.push_back(*engine->Tokens(ids[i]));
    *keep = std::move(engine);
    return tokens;
  };
  std::unique_ptr<RolloutEngine> engine, forced;
  const auto tokens = run(DecodeBackend::kAuto, &engine);
  const BackendChoice* choice = engine->backend_choice();
  ASSERT_NE(choice, nullptr);
  EXPECT_GT(choice->cpu_tokens_per_s, 0);
  EXPECT_GT(choice->torch_tokens_per_s, 0);
  EXPECT_EQ(choice->sequences, 2);
  EXPECT_EQ(engine->backend(), choice->chosen);
  EXPECT_EQ(choice->chosen, choice->cpu_tokens_per_s >= choice->torch_tokens_per_s
                                ? DecodeBackend::kCpu
                                : DecodeBackend::kTorch);
  EXPECT_THAT(engine->DebugString(), HasSubstr("BackendChoice{"));
  EXPECT_EQ(run(choice->chosen, &forced), tokens);
  EXPECT_EQ(forced->backend_choice(), nullptr);  // a forced backend measures nothing
}

}  // namespace
}  // namespace flywheel
