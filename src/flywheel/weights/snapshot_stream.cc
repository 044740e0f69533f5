#include "flywheel/weights/snapshot_stream.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/placement.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

struct DtypeEntry {
  const char* name;
  torch::ScalarType dtype;
};
constexpr DtypeEntry kDtypes[] = {
    {"F32", torch::kFloat32}, {"BF16", torch::kBFloat16}, {"F16", torch::kFloat16}};

absl::StatusOr<torch::ScalarType> DtypeFromName(const std::string& name) {
  for (const DtypeEntry& e : kDtypes) {
    if (name == e.name) return e.dtype;
  }
  return absl::InvalidArgumentError(StrCat("unknown dtype \"", name, "\" (F32, BF16, F16)"));
}

std::string ShapeString(c10::IntArrayRef shape) { return StrCat("[", Join(shape, ", "), "]"); }

}  // namespace

absl::StatusOr<std::string> DtypeName(torch::ScalarType dtype) {
  for (const DtypeEntry& e : kDtypes) {
    if (dtype == e.dtype) return std::string(e.name);
  }
  return absl::InvalidArgumentError(
      StrCat("weights of dtype ", c10::toString(dtype), " cannot be streamed (F32, BF16, F16)"));
}

absl::StatusOr<NamedTensors> SnapshotTensors(const WeightSnapshot& snapshot) {
  if (!snapshot.model) return absl::InvalidArgumentError("weight snapshot has no model");
  return TorchCallOr(StrCat("weights version ", snapshot.version, ": host copy"), [&] {
    NamedTensors out;
    for (const auto& item : snapshot.model->named_parameters()) {
      out.emplace_back(item.key(), item.value().detach().to(torch::kCPU).contiguous());
    }
    return out;
  });
}

bool ChunkTensors(int64_t version, const NamedTensors& tensors, int64_t max_chunk_bytes,
                  const std::function<bool(const v1::WeightsChunk&)>& emit) {
  max_chunk_bytes = std::clamp<int64_t>(max_chunk_bytes, 1, kMaxWeightsChunkBytes);
  v1::WeightsChunk chunk;
  chunk.set_version(version);
  for (const auto& [name, tensor] : tensors) {
    v1::TensorInfo* info = chunk.add_manifest();
    info->set_name(name);
    info->set_dtype(DtypeName(tensor.scalar_type()).value_or("?"));
    for (int64_t d : tensor.sizes()) info->add_shape(d);
    info->set_byte_size(static_cast<int64_t>(tensor.nbytes()));
  }
  // The manifest travels with the first data chunk; a snapshot of only empty tensors is one
  // chunk with the manifest and last = true.
  bool first = true;
  auto send = [&](v1::WeightsChunk& c, bool last) {
    c.set_last(last);
    const bool ok = emit(c);
    first = false;
    return ok;
  };
  // Index of the last tensor with bytes, so its final chunk can carry last = true.
  int64_t last_nonempty = -1;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].second.nbytes() > 0) last_nonempty = static_cast<int64_t>(i);
  }
  if (last_nonempty < 0) return send(chunk, true);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor& tensor = tensors[i].second;
    const int64_t size = static_cast<int64_t>(tensor.nbytes());
    const char* data = static_cast<const char*>(tensor.data_ptr());
    for (int64_t offset = 0; offset < size; offset += max_chunk_bytes) {
      const int64_t n = std::min(max_chunk_bytes, size - offset);
      if (!first) {
        chunk.Clear();
        chunk.set_version(version);
      }
      chunk.set_tensor_index(static_cast<int32_t>(i));
      chunk.set_tensor_name(tensors[i].first);
      chunk.set_offset(offset);
      chunk.set_data(data + offset, static_cast<size_t>(n));
      const bool last = static_cast<int64_t>(i) == last_nonempty && offset + n == size;
      if (!send(chunk, last)) return false;
    }
  }
  return true;
}

absl::Status WeightsAssembler::AllocateTensors() {
  for (const WeightsTensorSpec& spec : checker_.manifest()) {
    const std::string where = StrCat("weights version ", checker_.version(), ", tensor ", spec.name);
    ASSIGN_OR_RETURN(const torch::ScalarType dtype, DtypeFromName(spec.dtype));
    ASSIGN_OR_RETURN(torch::Tensor tensor, TorchCallOr(StrCat(where, ": allocate"), [&] {
                       return torch::empty(spec.shape, torch::dtype(dtype));
                     }));
    tensors_.emplace_back(spec.name, std::move(tensor));
  }
  return absl::OkStatus();
}

absl::Status WeightsAssembler::CheckExpected() const {
  if (!expected_.has_value()) return absl::OkStatus();
  std::unordered_map<std::string, const WeightsTensorSpec*> expected;
  for (const WeightsTensorSpec& spec : *expected_) expected.emplace(spec.name, &spec);
  const std::string version = StrCat("weights version ", checker_.version());
  for (const WeightsTensorSpec& got : checker_.manifest()) {
    const std::string where = StrCat(version, ", tensor ", got.name);
    auto it = expected.find(got.name);
    if (it == expected.end()) {
      return absl::InvalidArgumentError(
          StrCat(where, ": this model has no such parameter (the learner's [model] differs)"));
    }
    const WeightsTensorSpec& want = *it->second;
    if (got.shape != want.shape || got.dtype != want.dtype) {
      return absl::InvalidArgumentError(
          StrCat(where, ": ", got.dtype, " ", ShapeString(got.shape), " but this model holds ",
                 want.dtype, " ", ShapeString(want.shape), " (check [model] in both configs)"));
    }
    expected.erase(it);  // a name listed twice is then "no such parameter"
  }
  if (!expected.empty()) {
    return absl::InvalidArgumentError(
        StrCat(version, ", tensor ", expected.begin()->first,
               ": missing (the learner's [model] differs from this process's)"));
  }
  return absl::OkStatus();
}

absl::Status WeightsAssembler::Add(const v1::WeightsChunk& chunk) {
  const bool first = !checker_.started();
  ChunkPlacement placement;
  RETURN_IF_ERROR(checker_.Add(chunk, &placement));
  if (first) {
    RETURN_IF_ERROR(CheckExpected());
    RETURN_IF_ERROR(AllocateTensors());
  }
  if (placement.size > 0) {
    std::memcpy(static_cast<char*>(tensors_[placement.tensor].second.data_ptr()) +
                    placement.offset,
                chunk.data().data(), static_cast<size_t>(placement.size));
  }
  return absl::OkStatus();
}

absl::StatusOr<NamedTensors> WeightsAssembler::Finish() {
  if (finished_) return absl::FailedPreconditionError("weights stream: Finish() called twice");
  RETURN_IF_ERROR(checker_.Finish());
  finished_ = true;
  return std::move(tensors_);
}

Transformer ReceivingModel(const ModelOptions& options) {
  Transformer model(options);
  model->to(ModelDtype(options));
  return model;
}

absl::StatusOr<std::vector<WeightsTensorSpec>> ParameterSpecs(const Transformer& model) {
  std::vector<WeightsTensorSpec> specs;
  for (const auto& item : model->named_parameters()) {
    WeightsTensorSpec spec;
    spec.name = item.key();
    ASSIGN_OR_RETURN(spec.dtype, DtypeName(item.value().scalar_type()));
    spec.shape = item.value().sizes().vec();
    spec.byte_size = static_cast<int64_t>(item.value().nbytes());
    specs.push_back(std::move(spec));
  }
  return specs;
}

absl::StatusOr<std::shared_ptr<const WeightSnapshot>> SnapshotFromTensors(
    const ModelOptions& options, int64_t version, const NamedTensors& tensors) {
  Transformer model{nullptr};
  RETURN_IF_ERROR(TorchCall(StrCat("weights version ", version, ": build the model"),
                            [&] { model = ReceivingModel(options); }));
  return SnapshotFromTensors(std::move(model), version, tensors);
}

absl::StatusOr<std::shared_ptr<const WeightSnapshot>> SnapshotFromTensors(
    Transformer model, int64_t version, const NamedTensors& tensors) {
  std::unordered_map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, tensor] : tensors) {
    if (!by_name.emplace(name, &tensor).second) {
      return absl::InvalidArgumentError(
          StrCat("weights version ", version, ", tensor ", name, ": listed twice"));
    }
  }
  auto snapshot = std::make_shared<WeightSnapshot>();
  snapshot->version = version;
  absl::Status checked = absl::OkStatus();
  snapshot->model = std::move(model);
  RETURN_IF_ERROR(TorchCall(StrCat("weights version ", version, ": load the tensors"), [&] {
    torch::NoGradGuard no_grad;
    size_t matched = 0;
    for (auto& item : snapshot->model->named_parameters()) {
      const std::string where = StrCat("weights version ", version, ", tensor ", item.key());
      auto it = by_name.find(item.key());
      if (it == by_name.end()) {
        checked = absl::InvalidArgumentError(
            StrCat(where, ": missing (the learner's [model] differs from this process's)"));
        return;
      }
      const torch::Tensor& from = *it->second;
      if (from.sizes() != item.value().sizes()) {
        checked = absl::InvalidArgumentError(
            StrCat(where, ": shape ", ShapeString(from.sizes()), " but this model expects ",
                   ShapeString(item.value().sizes()), " (check [model] in both configs)"));
        return;
      }
      if (from.scalar_type() != item.value().scalar_type()) {
        checked = absl::InvalidArgumentError(
            StrCat(where, ": dtype ", c10::toString(from.scalar_type()), " but this model holds ",
                   c10::toString(item.value().scalar_type())));
        return;
      }
      item.value().copy_(from);
      item.value().set_requires_grad(false);
      ++matched;
    }
    if (matched != tensors.size()) {
      const auto params = snapshot->model->named_parameters();
      for (const auto& [name, tensor] : tensors) {
        if (params.find(name) == nullptr) {
          checked = absl::InvalidArgumentError(
              StrCat("weights version ", version, ", tensor ", name,
                     ": this model has no such parameter (the learner's [model] differs)"));
          return;
        }
      }
    }
  }));
  RETURN_IF_ERROR(checked);
  // Received on the host (ReceivingModel); decoded where this process's [model] says.
  ASSIGN_OR_RETURN(const torch::Device device, ModelDevice(snapshot->model->options()));
  RETURN_IF_ERROR(TorchCall(StrCat("weights version ", version, ": place on ", device.str()), [&] {
    snapshot->model->to(device, ModelDtype(snapshot->model->options()));
    snapshot->model->FuseProjectionsForInference();
  }));
  return std::shared_ptr<const WeightSnapshot>(std::move(snapshot));
}

}  // namespace flywheel
