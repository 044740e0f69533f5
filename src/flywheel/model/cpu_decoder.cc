#include "flywheel/model/cpu_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "flywheel/core/strings.h"
#include "flywheel/model/simd_kernels.h"

namespace flywheel {
namespace {

inline constexpr int64_t kTile = simd::kKeyTile;

void Linear(const float* x, int64_t m, const PackedLinear& w, float* y, bool accumulate) {
  simd::Linear(x, m, w.data.data(), w.n, w.k, y, accumulate);
}

torch::Tensor Contiguous(const torch::Tensor& t) { return t.detach().contiguous(); }

// Capacities are whole vectors of positions: attention reads keys 16 positions at a time.
int64_t RoundUp16(int64_t n) { return std::max<int64_t>(16, (n + 15) / 16 * 16); }

}  // namespace

PackedLinear PackedLinear::Pack(const torch::Tensor& weight) {
  const auto w = weight.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  TORCH_CHECK(w.dim() == 2, "PackedLinear: weight must be [out, in], got ", w.sizes());
  PackedLinear packed;
  packed.n = w.size(0);
  packed.k = w.size(1);
  const int64_t blocks = (packed.n + kPackWidth - 1) / kPackWidth;
  packed.data.assign(blocks * packed.k * kPackWidth, 0.0f);
  const float* src = w.data_ptr<float>();
  for (int64_t j = 0; j < packed.n; ++j) {
    float* dst = packed.data.data() + (j / kPackWidth) * packed.k * kPackWidth + j % kPackWidth;
    for (int64_t i = 0; i < packed.k; ++i) dst[i * kPackWidth] = src[j * packed.k + i];
  }
  return packed;
}

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
    layer.qkv = PackedLinear::Pack(
        torch::cat({get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                    get(p + "self_attn.v_proj.weight")},
                   0));
    if (o.attention_bias) {
      layer.qkv_bias =
          torch::cat({get(p + "self_attn.q_proj.bias"), get(p + "self_attn.k_proj.bias"),
                      get(p + "self_attn.v_proj.bias")},
                     0);
    }
    if (o.qk_norm) {
      layer.q_norm = get(p + "self_attn.q_norm.weight");
      layer.k_norm = get(p + "self_attn.k_norm.weight");
    }
    layer.o_proj = PackedLinear::Pack(get(p + "self_attn.o_proj.weight"));
    layer.post_norm = get(p + "post_attention_layernorm.weight");
    layer.gate_up = PackedLinear::Pack(
        torch::cat({get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")}, 0));
    layer.down = PackedLinear::Pack(get(p + "mlp.down_proj.weight"));
    w.layers.push_back(std::move(layer));
  }
  w.embed = get("model.embed_tokens.weight");
  w.final_norm = get("model.norm.weight");
  w.lm_head = PackedLinear::Pack(o.tie_embeddings ? w.embed : get("lm_head.weight"));
  return w;
}

CpuDecoder::CpuDecoder(const ModelOptions& options, int64_t initial_slots, int64_t initial_capacity)
    : options_(options),
      head_dim_(options.HeadDim()),
      slots_(std::max<int64_t>(initial_slots, 1)),
      capacity_(RoundUp16(initial_capacity)) {
  const size_t per_layer =
      static_cast<size_t>(slots_ * options_.num_kv_heads * head_dim_ * capacity_);
  keys_.assign(per_layer * options_.num_layers, 0.0f);
  values_.assign(per_layer * options_.num_layers, 0.0f);
  // The very cos/sin of the LibTorch path, so that positions rotate identically.
  c10::InferenceMode guard;
  const auto rotary =
      MakeRotary(torch::arange(options_.max_seq_len, torch::kInt64).unsqueeze(0), options_);
  const auto cos = rotary.cos.contiguous(), sin = rotary.sin.contiguous();  // [1, 1, L, D]
  rope_cos_.assign(cos.data_ptr<float>(), cos.data_ptr<float>() + cos.numel());
  rope_sin_.assign(sin.data_ptr<float>(), sin.data_ptr<float>() + sin.numel());
}

float* CpuDecoder::Keys(int64_t layer, int64_t slot, int64_t kv_head) {
  return keys_.data() +
         (((layer * slots_ + slot) * options_.num_kv_heads + kv_head) * capacity_) * head_dim_;
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
        // Keys are whole tiles of positions, so both are a prefix of the new head's block.
        std::memcpy(keys.data() + new_head * new_capacity * d,
                    keys_.data() + old_head * capacity_ * d, capacity_ * d * sizeof(float));
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
      const int64_t tiles = (length + kTile - 1) / kTile;
      std::memcpy(Keys(l, to, h), Keys(l, from, h), tiles * kTile * head_dim_ * sizeof(float));
      std::memcpy(Values(l, to, h), Values(l, from, h), length * head_dim_ * sizeof(float));
    }
  }
}

void CpuDecoder::Attend(int64_t layer, const DecodeRow& row, const DecodeRow* next_row,
                        const float* q, float* out) {
  const int64_t groups = options_.num_heads / options_.num_kv_heads;
  const int64_t length = row.position + 1;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim_)));
  for (int64_t h = 0; h < options_.num_kv_heads; ++h) {
    // What to fetch meanwhile: the next kv head of this row, else the first of the next row.
    const float* next_keys = Keys(layer, row.slot, h);
    const float* next_values = Values(layer, row.slot, h);
    if (h + 1 < options_.num_kv_heads) {
      next_keys = Keys(layer, row.slot, h + 1);
      next_values = Values(layer, row.slot, h + 1);
    } else if (next_row != nullptr) {
      next_keys = Keys(layer, next_row->slot, 0);
      next_values = Values(layer, next_row->slot, 0);
    }
    // Query head h * groups + g reads kv head h (the HF repeat_kv order).
    simd::AttendHead(q + h * groups * head_dim_, groups, head_dim_, Keys(layer, row.slot, h),
                     Values(layer, row.slot, h), next_keys, next_values, length, scale,
                     scores_.data(), out + h * groups * head_dim_);
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
  const float eps = static_cast<float>(options_.rms_norm_eps);
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
  if (options_.qk_norm) grow(head_norm_, options_.num_heads * d);

  const float* embed = w.embed.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(x_.data() + r * hidden, embed + rows[r].token * hidden, hidden * sizeof(float));
  }
  for (int64_t l = 0; l < options_.num_layers; ++l) {
    const auto& layer = w.layers[l];
    simd::RmsNormRows(x_.data(), n, hidden, layer.input_norm.data_ptr<float>(), eps, h_.data());
    Linear(h_.data(), n, layer.qkv, qkv_.data(), false);
    if (layer.qkv_bias.defined()) {
      const float* bias = layer.qkv_bias.data_ptr<float>();
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t i = 0; i < qkv_width; ++i) qkv_[r * qkv_width + i] += bias[i];
      }
    }
    // (Per-head q/k norms,) RoPE on q and k, then every row's k/v into its slot before any row
    // attends.
    for (int64_t r = 0; r < n; ++r) {
      const DecodeRow& row = rows[r];
      float* q = qkv_.data() + r * qkv_width;
      float* k = q + q_width;
      const float* v = k + kv_width;
      if (layer.q_norm.defined()) {
        // Each head is a row of head_dim; the kernel writes out of place (restrict pointers).
        simd::RmsNormRows(q, options_.num_heads, d, layer.q_norm.data_ptr<float>(), eps,
                          head_norm_.data());
        std::memcpy(q, head_norm_.data(), q_width * sizeof(float));
        simd::RmsNormRows(k, options_.num_kv_heads, d, layer.k_norm.data_ptr<float>(), eps,
                          head_norm_.data());
        std::memcpy(k, head_norm_.data(), kv_width * sizeof(float));
      }
      const float* cos = rope_cos_.data() + row.position * d;
      const float* sin = rope_sin_.data() + row.position * d;
      simd::Rope(q, options_.num_heads, d, cos, sin);
      simd::Rope(k, options_.num_kv_heads, d, cos, sin);
      for (int64_t h = 0; h < options_.num_kv_heads; ++h) {
        float* keys =
            Keys(l, row.slot, h) + (row.position / kTile) * kTile * d + row.position % kTile;
        for (int64_t i = 0; i < d; ++i) keys[i * kTile] = k[h * d + i];
        std::memcpy(Values(l, row.slot, h) + row.position * d, v + h * d, d * sizeof(float));
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      Attend(l, rows[r], r + 1 < n ? &rows[r + 1] : nullptr, qkv_.data() + r * qkv_width,
             att_.data() + r * q_width);
    }
    Linear(att_.data(), n, layer.o_proj, x_.data(), /*accumulate=*/true);
    simd::RmsNormRows(x_.data(), n, hidden, layer.post_norm.data_ptr<float>(), eps, h_.data());
    Linear(h_.data(), n, layer.gate_up, gate_up_.data(), false);
    simd::SiluMul(gate_up_.data(), n, inter, act_.data());
    Linear(act_.data(), n, layer.down, x_.data(), /*accumulate=*/true);
  }
  const int64_t m = static_cast<int64_t>(logit_rows.size());
  grow(final_, m * hidden);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = logit_rows[i];
    TORCH_CHECK(r >= 0 && r < n, "CPU decoder: logit row ", r, " out of range");
    simd::RmsNormRows(x_.data() + r * hidden, 1, hidden, w.final_norm.data_ptr<float>(), eps,
                      final_.data() + i * hidden);
  }
  Linear(final_.data(), m, w.lm_head, logits, false);
}

}  // namespace flywheel
