#include "flywheel/model/cpu_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "flywheel/core/strings.h"
#include "flywheel/model/vector_math.h"

namespace flywheel {
namespace {

// y [m, n] (+)= x [m, k] · wᵀ over weights packed in column blocks of kPackWidth (see
// PackedLinear): kR rows × kPackWidth outputs per tile, kR·4 independent vector accumulators,
// one pass over k with every weight vector loaded once per tile and every x value broadcast.
// The block of weights (k × kPackWidth floats) stays in L1/L2 while all row tiles pass over it.
template <int kR>
FLYWHEEL_INLINE void LinearTile(const float* __restrict x, int64_t k, const float* __restrict block,
                                float* __restrict y, int64_t ldy, int64_t width, bool accumulate) {
  using vmath::V16;
  constexpr int kVecs = PackedLinear::kPackWidth / 16;
  V16 acc[kR][kVecs] = {};
  for (int64_t i = 0; i < k; ++i) {
    V16 w[kVecs];
    for (int c = 0; c < kVecs; ++c)
      w[c] = vmath::Load(block + i * PackedLinear::kPackWidth + 16 * c);
    for (int r = 0; r < kR; ++r) {
      const V16 xr = vmath::Broadcast(x[r * k + i]);
      for (int c = 0; c < kVecs; ++c) acc[r][c] += xr * w[c];
    }
  }
  for (int r = 0; r < kR; ++r) {
    float* yr = y + r * ldy;
    if (width == PackedLinear::kPackWidth) {
      for (int c = 0; c < kVecs; ++c) {
        const V16 prior = accumulate ? vmath::Load(yr + 16 * c) : V16{};
        vmath::Store(yr + 16 * c, prior + acc[r][c]);
      }
    } else {  // the last, partial block of columns
      float tmp[PackedLinear::kPackWidth];
      for (int c = 0; c < kVecs; ++c) vmath::Store(tmp + 16 * c, acc[r][c]);
      for (int64_t j = 0; j < width; ++j) yr[j] = (accumulate ? yr[j] : 0.0f) + tmp[j];
    }
  }
}

FLYWHEEL_VECTOR_CLONES
void Linear(const float* x, int64_t m, const PackedLinear& w, float* y, bool accumulate) {
  // Four rows per tile need 16 vector accumulators: one AVX-512 register file's worth; with
  // narrower vectors two rows keep them in registers.
#if defined(__x86_64__)
  static const bool wide = __builtin_cpu_supports("avx512f");
#else
  static const bool wide = false;
#endif
  const int64_t k = w.k, n = w.n;
  for (int64_t b = 0; b * PackedLinear::kPackWidth < n; ++b) {
    const float* block = w.data.data() + b * k * PackedLinear::kPackWidth;
    const int64_t col = b * PackedLinear::kPackWidth;
    const int64_t width = std::min<int64_t>(PackedLinear::kPackWidth, n - col);
    int64_t r = 0;
    if (wide) {
      for (; r + 4 <= m; r += 4)
        LinearTile<4>(x + r * k, k, block, y + r * n + col, n, width, accumulate);
    }
    for (; r + 2 <= m; r += 2)
      LinearTile<2>(x + r * k, k, block, y + r * n + col, n, width, accumulate);
    for (; r < m; ++r) LinearTile<1>(x + r * k, k, block, y + r * n + col, n, width, accumulate);
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
    int64_t i = 0;
    for (; i + vmath::kLanes <= width; i += vmath::kLanes) {
      const vmath::V16 x = vmath::Load(g + i);
      vmath::Store(o + i, x / (1.0f + vmath::Exp(-x)) * vmath::Load(u + i));
    }
    for (; i < width; ++i) o[i] = g[i] / (1.0f + vmath::Exp(-g[i])) * u[i];
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

// Keys are stored in tiles of 16 positions, [capacity / 16][D][16]: the scores of a tile are D
// vector FMAs over 16·D contiguous floats, so q·kᵀ streams through memory in order.
inline constexpr int64_t kTile = 16;
// The cache is far larger than the L2, and every step reads all of it once. While one (row,
// kv head) is attended, the loops fetch the next one's keys and values at the same offsets: a
// whole head's work ahead, spread evenly over the loops. The fetches go to L2 (prefetcht1):
// measured faster than to L1, which they would crowd while the current head streams through.

// Attention of `groups` query heads (q [groups, D]) that share one kv head, over positions
// [0, length) of the tiled keys and the values v [capacity, D]; out [groups, D]. `scores` holds
// groups × capacity floats. Generic version: any D.
FLYWHEEL_INLINE void AttendScalar(const float* __restrict q, int64_t groups, int64_t dim,
                                  const float* __restrict keys, const float* __restrict v,
                                  int64_t length, float scale, float* __restrict scores,
                                  float* __restrict out) {
  for (int64_t g = 0; g < groups; ++g) {
    float* s = scores + g * length;
    const float* qg = q + g * dim;
    for (int64_t j = 0; j < length; ++j) {
      const float* k = keys + (j / kTile) * kTile * dim + j % kTile;
      float dot = 0;
      for (int64_t d = 0; d < dim; ++d) dot += qg[d] * k[d * kTile];
      s[j] = dot * scale;
    }
    const float m = vmath::Max(s, length);
    const float inv = 1.0f / vmath::ExpShifted(s, m, s, length);
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

// Scores of kG query heads (q [kG, D]) for kB consecutive key tiles: kG·kB independent FMA
// chains over d, no stores in the inner loop. scores: head g's row starts at g·stride.
template <int kVecs, int kG, int kB>
FLYWHEEL_INLINE void ScoreTiles(const float* __restrict q, const float* __restrict keys,
                                const float* next_keys, float scale, float* __restrict scores,
                                int64_t stride) {
  using vmath::V16;
  constexpr int kDim = 16 * kVecs;
  constexpr int64_t kTileSize = kTile * kDim;
  V16 acc[kG][kB] = {};
  // The next head's kB tiles at this offset: kB·D cache lines, spread over the D iterations.
  const char* next = reinterpret_cast<const char*>(next_keys);
  for (int d = 0; d < kDim; ++d) {
    for (int b = 0; b < kB; ++b) __builtin_prefetch(next + (d * kB + b) * 64, 0, 2);
    V16 k[kB];
    for (int b = 0; b < kB; ++b) k[b] = vmath::Load(keys + b * kTileSize + d * kTile);
    for (int g = 0; g < kG; ++g) {
      const V16 qd = vmath::Broadcast(q[g * kDim + d]);
      for (int b = 0; b < kB; ++b) acc[g][b] += qd * k[b];
    }
  }
  const V16 scale_v = vmath::Broadcast(scale);
  for (int g = 0; g < kG; ++g) {
    for (int b = 0; b < kB; ++b) vmath::Store(scores + g * stride + b * kTile, acc[g][b] * scale_v);
  }
}

// The same for D = 16·kVecs and kG query heads at once, register-blocked with 16-float vectors:
// the kG heads share every key and value load; scores are computed kBlock tiles at a time.
// Whole tiles are read;
// scores past `length` are set to −inf, so those positions weigh 0.
template <int kVecs, int kG>
FLYWHEEL_INLINE void AttendVec(const float* __restrict q, const float* __restrict keys,
                               const float* __restrict v, const float* next_keys,
                               const float* next_values, int64_t length, float scale,
                               float* __restrict scores, float* __restrict out) {
  using vmath::V16;
  constexpr int kDim = 16 * kVecs;
  constexpr int64_t kTileSize = kTile * kDim;
  constexpr int kBlock = kG == 1 ? 8 : 4;
  const int64_t tiles = (length + kTile - 1) / kTile;
  const int64_t padded = tiles * kTile;
  int64_t t = 0;
  for (; t + kBlock <= tiles; t += kBlock) {
    ScoreTiles<kVecs, kG, kBlock>(q, keys + t * kTileSize, next_keys + t * kTileSize, scale,
                                  scores + t * kTile, padded);
  }
  for (; t < tiles; ++t) {
    ScoreTiles<kVecs, kG, 1>(q, keys + t * kTileSize, next_keys + t * kTileSize, scale,
                             scores + t * kTile, padded);
  }
  float inv[kG];
  for (int g = 0; g < kG; ++g) {
    float* s = scores + g * padded;
    for (int64_t i = length; i < padded; ++i) s[i] = -std::numeric_limits<float>::infinity();
    V16 vmax = vmath::Broadcast(-std::numeric_limits<float>::infinity());
    for (int64_t i = 0; i < padded; i += kTile) {
      const V16 x = vmath::Load(s + i);
      vmax = x > vmax ? x : vmax;
    }
    const V16 m = vmath::Broadcast(vmath::HorizontalMax(vmax));
    V16 sum{};
    for (int64_t i = 0; i < padded; i += kTile) {
      const V16 e = vmath::Exp(vmath::Load(s + i) - m);
      vmath::Store(s + i, e);
      sum += e;
    }
    inv[g] = 1.0f / vmath::HorizontalSum(sum);
  }
  // out = probabilities · values, kUnroll positions per iteration into separate accumulators.
  constexpr int kUnroll = kG * kVecs <= 8 ? 2 : 1;
  V16 acc[kUnroll][kG][kVecs] = {};
  int64_t i = 0;
  for (; i + kUnroll <= length; i += kUnroll) {
    // The next head's values at these positions.
    for (int c = 0; c < kVecs * kUnroll; ++c) {
      __builtin_prefetch(reinterpret_cast<const char*>(next_values + i * kDim) + c * 64, 0, 2);
    }
    for (int u = 0; u < kUnroll; ++u) {
      V16 vv[kVecs];
      for (int c = 0; c < kVecs; ++c) vv[c] = vmath::Load(v + (i + u) * kDim + 16 * c);
      for (int g = 0; g < kG; ++g) {
        const V16 p = vmath::Broadcast(scores[g * padded + i + u]);
        for (int c = 0; c < kVecs; ++c) acc[u][g][c] += p * vv[c];
      }
    }
  }
  for (; i < length; ++i) {
    for (int g = 0; g < kG; ++g) {
      const V16 p = vmath::Broadcast(scores[g * padded + i]);
      for (int c = 0; c < kVecs; ++c) acc[0][g][c] += p * vmath::Load(v + i * kDim + 16 * c);
    }
  }
  for (int g = 0; g < kG; ++g) {
    for (int c = 0; c < kVecs; ++c) {
      V16 total = acc[0][g][c];
      for (int u = 1; u < kUnroll; ++u) total += acc[u][g][c];
      vmath::Store(out + g * kDim + 16 * c, total * vmath::Broadcast(inv[g]));
    }
  }
}

template <int kVecs>
FLYWHEEL_INLINE void AttendGroups(const float* q, int64_t groups, const float* keys, const float* v,
                                  const float* next_keys, const float* next_values, int64_t length,
                                  float scale, float* scores, float* out) {
  constexpr int kDim = 16 * kVecs;
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    AttendVec<kVecs, 2>(q + g * kDim, keys, v, next_keys, next_values, length, scale, scores,
                        out + g * kDim);
  }
  if (g < groups) {
    AttendVec<kVecs, 1>(q + g * kDim, keys, v, next_keys, next_values, length, scale, scores,
                        out + g * kDim);
  }
}

FLYWHEEL_VECTOR_CLONES
void AttendHead(const float* q, int64_t groups, int64_t dim, const float* keys, const float* v,
                const float* next_keys, const float* next_values, int64_t length, float scale,
                float* scores, float* out) {
  switch (dim) {
    case 32:
      return AttendGroups<2>(q, groups, keys, v, next_keys, next_values, length, scale, scores,
                             out);
    case 64:
      return AttendGroups<4>(q, groups, keys, v, next_keys, next_values, length, scale, scores,
                             out);
    case 128:
      return AttendGroups<8>(q, groups, keys, v, next_keys, next_values, length, scale, scores,
                             out);
    default:
      return AttendScalar(q, groups, dim, keys, v, length, scale, scores, out);
  }
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
      head_dim_(options.head_dim()),
      slots_(std::max<int64_t>(initial_slots, 1)),
      capacity_(RoundUp16(initial_capacity)) {
  const size_t per_layer =
      static_cast<size_t>(slots_ * options_.num_kv_heads * head_dim_ * capacity_);
  keys_.assign(per_layer * options_.num_layers, 0.0f);
  values_.assign(per_layer * options_.num_layers, 0.0f);
  // The very cos/sin of the LibTorch path, so that positions rotate identically.
  c10::InferenceMode guard;
  const auto rotary = MakeRotary(torch::arange(options_.max_seq_len, torch::kInt64).unsqueeze(0),
                                 head_dim_, options_.rope_theta);
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
    AttendHead(q + h * groups * head_dim_, groups, head_dim_, Keys(layer, row.slot, h),
               Values(layer, row.slot, h), next_keys, next_values, length, scale, scores_.data(),
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
    Linear(h_.data(), n, layer.qkv, qkv_.data(), false);
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
    RmsNormRows(x_.data(), n, hidden, layer.post_norm.data_ptr<float>(), options_.rms_norm_eps,
                h_.data());
    Linear(h_.data(), n, layer.gate_up, gate_up_.data(), false);
    SiluMul(gate_up_.data(), n, inter, act_.data());
    Linear(act_.data(), n, layer.down, x_.data(), /*accumulate=*/true);
  }
  const int64_t m = static_cast<int64_t>(logit_rows.size());
  grow(final_, m * hidden);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t r = logit_rows[i];
    TORCH_CHECK(r >= 0 && r < n, "CPU decoder: logit row ", r, " out of range");
    RmsNormRows(x_.data() + r * hidden, 1, hidden, w.final_norm.data_ptr<float>(),
                options_.rms_norm_eps, final_.data() + i * hidden);
  }
  Linear(final_.data(), m, w.lm_head, logits, false);
}

}  // namespace flywheel
