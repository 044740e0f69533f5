#include "flywheel/model/kv_cache.h"

#include <algorithm>

namespace flywheel {

KvCache::KvCache(const ModelOptions& options, torch::TensorOptions tensor_options,
                 int64_t initial_slots, int64_t initial_capacity)
    : slots_(std::max<int64_t>(initial_slots, 1)),
      capacity_(std::max<int64_t>(initial_capacity, 1)) {
  for (int64_t l = 0; l < options.num_layers; ++l) {
    values_.push_back(torch::zeros({slots_, options.num_kv_heads, capacity_, options.HeadDim()},
                                   tensor_options));
    keys_.push_back(torch::zeros({slots_, options.num_kv_heads, options.HeadDim(), capacity_},
                                 tensor_options));
  }
}

void KvCache::Reserve(int64_t slots, int64_t length) {
  if (slots <= slots_ && length <= capacity_) return;
  int64_t new_slots = slots_;
  while (new_slots < slots) new_slots *= 2;
  int64_t new_capacity = capacity_;
  while (new_capacity < length) new_capacity *= 2;
  // `dim` is the position dimension: 2 for values, 3 for (transposed) keys.
  auto grow = [&](torch::Tensor& t, int64_t dim) {
    auto sizes = t.sizes().vec();
    sizes[0] = new_slots;
    sizes[dim] = new_capacity;
    auto bigger = torch::zeros(sizes, t.options());
    bigger.narrow(0, 0, slots_).narrow(dim, 0, capacity_).copy_(t);
    t = bigger;
  };
  for (auto& t : keys_) grow(t, 3);
  for (auto& t : values_) grow(t, 2);
  slots_ = new_slots;
  capacity_ = new_capacity;
  ++generation_;
}

void KvCache::MoveSlot(int64_t from, int64_t to, int64_t length) {
  if (from == to || length == 0) return;
  for (auto& t : keys_) t[to].narrow(2, 0, length).copy_(t[from].narrow(2, 0, length));
  for (auto& t : values_) t[to].narrow(1, 0, length).copy_(t[from].narrow(1, 0, length));
}

KvCache::Binding KvCache::Bind(std::vector<int64_t> slots, std::vector<int64_t> starts,
                               int64_t attend_length) {
  TORCH_CHECK(slots.size() == starts.size(), "KvCache::Bind: one start per slot");
  TORCH_CHECK(attend_length <= capacity_, "KvCache::Bind: attend_length ", attend_length,
              " exceeds capacity ", capacity_, " (Reserve first)");
  Binding binding;
  binding.cache_ = this;
  binding.identity_ = true;
  for (size_t i = 0; i < slots.size(); ++i) {
    TORCH_CHECK(slots[i] >= 0 && slots[i] < slots_, "KvCache::Bind: slot ", slots[i],
                " out of range");
    if (slots[i] != static_cast<int64_t>(i)) binding.identity_ = false;
  }
  const auto device = keys_.front().device();
  binding.slot_index_ = torch::tensor(slots, torch::kInt64).to(device);
  binding.start_index_ = torch::tensor(starts, torch::kInt64).to(device);
  binding.starts_ = std::move(starts);
  binding.attend_length_ = attend_length;
  return binding;
}

KvCache::Binding KvCache::BindDevice(torch::Tensor slots, torch::Tensor starts, bool identity,
                                     int64_t attend_length) {
  TORCH_CHECK(slots.dim() == 1 && starts.sizes() == slots.sizes(),
              "KvCache::BindDevice: one start per slot, both [B]");
  TORCH_CHECK(attend_length <= capacity_, "KvCache::BindDevice: attend_length ", attend_length,
              " exceeds capacity ", capacity_);
  Binding binding;
  binding.cache_ = this;
  binding.identity_ = identity;
  binding.slot_index_ = std::move(slots);
  binding.start_index_ = std::move(starts);
  binding.attend_length_ = attend_length;
  return binding;
}

std::pair<torch::Tensor, torch::Tensor> KvCache::Binding::Update(int64_t layer,
                                                                 const torch::Tensor& k,
                                                                 const torch::Tensor& v) {
  auto& keys = cache_->keys_[layer];
  auto& values = cache_->values_[layer];
  const int64_t rows = k.size(0);
  const int64_t lq = k.size(2);
  using torch::indexing::Slice;
  if (lq == 1) {
    // One token per row at a different position per row: one scatter for the whole batch.
    keys.index_put_({slot_index_, Slice(), Slice(), start_index_}, k.select(2, 0));
    values.index_put_({slot_index_, Slice(), start_index_}, v.select(2, 0));
  } else {
    // A prefill: every row's Lq tokens in one scatter too (a copy per row and layer was
    // thousands of small kernels for a batch of new prompts on a GPU).
    TORCH_CHECK(!starts_.empty(), "KvCache: a device binding takes one token a row, not ", lq);
    if (!write_slots_.defined()) {
      for (int64_t start : starts_) {
        TORCH_CHECK(start + lq <= cache_->capacity_, "KvCache: write past capacity");
      }
      write_slots_ = slot_index_.unsqueeze(1).expand({rows, lq}).flatten();
      write_positions_ =
          (start_index_.unsqueeze(1) + torch::arange(lq, start_index_.options())).flatten();
    }
    // [B, kv_heads, Lq, D] -> [B * Lq, kv_heads, D]: the indexed dimensions (slot, position)
    // are not adjacent, so the scatter's value has them first.
    const auto flat = [&](const torch::Tensor& t) {
      return t.transpose(1, 2).reshape({rows * lq, t.size(1), t.size(3)});
    };
    keys.index_put_({write_slots_, Slice(), Slice(), write_positions_}, flat(k));
    values.index_put_({write_slots_, Slice(), write_positions_}, flat(v));
  }
  TORCH_CHECK(!identity_ || rows <= cache_->slots_, "KvCache: ", rows, " rows read ",
              cache_->slots_, " slots");
  auto read = [&](const torch::Tensor& t, int64_t dim) {
    const auto prefix = t.narrow(dim, 0, attend_length_);
    return identity_ ? prefix.narrow(0, 0, rows) : prefix.index_select(0, slot_index_);
  };
  return {read(keys, 3), read(values, 2)};
}

}  // namespace flywheel
