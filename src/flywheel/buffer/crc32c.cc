#include "flywheel/buffer/crc32c.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#define FLYWHEEL_CRC32C_SSE42 1
#endif

#include <array>
#include <cstring>

namespace flywheel {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // CRC32C, reflected

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

}  // namespace

uint32_t Crc32cExtendTable(uint32_t crc, const char* data, size_t n) {
  uint32_t l = ~crc;
  const auto* p = reinterpret_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) l = kTable[(l ^ p[i]) & 0xff] ^ (l >> 8);
  return ~l;
}

namespace {

#ifdef FLYWHEEL_CRC32C_SSE42
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const char* data, size_t n) {
  uint64_t l = ~crc;
  const char* p = data;
  // One dependent chain of crc32 instructions runs at about 8 bytes per 3 cycles, far faster
  // than the WAL's disk, so no interleaved chains: align, then 8 bytes at a time.
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    l = _mm_crc32_u8(static_cast<uint32_t>(l), static_cast<uint8_t>(*p++));
    --n;
  }
  while (n >= 32) {
    uint64_t v[4];
    std::memcpy(v, p, sizeof(v));
    l = _mm_crc32_u64(l, v[0]);
    l = _mm_crc32_u64(l, v[1]);
    l = _mm_crc32_u64(l, v[2]);
    l = _mm_crc32_u64(l, v[3]);
    p += 32;
    n -= 32;
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    l = _mm_crc32_u64(l, v);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    l = _mm_crc32_u8(static_cast<uint32_t>(l), static_cast<uint8_t>(*p++));
    --n;
  }
  return ~static_cast<uint32_t>(l);
}
#endif  // FLYWHEEL_CRC32C_SSE42

using ExtendFn = uint32_t (*)(uint32_t, const char*, size_t);

ExtendFn Choose() {
#ifdef FLYWHEEL_CRC32C_SSE42
  __builtin_cpu_init();  // the first call may come before libgcc's own constructor has run
  if (__builtin_cpu_supports("sse4.2")) return &ExtendSse42;
#endif
  return &Crc32cExtendTable;  // other CPUs and architectures
}

ExtendFn Chosen() {
  static const ExtendFn fn = Choose();
  return fn;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const char* data, size_t n) { return Chosen()(crc, data, n); }

const char* Crc32cImplementation() { return Chosen() == &Crc32cExtendTable ? "table" : "sse4.2"; }

}  // namespace flywheel

// Takes the place of librocksdb's definition (see crc32c.h). Same signature and semantics as
// util/crc32c.h: `init_crc` is a finished CRC32C of the data before.
namespace rocksdb::crc32c {
__attribute__((visibility("default"))) uint32_t Extend(uint32_t init_crc, const char* data,
                                                       size_t n) {
  return flywheel::Crc32cExtend(init_crc, data, n);
}
}  // namespace rocksdb::crc32c
