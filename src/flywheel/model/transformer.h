// The policy: a decoder-only transformer of the Llama family (RMSNorm, rotary position
// embedding with optional Llama 3 frequency scaling, multi-head attention with optional
// grouped-query attention, SwiGLU MLP, tied or untied LM head), covering Llama, Qwen2 (q/k/v
// bias) and Qwen3 (per-head q/k RMSNorm, head_dim independent of hidden_size). Parameter names
// follow Hugging Face Llama/Qwen2/Qwen3 so that real checkpoints load by name (hf_weights.h):
//
//   model.embed_tokens.weight                      [V, hidden]
//   model.layers.N.input_layernorm.weight          [hidden]
//   model.layers.N.self_attn.{q,k,v}_proj.weight   [heads·head_dim or kv_heads·head_dim, hidden]
//                                                  (+ .bias with attention_bias)
//   model.layers.N.self_attn.o_proj.weight         [hidden, heads·head_dim]
//   model.layers.N.self_attn.{q,k}_norm.weight     [head_dim] (with qk_norm)
//   model.layers.N.post_attention_layernorm.weight [hidden]
//   model.layers.N.mlp.{gate,up,down}_proj.weight
//   model.norm.weight                              [hidden]
//   lm_head.weight                                 [V, hidden] (absent when tied)
//
// Every attention call takes an AttentionLayout-style description (positions + allowed mask)
// and optionally a KvStore; training, packed documents, trees and cached decoding share one path.
// The inference methods are const: a published snapshot's weights are never modified, so many
// actor threads may run the same snapshot at once.
//
// Tensor-parallel slice (`tensor_parallel` = T > 1 in the constructors below): the model one TP
// rank holds (learner/tensor_parallel.h). Each layer has num_heads/T query heads and
// num_kv_heads/T kv heads of the full head_dim (q/k/v rows), the matching o_proj columns, and
// intermediate_size/T gate/up rows and down_proj columns; embeddings, norms (the per-head q/k
// norms too) and the LM head are whole. On its own such a model computes only its partial sums
// of o_proj and down_proj: it is meant to run the packed training path under the TP layer
// runner, which adds the all-reduces.
#ifndef FLYWHEEL_MODEL_TRANSFORMER_H_
#define FLYWHEEL_MODEL_TRANSFORMER_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "flywheel/model/attention_layout.h"
#include "flywheel/model/document_attention.h"
#include "flywheel/model/kv_store.h"
#include "flywheel/model/model_options.h"

namespace flywheel {

// y = x W^T (+ b), weight stored as in torch::nn::Linear ("weight", "bias").
class LinearWeightsImpl : public torch::nn::Module {
 public:
  LinearWeightsImpl(int64_t in, int64_t out, bool bias);
  torch::Tensor forward(const torch::Tensor& x) const;
  torch::Tensor weight;
  torch::Tensor bias;  // undefined without bias
};
TORCH_MODULE(LinearWeights);

// Root-mean-square norm (Zhang & Sennrich 2019) over the last dimension:
// x / sqrt(mean(x^2) + eps) * weight, computed in float32 whatever x's dtype (as HF Llama).
torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x) const;
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

// cos/sin of the rotary embedding (Su et al. 2021, "rotate half" convention as in HF Llama) for
// given positions, shaped [B, 1, L, head_dim] to broadcast over heads.
struct Rotary {
  torch::Tensor cos;
  torch::Tensor sin;
  torch::Tensor Apply(const torch::Tensor& x) const;  // x [B, heads, L, head_dim]
};
// inv_freq [head_dim / 2]: e.g. RopeInverseFrequencies(options) (rope_scaling.h).
Rotary MakeRotary(const torch::Tensor& positions, const torch::Tensor& inv_freq);
// Unscaled frequencies theta^(-2i / head_dim).
Rotary MakeRotary(const torch::Tensor& positions, int64_t head_dim, double theta);
// The model's frequencies (head_dim, rope_theta, rope_scaling), on positions' device.
Rotary MakeRotary(const torch::Tensor& positions, const ModelOptions& options);

class AttentionImpl : public torch::nn::Module {
 public:
  // tensor_parallel = T: this rank's 1/T of the heads (see the top of the file).
  AttentionImpl(const ModelOptions& options, int64_t layer_index, int64_t tensor_parallel = 1);
  // x [B, Lq, hidden]; bias [B, 1, 1, Lq, Lk] additive mask (0 or -inf).
  torch::Tensor forward(const torch::Tensor& x, const Rotary& rotary, const torch::Tensor& bias,
                        KvStore* store) const;

  // Concatenates q/k/v weights for one GEMM; only for frozen weights (see
  // TransformerImpl::FuseProjectionsForInference).
  void FuseProjections();

  // Maps a replicated weight that acts on this module's heads only (the q/k norms) before use.
  // A tensor-parallel rank sees 1/T of the heads, so the gradient of such a weight is a partial
  // sum: the TP layer runner passes Megatron's f (TensorParallelCopy) to sum it over the ranks.
  using HeadWeightMap = std::function<torch::Tensor(const torch::Tensor&)>;

  // Training forward of packed rows: x [B, L, hidden], `rotary` token-major ([B, L, 1, D]),
  // attention within each document (DocumentAttention). q/k/v come from one
  // GEMM against the parameters concatenated on the fly (gradients reach each parameter).
  torch::Tensor ForwardDocuments(const torch::Tensor& x, const Rotary& rotary,
                                 const Documents& documents,
                                 const HeadWeightMap& head_weight_map = nullptr) const;

  LinearWeights q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // [head_dim] per-head norms; null without qk_norm

 private:
  torch::Tensor qkv_weight_;  // not a parameter: a frozen copy, undefined unless fused
  torch::Tensor qkv_bias_;
  int64_t layer_index_;
  int64_t num_heads_;
  int64_t num_kv_heads_;
  int64_t head_dim_;
};
TORCH_MODULE(Attention);

// SwiGLU (Shazeer 2020): down(silu(gate(x)) * up(x)).
class MlpImpl : public torch::nn::Module {
 public:
  // tensor_parallel = T: this rank's 1/T of the intermediate width (see the top of the file).
  explicit MlpImpl(const ModelOptions& options, int64_t tensor_parallel = 1);
  torch::Tensor forward(const torch::Tensor& x) const;
  void FuseProjections();  // gate and up in one GEMM; frozen weights only
  // Training: gate and up in one GEMM against the parameters concatenated on the fly.
  torch::Tensor ForwardTraining(const torch::Tensor& x) const;
  LinearWeights gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  torch::Tensor gate_up_weight_;
};
TORCH_MODULE(Mlp);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelOptions& options, int64_t layer_index, int64_t tensor_parallel = 1);
  torch::Tensor forward(const torch::Tensor& x, const Rotary& rotary, const torch::Tensor& bias,
                        KvStore* store) const;
  torch::Tensor ForwardDocuments(const torch::Tensor& x, const Rotary& rotary,
                                 const Documents& documents) const;
  RMSNorm input_layernorm{nullptr};
  Attention self_attn{nullptr};
  RMSNorm post_attention_layernorm{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(DecoderLayer);

// The "model." prefix of the HF naming: embeddings, layers, final norm.
class EmbeddingTableImpl : public torch::nn::Module {
 public:
  EmbeddingTableImpl(int64_t vocab_size, int64_t dim);
  torch::Tensor forward(const torch::Tensor& tokens) const;
  torch::Tensor weight;
};
TORCH_MODULE(EmbeddingTable);

class DecoderStackImpl : public torch::nn::Module {
 public:
  explicit DecoderStackImpl(const ModelOptions& options, int64_t tensor_parallel = 1);
  EmbeddingTable embed_tokens{nullptr};
  torch::nn::ModuleList layers;       // registered as "layers" (names layers.N.…)
  std::vector<DecoderLayer> decoder;  // the same layers, typed
  RMSNorm norm{nullptr};
};
TORCH_MODULE(DecoderStack);

class TransformerImpl : public torch::nn::Module {
 public:
  // options.vocab_size must be > 0 here (the job resolves 0 from the tokenizer first).
  // tensor_parallel = T > 1 builds one TP rank's slice (see the top of the file); T must divide
  // num_heads, num_kv_heads and intermediate_size.
  explicit TransformerImpl(const ModelOptions& options, int64_t tensor_parallel = 1);

  // Training / scoring: logits [B, L, V] for tokens [B, L] int64 under `layout`. A packed
  // layout (doc_lengths set: packed documents, or tree segments) takes the document-wise attention
  // path, others the dense mask.
  torch::Tensor forward(const torch::Tensor& tokens, const AttentionLayout& layout) const;

  // Final-norm hidden states [B, Lq, hidden] of `tokens` [B, Lq] at `positions` [B, Lq], where
  // query i of row b may attend to key j iff allowed[b][i][j] ([B, Lq, Lk]). Without a store
  // Lk = Lq and the keys are the input's own; with one, keys come from the store.
  torch::Tensor Hidden(const torch::Tensor& tokens, const torch::Tensor& positions,
                       const torch::Tensor& allowed, KvStore* store) const;
  // LM head: logits [..., V] of hidden states [..., hidden].
  torch::Tensor Logits(const torch::Tensor& hidden) const;

  // Concatenates q/k/v and gate/up weights into frozen copies so that decoding runs 2 GEMMs
  // fewer per projection group. Only for weights that never change afterwards (snapshots):
  // training through the fused copies would not update the parameters.
  void FuseProjectionsForInference();

  // The full model's shape (also for a tensor-parallel slice).
  const ModelOptions& options() const { return options_; }
  int64_t tensor_parallel() const { return tensor_parallel_; }
  int64_t NumParameters() const;

  // Runs decoder layer `index` of the packed training path (forward with doc_lengths): returns
  // layer->ForwardDocuments(x, rotary, documents) or what replaces it. The one hook a wrapper
  // needs to put code around each layer's compute, e.g. fully sharded training
  // (learner/fully_sharded.h) gathering a layer's parameters just before it runs and freeing
  // them after, or tensor parallel training (learner/tensor_parallel.h) adding the all-reduces
  // of the row-parallel outputs. Unset (the default) = the layer runs as is. Not used by the
  // inference paths.
  using LayerRunner = std::function<torch::Tensor(
      int64_t index, const DecoderLayer& layer, const torch::Tensor& x, const Rotary& rotary,
      const Documents& documents)>;
  void SetLayerRunner(LayerRunner runner) { layer_runner_ = std::move(runner); }

 private:
  ModelOptions options_;
  int64_t tensor_parallel_ = 1;  // 1 = the whole model
  DecoderStack model_{nullptr};
  LinearWeights lm_head_{nullptr};  // null when tied to the embedding
  LayerRunner layer_runner_;        // unset: layers run as they are
};
TORCH_MODULE(Transformer);

// Builds a model with weights initialised as HF Llama does (normal(0, 0.02), norms = 1) from
// options.seed with a private generator (no global RNG state is touched). Errors name the
// invalid option.
absl::StatusOr<Transformer> MakeTransformer(const ModelOptions& options);

// Additive attention bias [B, 1, 1, Lq, Lk] (0 where allowed, -inf elsewhere) of a bool mask.
torch::Tensor AttentionBias(const torch::Tensor& allowed, torch::ScalarType dtype);

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_TRANSFORMER_H_
