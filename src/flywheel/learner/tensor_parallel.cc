#include "flywheel/learner/tensor_parallel.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

// Autograd cannot carry a Status: a failed collective inside forward/backward becomes a
// c10::Error, which the learner's TorchCall around forward/backward turns back into one.
void ThrowIfError(const absl::Status& status) {
  TORCH_CHECK(status.ok(), "tensor parallel: ", std::string(status.message()));
}

dist::Communicator* CommOf(torch::autograd::AutogradContext* ctx) {
  return reinterpret_cast<dist::Communicator*>(ctx->saved_data["comm"].toInt());
}

// f: identity forward, all-reduce backward.
class CopyFunction : public torch::autograd::Function<CopyFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               dist::Communicator* comm) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    return x;  // autograd returns an unmodified input as a view with this node as its history
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    torch::Tensor sum = grad_out[0].clone(at::MemoryFormat::Contiguous);
    ThrowIfError(CommOf(ctx)->AllReduceSumNow(sum));
    return {sum, torch::Tensor()};
  }
};

// g: all-reduce forward, identity backward.
class ReduceFunction : public torch::autograd::Function<ReduceFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               dist::Communicator* comm) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
    torch::Tensor sum = x.clone(at::MemoryFormat::Contiguous);
    ThrowIfError(comm->AllReduceSumNow(sum));
    return sum;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grad_out) {
    return {grad_out[0], torch::Tensor()};
  }
};

// What learner.tensor_parallel = t must divide in the model; errors name the keys.
absl::Status CheckModelDivides(int64_t t, const ModelOptions& model) {
  struct Key {
    const char* name;
    int64_t value;
  };
  for (const Key& key :
       {Key{"model.num_heads", model.num_heads}, Key{"model.num_kv_heads", model.num_kv_heads},
        Key{"model.intermediate_size", model.intermediate_size}}) {
    if (key.value % t != 0) {
      return absl::InvalidArgumentError(
          StrCat("learner.tensor_parallel (", t, ") must divide ", key.name, " (", key.value,
                 "): each tensor-parallel rank holds whole attention heads and an equal share "
                 "of the MLP width"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTensorParallel(const LearnerOptions& learner, const ModelOptions& model) {
  const int64_t t = learner.tensor_parallel;
  if (t < 1) {
    return absl::InvalidArgumentError(StrCat("learner.tensor_parallel (", t, ") must be >= 1"));
  }
  if (learner.world_size % t != 0) {
    return absl::InvalidArgumentError(
        StrCat("learner.tensor_parallel (", t, ") must divide learner.world_size (",
               learner.world_size, "): world_size = data-parallel replicas x tensor_parallel"));
  }
  if (t > 1 && learner.sharding != ShardingMode::kNone) {
    return absl::InvalidArgumentError(
        StrCat("learner.tensor_parallel (", t,
               ") > 1 works with learner.sharding = \"none\" only (data parallel over the "
               "replicas)"));
  }
  return CheckModelDivides(t, model);
}

torch::Tensor TensorParallelCopy(const torch::Tensor& x, dist::Communicator* tp) {
  return CopyFunction::apply(x, tp);
}

torch::Tensor TensorParallelReduce(const torch::Tensor& x, dist::Communicator* tp) {
  return ReduceFunction::apply(x, tp);
}

absl::StatusOr<DeviceMesh> DeviceMesh::Form(c10::intrusive_ptr<c10d::Store> store, int rank,
                                            int world_size, int tensor_parallel,
                                            const dist::CommunicatorOptions& options) {
  if (tensor_parallel < 1 || world_size < 1 || world_size % tensor_parallel != 0) {
    return absl::InvalidArgumentError(
        StrCat("device mesh: learner.tensor_parallel (", tensor_parallel,
               ") must be >= 1 and divide learner.world_size (", world_size, ")"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        StrCat("device mesh: rank ", rank, " is outside 0..", world_size - 1));
  }
  DeviceMesh mesh;
  mesh.tensor_parallel = tensor_parallel;
  mesh.data_parallel = world_size / tensor_parallel;
  mesh.tp_index = rank % tensor_parallel;
  mesh.dp_index = rank / tensor_parallel;
  // TP first, then DP, on every rank: a group only waits for its own members, who all form
  // their TP group before their DP group, so the two never wait on each other.
  dist::CommunicatorOptions tp_options = options;
  tp_options.name = StrCat(options.name, " tp/", mesh.dp_index);
  ASSIGN_OR_RETURN(mesh.tp_group,
                   dist::Communicator::Create(
                       c10::make_intrusive<c10d::PrefixStore>(StrCat("tp/", mesh.dp_index), store),
                       mesh.tp_index, mesh.tensor_parallel, std::move(tp_options)));
  dist::CommunicatorOptions dp_options = options;
  dp_options.name = StrCat(options.name, " dp/", mesh.tp_index);
  ASSIGN_OR_RETURN(mesh.dp_group,
                   dist::Communicator::Create(
                       c10::make_intrusive<c10d::PrefixStore>(StrCat("dp/", mesh.tp_index), store),
                       mesh.dp_index, mesh.data_parallel, std::move(dp_options)));
  return mesh;
}

std::string DeviceMesh::DebugString() const {
  return StrCat("mesh DP ", data_parallel, " x TP ", tensor_parallel, ": dp_index ", dp_index,
                ", tp_index ", tp_index, " (rank ", dp_index * tensor_parallel + tp_index, ")");
}

TensorParallelSplit SplitOfParameter(const std::string& name) {
  for (const char* column : {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.",
                             "mlp.gate_proj.", "mlp.up_proj."}) {
    if (name.find(column) != std::string::npos) return TensorParallelSplit::kColumn;
  }
  for (const char* row : {"self_attn.o_proj.weight", "mlp.down_proj.weight"}) {
    if (name.ends_with(row)) return TensorParallelSplit::kRow;
  }
  return TensorParallelSplit::kReplicated;
}

absl::StatusOr<std::unique_ptr<TensorParallelModel>> TensorParallelModel::Create(
    const TransformerImpl& full, dist::Communicator* tp) {
  if (tp == nullptr) {
    return absl::FailedPreconditionError("tensor parallel: needs the TP group (a communicator)");
  }
  if (full.tensor_parallel() != 1) {
    return absl::InvalidArgumentError(
        "tensor parallel: the source model is already a tensor-parallel slice");
  }
  const int64_t t = tp->size();
  const int64_t r = tp->rank();
  RETURN_IF_ERROR(CheckModelDivides(t, full.options()));
  Transformer local{nullptr};
  std::vector<TensorParallelSplit> splits;
  RETURN_IF_ERROR(
      TorchCall(StrCat("tensor parallel: slicing the model for rank ", r, " of ", t), [&] {
        local = Transformer(full.options(), t);
        torch::NoGradGuard no_grad;
        const auto source = full.named_parameters();
        const auto target = local->named_parameters();
        TORCH_CHECK(source.size() == target.size(), "the slice has ", target.size(),
                    " parameters, the model ", source.size());
        for (size_t i = 0; i < target.size(); ++i) {
          const std::string& name = target[i].key();
          TORCH_CHECK(source[i].key() == name, "parameter ", i, " is ", source[i].key(),
                      " in the model and ", name, " in the slice");
          const TensorParallelSplit split = SplitOfParameter(name);
          torch::Tensor from = source[i].value().detach();
          torch::Tensor to = target[i].value();
          if (split != TensorParallelSplit::kReplicated) {
            const int64_t dim = split == TensorParallelSplit::kColumn ? 0 : 1;
            from = from.narrow(dim, r * to.size(dim), to.size(dim));
          }
          TORCH_CHECK(from.sizes() == to.sizes(), name, ": slice ", from.sizes(), " for a local ",
                      to.sizes());
          to.copy_(from);
          splits.push_back(split);
        }
      }));
  std::unique_ptr<TensorParallelModel> out(
      new TensorParallelModel(std::move(local), tp, std::move(splits)));
  const TensorParallelModel* self = out.get();
  out->model_->SetLayerRunner([self](int64_t, const DecoderLayer& layer, const torch::Tensor& x,
                                     const Rotary& rotary,
                                     const Documents& documents) {
    return self->RunLayer(layer, x, rotary, documents);
  });
  return out;
}

TensorParallelModel::TensorParallelModel(Transformer model, dist::Communicator* tp,
                                         std::vector<TensorParallelSplit> splits)
    : model_(std::move(model)), tp_(tp), splits_(std::move(splits)) {}

TensorParallelModel::~TensorParallelModel() { model_->SetLayerRunner(nullptr); }

torch::Tensor TensorParallelModel::RunLayer(
    const DecoderLayer& layer, const torch::Tensor& x, const Rotary& rotary,
    const Documents& documents) const {
  // DecoderLayerImpl::ForwardDocuments with f before and g after each parallel block. The
  // per-head q/k norm weights (qk_norm) are replicated but see only this rank's heads: f on the
  // weight sums their gradient over the TP group, so it is the full model's on every rank.
  const torch::Tensor attn = layer->self_attn->ForwardDocuments(
      TensorParallelCopy(layer->input_layernorm->forward(x), tp_), rotary, documents,
      [this](const torch::Tensor& weight) { return TensorParallelCopy(weight, tp_); });
  const torch::Tensor h = x + TensorParallelReduce(attn, tp_);
  const torch::Tensor mlp = layer->mlp->ForwardTraining(
      TensorParallelCopy(layer->post_attention_layernorm->forward(h), tp_));
  return h + TensorParallelReduce(mlp, tp_);
}

absl::StatusOr<double> TensorParallelModel::GlobalGradSquareSum() const {
  double sliced = 0;
  double replicated = 0;
  const std::vector<torch::Tensor> params = parameters();
  RETURN_IF_ERROR(TorchCall("tensor parallel: gradient norm", [&] {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& g = params[i].grad();
      if (!g.defined()) continue;
      const double s = g.to(torch::kDouble).pow(2).sum().item<double>();
      (splits_[i] == TensorParallelSplit::kReplicated ? replicated : sliced) += s;
    }
  }));
  torch::Tensor total = torch::tensor({sliced}, torch::kDouble);
  RETURN_IF_ERROR(tp_->AllReduceSumNow(total));
  return replicated + total.item<double>();
}

absl::StatusOr<std::vector<torch::Tensor>> TensorParallelModel::FullParameters() const {
  const std::vector<torch::Tensor> params = parameters();
  const int64_t t = size();
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor p = params[i].detach();
    if (splits_[i] == TensorParallelSplit::kReplicated) {
      ASSIGN_OR_RETURN(torch::Tensor copy, TorchCallOr("tensor parallel: copying a parameter",
                                                       [&] { return p.clone(); }));
      out.push_back(std::move(copy));
      continue;
    }
    torch::Tensor local, gathered;
    RETURN_IF_ERROR(TorchCall("tensor parallel: gathering a parameter", [&] {
      local = p.contiguous();
      gathered = torch::empty({t * p.numel()}, p.options());
    }));
    RETURN_IF_ERROR(tp_->AllGather(local, gathered));
    ASSIGN_OR_RETURN(
        torch::Tensor whole, TorchCallOr("tensor parallel: assembling a parameter", [&] {
          if (splits_[i] == TensorParallelSplit::kColumn) {  // rank slices stacked along dim 0
            std::vector<int64_t> shape = p.sizes().vec();
            shape[0] *= t;
            return gathered.view(shape);
          }
          // [T, out, in/T] → [out, T, in/T] → [out, in]
          return gathered.view({t, p.size(0), p.size(1)})
              .permute({1, 0, 2})
              .reshape({p.size(0), t * p.size(1)});
        }));
    out.push_back(std::move(whole));
  }
  return out;
}

}  // namespace flywheel
