#include "flywheel/learner/sharding.h"

#include <map>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

std::vector<ShardUnit> TransformerUnits(std::span<const std::string> names) {
  constexpr std::string_view kLayers = "model.layers.";
  std::vector<ShardUnit> units{{"root", {}}};
  std::map<int64_t, size_t> layer_unit;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    if (name.rfind(kLayers, 0) == 0) {
      const size_t dot = name.find('.', kLayers.size());
      const int64_t layer = std::stoll(name.substr(kLayers.size(), dot - kLayers.size()));
      auto [it, inserted] = layer_unit.emplace(layer, units.size());
      if (inserted) units.push_back({StrCat("layers.", layer), {}});
      units[it->second].parameters.push_back(static_cast<int64_t>(i));
    } else {
      units[0].parameters.push_back(static_cast<int64_t>(i));
    }
  }
  return units;
}

std::vector<ShardUnit> SingleUnit(int64_t num_parameters) {
  ShardUnit unit{"all", {}};
  for (int64_t i = 0; i < num_parameters; ++i) unit.parameters.push_back(i);
  return {unit};
}

absl::Status ValidateUnits(std::span<const ShardUnit> units, int64_t num_parameters) {
  std::vector<int> seen(num_parameters, 0);
  for (const ShardUnit& u : units) {
    for (int64_t i : u.parameters) {
      if (i < 0 || i >= num_parameters) {
        return absl::InvalidArgumentError(
            StrCat("shard unit ", u.name, ": parameter index ", i, " out of range"));
      }
      ++seen[i];
    }
  }
  for (int64_t i = 0; i < num_parameters; ++i) {
    if (seen[i] != 1) {
      return absl::InvalidArgumentError(
          StrCat("shard units: parameter ", i, " is in ", seen[i], " units (must be in one)"));
    }
  }
  return absl::OkStatus();
}

torch::Tensor FlattenTensors(std::span<const torch::Tensor> tensors, int64_t padded_length) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> pieces;
  int64_t length = 0;
  for (const torch::Tensor& t : tensors) {
    pieces.push_back(t.detach().reshape(-1));
    length += t.numel();
  }
  TORCH_CHECK(padded_length >= length, "flat unit: padded length ", padded_length, " < ", length);
  if (padded_length > length) {
    pieces.push_back(torch::zeros({padded_length - length}, tensors.front().options()));
  }
  return torch::cat(pieces);
}

void UnflattenInto(const torch::Tensor& flat, std::span<const torch::Tensor> outputs) {
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const torch::Tensor& out : outputs) {
    const_cast<torch::Tensor&>(out).copy_(flat.narrow(0, offset, out.numel()).view(out.sizes()));
    offset += out.numel();
  }
}

absl::StatusOr<std::unique_ptr<FlatShards>> FlatShards::Create(
    std::vector<torch::Tensor> parameters, std::vector<ShardUnit> units, int world_size, int rank) {
  RETURN_IF_ERROR(ValidateUnits(units, static_cast<int64_t>(parameters.size())));
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        StrCat("flat shards: rank ", rank, " outside a group of ", world_size));
  }
  std::unique_ptr<FlatShards> shards(
      new FlatShards(std::move(parameters), std::move(units), world_size, rank));
  RETURN_IF_ERROR(TorchCall("flat shards: slicing the parameters", [&] {
    for (size_t u = 0; u < shards->units_.size(); ++u) {
      const int64_t shard = shards->shard_length(u);
      const torch::Tensor flat = FlattenTensors(shards->UnitParameters(u), shard * world_size);
      shards->shards_.push_back(flat.narrow(0, rank * shard, shard).clone().requires_grad_(true));
    }
  }));
  return shards;
}

FlatShards::FlatShards(std::vector<torch::Tensor> parameters, std::vector<ShardUnit> units,
                       int world_size, int rank)
    : parameters_(std::move(parameters)),
      units_(std::move(units)),
      world_size_(world_size),
      rank_(rank) {
  for (const torch::Tensor& p : parameters_) shapes_.push_back(p.sizes().vec());
  for (const ShardUnit& u : units_) {
    int64_t length = 0;
    for (int64_t i : u.parameters) length += parameters_[i].numel();
    lengths_.push_back(length);
  }
}

std::vector<torch::Tensor> FlatShards::UnitParameters(size_t u) const {
  std::vector<torch::Tensor> out;
  for (int64_t i : units_[u].parameters) out.push_back(parameters_[i]);
  return out;
}

absl::Status FlatShards::ReduceScatterUnit(size_t u, std::span<const torch::Tensor> grads,
                                           dist::Communicator& comm, bool accumulate) {
  const int64_t shard = shard_length(u);
  const std::string what = StrCat("reduce-scatter of unit ", units_[u].name);
  torch::Tensor full, reduced;
  RETURN_IF_ERROR(TorchCall(what, [&] {
    std::vector<torch::Tensor> filled;
    const std::vector<int64_t>& params = units_[u].parameters;
    for (size_t k = 0; k < params.size(); ++k) {
      filled.push_back(k < grads.size() && grads[k].defined()
                           ? grads[k]
                           : torch::zeros(shapes_[params[k]], shards_[u].options()));
    }
    full = FlattenTensors(filled, shard * world_size_);
    reduced = torch::empty({shard}, shards_[u].options().requires_grad(false));
  }));
  RETURN_IF_ERROR(Annotate(comm.ReduceScatterSum(full, reduced), what));
  return TorchCall(what, [&] {
    torch::Tensor& grad = shards_[u].mutable_grad();
    if (accumulate && grad.defined()) {
      grad.add_(reduced);
    } else {
      grad = reduced;
    }
  });
}

absl::Status FlatShards::ReduceScatterGrads(dist::Communicator& comm) {
  for (size_t u = 0; u < units_.size(); ++u) {
    std::vector<torch::Tensor> grads;
    for (int64_t i : units_[u].parameters) grads.push_back(parameters_[i].grad());
    RETURN_IF_ERROR(ReduceScatterUnit(u, grads, comm, /*accumulate=*/false));
    // Only the shard of the gradient stays.
    for (int64_t i : units_[u].parameters) parameters_[i].mutable_grad() = torch::Tensor();
  }
  return absl::OkStatus();
}

absl::Status FlatShards::GatherUnit(size_t u, dist::Communicator& comm) {
  const int64_t shard = shard_length(u);
  const std::string what = StrCat("all-gather of unit ", units_[u].name);
  torch::Tensor full;
  RETURN_IF_ERROR(TorchCall(what, [&] {
    full = torch::empty({shard * world_size_}, shards_[u].options().requires_grad(false));
  }));
  RETURN_IF_ERROR(Annotate(comm.AllGather(shards_[u].detach(), full), what));
  return TorchCall(what, [&] {
    int64_t offset = 0;
    for (int64_t i : units_[u].parameters) {
      const std::vector<int64_t>& shape = shapes_[i];
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      parameters_[i].set_data(full.narrow(0, offset, numel).view(shape));
      offset += numel;
    }
  });
}

void FlatShards::FreeUnit(size_t u) {
  for (int64_t i : units_[u].parameters) {
    parameters_[i].set_data(torch::empty({0}, parameters_[i].options().requires_grad(false)));
    parameters_[i].mutable_grad() = torch::Tensor();
  }
}

absl::StatusOr<std::vector<torch::Tensor>> FlatShards::GatherCopies(
    dist::Communicator& comm) const {
  std::vector<torch::Tensor> out(parameters_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    const int64_t shard = shard_length(u);
    const std::string what = StrCat("gathering the parameters of unit ", units_[u].name);
    torch::Tensor full;
    RETURN_IF_ERROR(TorchCall(what, [&] {
      full = torch::empty({shard * world_size_}, shards_[u].options().requires_grad(false));
    }));
    RETURN_IF_ERROR(Annotate(comm.AllGather(shards_[u].detach(), full), what));
    RETURN_IF_ERROR(TorchCall(what, [&] {
      int64_t offset = 0;
      for (int64_t i : units_[u].parameters) {
        int64_t numel = 1;
        for (int64_t d : shapes_[i]) numel *= d;
        out[i] = full.narrow(0, offset, numel).view(shapes_[i]).clone();
        offset += numel;
      }
    }));
  }
  return out;
}

absl::Status FlatShards::AllGatherParams(dist::Communicator& comm) {
  for (size_t u = 0; u < units_.size(); ++u) {
    const int64_t shard = shard_length(u);
    torch::Tensor full;
    RETURN_IF_ERROR(TorchCall(StrCat("all-gather of unit ", units_[u].name), [&] {
      full = torch::empty({shard * world_size_}, shards_[u].options().requires_grad(false));
    }));
    RETURN_IF_ERROR(
        Annotate(comm.AllGather(shards_[u].detach(), full), StrCat("unit ", units_[u].name)));
    RETURN_IF_ERROR(TorchCall(StrCat("all-gather of unit ", units_[u].name),
                              [&] { UnflattenInto(full, UnitParameters(u)); }));
  }
  return absl::OkStatus();
}

}  // namespace flywheel
