// Writes the binary seeds of fuzz/corpus/ from the test helpers, in the layouts the targets
// read: `fuzz_seed_writer fuzz/corpus`. Text seeds (JSON lines, TOML) are kept as files.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "flywheel/buffer/test_util.h"
#include "flywheel/core/trajectory_proto.h"
#include "flywheel/v1/weights_service.pb.h"
#include "fuzz_input.h"

namespace flywheel {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string Wire(const Trajectory& t) { return ToProto(t).SerializeAsString(); }

std::vector<Trajectory> Trajectories() {
  std::vector<Trajectory> out;
  out.push_back(*testing::MakeTrajectory("plain", /*version=*/2));
  Trajectory grouped = *testing::MakeTrajectory("g1-a", 1, "g1", Role::kSubAgent, 5);
  grouped.partial_score = 0.5f;
  grouped.termination = Termination::kTimeout;
  grouped.execution_id = "e1";
  out.push_back(grouped);
  Trajectory branch = *testing::MakeTrajectory("g1-b", 1, "g1", Role::kMain, 2);
  branch.execution_id = "e1";
  branch.parent_id = "g1-a";
  branch.fork_position = 2;
  out.push_back(branch);
  Trajectory invalid = *testing::MakeTrajectory("invalid", 0);
  invalid.logprobs.pop_back();  // fails Validate
  out.push_back(invalid);
  return out;
}

void TrajectorySeeds(const fs::path& dir) {
  const std::vector<Trajectory> ts = Trajectories();
  for (size_t i = 0; i < ts.size(); ++i) Write(dir, ts[i].id + ".pb", Wire(ts[i]));
}

// Options bytes as buffer_insert_fuzzer.cc reads them.
fuzz::FuzzOutput Options(uint8_t max_size, uint8_t ratio, uint8_t selector, uint8_t group_size,
                         uint8_t staleness, uint8_t remember_ids = 8) {
  fuzz::FuzzOutput out;
  out.Byte(max_size - 1).Byte(ratio).Byte(selector).Byte(0).Byte(group_size - 1).Byte(0);
  out.Byte(staleness + 1).Byte(1).Byte(remember_ids);
  return out;
}

void BufferSeeds(const fs::path& dir) {
  const std::vector<Trajectory> ts = Trajectories();
  auto insert = [&](fuzz::FuzzOutput& out, std::vector<size_t> which) {
    out.Byte(0).Byte(static_cast<uint8_t>(which.size() - 1));
    for (size_t i : which) out.Bytes(Wire(ts[i]));
  };
  fuzz::FuzzOutput queue = Options(4, 0, 0, 1, 0);
  insert(queue, {0, 3});
  queue.Byte(1).Byte(0);  // sample one
  insert(queue, {0, 0, 0, 0});
  queue.Byte(1).Byte(3);
  Write(dir, "queue", queue.str());

  fuzz::FuzzOutput groups = Options(8, 1, 1, 2, 1);
  insert(groups, {1});
  groups.Byte(3).Byte(10);  // the straggler deadline passes
  insert(groups, {1, 2});
  groups.Byte(2).Byte(3);  // learner version 3: stale
  groups.Byte(1).Byte(1);
  Write(dir, "groups", groups.str());

  fuzz::FuzzOutput roles = Options(3, 1, 3, 1, 255);
  insert(roles, {0, 1, 2});
  roles.Byte(1).Byte(2).Byte(1).Byte(2);
  Write(dir, "role_priority", roles.str());

  // The remote learner: leased samples, an acknowledgement, a release, retried inserts.
  fuzz::FuzzOutput leases = Options(4, 0, 0, 1, 255);
  insert(leases, {0, 1});
  leases.Byte(4).Byte(0);           // lease one
  leases.Byte(6).Byte(0);           // retry the leased one: a duplicate
  leases.Byte(5).Byte(1).Byte(0);   // acknowledge it
  leases.Byte(6).Byte(0);           // retry again: still known
  leases.Byte(4).Byte(3);           // lease the rest
  leases.Byte(5).Byte(0).Byte(1);   // release them
  leases.Byte(1).Byte(3);
  Write(dir, "leases", leases.str());
}

std::string Safetensors(const std::string& header, size_t data_bytes) {
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  return file + header + std::string(data_bytes, '\x01');
}

void SafetensorsSeeds(const fs::path& dir) {
  Write(dir, "f32",
        Safetensors(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 16));
  Write(dir, "mixed",
        Safetensors(R"({"__metadata__":{"format":"pt"},)"
                    R"("a":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},)"
                    R"("b":{"dtype":"F16","shape":[1,4],"data_offsets":[0,8]}})",
                    14));
  Write(dir, "empty_tensor",
        Safetensors(R"({"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]}})", 0));
}

// Weights streams as the learner's ChunkTensors cuts them: w F32 [2, 3], e F32 [0, 4] (empty),
// b BF16 [4]; chunks of at most `chunk` bytes.
std::string WeightsStream(size_t chunk, int64_t version) {
  struct Tensor {
    const char* name;
    const char* dtype;
    std::vector<int64_t> shape;
    size_t bytes;
  };
  const std::vector<Tensor> tensors = {
      {"w", "F32", {2, 3}, 24}, {"e", "F32", {0, 4}, 0}, {"b", "BF16", {4}, 8}};
  fuzz::FuzzOutput out;
  v1::WeightsChunk c;
  c.set_version(version);
  for (const Tensor& t : tensors) {
    v1::TensorInfo* info = c.add_manifest();
    info->set_name(t.name);
    info->set_dtype(t.dtype);
    for (int64_t d : t.shape) info->add_shape(d);
    info->set_byte_size(static_cast<int64_t>(t.bytes));
  }
  bool first = true;
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (size_t offset = 0; offset < tensors[i].bytes; offset += chunk) {
      if (!first) {
        c.Clear();
        c.set_version(version);
      }
      first = false;
      const size_t n = std::min(chunk, tensors[i].bytes - offset);
      c.set_tensor_index(static_cast<int32_t>(i));
      c.set_tensor_name(tensors[i].name);
      c.set_offset(static_cast<int64_t>(offset));
      c.set_data(std::string(n, static_cast<char>('a' + offset)));
      c.set_last(i + 1 == tensors.size() && offset + n == tensors[i].bytes);
      out.Bytes(c.SerializeAsString());
    }
  }
  return out.str();
}

void WeightsSeeds(const fs::path& dir) {
  Write(dir, "whole_8", WeightsStream(8, 3));
  Write(dir, "whole_5", WeightsStream(5, 7));
  Write(dir, "whole_64", WeightsStream(64, 0));
  v1::WeightsChunk up_to_date;
  up_to_date.set_version(9);
  up_to_date.set_up_to_date(true);
  Write(dir, "up_to_date", fuzz::FuzzOutput().Bytes(up_to_date.SerializeAsString()).str());
}

// Conversations in chat_messages_fuzzer.cc's layout: kind = role | 0x08 reasoning | 0x10 null
// content | 0x20 tool calls (count - 1 in the top two bits).
void ChatMessagesSeeds(const fs::path& dir) {
  fuzz::FuzzOutput plain;
  plain.Byte(1);  // generation prompt
  plain.Byte(0).Bytes("You are terse.");
  plain.Byte(1).Bytes("What is 2+3?");
  plain.Byte(2 | 0x08).Bytes("5").Bytes("2 plus 3");
  plain.Byte(1).Bytes("And 4+4?");
  Write(dir, "plain", plain.str());

  fuzz::FuzzOutput tools;
  tools.Byte(2 | 8);  // tools, enable_thinking = false
  tools.Byte(1).Bytes("Add 2 and 3.");
  tools.Byte(2 | 0x20).Bytes("<think>\nadd\n</think>\n\nCalling.").Bytes("add").Bytes(
      R"({"a": 2, "b": 3})");
  tools.Byte(3).Bytes("<tool_response>5</tool_response>");
  tools.Byte(3).Bytes("second result");
  tools.Byte(2 | 0x10 | 0x20 | 0x40).Bytes("").Bytes("mul").Bytes("not json").Bytes("sub").Bytes(
      "[1, 2]");
  Write(dir, "tools", tools.str());

  fuzz::FuzzOutput thinking;
  thinking.Byte(1 | 4 | 8);
  thinking.Byte(1).Bytes("\xE4\xBD\xA0\xE5\xA5\xBD <|im_end|>");
  thinking.Byte(2).Bytes("<think>\nhm\n</think>\n\nhi");
  Write(dir, "thinking", thinking.str());
}

}  // namespace
}  // namespace flywheel

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seed_writer CORPUS_DIR (fuzz/corpus)\n";
    return 2;
  }
  const std::filesystem::path corpus = argv[1];
  flywheel::TrajectorySeeds(corpus / "trajectory_proto");
  flywheel::BufferSeeds(corpus / "buffer_insert");
  flywheel::SafetensorsSeeds(corpus / "safetensors_header");
  flywheel::WeightsSeeds(corpus / "weights_stream");
  flywheel::ChatMessagesSeeds(corpus / "chat_messages");
  return 0;
}
