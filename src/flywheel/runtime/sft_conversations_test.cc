#include "flywheel/runtime/sft_conversations.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "flywheel/env/task_source.h"
#include "flywheel/runtime/job_test_util.h"
#include "flywheel/runtime/policy_setup.h"
#include "flywheel/runtime/warm_start.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

struct Job {
  JobConfig config;
  std::unique_ptr<EnvFactory> factory;
  PolicyText text;
  int64_t max_seq_len = 0;
};

Job MakeJob(const std::string& name, const std::vector<std::string>& overrides = {}) {
  Job j;
  absl::StatusOr<JobConfig> config = testing::LoadGuessJob(name, overrides);
  EXPECT_TRUE(config.ok()) << config.status();
  j.config = *config;
  j.factory = *EnvFactory::Create(j.config.env);
  j.text = *MakePolicyText(j.config, *j.factory);
  j.max_seq_len =
      ResolveModelOptions(j.config, *j.text.tokenizer, j.text.tokenizer_name)->max_seq_len;
  return j;
}

std::filesystem::path WriteFile(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("flywheel_sft_" + name + ".jsonl");
  std::ofstream(path) << text;
  return path;
}

// The expert's episodes of `count` guess tasks from `seed`, written as conversations: the
// environment's observations as user turns, the expert's actions as assistant turns.
std::string ExpertConversations(const Job& j, uint64_t seed, int64_t count) {
  std::unique_ptr<Policy> expert = *j.factory->MakeExpert();
  TaskSource tasks(j.factory->task_name(), seed, 1);
  std::string out;
  for (int64_t i = 0; i < count; ++i) {
    const TaskInstance task = tasks.Next();
    std::unique_ptr<Environment> env = j.factory->NewEnvironment();
    StepResult step = *env->Reset(task);
    expert->Begin(task, step.observation);
    nlohmann::json messages = nlohmann::json::array();
    for (int64_t turn = 0; turn < j.config.actor.max_turns && !step.done; ++turn) {
      const std::string action = expert->Act(step.observation);
      messages.push_back({{"role", turn == 0 ? "user" : "tool"}, {"content", step.observation}});
      messages.push_back({{"role", "assistant"}, {"content", action}});
      step = *env->Step(action);
    }
    env->Close();
    out += nlohmann::json{{"messages", messages}}.dump() + "\n\n";  // blank lines are skipped
  }
  return out;
}

// A conversation is laid out token for token as the same episode played by the expert, which
// is laid out as an actor lays out the policy's (warm_start_test).
TEST(SftConversationsTest, AConversationIsLaidOutAsTheExpertsEpisode) {
  const Job j = MakeJob("sft_conversations_layout");
  const auto path = WriteFile("layout", ExpertConversations(j, 5, 6));
  auto read = ReadSftConversations(path.string(), j.config, j.text, j.max_seq_len);
  ASSERT_TRUE(read.ok()) << read.status();
  auto expert = ExpertTrajectories(j.config, *j.factory, j.text, 5, 6);
  ASSERT_TRUE(expert.ok()) << expert.status();
  ASSERT_EQ(read->size(), 6u);
  for (size_t i = 0; i < read->size(); ++i) {
    const Trajectory& t = (*read)[i];
    EXPECT_TRUE(t.Validate(j.text.tokenizer->vocab_size()).ok()) << t.DebugString();
    EXPECT_EQ(t.tokens, (*expert)[i].tokens) << "conversation " << i;
    EXPECT_EQ(t.trainable, (*expert)[i].trainable) << "conversation " << i;
    EXPECT_EQ(t.turn_ends, (*expert)[i].turn_ends) << "conversation " << i;
    EXPECT_GT(t.NumTrainable(), 0);
  }
}

TEST(SftConversationsTest, EveryBadLineIsNamedWithWhatToFix) {
  const Job j = MakeJob("sft_conversations_errors");
  // One of the expert's conversations: its words are in guess's vocabulary.
  std::string good = ExpertConversations(j, 5, 1);
  good = good.substr(0, good.find('\n'));
  const std::string task = nlohmann::json::parse(good)["messages"][0]["content"];
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{not json", "line 2: not JSON"},
      {R"({"conversation": []})", "line 2: expected an object with a \"messages\" array"},
      {R"({"messages": [{"role": "user"}]})", "line 2: message 1: expected {\"role\": string"},
      {R"({"messages": [{"role": "system", "content": "be brief"}]})", "role \"system\""},
      {R"({"messages": [{"role": "assistant", "content": "3"}]})",
       "message 1: an assistant turn must follow"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]})",
       "message 2: two environment turns"},
      {R"({"messages": [{"role": "user", "content": "a"}]})", "the last message must be"},
      {R"({"messages": []})", "no messages"},
      // guess's actions are one word: actor.max_new_tokens = 1.
      {nlohmann::json{
           {"messages",
            {{{"role", "user"}, {"content", task}}, {{"role", "assistant"}, {"content", "3 4"}}}}}
           .dump(),
       "more than actor.max_new_tokens = 1"},
  };
  for (const auto& [line, expected] : cases) {
    const auto path = WriteFile("bad", good + "\n" + line + "\n" + good + "\n");
    auto read = ReadSftConversations(path.string(), j.config, j.text, j.max_seq_len);
    ASSERT_FALSE(read.ok()) << line;
    const std::string message(read.status().message());
    EXPECT_THAT(message, HasSubstr(path.string())) << line;
    EXPECT_THAT(message, HasSubstr(expected)) << line;
  }
  auto missing = ReadSftConversations("/nonexistent/sft.jsonl", j.config, j.text, j.max_seq_len);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot open"));
  auto empty =
      ReadSftConversations(WriteFile("empty", "\n\n").string(), j.config, j.text, j.max_seq_len);
  EXPECT_THAT(empty.status().message(), HasSubstr("no conversations"));
  auto too_long = ReadSftConversations(WriteFile("long", good + "\n").string(), j.config, j.text,
                                       /*max_seq_len=*/3);
  EXPECT_THAT(too_long.status().message(), HasSubstr("more than the model's max_seq_len 3"));
}

TEST(SftConversationsTest, TheOptionsNameTheFileTheyNeed) {
  SftOptions sft;
  sft.steps = 1;
  sft.source = "jsonl";
  EXPECT_THAT(sft.Validate().message(), HasSubstr("needs sft.path"));
  sft.source = "expert";
  sft.path = "x.jsonl";
  EXPECT_THAT(sft.Validate().message(), HasSubstr("only with sft.source = \"jsonl\""));
  sft.source = "hub";
  EXPECT_THAT(sft.Validate().message(), HasSubstr("expected \"expert\""));
}

// The supervised stage on the file: 20 steps of 32 conversations drawn from 64 (so every
// conversation comes back) lower the assistant tokens' NLL as the expert's episodes do.
TEST(SftConversationsTest, TrainingOnTheFileRaisesItsLikelihood) {
  const Job probe = MakeJob("sft_conversations_probe");
  const auto path = WriteFile("train", ExpertConversations(probe, 11, 64));
  Job j = MakeJob("sft_conversations_train",
                  {"sft.steps=20", "sft.episodes_per_step=32", "sft.lr=3e-3",
                   "sft.source=\"jsonl\"", StrCat("sft.path=\"", path.string(), "\"")});
  auto options = ResolveModelOptions(j.config, *j.text.tokenizer, j.text.tokenizer_name);
  ASSERT_TRUE(options.ok()) << options.status();
  Transformer model = *MakeInitialModel(*options);
  auto result = SupervisedWarmStart(j.config, *j.factory, j.text, model);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps, 20);
  EXPECT_EQ(result->episodes, 640);
  std::printf("sft on a conversation file: assistant-token NLL %.3f -> %.3f\n", result->first_nll,
              result->last_nll);
  EXPECT_LT(result->last_nll, 0.6 * result->first_nll);
}

}  // namespace
}  // namespace flywheel
