// The actor with a Hugging Face model's chat template as its turn format (the real Qwen3
// tokenizer and template from scripts/setup): trajectories are the template's text, and the
// trainable tokens are exactly the ones the policy sampled; the template's markup and the
// environment's replies around them are not trainable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "absl/synchronization/mutex.h"
#include "flywheel/actor/actor.h"
#include "flywheel/actor/chat_turn_format.h"
#include "flywheel/model/weight_snapshot.h"
#include "flywheel/tokenizer/hf_tokenizer.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

// Qwen3's embedding table: 267 rows past the tokenizer's 151,669 ids.
constexpr int64_t kModelVocab = 151936;
constexpr int64_t kPadding = 151900;  // a row past the tokenizer

fs::path Qwen3Dir() {
  const char* source = std::getenv("FLYWHEEL_SOURCE_DIR");
  return fs::path(source != nullptr ? source : ".") / "third_party/tokenizers/qwen3";
}

// A model that samples, whatever the context, one of `likely` (nearly uniformly) and almost
// never anything else: every layer's output projection is zero, so the last hidden state is
// the (constant) embedding, and only the LM-head rows of `likely` see it.
Transformer SteeredModel(const std::vector<int64_t>& likely) {
  ModelOptions o;
  o.vocab_size = kModelVocab;
  o.hidden_size = 16;
  o.num_layers = 1;
  o.num_heads = 2;
  o.num_kv_heads = 1;
  o.intermediate_size = 32;
  o.max_seq_len = 256;
  o.tie_embeddings = false;
  Transformer model = *MakeTransformer(o);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    if (name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight")) p.value().zero_();
    if (name == "model.embed_tokens.weight") p.value().fill_(1.0);
    if (name == "lm_head.weight") {
      p.value().zero_();
      for (int64_t id : likely) p.value()[id].fill_(1.5);  // logit 24 against 0
    }
  }
  return model;
}

TEST(ChatActorTest, TrainableTokensAreExactlyThePolicysAndTheRestIsTheTemplate) {
  ASSERT_TRUE(fs::exists(Qwen3Dir() / "tokenizer.json"))
      << Qwen3Dir() << " is missing: run scripts/setup, which fetches the Qwen3 tokenizer";
  HfTokenizerOptions tokenizer_options;
  tokenizer_options.tokenizer_config = (Qwen3Dir() / "tokenizer_config.json").string();
  auto tokenizer = LoadHfTokenizer((Qwen3Dir() / "tokenizer.json").string(), tokenizer_options);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto chat_template = LoadChatTemplate((Qwen3Dir() / "tokenizer_config.json").string());
  ASSERT_TRUE(chat_template.ok()) << chat_template.status();
  auto format = ChatTurnFormat::Create(&*chat_template, tokenizer->get());
  ASSERT_TRUE(format.ok()) << format.status();
  const int64_t im_end = *(*tokenizer)->TokenId("<|im_end|>");
  const int64_t seven = *(*tokenizer)->TokenId("7");
  ASSERT_EQ((*format)->stop_tokens(), std::vector<int64_t>{im_end});

  EnvOptions env_options;
  env_options.latency.model = LatencyKind::kConstant;
  env_options.latency.mean_ms = 1;
  auto factory = *EnvFactory::Create(env_options);  // guess
  EnvExecutor executor(EnvExecutor::Options{.num_workers = 1});
  TaskSource tasks(factory->task_name(), 7, 4);
  ActorOptions actor_options;
  actor_options.episodes_in_flight = 8;
  actor_options.max_new_tokens = 3;
  actor_options.max_turns = 4;
  absl::Mutex mu;
  std::vector<Trajectory> trajectories;
  auto engine =
      RolloutEngine::Create({}, *MakeSnapshot(SteeredModel({im_end, seven, kPadding}), 0));
  ASSERT_TRUE(engine.ok()) << engine.status();
  ActorStats stats;
  {
    Actor actor(
        "actor-0", actor_options, SamplingParams{}, std::move(*engine), factory.get(), &executor,
        tokenizer->get(), &tasks,
        [&](Trajectory t) {
          absl::MutexLock lock(&mu);
          trajectories.push_back(std::move(t));
          return absl::OkStatus();
        },
        11, format->get());
    ASSERT_TRUE(actor.Run(16).ok());
    stats = actor.stats();
    executor.Close();
  }
  ASSERT_EQ(trajectories.size(), 16u);

  const auto decode = [&](const std::vector<int64_t>& ids) { return *(*tokenizer)->Decode(ids); };
  const std::regex first(R"(<\|im_start\|>user\ngo<\|im_end\|>\n<\|im_start\|>assistant\n)");
  const std::regex reply(
      R"((<\|im_end\|>)?\n<\|im_start\|>user\n(invalid|higher|lower)<\|im_end\|>\n<\|im_start\|>assistant\n)");
  int64_t trainable = 0, padding_sampled = 0, cut_turns = 0;
  for (const Trajectory& t : trajectories) {
    ASSERT_TRUE(t.Validate(kModelVocab).ok()) << t.Validate(kModelVocab);
    // Split into runs of equal trainability: environment, policy, environment, …
    size_t at = 0;
    bool previous_stopped = true;
    for (int run = 0; at < t.tokens.size(); ++run) {
      const bool policy = t.trainable[at];
      ASSERT_EQ(policy, run % 2 == 1) << t.DebugString();
      std::vector<int64_t> ids;
      for (; at < t.tokens.size() && static_cast<bool>(t.trainable[at]) == policy; ++at) {
        ids.push_back(t.tokens[at]);
      }
      if (policy) {
        // Only what the policy can sample, at most max_new_tokens, a stop token only last.
        EXPECT_LE(ids.size(), 3u);
        for (size_t i = 0; i < ids.size(); ++i) {
          EXPECT_THAT(ids[i], ::testing::AnyOf(im_end, seven, kPadding));
          if (ids[i] == im_end) {
            EXPECT_EQ(i + 1, ids.size()) << "the turn ends at its stop token";
          }
          padding_sampled += ids[i] == kPadding;
        }
        trainable += static_cast<int64_t>(ids.size());
        previous_stopped = ids.back() == im_end;
        cut_turns += !previous_stopped;
        continue;
      }
      // The environment's tokens are the template's text around the reply; after a cut turn
      // the template's <|im_end|> closes it, and that token is not trainable either.
      const std::string text = decode(ids);
      std::smatch m;
      if (run == 0) {
        EXPECT_TRUE(std::regex_match(text, first)) << text;
      } else {
        ASSERT_TRUE(std::regex_match(text, m, reply)) << text;
        EXPECT_EQ(m[1].matched, !previous_stopped) << text;
      }
    }
  }
  EXPECT_EQ(trainable, stats.tokens_generated);
  // The padding rows were sampled and decoded to nothing instead of failing the actor; both
  // turn endings occurred.
  EXPECT_GT(padding_sampled, 0);
  EXPECT_GT(cut_turns, 0);
}

}  // namespace
}  // namespace flywheel
