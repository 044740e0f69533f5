// What a durable store holds, for the store's tests.
#ifndef FLYWHEEL_BUFFER_STORE_TEST_UTIL_H_
#define FLYWHEEL_BUFFER_STORE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "flywheel/buffer/durable_store.h"

namespace flywheel::testing {

// Every stored trajectory by key.
inline std::map<uint64_t, std::string> StoreContents(const DurableStore& store) {
  std::map<uint64_t, std::string> out;
  EXPECT_TRUE(store
                  .ForEach([&](uint64_t key, std::string_view value) {
                    out[key] = std::string(value);
                    return absl::OkStatus();
                  })
                  .ok());
  return out;
}

}  // namespace flywheel::testing

#endif  // FLYWHEEL_BUFFER_STORE_TEST_UTIL_H_
