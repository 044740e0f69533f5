#include "flywheel/trajectory/call_log.h"

#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/strings.h"

namespace flywheel {
namespace {

using ::testing::HasSubstr;

TEST(CallLogTest, ReadsInterleavedExecutions) {
  std::istringstream in(R"(
{"type":"call","execution_id":"e1","call_id":"c1","role":"main","context":[1,2],"generated":[3],"logprobs":[-0.5],"versions":[4]}
{"type":"call","execution_id":"e2","call_id":"d1","role":"sub-agent","context":[1],"generated":[7,8],"logprobs":[-0.1,-0.2],"versions":[5,5]}
{"type":"execution","execution_id":"e1","group_id":"g","task_id":"repair/1","env_name":"repair","termination":"timeout","partial_score":0.25}
{"type":"call","execution_id":"e1","call_id":"c2","role":"main-summary","context":[1,2,3,9],"generated":[4],"logprobs":[-1.0],"versions":[4]}
{"type":"execution","execution_id":"e2","termination":"done","final_reward":1}
)");
  auto executions = ReadCallLog(in, "calls.jsonl");
  ASSERT_TRUE(executions.ok()) << executions.status();
  ASSERT_EQ(executions->size(), 2u);
  const Execution& e1 = (*executions)[0];
  EXPECT_EQ(e1.execution_id, "e1");
  ASSERT_EQ(e1.calls.size(), 2u);
  EXPECT_EQ(e1.calls[1].role, Role::kMainSummary);
  EXPECT_EQ(e1.termination, Termination::kTimeout);
  EXPECT_FLOAT_EQ(*e1.partial_score, 0.25f);
  EXPECT_FALSE(e1.final_reward.has_value());
  EXPECT_EQ((*executions)[1].calls[0].generated, (std::vector<int32_t>{7, 8}));
}

TEST(CallLogTest, RoundTrip) {
  Execution e;
  e.execution_id = "x";
  e.group_id = "g";
  e.termination = Termination::kDone;
  e.final_reward = 0.5f;
  LlmCall c;
  c.call_id = "c";
  c.role = Role::kSubAgentSummary;
  c.context = {1, 2};
  c.generated = {3};
  c.logprobs = {-0.25f};
  c.versions = {9};
  c.start_unix_ns = 5;
  c.end_unix_ns = 6;
  e.calls = {c};
  std::stringstream buffer;
  WriteCallLog({e}, buffer);
  auto back = ReadCallLog(buffer, "mem");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  const LlmCall& r = (*back)[0].calls[0];
  EXPECT_EQ(r.role, Role::kSubAgentSummary);
  EXPECT_EQ(r.context, c.context);
  EXPECT_EQ(r.logprobs, c.logprobs);
  EXPECT_EQ(r.end_unix_ns, 6);
  EXPECT_FLOAT_EQ(*(*back)[0].final_reward, 0.5f);
}

TEST(CallLogTest, ErrorsNameLineAndField) {
  std::istringstream bad_json("{\"type\":\"call\"}\nnot json\n");
  auto r = ReadCallLog(bad_json, "log.jsonl");
  EXPECT_THAT(r.status().message(), HasSubstr("log.jsonl:1:"));
  EXPECT_THAT(r.status().message(), HasSubstr("execution_id"));

  std::istringstream garbage("\nnot json\n");
  r = ReadCallLog(garbage, "log.jsonl");
  EXPECT_THAT(r.status().message(), HasSubstr("log.jsonl:2:"));

  std::istringstream bad_role(
      R"({"type":"call","execution_id":"e","call_id":"c","role":"critic","generated":[1],"logprobs":[-1],"versions":[1],"context":[0]})");
  r = ReadCallLog(bad_role, "log.jsonl");
  EXPECT_THAT(r.status().message(), HasSubstr("unknown role 'critic'"));

  // Numbers outside their field's type were cast (undefined behaviour) instead of refused.
  std::istringstream huge_time(
      R"({"type":"call","execution_id":"e","call_id":"c","generated":[1],"logprobs":[-1],"versions":[1],"end_unix_ns":29223372036854775807})");
  r = ReadCallLog(huge_time, "log.jsonl");
  EXPECT_THAT(r.status().message(), HasSubstr("log.jsonl:1: end_unix_ns: 2.9223372036854776e+19"));
  for (const char* field : {R"("context":[1e300])", R"("context":[2147483648])",
                            R"("versions":[-1e30])", R"("context":[true])"}) {
    std::istringstream in(
        StrCat(R"({"type":"call","execution_id":"e","call_id":"c","generated":[1],"logprobs":[-1],)",
               R"("versions":[1],)", field, "}"));
    r = ReadCallLog(in, "log.jsonl");
    EXPECT_THAT(r.status().message(), HasSubstr("is not an integer in")) << field;
  }

  std::istringstream mismatch(
      R"({"type":"call","execution_id":"e","call_id":"c","context":[0],"generated":[1,2],"logprobs":[-1],"versions":[1,1]})");
  r = ReadCallLog(mismatch, "log.jsonl");
  EXPECT_THAT(r.status().message(), HasSubstr("call 'c'"));
  EXPECT_THAT(r.status().message(), HasSubstr("logprobs"));
}

}  // namespace
}  // namespace flywheel
