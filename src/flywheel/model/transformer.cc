#include "flywheel/model/transformer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

#include "flywheel/core/strings.h"
#include "flywheel/model/document_attention.h"
#include "flywheel/model/rope_scaling.h"
#include "flywheel/model/torch_status.h"

namespace flywheel {

LinearWeightsImpl::LinearWeightsImpl(int64_t in, int64_t out, bool with_bias) {
  weight = register_parameter("weight", torch::empty({out, in}));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor LinearWeightsImpl::forward(const torch::Tensor& x) const {
  return torch::linear(x, weight, bias);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_in) : eps(eps_in) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  // Computed in float32 whatever the activation dtype, as HF Llama does.
  const auto x32 = x.to(torch::kFloat32);
  const auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) const { return RmsNorm(x, weight, eps); }

EmbeddingTableImpl::EmbeddingTableImpl(int64_t vocab_size, int64_t dim) {
  weight = register_parameter("weight", torch::empty({vocab_size, dim}));
}

torch::Tensor EmbeddingTableImpl::forward(const torch::Tensor& tokens) const {
  return torch::embedding(weight, tokens);
}

Rotary MakeRotary(const torch::Tensor& positions, const torch::Tensor& inv_freq) {
  const auto angles = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq;  // [B, L, D/2]
  const auto emb = torch::cat({angles, angles}, -1).unsqueeze(1);              // [B, 1, L, D]
  return {emb.cos(), emb.sin()};
}

Rotary MakeRotary(const torch::Tensor& positions, int64_t head_dim, double theta) {
  ModelOptions o;
  o.hidden_size = head_dim;
  o.num_heads = 1;
  o.head_dim = head_dim;
  o.rope_theta = theta;
  return MakeRotary(positions, o);
}

Rotary MakeRotary(const torch::Tensor& positions, const ModelOptions& options) {
  return MakeRotary(positions, RopeInverseFrequencies(options, positions.device()));
}

torch::Tensor Rotary::Apply(const torch::Tensor& x) const {
  const int64_t half = x.size(-1) / 2;
  const auto x1 = x.narrow(-1, 0, half);
  const auto x2 = x.narrow(-1, half, half);
  const auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos.to(x.scalar_type()) + rotated * sin.to(x.scalar_type());
}

torch::Tensor AttentionBias(const torch::Tensor& allowed, torch::ScalarType dtype) {
  auto bias =
      torch::zeros(allowed.sizes(), torch::TensorOptions().dtype(dtype).device(allowed.device()));
  bias.masked_fill_(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  return bias.unsqueeze(1).unsqueeze(1);  // [B, 1, 1, Lq, Lk]: broadcast over kv heads, groups
}

AttentionImpl::AttentionImpl(const ModelOptions& o, int64_t layer_index, int64_t tensor_parallel)
    : layer_index_(layer_index),
      num_heads_(o.num_heads / tensor_parallel),
      num_kv_heads_(o.num_kv_heads / tensor_parallel),
      head_dim_(o.HeadDim()) {
  TORCH_CHECK_VALUE(tensor_parallel >= 1 && o.num_heads % tensor_parallel == 0 &&
                        o.num_kv_heads % tensor_parallel == 0,
                    "attention: tensor_parallel ", tensor_parallel, " must divide num_heads ",
                    o.num_heads, " and num_kv_heads ", o.num_kv_heads);
  q_proj = register_module("q_proj",
                           LinearWeights(o.hidden_size, num_heads_ * head_dim_, o.attention_bias));
  k_proj = register_module(
      "k_proj", LinearWeights(o.hidden_size, num_kv_heads_ * head_dim_, o.attention_bias));
  v_proj = register_module(
      "v_proj", LinearWeights(o.hidden_size, num_kv_heads_ * head_dim_, o.attention_bias));
  o_proj = register_module("o_proj", LinearWeights(num_heads_ * head_dim_, o.hidden_size, false));
  if (o.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, o.rms_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, o.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const Rotary& rotary,
                                     const torch::Tensor& bias, KvStore* store) const {
  const int64_t b = x.size(0);
  const int64_t lq = x.size(1);
  const int64_t groups = num_heads_ / num_kv_heads_;
  torch::Tensor q, k, v;
  const int64_t q_width = num_heads_ * head_dim_;
  const int64_t kv_width = num_kv_heads_ * head_dim_;
  if (qkv_weight_.defined()) {  // frozen weights: one GEMM instead of three
    const auto qkv = torch::linear(x, qkv_weight_, qkv_bias_);
    q = qkv.narrow(-1, 0, q_width);
    k = qkv.narrow(-1, q_width, kv_width);
    v = qkv.narrow(-1, q_width + kv_width, kv_width);
  } else {
    q = q_proj->forward(x);
    k = k_proj->forward(x);
    v = v_proj->forward(x);
  }
  q = q.view({b, lq, num_heads_, head_dim_});
  k = k.view({b, lq, num_kv_heads_, head_dim_});
  if (!q_norm.is_empty()) {  // Qwen3: each head normalised on its own, before the rotation
    q = q_norm->forward(q);
    k = k_norm->forward(k);
  }
  q = rotary.Apply(q.transpose(1, 2));
  k = rotary.Apply(k.transpose(1, 2));
  v = v.view({b, lq, num_kv_heads_, head_dim_}).transpose(1, 2);
  torch::Tensor kt;  // keys transposed, [B, kv_heads, D, Lk]
  if (store != nullptr) {
    std::tie(kt, v) = store->Update(layer_index_, k, v);
  } else {
    kt = k.transpose(-1, -2);
  }
  const int64_t lk = kt.size(3);
  // Grouped-query attention without copying keys: query head h = kv_head * groups + g (the HF
  // repeat_kv order) is folded into the query-row dimension of its kv head.
  const auto qg = q.reshape({b, num_kv_heads_, groups * lq, head_dim_});
  auto scores = torch::matmul(qg, kt) * (1.0 / std::sqrt(double(head_dim_)));
  scores = scores.view({b, num_kv_heads_, groups, lq, lk}) + bias;
  const auto probs = torch::softmax(scores, -1).view({b, num_kv_heads_, groups * lq, lk});
  const auto out = torch::matmul(probs, v)  // [B, kv_heads, groups * Lq, D]
                       .view({b, num_heads_, lq, head_dim_})
                       .transpose(1, 2)
                       .reshape({b, lq, num_heads_ * head_dim_});
  return o_proj->forward(out);
}

torch::Tensor AttentionImpl::ForwardDocuments(const torch::Tensor& x, const Rotary& rotary,
                                              const Documents& documents,
                                              const HeadWeightMap& head_weight_map) const {
  const int64_t b = x.size(0);
  const int64_t l = x.size(1);
  const int64_t q_width = num_heads_ * head_dim_;
  const int64_t kv_width = num_kv_heads_ * head_dim_;
  const auto weight = torch::cat({q_proj->weight, k_proj->weight, v_proj->weight}, 0);
  torch::Tensor bias;
  if (q_proj->bias.defined()) bias = torch::cat({q_proj->bias, k_proj->bias, v_proj->bias}, 0);
  const auto qkv = torch::linear(x, weight, bias);
  auto q = qkv.narrow(-1, 0, q_width).view({b, l, num_heads_, head_dim_});
  auto k = qkv.narrow(-1, q_width, kv_width).view({b, l, num_kv_heads_, head_dim_});
  if (!q_norm.is_empty()) {
    auto weight = [&](const RMSNorm& norm) {
      return head_weight_map ? head_weight_map(norm->weight) : norm->weight;
    };
    q = RmsNorm(q, weight(q_norm), q_norm->eps);
    k = RmsNorm(k, weight(k_norm), k_norm->eps);
  }
  q = rotary.Apply(q);
  k = rotary.Apply(k);
  const auto v =
      qkv.narrow(-1, q_width + kv_width, kv_width).view({b, l, num_kv_heads_, head_dim_});
  return o_proj->forward(
      DocumentAttention(q, k, v, documents, 1.0 / std::sqrt(double(head_dim_))));
}

MlpImpl::MlpImpl(const ModelOptions& o, int64_t tensor_parallel) {
  TORCH_CHECK_VALUE(tensor_parallel >= 1 && o.intermediate_size % tensor_parallel == 0,
                    "mlp: tensor_parallel ", tensor_parallel, " must divide intermediate_size ",
                    o.intermediate_size);
  const int64_t width = o.intermediate_size / tensor_parallel;
  gate_proj = register_module("gate_proj", LinearWeights(o.hidden_size, width, false));
  up_proj = register_module("up_proj", LinearWeights(o.hidden_size, width, false));
  down_proj = register_module("down_proj", LinearWeights(width, o.hidden_size, false));
}

void AttentionImpl::FuseProjections() {
  torch::NoGradGuard no_grad;
  qkv_weight_ = torch::cat({q_proj->weight, k_proj->weight, v_proj->weight}, 0);
  if (q_proj->bias.defined()) {
    qkv_bias_ = torch::cat({q_proj->bias, k_proj->bias, v_proj->bias}, 0);
  }
}

void MlpImpl::FuseProjections() {
  torch::NoGradGuard no_grad;
  gate_up_weight_ = torch::cat({gate_proj->weight, up_proj->weight}, 0);
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) const {
  if (gate_up_weight_.defined()) {
    const auto gate_up = torch::linear(x, gate_up_weight_);
    const int64_t n = gate_up.size(-1) / 2;
    return down_proj->forward(torch::silu(gate_up.narrow(-1, 0, n)) * gate_up.narrow(-1, n, n));
  }
  return down_proj->forward(torch::silu(gate_proj->forward(x)) * up_proj->forward(x));
}

torch::Tensor MlpImpl::ForwardTraining(const torch::Tensor& x) const {
  const auto gate_up = torch::linear(x, torch::cat({gate_proj->weight, up_proj->weight}, 0));
  const int64_t n = gate_proj->weight.size(0);
  return down_proj->forward(torch::silu(gate_up.narrow(-1, 0, n)) * gate_up.narrow(-1, n, n));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelOptions& o, int64_t layer_index,
                                   int64_t tensor_parallel) {
  input_layernorm = register_module("input_layernorm", RMSNorm(o.hidden_size, o.rms_norm_eps));
  self_attn = register_module("self_attn", Attention(o, layer_index, tensor_parallel));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(o.hidden_size, o.rms_norm_eps));
  mlp = register_module("mlp", Mlp(o, tensor_parallel));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const Rotary& rotary,
                                        const torch::Tensor& bias, KvStore* store) const {
  const auto h = x + self_attn->forward(input_layernorm->forward(x), rotary, bias, store);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

torch::Tensor DecoderLayerImpl::ForwardDocuments(
    const torch::Tensor& x, const Rotary& rotary,
    const Documents& documents) const {
  const auto h = x + self_attn->ForwardDocuments(input_layernorm->forward(x), rotary, documents);
  return h + mlp->ForwardTraining(post_attention_layernorm->forward(h));
}

DecoderStackImpl::DecoderStackImpl(const ModelOptions& o, int64_t tensor_parallel) {
  embed_tokens = register_module("embed_tokens", EmbeddingTable(o.vocab_size, o.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.num_layers; ++i) {
    decoder.emplace_back(o, i, tensor_parallel);
    layers->push_back(decoder.back());
  }
  norm = register_module("norm", RMSNorm(o.hidden_size, o.rms_norm_eps));
}

TransformerImpl::TransformerImpl(const ModelOptions& options, int64_t tensor_parallel)
    : options_(options), tensor_parallel_(tensor_parallel) {
  TORCH_CHECK_VALUE(options.vocab_size > 0, "model.vocab_size must be > 0 to build the model");
  model_ = register_module("model", DecoderStack(options, tensor_parallel));
  if (!options.tie_embeddings) {
    lm_head_ =
        register_module("lm_head", LinearWeights(options.hidden_size, options.vocab_size, false));
  }
}

torch::Tensor TransformerImpl::Hidden(const torch::Tensor& tokens, const torch::Tensor& positions,
                                      const torch::Tensor& allowed, KvStore* store) const {
  TORCH_CHECK_VALUE(tokens.dim() == 2 && positions.sizes() == tokens.sizes(),
                    "transformer: tokens ", tokens.sizes(), " and positions ", positions.sizes(),
                    " must both be [B, L]");
  TORCH_CHECK_VALUE(
      allowed.dim() == 3 && allowed.size(0) == tokens.size(0) && allowed.size(1) == tokens.size(1),
      "transformer: allowed mask ", allowed.sizes(), " must be [B, Lq, Lk] for ", "tokens ",
      tokens.sizes());
  auto x = model_->embed_tokens->forward(tokens);
  const Rotary rotary = MakeRotary(positions, options_);
  const auto bias = AttentionBias(allowed, x.scalar_type());
  for (const auto& layer : model_->decoder) x = layer->forward(x, rotary, bias, store);
  return model_->norm->forward(x);
}

torch::Tensor TransformerImpl::Logits(const torch::Tensor& hidden) const {
  const auto& w = lm_head_.is_empty() ? model_->embed_tokens->weight : lm_head_->weight;
  return torch::linear(hidden, w);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens,
                                       const AttentionLayout& layout) const {
  const auto device = model_->embed_tokens->weight.device();
  if (!layout.doc_lengths.empty()) {
    // Packed rows (or tree segments): attention within each document, never the dense [L, L]
    // mask.
    TORCH_CHECK_VALUE(tokens.dim() == 2 && layout.positions.sizes() == tokens.sizes() &&
                          static_cast<int64_t>(layout.doc_lengths.size()) == tokens.size(0),
                      "transformer: tokens ", tokens.sizes(), ", positions ",
                      layout.positions.sizes(), " and ", layout.doc_lengths.size(),
                      " rows of documents must agree on [B, L]");
    auto x = model_->embed_tokens->forward(tokens.to(device));
    const Rotary rotary = MakeRotary(layout.positions.to(device), options_);
    // [B, 1, L, D] → [B, L, 1, D]: the packed path keeps activations token-major.
    const Rotary token_major{rotary.cos.transpose(1, 2), rotary.sin.transpose(1, 2)};
    const Documents documents{layout.doc_lengths,
                              layout.documents_masked ? layout.allowed : torch::Tensor()};
    for (size_t i = 0; i < model_->decoder.size(); ++i) {
      const DecoderLayer& layer = model_->decoder[i];
      x = layer_runner_
              ? layer_runner_(static_cast<int64_t>(i), layer, x, token_major, documents)
              : layer->ForwardDocuments(x, token_major, documents);
    }
    return Logits(model_->norm->forward(x));
  }
  TORCH_CHECK_VALUE(layout.allowed.dim() == 3 && layout.allowed.size(1) == layout.allowed.size(2),
                    "transformer: layout.allowed must be [B, L, L], got ", layout.allowed.sizes());
  return Logits(
      Hidden(tokens.to(device), layout.positions.to(device), layout.allowed.to(device), nullptr));
}

void TransformerImpl::FuseProjectionsForInference() {
  for (auto& layer : model_->decoder) {
    layer->self_attn->FuseProjections();
    layer->mlp->FuseProjections();
  }
}

int64_t TransformerImpl::NumParameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

absl::StatusOr<Transformer> MakeTransformer(const ModelOptions& options) {
  if (auto s = options.Validate(); !s.ok()) return s;
  if (options.vocab_size <= 0) {
    return absl::InvalidArgumentError(
        "model.vocab_size must be > 0 to build the model (set it, or take it from the tokenizer)");
  }
  return TorchCallOr("building the transformer", [&] {
    Transformer model(options);
    torch::NoGradGuard no_grad;
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(options.seed));
    for (auto& item : model->named_parameters()) {
      const std::string& name = item.key();
      if (name.ends_with("norm.weight")) continue;  // RMSNorm weights start at 1
      if (name.ends_with(".bias")) {
        item.value().zero_();
      } else {
        item.value().normal_(0.0, 0.02, gen);
      }
    }
    return model;
  });
}

}  // namespace flywheel
