#include "flywheel/buffer/crc32c.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "flywheel/buffer/durable_store.h"
#include "flywheel/core/strings.h"

namespace rocksdb::crc32c {
uint32_t Extend(uint32_t init_crc, const char* data, size_t n);
}

namespace flywheel {
namespace {

using ExtendFn = uint32_t (*)(uint32_t, const char*, size_t);
constexpr char kRocksDbExtend[] = "_ZN7rocksdb6crc32c6ExtendEjPKcm";

uint32_t Value(const std::string& s) { return Crc32cExtend(0, s.data(), s.size()); }

// RFC 3720 (iSCSI) B.4 test vectors and the usual check value.
TEST(Crc32cTest, KnownVectors) {
  EXPECT_EQ(Value("123456789"), 0xe3069283u);
  EXPECT_EQ(Value(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Value(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(Value(ascending), 0x46dd794eu);
  EXPECT_EQ(Value(""), 0u);
}

// Every length and alignment around the 8- and 32-byte steps, and extending in pieces.
TEST(Crc32cTest, MatchesLibrocksdbOwnImplementation) {
  // RTLD_NEXT from this executable skips its own definition: librocksdb's software CRC.
  auto library = reinterpret_cast<ExtendFn>(dlsym(RTLD_NEXT, kRocksDbExtend));
  ASSERT_NE(library, nullptr) << "librocksdb does not export " << kRocksDbExtend;
  std::mt19937 rng(7);
  std::string data(70000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t n : {0, 1, 7, 8, 9, 31, 32, 33, 63, 100, 4096, 32768, 65536}) {
      const char* p = data.data() + offset;
      EXPECT_EQ(Crc32cExtend(0, p, n), library(0, p, n)) << offset << " " << n;
      EXPECT_EQ(Crc32cExtend(0x12345678, p, n), library(0x12345678, p, n));
      EXPECT_EQ(Crc32cExtendTable(0x12345678, p, n), library(0x12345678, p, n));
    }
  }
  const uint32_t whole = Crc32cExtend(0, data.data(), data.size());
  const uint32_t head = Crc32cExtend(0, data.data(), 12345);
  EXPECT_EQ(Crc32cExtend(head, data.data() + 12345, data.size() - 12345), whole);
}

// librocksdb resolves crc32c::Extend through its PLT to this executable's definition, so its
// WAL records are checksummed by Crc32cExtend; a store written and recovered through it reads
// back every record (RocksDB verifies each WAL record's CRC on replay).
TEST(Crc32cTest, RocksDbUsesThisImplementation) {
  const std::string path =
      (std::filesystem::temp_directory_path() / StrCat("flywheel_crc32c_test_", ::getpid()))
          .string();
  std::filesystem::remove_all(path);
  {
    auto store = DurableStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    DurableStore::Write write;
    for (uint64_t k = 1; k <= 3; ++k) {
      write.puts.emplace_back(k, std::make_shared<const std::string>(100000, 'a' + k));
    }
    ASSERT_TRUE((*store)->Commit(write).ok());
  }
  {
    auto reopened = DurableStore::Open(path);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    int records = 0;
    ASSERT_TRUE((*reopened)
                    ->ForEach([&](uint64_t key, std::string_view value) {
                      EXPECT_EQ(value, std::string(100000, 'a' + key));
                      ++records;
                      return absl::OkStatus();
                    })
                    .ok());
    EXPECT_EQ(records, 3);
  }
  std::filesystem::remove_all(path);

  void* resolved = dlsym(RTLD_DEFAULT, kRocksDbExtend);
  EXPECT_EQ(resolved, reinterpret_cast<void*>(&rocksdb::crc32c::Extend))
      << "the executable does not export rocksdb::crc32c::Extend; RocksDB keeps its software "
         "CRC";
  EXPECT_EQ(rocksdb::crc32c::Extend(0, "123456789", 9), 0xe3069283u);
  EXPECT_STREQ(Crc32cImplementation(), __builtin_cpu_supports("sse4.2") ? "sse4.2" : "table");
}

}  // namespace
}  // namespace flywheel
