// Writes the binary seeds of fuzz/corpus/ from the test helpers, in the layouts the targets
// read: `fuzz_seed_writer fuzz/corpus`. Text seeds (JSON lines, TOML) are kept as files.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "flywheel/buffer/test_util.h"
#include "flywheel/core/trajectory_proto.h"
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
                         uint8_t staleness) {
  fuzz::FuzzOutput out;
  out.Byte(max_size - 1).Byte(ratio).Byte(selector).Byte(0).Byte(group_size - 1).Byte(0);
  out.Byte(staleness + 1).Byte(1);
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
  return 0;
}
