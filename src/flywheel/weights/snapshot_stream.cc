#include "flywheel/weights/snapshot_stream.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
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

absl::Status WeightsAssembler::StartManifest(const v1::WeightsChunk& chunk) {
  if (chunk.manifest_size() == 0) {
    return absl::DataLossError(
        StrCat("weights stream of version ", chunk.version(), ": the first chunk has no manifest"));
  }
  version_ = chunk.version();
  std::unordered_map<std::string, int> seen;
  for (const v1::TensorInfo& info : chunk.manifest()) {
    const std::string where = StrCat("weights version ", version_, ", tensor ", info.name());
    if (info.name().empty()) return absl::DataLossError(StrCat(where, ": empty name"));
    if (!seen.emplace(info.name(), 0).second) {
      return absl::DataLossError(StrCat(where, ": listed twice in the manifest"));
    }
    absl::StatusOr<torch::ScalarType> dtype = DtypeFromName(info.dtype());
    if (!dtype.ok()) return absl::DataLossError(StrCat(where, ": ", dtype.status().message()));
    std::vector<int64_t> shape(info.shape().begin(), info.shape().end());
    int64_t numel = 1;
    for (int64_t d : shape) {
      if (d < 0 || (d > 0 && numel > (int64_t{1} << 40) / d)) {
        return absl::DataLossError(StrCat(where, ": bad shape ", ShapeString(shape)));
      }
      numel *= d;
    }
    const int64_t expected = numel * static_cast<int64_t>(c10::elementSize(*dtype));
    if (info.byte_size() != expected) {
      return absl::DataLossError(StrCat(where, ": byte_size ", info.byte_size(), " but ",
                                        info.dtype(), " ", ShapeString(shape), " is ", expected,
                                        " bytes"));
    }
    ASSIGN_OR_RETURN(torch::Tensor tensor, TorchCallOr(StrCat(where, ": allocate"), [&] {
                       return torch::empty(shape, torch::dtype(*dtype));
                     }));
    manifest_.push_back(info);
    tensors_.emplace_back(info.name(), std::move(tensor));
    filled_.push_back(0);
  }
  started_ = true;
  SkipComplete();
  return absl::OkStatus();
}

void WeightsAssembler::SkipComplete() {
  while (current_ < manifest_.size() && filled_[current_] == manifest_[current_].byte_size()) {
    ++current_;
  }
}

absl::Status WeightsAssembler::Add(const v1::WeightsChunk& chunk) {
  ++chunks_;
  if (last_seen_) {
    return absl::DataLossError(
        StrCat("weights stream of version ", version_, ": a chunk after the last one"));
  }
  if (!started_) {
    RETURN_IF_ERROR(StartManifest(chunk));
  } else if (chunk.manifest_size() > 0) {
    return absl::DataLossError(
        StrCat("weights stream of version ", version_, ": a second manifest in chunk ", chunks_));
  }
  if (chunk.version() != version_) {
    return absl::DataLossError(StrCat("weights stream of version ", version_, ": chunk ", chunks_,
                                      " is of version ", chunk.version()));
  }
  if (!chunk.data().empty()) {
    const int64_t index = chunk.tensor_index();
    if (index < 0 || static_cast<size_t>(index) >= manifest_.size()) {
      return absl::DataLossError(StrCat("weights version ", version_, ": chunk ", chunks_,
                                        " names tensor index ", index, " of ", manifest_.size()));
    }
    const v1::TensorInfo& info = manifest_[index];
    const std::string where = StrCat("weights version ", version_, ", tensor ", info.name());
    if (chunk.tensor_name() != info.name()) {
      return absl::DataLossError(
          StrCat(where, ": chunk ", chunks_, " calls it \"", chunk.tensor_name(), "\""));
    }
    if (static_cast<size_t>(index) != current_ || chunk.offset() != filled_[index]) {
      return absl::DataLossError(StrCat(
          where, ": chunk ", chunks_, " has bytes from ", chunk.offset(), " but the stream is at ",
          current_ < manifest_.size() ? manifest_[current_].name() : "the end", " byte ",
          current_ < manifest_.size() ? filled_[current_] : 0, " (a gap or reordering)"));
    }
    const int64_t n = static_cast<int64_t>(chunk.data().size());
    if (chunk.offset() + n > info.byte_size()) {
      return absl::DataLossError(StrCat(where, ": chunk ", chunks_, " ends at byte ",
                                        chunk.offset() + n, " of ", info.byte_size()));
    }
    std::memcpy(static_cast<char*>(tensors_[index].second.data_ptr()) + chunk.offset(),
                chunk.data().data(), static_cast<size_t>(n));
    filled_[index] += n;
    bytes_received_ += n;
    SkipComplete();
  }
  if (chunk.last()) last_seen_ = true;
  return absl::OkStatus();
}

absl::StatusOr<NamedTensors> WeightsAssembler::Finish() {
  if (!started_) return absl::DataLossError("weights stream ended before its first chunk");
  int64_t total = 0;
  for (const v1::TensorInfo& info : manifest_) total += info.byte_size();
  if (current_ < manifest_.size()) {
    return absl::DataLossError(StrCat("weights stream of version ", version_, " ended after ",
                                      bytes_received_, " of ", total, " bytes: tensor ",
                                      manifest_[current_].name(), " has ", filled_[current_],
                                      " of ", manifest_[current_].byte_size()));
  }
  if (!last_seen_) {
    return absl::DataLossError(
        StrCat("weights stream of version ", version_, " ended without its last chunk"));
  }
  started_ = false;
  return std::move(tensors_);
}

absl::StatusOr<std::shared_ptr<const WeightSnapshot>> SnapshotFromTensors(
    const ModelOptions& options, int64_t version, const NamedTensors& tensors) {
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
  RETURN_IF_ERROR(TorchCall(StrCat("weights version ", version, ": build the model"), [&] {
    snapshot->model = Transformer(options);
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
    snapshot->model->FuseProjectionsForInference();
  }));
  RETURN_IF_ERROR(checked);
  return std::shared_ptr<const WeightSnapshot>(std::move(snapshot));
}

}  // namespace flywheel
