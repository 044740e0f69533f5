#include "flywheel/model/hf_parity.h"

#include <algorithm>

#include "flywheel/core/status_macros.h"
#include "flywheel/core/strings.h"
#include "flywheel/model/attention_layout.h"
#include "flywheel/model/hf_config.h"
#include "flywheel/model/hf_weights.h"
#include "flywheel/model/kv_cache.h"
#include "flywheel/model/placement.h"
#include "flywheel/model/torch_status.h"
#include "flywheel/model/weight_snapshot.h"

namespace flywheel {
namespace {

// Compared on the host in float64, wherever the two were computed.
double MaxError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kCPU, torch::kFloat64) - want.to(torch::kCPU, torch::kFloat64))
      .abs()
      .max()
      .item<double>();
}

}  // namespace

absl::StatusOr<HfParity> MeasureHfParity(const std::string& model_dir,
                                         const std::vector<int64_t>& tokens,
                                         const torch::Tensor& reference, const std::string& device,
                                         const std::string& dtype, int64_t prefill) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 2 || prefill < 1 || prefill >= n || reference.dim() != 2 || reference.size(0) != n) {
    return absl::InvalidArgumentError(StrCat(
        model_dir, ": need >= 2 tokens, 1 <= prefill < tokens and reference logits [tokens, V]"));
  }
  ASSIGN_OR_RETURN(HfModelConfig hf, LoadHfModelConfig(model_dir));
  hf.model.device = device;
  hf.model.dtype = dtype;
  RETURN_IF_ERROR(hf.model.Validate());
  ASSIGN_OR_RETURN(const torch::Device where, ModelDevice(hf.model));
  ASSIGN_OR_RETURN(Transformer model, LoadHfModel(model_dir, hf.model));
  RETURN_IF_ERROR(TorchCall(StrCat("move the model to ", device), [&] { model->to(where); }));
  ASSIGN_OR_RETURN(const std::shared_ptr<const WeightSnapshot> snapshot, MakeSnapshot(model, 0));
  HfParity parity;
  RETURN_IF_ERROR(TorchCall(StrCat(model_dir, ": logits"), [&] {
    const torch::Tensor want = reference.to(torch::kFloat64);
    parity.max_abs_logit = want.abs().max().item<double>();
    // The decode path below takes tensors where the model is, as the engine gives them.
    const torch::Tensor row = torch::tensor(tokens, torch::kInt64).unsqueeze(0).to(where);
    torch::Tensor learner;  // [n, V] float32 on the device
    {
      torch::NoGradGuard no_grad;
      AutocastScope autocast(where, ModelDtype(hf.model));
      // One document followed by 3 padding tokens, as the packer lays rows out.
      const torch::Tensor padded = torch::cat({row, torch::zeros({1, 3}, row.options())}, 1);
      learner = model->forward(padded, PackedLayout({{n}}, n + 3))[0].narrow(0, 0, n).toType(
          torch::kFloat32);
      parity.packed_max_error = MaxError(learner, want);
      // The same sequence as the second document of a row, after its own first half.
      const int64_t m = n / 2;
      const torch::Tensor two = torch::cat({row.narrow(1, 0, m), row}, 1);
      const torch::Tensor second =
          model->forward(two, PackedLayout({{m, n}}, m + n))[0].narrow(0, m, n);
      parity.packed_vs_single = MaxError(second, learner);
    }
    std::vector<torch::Tensor> engine;  // the engine's logits, position by position
    c10::InferenceMode inference;
    const Transformer& decoder = snapshot->model;
    KvCache cache(decoder->options(),
                  decoder->parameters().front().options().requires_grad(false), 1, n);
    {
      auto binding = cache.Bind({0}, {0}, prefill);
      const AttentionLayout layout = CausalLayout(1, prefill);
      const torch::Tensor logits =
          decoder->Logits(decoder->Hidden(row.narrow(1, 0, prefill), layout.positions.to(where),
                                          layout.allowed.to(where), &binding));
      parity.decode_max_error = MaxError(logits[0], want.narrow(0, 0, prefill));
      engine.push_back(logits[0].toType(torch::kFloat32));
    }
    for (int64_t pos = prefill; pos < n; ++pos) {
      auto binding = cache.Bind({0}, {pos}, pos + 1);
      const torch::Tensor positions = torch::tensor({pos}).unsqueeze(0).to(where);
      const torch::Tensor allowed =
          torch::ones({1, 1, pos + 1}, torch::TensorOptions(torch::kBool).device(where));
      const torch::Tensor logits =
          decoder->Logits(decoder->Hidden(row.narrow(1, pos, 1), positions, allowed, &binding));
      parity.decode_max_error =
          std::max(parity.decode_max_error, MaxError(logits[0][0], want[pos]));
      engine.push_back(logits[0].toType(torch::kFloat32));
    }
    parity.engine_vs_learner_logprob = MaxError(torch::log_softmax(torch::cat(engine, 0), -1),
                                                torch::log_softmax(learner, -1));
  }));
  return parity;
}

}  // namespace flywheel
