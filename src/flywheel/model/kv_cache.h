// Keys/values of many sequences for incremental decoding, one slot per sequence.
//
//   layer l:  values[l] [slots, kv_heads, capacity, head_dim]
//             keys[l]   [slots, kv_heads, head_dim, capacity]   (transposed: see KvStore)
//             slot 0  | k0 k1 k2 k3 . . . . |   length 4
//             slot 1  | k0 k1 . . . . . . . |   length 2
//             slot 2  | k0 k1 k2 k3 k4 k5 . |   length 6
//
// A forward pass binds rows to slots (Bind): row b writes its new keys at [start_b, start_b+Lq)
// of slot_b and attends to positions [0, attend_length) of its slot; the caller's allowed mask
// hides each row's unused tail. When the bound slots are 0..B-1 in order (the common case when
// every live sequence decodes) the keys are read as a view, without a copy. Capacity grows by
// doubling. Not thread-safe: one owner (an actor's rollout engine).
#ifndef FLYWHEEL_MODEL_KV_CACHE_H_
#define FLYWHEEL_MODEL_KV_CACHE_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "flywheel/model/kv_store.h"
#include "flywheel/model/model_options.h"

namespace flywheel {

class KvCache {
 public:
  KvCache(const ModelOptions& options, torch::TensorOptions tensor_options,
          int64_t initial_slots = 8, int64_t initial_capacity = 128);

  int64_t num_slots() const { return slots_; }
  int64_t capacity() const { return capacity_; }
  torch::Device device() const { return keys_.front().device(); }
  // Counts the growths: the tensors a Binding or a captured graph refers to stay valid while it
  // does not change.
  int64_t generation() const { return generation_; }
  // Grows (never shrinks) so that `slots` slots of `length` positions fit; keeps contents.
  void Reserve(int64_t slots, int64_t length);
  // Copies positions [0, length) of slot `from` into slot `to` (compaction after a removal).
  void MoveSlot(int64_t from, int64_t to, int64_t length);

  // One forward pass's view of the cache (see the header comment). Valid until the next
  // Reserve/MoveSlot; the cache must already have room for start_b + Lq and attend_length.
  class Binding : public KvStore {
   public:
    std::pair<torch::Tensor, torch::Tensor> Update(int64_t layer, const torch::Tensor& k,
                                                   const torch::Tensor& v) override;

   private:
    friend class KvCache;
    KvCache* cache_ = nullptr;
    std::vector<int64_t> starts_;  // host copy (Bind only), for the capacity check
    torch::Tensor slot_index_;   // [B] int64 on the cache's device
    torch::Tensor start_index_;  // [B] int64
    bool identity_ = false;      // rows read slots 0..B-1
    int64_t attend_length_ = 0;
    // Several tokens a row: every (slot, position) written, flattened row-major; made at the
    // first layer and reused by the others.
    torch::Tensor write_slots_, write_positions_;
  };
  Binding Bind(std::vector<int64_t> slots, std::vector<int64_t> starts, int64_t attend_length);
  // A decode binding (one token a row) from index tensors already on the device, which a
  // captured CUDA graph reads at every replay: row b writes at (slots[b], starts[b]); it reads
  // slot b when `identity` (so slots[b] may then point elsewhere, e.g. a padding row's scratch
  // slot), slots[b] otherwise. Nothing is checked against the values, which the caller keeps
  // within the cache (num_slots() >= B when `identity`, starts[b] < attend_length <= capacity).
  Binding BindDevice(torch::Tensor slots, torch::Tensor starts, bool identity,
                     int64_t attend_length);

 private:
  std::vector<torch::Tensor> keys_;
  std::vector<torch::Tensor> values_;
  int64_t slots_;
  int64_t capacity_;
  int64_t generation_ = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_MODEL_KV_CACHE_H_
