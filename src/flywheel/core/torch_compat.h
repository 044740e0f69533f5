// The few LibTorch spellings that differ between Debian's LibTorch 1.13 (the CPU build) and the
// 2.x of Python's CUDA wheels, in one place so that the rest of the tree is written once.
// Header-only; include it only from targets that link LibTorch.
//
// Differences handled elsewhere by a spelling valid in both (no code here):
//   - c10d::Store::set / compareSet gained std::string overloads in 2.x, so a braced value
//     ({1}, {s.begin(), s.end()}) is ambiguous: callers pass a std::vector<uint8_t>.
#ifndef FLYWHEEL_CORE_TORCH_COMPAT_H_
#define FLYWHEEL_CORE_TORCH_COMPAT_H_

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/optim/optimizer.h>
#include <torch/types.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace flywheel {

// The key under which a torch::optim optimizer keeps a parameter's state (state()): the
// TensorImpl's address as text ("0x…", c10::guts::to_string's spelling) in 1.13, the address
// itself (void*) in 2.x. Taken from the map's own key type, so it follows whichever LibTorch the
// build uses, and spelled without c10::guts, which 2.x is retiring.
using OptimizerStateKey = typename std::remove_cvref_t<
    decltype(std::declval<const torch::optim::Optimizer&>().state())>::key_type;

// (A template only so that the branch for the other LibTorch is discarded, not compiled.)
template <typename Key = OptimizerStateKey>
Key OptimizerStateKeyOf(const torch::Tensor& parameter) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << static_cast<const void*>(parameter.unsafeGetTensorImpl());
    return key.str();
  } else {
    return parameter.unsafeGetTensorImpl();
  }
}

// The c10d class a process group's implementation (Gloo, NCCL) derives from, whose virtual
// collectives (allreduce, broadcast, allgather, alltoall_base, barrier) flywheel calls:
// c10d::ProcessGroup in 1.13, c10d::Backend since 2.0 (ProcessGroup became a dispatcher over
// backends).
#if TORCH_VERSION_MAJOR >= 2
using C10dBackend = c10d::Backend;
#else
using C10dBackend = c10d::ProcessGroup;
#endif

}  // namespace flywheel

#endif  // FLYWHEEL_CORE_TORCH_COMPAT_H_
