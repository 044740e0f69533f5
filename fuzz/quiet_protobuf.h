// libprotobuf logs an ERROR line for every string field holding invalid UTF-8 that it is asked to
// parse (and then refuses the message, which the targets handle). Fuzzing asks millions of times:
// hundreds of MB of log, and a run that stalls writing it (one 10-minute run ended in a spurious
// libFuzzer timeout inside that fprintf). The targets that parse protobuf call this from
// LLVMFuzzerInitialize.
#ifndef FLYWHEEL_FUZZ_QUIET_PROTOBUF_H_
#define FLYWHEEL_FUZZ_QUIET_PROTOBUF_H_

#include <google/protobuf/stubs/logging.h>

#include <string>

namespace flywheel::fuzz {

inline void SilenceProtobufLog() {
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
}

}  // namespace flywheel::fuzz

#endif  // FLYWHEEL_FUZZ_QUIET_PROTOBUF_H_
