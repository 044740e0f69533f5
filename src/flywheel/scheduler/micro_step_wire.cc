#include "flywheel/scheduler/micro_step_wire.h"

#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

// The bytes are the host's: flywheel runs on little-endian machines only (x86-64, aarch64).
static_assert(std::endian::native == std::endian::little,
              "the micro-step wire form is little-endian; add byte swapping for this host");

struct DtypeEntry {
  torch::ScalarType type;
  const char* name;
};
constexpr DtypeEntry kDtypes[] = {
    {torch::kFloat32, "F32"}, {torch::kFloat64, "F64"}, {torch::kInt32, "I32"},
    {torch::kInt64, "I64"},   {torch::kBool, "BOOL"},
};

const char* DtypeName(torch::ScalarType type) {
  for (const DtypeEntry& e : kDtypes) {
    if (e.type == type) return e.name;
  }
  return nullptr;
}

// The tensors of a PackedMicroBatch, their wire fields and the dtype each must have.
struct TensorField {
  const char* name;
  torch::Tensor PackedMicroBatch::*member;
  v1::WireTensor* (v1::WireMicroStep::*mutable_wire)();
  const v1::WireTensor& (v1::WireMicroStep::*wire)() const;
  torch::ScalarType dtype;
};
const TensorField kTensorFields[] = {
    {"tokens", &PackedMicroBatch::tokens, &v1::WireMicroStep::mutable_tokens,
     &v1::WireMicroStep::tokens, torch::kInt64},
    {"targets", &PackedMicroBatch::targets, &v1::WireMicroStep::mutable_targets,
     &v1::WireMicroStep::targets, torch::kInt64},
    {"trainable", &PackedMicroBatch::trainable, &v1::WireMicroStep::mutable_trainable,
     &v1::WireMicroStep::trainable, torch::kBool},
    {"behaviour_logprobs", &PackedMicroBatch::behaviour_logprobs,
     &v1::WireMicroStep::mutable_behaviour_logprobs, &v1::WireMicroStep::behaviour_logprobs,
     torch::kFloat32},
    {"versions", &PackedMicroBatch::versions, &v1::WireMicroStep::mutable_versions,
     &v1::WireMicroStep::versions, torch::kInt64},
    {"advantages", &PackedMicroBatch::advantages, &v1::WireMicroStep::mutable_advantages,
     &v1::WireMicroStep::advantages, torch::kFloat32},
    {"loss_weights", &PackedMicroBatch::loss_weights, &v1::WireMicroStep::mutable_loss_weights,
     &v1::WireMicroStep::loss_weights, torch::kFloat32},
    {"sequence_ids", &PackedMicroBatch::sequence_ids, &v1::WireMicroStep::mutable_sequence_ids,
     &v1::WireMicroStep::sequence_ids, torch::kInt64},
    {"execution_ids", &PackedMicroBatch::execution_ids, &v1::WireMicroStep::mutable_execution_ids,
     &v1::WireMicroStep::execution_ids, torch::kInt64},
};

void RowsToWire(const std::vector<std::vector<int64_t>>& rows,
                google::protobuf::RepeatedPtrField<v1::Int64List>* out) {
  for (const std::vector<int64_t>& row : rows)
    out->Add()->mutable_values()->Add(row.begin(), row.end());
}

std::vector<std::vector<int64_t>> RowsFromWire(
    const google::protobuf::RepeatedPtrField<v1::Int64List>& rows) {
  std::vector<std::vector<int64_t>> out;
  out.reserve(rows.size());
  for (const v1::Int64List& row : rows) out.emplace_back(row.values().begin(), row.values().end());
  return out;
}

// Each row's documents have positive lengths that fit in `length`, and one trajectory index each.
absl::Status CheckDocuments(const PackedMicroBatch& mb) {
  if (static_cast<int64_t>(mb.doc_lengths.size()) != mb.rows ||
      static_cast<int64_t>(mb.doc_trajectories.size()) != mb.rows) {
    return absl::InvalidArgumentError(StrCat("doc_lengths has ", mb.doc_lengths.size(),
                                             " rows and doc_trajectories ",
                                             mb.doc_trajectories.size(), ", rows = ", mb.rows));
  }
  for (int64_t r = 0; r < mb.rows; ++r) {
    const std::vector<int64_t>& docs = mb.doc_lengths[r];
    if (docs.size() != mb.doc_trajectories[r].size()) {
      return absl::InvalidArgumentError(StrCat("row ", r, " has ", docs.size(),
                                               " document lengths but ",
                                               mb.doc_trajectories[r].size(), " trajectories"));
    }
    int64_t used = 0;
    for (const int64_t n : docs) {
      if (n <= 0 || n > mb.length - used) {
        return absl::InvalidArgumentError(StrCat("row ", r, ": document lengths ", Join(docs, ","),
                                                 " do not fit a row of ", mb.length));
      }
      used += n;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TensorToWire(const torch::Tensor& tensor, v1::WireTensor* out) {
  if (!tensor.defined()) return absl::InvalidArgumentError("tensor is undefined");
  const char* name = DtypeName(tensor.scalar_type());
  if (name == nullptr) {
    return absl::InvalidArgumentError(StrCat("dtype ", c10::toString(tensor.scalar_type()),
                                             " has no wire form (F32, F64, I32, I64, BOOL)"));
  }
  torch::Tensor host;
  RETURN_IF_ERROR(TorchCall("copying a tensor to the host",
                            [&] { host = tensor.detach().to(torch::kCPU).contiguous(); }));
  out->set_dtype(name);
  out->clear_shape();
  for (const int64_t d : host.sizes()) out->add_shape(d);
  out->set_data(host.data_ptr(), host.numel() * host.element_size());
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> TensorFromWire(const v1::WireTensor& wire, std::string_view field) {
  const DtypeEntry* dtype = nullptr;
  for (const DtypeEntry& e : kDtypes) {
    if (wire.dtype() == e.name) dtype = &e;
  }
  if (dtype == nullptr) {
    return absl::InvalidArgumentError(
        StrCat(field, ": unknown dtype \"", wire.dtype(), "\" (F32, F64, I32, I64, BOOL)"));
  }
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype->type));
  std::vector<int64_t> shape(wire.shape().begin(), wire.shape().end());
  int64_t numel = 1;
  for (const int64_t d : shape) {
    if (d < 0 || (d > 0 && numel > std::numeric_limits<int64_t>::max() / element / d)) {
      return absl::InvalidArgumentError(StrCat(field, ": bad shape [", Join(shape, ", "), "]"));
    }
    numel *= d;
  }
  const std::string& data = wire.data();
  if (static_cast<int64_t>(data.size()) != numel * element) {
    return absl::InvalidArgumentError(StrCat(field, ": ", data.size(), " bytes, but ", wire.dtype(),
                                             " [", Join(shape, ", "), "] needs ", numel * element));
  }
  if (dtype->type == torch::kBool) {
    for (size_t i = 0; i < data.size(); ++i) {
      if (data[i] != 0 && data[i] != 1) {
        return absl::InvalidArgumentError(
            StrCat(field, ": byte ", i, " of a BOOL tensor is ", static_cast<int>(data[i])));
      }
    }
  }
  torch::Tensor tensor = torch::empty(shape, torch::TensorOptions().dtype(dtype->type));
  if (!data.empty()) std::memcpy(tensor.data_ptr(), data.data(), data.size());
  return tensor;
}

absl::Status MicroStepToWire(const MicroStep& micro_step, v1::WireMicroStep* out) {
  const PackedMicroBatch& mb = micro_step.batch;
  out->set_id(micro_step.id);
  out->set_step(micro_step.step);
  out->set_version(micro_step.version);
  out->set_rows(mb.rows);
  out->set_length(mb.length);
  for (const TensorField& f : kTensorFields) {
    RETURN_IF_ERROR(
        Annotate(TensorToWire(mb.*f.member, (out->*f.mutable_wire)()),
                 StrCat("micro-step ", micro_step.id, " of step ", micro_step.step, ": ", f.name)));
  }
  RowsToWire(mb.doc_lengths, out->mutable_doc_lengths());
  RowsToWire(mb.doc_trajectories, out->mutable_doc_trajectories());
  out->set_real_tokens(mb.real_tokens);
  return absl::OkStatus();
}

absl::StatusOr<MicroStep> MicroStepFromWire(const v1::WireMicroStep& wire) {
  const std::string what = StrCat("micro-step ", wire.id(), " of step ", wire.step());
  MicroStep ms;
  ms.id = wire.id();
  ms.step = wire.step();
  ms.version = wire.version();
  PackedMicroBatch& mb = ms.batch;
  mb.rows = wire.rows();
  mb.length = wire.length();
  if (mb.rows <= 0 || mb.length <= 0) {
    return absl::InvalidArgumentError(
        StrCat(what, ": rows ", mb.rows, " and length ", mb.length, " must be positive"));
  }
  for (const TensorField& f : kTensorFields) {
    const v1::WireTensor& t = (wire.*f.wire)();
    if (t.dtype() != DtypeName(f.dtype)) {
      return absl::InvalidArgumentError(StrCat(what, ": ", f.name, " is ",
                                               t.dtype().empty() ? "missing" : t.dtype(),
                                               ", expected ", DtypeName(f.dtype)));
    }
    if (t.shape_size() != 2 || t.shape(0) != mb.rows || t.shape(1) != mb.length) {
      return absl::InvalidArgumentError(StrCat(what, ": ", f.name, " has shape [",
                                               Join(t.shape(), ", "), "], expected [", mb.rows,
                                               ", ", mb.length, "]"));
    }
    ASSIGN_OR_RETURN(mb.*f.member, TensorFromWire(t, StrCat(what, ": ", f.name)));
  }
  mb.doc_lengths = RowsFromWire(wire.doc_lengths());
  mb.doc_trajectories = RowsFromWire(wire.doc_trajectories());
  RETURN_IF_ERROR(Annotate(CheckDocuments(mb), what));
  mb.real_tokens = wire.real_tokens();
  if (mb.real_tokens < 0 || mb.real_tokens > mb.rows * mb.length) {
    return absl::InvalidArgumentError(
        StrCat(what, ": real_tokens ", mb.real_tokens, " outside [0, rows · length]"));
  }
  return ms;
}

}  // namespace flywheel
