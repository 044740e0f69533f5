#include "flywheel/model/cpu_decoder.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "flywheel/core/strings.h"
#include "flywheel/model/vector_math.h"

namespace flywheel {
namespace {

// Fortran BLAS sgemm, as exported by OpenBLAS, MKL or the reference BLAS that LibTorch loads.
using SgemmFn = void (*)(const char* transa, const char* transb, const int* m, const int* n,
                         const int* k, const float* alpha, const float* a, const int* lda,
                         const float* b, const int* ldb, const float* beta, float* c,
                         const int* ldc);

SgemmFn FindSgemm() {
  static const SgemmFn fn = reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "sgemm_"));
  return fn;
}

// y [m, n] (+)= x [m, k] · wᵀ, w [n, k] row-major (a torch Linear weight). With `accumulate`
// the product is added onto y (a residual connection without a separate add).
void Linear(const float* x, int64_t m, int64_t k, const torch::Tensor& w, float* y,
            bool accumulate) {
  const int64_t n = w.size(0);
  if (m == 0) return;
  if (SgemmFn sgemm = FindSgemm()) {
    // Row-major y = x·wᵀ is column-major yᵀ = w'ᵀ·x' with w' = w viewed column-major [k, n].
    const int mi = static_cast<int>(n), ni = static_cast<int>(m), ki = static_cast<int>(k);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    sgemm("T", "N", &mi, &ni, &ki, &alpha, w.data_ptr<float>(), &ki, x, &ki, &beta, y, &mi);
    return;
  }
  const auto xt = torch::from_blob(const_cast<float*>(x), {m, k});
  auto yt = torch::from_blob(y, {m, n});
  if (accumulate) {
    yt.addmm_(xt, w.t());
  } else {
    torch::mm_out(yt, xt, w.t());
  }
}

// out = x / sqrt(mean(x²) + eps) * weight, per row of `dim` floats (HF Llama RMSNorm).
FLYWHEEL_VECTOR_CLONES
void RmsNormRows(const float* __restrict x, int64_t rows, int64_t dim,
                 const float* __restrict weight, double eps, float* __restrict out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    const float mean = vmath::Dot(xr, xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(mean + static_cast<float>(eps));
    for (int64_t i = 0; i < dim; ++i) o[i] = weight[i] * (xr[i] * inv);
  }
}

// SwiGLU: out[r, i] = silu(gate[r, i]) * up[r, i], gate_up [rows, 2 * width].
FLYWHEEL_VECTOR_CLONES
void SiluMul(const float* __restrict gate_up, int64_t rows, int64_t width, float* __restrict out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * width;
    const float* u = g + width;
    float* o = out + r * width;
    for (int64_t i = 0; i < width; ++i) o[i] = g[i] / (1.0f + vmath::Exp(-g[i])) * u[i];
  }
}

// Rotary embedding in place on `heads` heads of `dim` floats ("rotate half", HF Llama):
// x·cos + rotate_half(x)·sin.
FLYWHEEL_VECTOR_CLONES
void Rope(float* __restrict x, int64_t heads, int64_t dim, const float* __restrict cos,
          const float* __restrict sin) {
  const int64_t half = dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i + half] + a * sin[i + half];
    }
  }
}

// Attention of `groups` query heads (q [groups, D]) that share one kv head, over positions
// [0, length) of keys kt [D, capacity] and values v [capacity, D]. out [groups, D].
template <int kD>
FLYWHEEL_INLINE void AttendHeadT(const float* __restrict q, int64_t groups, int64_t dim_rt,
                                 const float* __restrict kt, const float* __restrict v,
                                 int64_t capacity, int64_t length, float scale,
                                 float* __restrict scores, float* __restrict out) {
  const int64_t dim = kD > 0 ? kD : dim_rt;
  for (int64_t g = 0; g < groups; ++g) {
    float* s = scores + g * length;
    const float* qg = q + g * dim;
    // s = q·kᵀ, streaming over positions: one pass over the keys per dimension.
    {
      const float q0 = qg[0];
      for (int64_t j = 0; j < length; ++j) s[j] = q0 * kt[j];
    }
    for (int64_t d = 1; d < dim; ++d) {
      const float qd = qg[d];
      const float* k = kt + d * capacity;
      for (int64_t j = 0; j < length; ++j) s[j] += qd * k[j];
    }
    for (int64_t j = 0; j < length; ++j) s[j] *= scale;
    const float m = vmath::Max(s, length);
    const float total = vmath::ExpShifted(s, m, s, length);
    const float inv = 1.0f / total;
    float acc[kD > 0 ? kD : 256] = {};
    if (kD > 0 || dim <= 256) {
      for (int64_t j = 0; j < length; ++j) {
        const float p = s[j];
        const float* vj = v + j * dim;
        for (int64_t d = 0; d < dim; ++d) acc[d] += p * vj[d];
      }
      for (int64_t d = 0; d < dim; ++d) out[g * dim + d] = acc[d] * inv;
    } else {
      float* o = out + g * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] = 0;
      for (int64_t j = 0; j < length; ++j) {
        const float p = s[j];
        const float* vj = v + j * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] += p * vj[d];
      }
      for (int64_t d = 0; d < dim; ++d) o[d] *= inv;
    }
  }
}

FLYWHEEL_VECTOR_CLONES
void AttendHead(const float* q, int64_t groups, int64_t dim, const float* kt, const float* v,
                int64_t capacity, int64_t length, float scale, float* scores, float* out) {
  switch (dim) {
    case 32:
      return AttendHeadT<32>(q, groups, dim, kt, v, capacity, length, scale, scores, out);
    case 64:
      return AttendHeadT<64>(q, groups, dim, kt, v, capacity, length, scale, scores, out);
    case 128:
      return AttendHeadT<128>(q, groups, dim, kt, v, capacity, length, scale, scores, out);
    default:
      return AttendHeadT<0>(q, groups, dim, kt, v, capacity, length, scale, scores, out);
  }
}

torch::Tensor Contiguous(const torch::Tensor& t) { return t.detach().contiguous(); }

}  // namespace

bool CpuDecoderWeights::Supports(const Transformer& model) {
  for (const auto& p : model->parameters()) {
    if (!p.device().is_cpu() || p.scalar_type() != torch::kFloat32) return false;
  }
  return true;
}

CpuDecoderWeights CpuDecoderWeights::From(const Transformer& model) {
  const auto params = model->named_parameters();
  auto get = [&](const std::string& name) {
    const torch::Tensor* t = params.find(name);
    TORCH_CHECK(t != nullptr, "CPU decoder: parameter ", name, " missing");
    return Contiguous(*t);
  };
  const auto& o = model->options();
  CpuDecoderWeights w;
  for (int64_t l = 0; l < o.num_layers; ++l) {
    const std::string p = StrCat("model.layers.", l, ".");
    Layer layer;
    layer.input_norm = get(p + "input_layernorm.weight");
    layer.qkv = torch::cat({get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                            get(p + "self_attn.v_proj.weight")},
                           0);
    if (o.attention_bias) {
      layer.qkv_bias = torch::cat({get(p + "self_attn.q_proj.bias"),
                                   get(p + "self_attn.k_proj.bias"),
                                   get(p + "self_attn.v_proj.bias")},
                                  0);
    }
    layer.o_proj = get(p + "self_attn.o_proj.weight");
    layer.post_norm = get(p + "post_attention_layernorm.weight");
    layer.gate_up = torch::cat({get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")}, 0);
    layer.down = get(p + "mlp.down_proj.weight");
    w.layers.push_back(std::move(layer));
  }
  w.embed = get("model.embed_tokens.weight");
  w.final_norm = get("model.norm.weight");
  w.lm_head = o.tie_embeddings ? w.embed : get("lm_head.weight");
  return w;
}

CpuDecoder::CpuDecoder(const ModelOptions& options, int64_t initial_slots,
                       int64_t initial_capacity)
    : options_(options),
      head_dim_(options.head_dim()),
      slots_(std::max<int64_t>(initial_slots, 1)),
      capacity_(std::max<int64_t>(initial_capacity, 1)) {
  const size_t per_layer = static_cast<size_t>(slots_ * options_.num_kv_heads * head_dim_ *
                                               capacity_);
  keys_.assign(per_layer * options_.num_layers, 0.0f);
  values_.assign(per_layer * options_.num_layers, 0.0f);
  // The very cos/sin of the LibTorch path, so that positions rotate identically.
  c10::InferenceMode guard;
  const auto rotary =
      MakeRotary(torch::arange(options_.max_seq_len, torch::kInt64).unsqueeze(0), head_dim_,
                 options_.rope_theta);
  const auto cos = rotary.cos.contiguous(), sin = rotary.sin.contiguous();  // [1, 1, L, D]
  rope_cos_.assign(cos.data_ptr<float>(), cos.data_ptr<float>() + cos.numel());
  rope_sin_.assign(sin.data_ptr<float>(), sin.data_ptr<float>() + sin.numel());
}

float* CpuDecoder::Keys(int64_t layer, int64_t slot, int64_t kv_head) {
  return keys_.data() +
         (((layer * slots_ + slot) * options_.num_kv_heads + kv_head) * head_dim_) * capacity_;
}

float* CpuDecoder::Values(int64_t layer, int64_t slot, int64_t kv_head) {
  return values_.data() +
         (((layer * slots_ + slot) * options_.num_kv_heads + kv_head) * capacity_) * head_dim_;
}

void CpuDecoder::Reserve(int64_t slots, int64_t length) {
  if (slots <= slots_ && length <= capacity_) return;
  int64_t new_slots = slots_;
  while (new_slots < slots) new_slots *= 2;
  int64_t new_capacity = capacity_;
  while (new_capacity < length) new_capacity *= 2;
  const int64_t heads = options_.num_kv_heads, d = head_dim_;
  const size_t size =
      static_cast<size_t>(options_.num_layers * new_slots * heads * d * new_capacity);
  std::vector<float> keys(size, 0.0f), values(size, 0.0f);
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    for (int64_t s = 0; s < slots_; ++s) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t old_head = (l * slots_ + s) * heads + h;
        const int64_t new_head = (l * new_slots + s) * heads + h;
        for (int64_t i = 0; i < d; ++i) {  // keys: one row of `capacity` per dimension
          std::memcpy(keys.data() + (new_head * d + i) * new_capacity,
                      keys_.data() + (old_head * d + i) * capacity_, capacity_ * sizeof(float));
        }
        std::memcpy(values.data() + new_head * new_capacity * d,
                    values_.data() + old_head * capacity_ * d, capacity_ * d * sizeof(float));
      }
    }
  }
  keys_ = std::move(keys);
  values_ = std::move(values);
  slots_ = new_slots;
  capacity_ = new_capacity;
}

void CpuDecoder::MoveSlot(int64_t from, int64_t to, int64_t length) {
  if (from == to || length == 0) return;
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    for (int64_t h = 0; h < options_.num_kv_heads; ++h) {
      for (int64_t i = 0; i < head_dim_; ++i) {
        std::memcpy(Keys(l, to, h) + i * capacity_, Keys(l, from, h) + i * capacity_,
                    length * sizeof(float));
      }
      std::memcpy(Values(l, to, h), Values(l, from, h), length * head_dim_ * sizeof(float));
    }
  }
}

void CpuDecoder::Attend(int64_t layer, const DecodeRow& row, const float* q, float* out) {
  const int64_t groups = options_.num_heads / options_.num_kv_heads;
  const int64_t length = row.position + 1;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim_)));
  for (int64_t h = 0; h < options_.num_kv_heads; ++h) {
    // Query head h * groups + g reads kv head h (the HF repeat_kv order).
    AttendHead(q + h * groups * head_dim_, groups, head_dim_, Keys(layer, row.slot, h),
               Values(layer, row.slot, h), capacity_, length, scale, scores_.data(),
               out + h * groups * head_dim_);
  }
}

void CpuDecoder::Forward(const CpuDecoderWeights& w, std::span<const DecodeRow> rows,
                         std::span<const int64_t> logit_rows, float* logits) {
  const int64_t n = static_cast<int64_t>(rows.size());
  const int64_t hidden = options_.hidden_size, d = head_dim_;
  const int64_t q_width = options_.num_heads * d, kv_width = options_.num_kv_heads * d;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const int64_t inter = options_.intermediate_size;
  const int64_t groups = options_.num_heads / options_.num_kv_heads;
  for (const DecodeRow& r : rows) {
    TORCH_CHECK(r.slot >= 0 && r.slot < slots_ && r.position >= 0 && r.position < capacity_ &&
                    r.position < options_.max_seq_len,
                "CPU decoder: row at slot ", r.slot, " position ", r.position,
                " outside the cache (", slots_, " slots, capacity ", capacity_, ")");
    TORCH_CHECK(r.token >= 0 && r.token < options_.vocab_size, "CPU decoder: token ", r.token,
                " outside the vocabulary");
  }
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(size);
  };
  grow(x_, n * hidden);
  grow(h_, n * hidden);
  grow(qkv_, n * qkv_width);
  grow(att_, n * q_width);
  grow(gate_up_, n * 2 * inter);
  grow(act_, n * inter);
  grow(scores_, groups * capacity_);

  const float* embed = w.embed.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(x_.data() + r * hidden, embed + rows[r].token * hidden, hidden * sizeof(float));
  }
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    const auto& layer = w.layers[l];
    RmsNormRows(x_.data(), n, hidden, layer.input_norm.data_ptr<float>(), options_.rms_norm_eps,
                h_.data());
    Linear(h_.data(), n, hidden, layer.qkv, qkv_.data(), false);
    if (layer.qkv_bias.defined()) {
      const float* bias = layer.qkv_bias.data_ptr<float>();
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t i = 0; i < qkv_width; ++i) qkv_[r * qkv_width + i] += bias[i];
      }
    }
    // RoPE on q and k, then every row's k/v into its slot before any row attends.
    for (int64_t r = 0; r < n; ++r) {
      const DecodeRow& row = rows[r];
      float* q = qkv_.data() + r * qkv_width;
      float* k = q + q_width;
      const float* v = k + kv_width;
      const float* cos = rope_cos_.data() + row.position * d;
      const float* sin = rope_sin_.data() + row.position * d;
      Rope(q, options_.num_heads, d, cos, sin);
      Rope(k, options_.num_kv_heads, d, cos, sin);
      for (int64_t h = 0; h < options_.num_kv_heads; ++h) {
        float* keys = Keys(l, row.slot, h) + row.position;
        for (int64_t i = 0; i < d; ++i) keys[i * capacity_] = k[h * d + i];
        std::memcpy(Values(l, row.slot, h) + row.position * d, v + h * d, d * sizeof(float));
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      Attend(l, rows[r], qkv_.data() + r * qkv_width, att_.data() + r * q_width);
    }
    Linear(att_.data(), n, q_width, layer.o_proj, x_.data(), /*accumulate=*/true);
    RmsNormRows(x_.data(), n, hidden, layer.post_norm.data_ptr<float>(), options_.rms_norm_eps,
                h_.data());
    Linear(h_.data(), n, hidden, layer.gate_up, gate_up_.data(), false);
    SiluMul(gate_up_.data(), n, inter, act_.data());
    Linear(act_.data(), n, inter, layer.down, x_.data(), /*accumulate=*/true);
  }
  const int64_t m = static_cast<int64_t>(logit_rows.size());
  grow(final_, m * hidden);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = logit_rows[i];
    TORCH_CHECK(r >= 0 && r < n, "CPU decoder: logit row ", r, " out of range");
    RmsNormRows(x_.data() + r * hidden, 1, hidden, w.final_norm.data_ptr<float>(),
                options_.rms_norm_eps, final_.data() + i * hidden);
  }
  Linear(final_.data(), m, hidden, w.lm_head, logits, false);
}

}  // namespace flywheel
