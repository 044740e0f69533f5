#include "flywheel/env/process/protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "flywheel/core/strings.h"

namespace flywheel::protocol {
namespace {

using ::testing::HasSubstr;

TEST(ProtocolTest, RequestsAreOneLineJson) {
  EXPECT_EQ(HelloRequest(), R"({"protocol_version":1,"type":"hello"})");
  EXPECT_EQ(ResetRequest("guess", 42), R"({"seed":42,"task":"guess","type":"reset"})");
  EXPECT_EQ(StepRequest("a\nb"), R"({"action":"a\nb","type":"step"})");
  EXPECT_THAT(ResetRequest("guess", ~uint64_t{0}), HasSubstr("9007199254740991"));
  EXPECT_EQ(StepRequest("\xff").find('\n'), std::string::npos);  // invalid UTF-8 is replaced
}

TEST(ProtocolTest, ParsesAValidObservation) {
  auto r = ParseObservation(
      R"({"type":"observation","observation":"higher","reward":0.5,"done":true,"partial_score":0.25,"tool":"calc"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->observation, "higher");
  EXPECT_EQ(r->reward, 0.5);
  EXPECT_TRUE(r->done);
  EXPECT_EQ(r->end, EpisodeEnd::kDone);
  EXPECT_EQ(r->partial_score, 0.25);
  EXPECT_EQ(r->tool, "calc");
}

TEST(ProtocolTest, EachMalformedReplyNamesTheProblemAndQuotesTheLine) {
  struct Case {
    const char* line;
    const char* problem;
  };
  for (
      const Case& c : {
          Case{"garbage", "not valid JSON"},
          Case{"[1,2]", "not a JSON object"},
          Case{R"({"observation":"x"})", "no string field \"type\""},
          Case{R"({"type":"score","score":1})", "expected a reply of type \"observation\""},
          Case{R"({"type":"observation","reward":0,"done":false})", "\"observation\""},
          Case{R"({"type":"observation","observation":"x","done":false})", "\"reward\""},
          Case{R"({"type":"observation","observation":"x","reward":0,"done":"no"})", "\"done\""},
          Case{
              R"({"type":"observation","observation":"x","reward":0,"done":false,"partial_score":2})",
              "partial_score"},
      }) {
    auto r = ParseObservation(c.line);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.line;
    EXPECT_THAT(r.status().message(), HasSubstr(c.problem)) << c.line;
    EXPECT_THAT(r.status().message(), HasSubstr(c.line));
  }
  const std::string long_line(5000, 'z');
  EXPECT_THAT(ParseObservation(long_line).status().message(), HasSubstr("(5000 bytes)"));
}

TEST(ProtocolTest, ErrorRepliesAreFailedPrecondition) {
  auto r = ParseObservation(R"({"type":"error","message":"step before reset"})");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("step before reset"));
}

TEST(ProtocolTest, HelloChecksVersionNameAndVocabulary) {
  auto ok = ParseHello(
      R"({"type":"hello","protocol_version":1,"name":"g","vocabulary":{"kind":"words","words":["a","b"]}})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->vocabulary.kind, VocabularySpec::kWords);
  EXPECT_EQ(ok->vocabulary.words.size(), 2u);
  EXPECT_EQ(ParseHello(R"({"type":"hello","protocol_version":1,"name":"g"})")->vocabulary.kind,
            VocabularySpec::kBytes);
  EXPECT_THAT(ParseHello(R"({"type":"hello","protocol_version":2,"name":"g"})").status().message(),
              HasSubstr("protocol_version 2, flywheel speaks 1"));
  // 2^32 + 1 used to be narrowed to int, to 1, and accepted.
  EXPECT_THAT(
      ParseHello(R"({"type":"hello","protocol_version":4294967297,"name":"g"})").status().message(),
      HasSubstr("protocol_version 4294967297, flywheel speaks 1"));
  EXPECT_FALSE(ParseHello(R"({"type":"hello","protocol_version":18446744073709551617,"name":"g"})")
                   .ok());
  EXPECT_THAT(ParseHello(R"({"type":"hello","protocol_version":1})").status().message(),
              HasSubstr("\"name\""));
  EXPECT_THAT(
      ParseHello(
          R"({"type":"hello","protocol_version":1,"name":"g","vocabulary":{"kind":"words","words":["a b"]}})")
          .status()
          .message(),
      HasSubstr("without whitespace"));
  EXPECT_THAT(
      ParseHello(
          R"({"type":"hello","protocol_version":1,"name":"g","vocabulary":{"kind":"words","words":["a","a"]}})")
          .status()
          .message(),
      HasSubstr("appears twice"));
}

TEST(ProtocolTest, ADeeplyNestedValueIsRefusedWithoutRecursingThroughIt) {
  // A million nested arrays as a vocabulary word: the error message used to dump() the word,
  // which recursed once per level and overflowed the stack.
  const std::string nested = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  auto hello = ParseHello(StrCat(
      R"({"type":"hello","protocol_version":1,"name":"g","vocabulary":{"kind":"words","words":[)",
      nested, "]}}"));
  EXPECT_EQ(hello.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(hello.status().message(), HasSubstr("vocabulary word an array is not"));
}

TEST(ProtocolTest, ScoreMustBeInUnitInterval) {
  EXPECT_EQ(*ParseScore(R"({"type":"score","score":0.75})"), 0.75);
  EXPECT_FALSE(ParseScore(R"({"type":"score","score":7})").ok());
  EXPECT_FALSE(ParseScore(R"({"type":"score"})").ok());
}

}  // namespace
}  // namespace flywheel::protocol
