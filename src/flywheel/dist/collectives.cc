#include "flywheel/dist/collectives.h"

#include <cstdint>
#include <vector>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel::dist {

absl::Status BroadcastBytes(Communicator& comm, std::string& bytes, int root) {
  const std::string what = StrCat("broadcasting bytes from rank ", root, " (rank ", comm.rank(),
                                  " of ", comm.size(), ")");
  torch::Tensor length;
  RETURN_IF_ERROR(TorchCall(
      what, [&] { length = torch::full({1}, static_cast<int64_t>(bytes.size()), torch::kInt64); }));
  RETURN_IF_ERROR(comm.Broadcast(length, root));
  const int64_t n = length.item<int64_t>();
  if (n < 0) return absl::DataLossError(StrCat(what, ": received a negative length ", n));
  if (comm.rank() != root) bytes.resize(static_cast<size_t>(n));
  if (n == 0) return absl::OkStatus();
  torch::Tensor payload;
  RETURN_IF_ERROR(
      TorchCall(what, [&] { payload = torch::from_blob(bytes.data(), {n}, torch::kUInt8); }));
  return comm.Broadcast(payload, root);
}

absl::Status AgreeOk(Communicator& comm, bool ok) {
  const std::string what =
      StrCat("agreeing on the step (rank ", comm.rank(), " of ", comm.size(), ")");
  torch::Tensor failed;
  RETURN_IF_ERROR(TorchCall(what, [&] {
    failed = torch::zeros({comm.size()}, torch::kInt32);
    failed[comm.rank()] = ok ? 0 : 1;
  }));
  RETURN_IF_ERROR(comm.AllReduceMax(failed));
  std::vector<int> ranks;
  auto flags = failed.accessor<int32_t, 1>();
  for (int r = 0; r < comm.size(); ++r) {
    if (flags[r] != 0) ranks.push_back(r);
  }
  if (ranks.empty()) return absl::OkStatus();
  return absl::AbortedError(StrCat(comm.options().name, ": rank", ranks.size() == 1 ? " " : "s ",
                                   Join(ranks, ", "), " of ", comm.size(),
                                   " failed this step; every rank stops"));
}

}  // namespace flywheel::dist
