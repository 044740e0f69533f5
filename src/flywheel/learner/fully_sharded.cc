#include "flywheel/learner/fully_sharded.h"

#include <map>
#include <string>
#include <utility>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {
namespace {

// Autograd cannot carry a Status: a failed collective inside forward/backward becomes a
// c10::Error, which the learner's TorchCall around forward/backward turns back into one.
void ThrowIfError(const absl::Status& status) {
  TORCH_CHECK(status.ok(), "fully sharded layer: ", std::string(status.message()));
}

class ShardedLayerFunction : public torch::autograd::Function<ShardedLayerFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               FullyShardedLayers* owner, int64_t call) {
    ctx->saved_data["owner"] = reinterpret_cast<int64_t>(owner);
    ctx->saved_data["call"] = call;
    ctx->save_for_backward({x});
    return owner->Forward(call, x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* owner = reinterpret_cast<FullyShardedLayers*>(ctx->saved_data["owner"].toInt());
    const int64_t call = ctx->saved_data["call"].toInt();
    const torch::Tensor x = ctx->get_saved_variables()[0];
    return {owner->Backward(call, x, grad_out[0]), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<FullyShardedLayers>> FullyShardedLayers::Create(
    TransformerImpl* transformer, FlatShards* shards) {
  if (transformer == nullptr) {
    return absl::FailedPreconditionError(
        "learner.sharding = \"full\" needs the transformer (ParallelContext.transformer)");
  }
  std::map<std::string, size_t> by_name;
  for (size_t u = 0; u < shards->units().size(); ++u) by_name[shards->units()[u].name] = u;
  std::vector<size_t> layer_units;
  for (int64_t i = 0; i < transformer->options().num_layers; ++i) {
    auto it = by_name.find(StrCat("layers.", i));
    if (it == by_name.end()) {
      return absl::FailedPreconditionError(
          StrCat("learner.sharding = \"full\": no unit \"layers.", i,
                 "\" (build ParallelContext.units with TransformerUnits)"));
    }
    layer_units.push_back(it->second);
  }
  auto root = by_name.find("root");
  if (root == by_name.end()) {
    return absl::FailedPreconditionError("learner.sharding = \"full\": no unit \"root\"");
  }
  std::unique_ptr<FullyShardedLayers> out(
      new FullyShardedLayers(transformer, shards, root->second, std::move(layer_units)));
  FullyShardedLayers* self = out.get();
  transformer->SetLayerRunner([self](int64_t index, const DecoderLayer& layer,
                                     const torch::Tensor& x, const Rotary& rotary,
                                     const Documents& documents) {
    return self->Run(index, layer, x, rotary, documents);
  });
  out->FreeAll();  // from now on the parameters live in the shards
  return out;
}

FullyShardedLayers::FullyShardedLayers(TransformerImpl* transformer, FlatShards* shards,
                                       size_t root_unit, std::vector<size_t> layer_units)
    : transformer_(transformer),
      shards_(shards),
      root_unit_(root_unit),
      layer_units_(std::move(layer_units)) {}

FullyShardedLayers::~FullyShardedLayers() { transformer_->SetLayerRunner(nullptr); }

absl::Status FullyShardedLayers::BeginStep() {
  calls_.clear();
  return shards_->GatherUnit(root_unit_, *comm_);
}

absl::Status FullyShardedLayers::EndStep() {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : shards_->UnitParameters(root_unit_)) grads.push_back(p.grad());
  const absl::Status s = shards_->ReduceScatterUnit(root_unit_, grads, *comm_, false);
  shards_->FreeUnit(root_unit_);
  calls_.clear();
  return s;
}

void FullyShardedLayers::FreeAll() {
  for (size_t u = 0; u < shards_->units().size(); ++u) shards_->FreeUnit(u);
  calls_.clear();
}

torch::Tensor FullyShardedLayers::Run(int64_t index, const DecoderLayer& layer,
                                      const torch::Tensor& x, const Rotary& rotary,
                                      const Documents& documents) {
  calls_.push_back({index, layer, rotary, documents});
  return ShardedLayerFunction::apply(x, this, static_cast<int64_t>(calls_.size()) - 1);
}

torch::Tensor FullyShardedLayers::Forward(int64_t call, const torch::Tensor& x) {
  const LayerCall& c = calls_[call];
  const size_t unit = layer_units_[c.index];
  ThrowIfError(shards_->GatherUnit(unit, *comm_));
  torch::Tensor y;
  {
    torch::NoGradGuard no_grad;
    y = c.layer->ForwardDocuments(x, c.rotary, c.documents);
  }
  shards_->FreeUnit(unit);
  return y;
}

torch::Tensor FullyShardedLayers::Backward(int64_t call, const torch::Tensor& x,
                                           const torch::Tensor& grad_y) {
  const LayerCall& c = calls_[call];
  const size_t unit = layer_units_[c.index];
  ThrowIfError(shards_->GatherUnit(unit, *comm_));
  const std::vector<torch::Tensor> params = shards_->UnitParameters(unit);
  torch::Tensor grad_x;
  std::vector<torch::Tensor> grads;
  {
    torch::AutoGradMode enable_grad(true);
    const torch::Tensor input = x.detach().requires_grad_(true);
    const torch::Tensor y = c.layer->ForwardDocuments(input, c.rotary, c.documents);
    std::vector<torch::Tensor> wrt{input};
    wrt.insert(wrt.end(), params.begin(), params.end());
    std::vector<torch::Tensor> g = torch::autograd::grad({y}, wrt, {grad_y}, /*retain_graph=*/false,
                                                         /*create_graph=*/false,
                                                         /*allow_unused=*/true);
    grad_x = g[0];
    grads.assign(g.begin() + 1, g.end());
  }
  ThrowIfError(shards_->ReduceScatterUnit(unit, grads, *comm_, /*accumulate=*/true));
  shards_->FreeUnit(unit);
  return grad_x;
}

}  // namespace flywheel
