// The weights stream an actor receives from the learner's weights service (weights/
// chunk_checker.h, the checks WeightsAssembler runs before it allocates or copies): a sequence of
// serialized v1.WeightsChunk messages. The target copies every accepted chunk into buffers of
// the manifest's sizes as WeightsAssembler does into its tensors, so AddressSanitizer sees any
// placement outside a tensor, and checks what the checker promises: each manifest entry's
// byte_size is its elements times the dtype's size, a placement continues its tensor, and a
// stream that Finish() accepts has every byte.
//
// Input (fuzz_input.h): [u16 length][serialized v1.WeightsChunk], repeated.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "flywheel/model/safetensors_header.h"
#include "flywheel/weights/chunk_checker.h"
#include "fuzz_input.h"
#include "quiet_protobuf.h"

namespace flywheel {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

// Buffers are allocated only for manifests this small (a hostile manifest may declare terabytes,
// which the actor would ask torch for and be refused; here it would only exhaust the fuzzer).
constexpr int64_t kMaxBufferedBytes = 1 << 20;

void Stream(fuzz::FuzzInput& in) {
  WeightsChunkChecker checker;
  std::vector<std::string> tensors;
  std::vector<int64_t> filled;
  v1::WeightsChunk chunk;
  while (!in.empty()) {
    if (!chunk.ParseFromString(std::string(in.Bytes()))) continue;
    const bool first = !checker.started();
    ChunkPlacement placement;
    if (!checker.Add(chunk, &placement).ok()) {
      Check(placement.size == 0);
      continue;
    }
    if (first) {
      if (checker.total_bytes() > kMaxBufferedBytes) return;
      int64_t total = 0;
      for (const WeightsTensorSpec& spec : checker.manifest()) {
        int64_t numel = 1;
        for (int64_t d : spec.shape) {
          Check(d >= 0);
          numel *= d;
        }
        Check(spec.byte_size == numel * static_cast<int64_t>(SafetensorsDtypeSize(spec.dtype)));
        Check(spec.byte_size > 0 || numel == 0);
        tensors.emplace_back(static_cast<size_t>(spec.byte_size), '\0');
        filled.push_back(0);
        total += spec.byte_size;
      }
      Check(total == checker.total_bytes());
    }
    if (placement.size == 0) continue;
    Check(placement.size == static_cast<int64_t>(chunk.data().size()));
    Check(placement.tensor < tensors.size());
    Check(placement.offset == filled[placement.tensor]);
    std::memcpy(tensors[placement.tensor].data() + placement.offset, chunk.data().data(),
                static_cast<size_t>(placement.size));
    filled[placement.tensor] += placement.size;
  }
  if (checker.Finish().ok()) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      Check(filled[i] == static_cast<int64_t>(tensors[i].size()));
    }
    Check(checker.bytes_received() == checker.total_bytes());
  }
}

}  // namespace
}  // namespace flywheel

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  flywheel::fuzz::SilenceProtobufLog();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flywheel::fuzz::FuzzInput in(data, size);
  flywheel::Stream(in);
  return 0;
}
