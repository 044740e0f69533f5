// Which item a sample picks. A selector only sees keys and the few facts it orders by; the
// Table owns the items and serialises every call, so implementations need not be thread-safe
// (as Reverb's selectors: "member methods will not be called concurrently").
//
//   Table ──Insert(key, info)──▶ ItemSelector ──Sample()──▶ key ──▶ Table looks the item up
//         ──Delete(key)───────▶
#ifndef FLYWHEEL_BUFFER_SELECTORS_INTERFACE_H_
#define FLYWHEEL_BUFFER_SELECTORS_INTERFACE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "flywheel/core/trajectory.h"

namespace flywheel {

struct SelectorItemInfo {
  double priority = 1.0;
  Role role = Role::kMain;
};

class ItemSelector {
 public:
  struct KeyWithProbability {
    uint64_t key = 0;
    double probability = 1.0;
  };

  virtual ~ItemSelector() = default;
  // Keys are unique and increase with insertion order.
  virtual void Insert(uint64_t key, const SelectorItemInfo& info) = 0;
  // The key must have been inserted and not deleted.
  virtual void Delete(uint64_t key) = 0;
  // Requires size() > 0. Does not remove the key.
  virtual KeyWithProbability Sample() = 0;
  virtual int64_t size() const = 0;
  virtual std::string DebugString() const = 0;
};

}  // namespace flywheel

#endif  // FLYWHEEL_BUFFER_SELECTORS_INTERFACE_H_
