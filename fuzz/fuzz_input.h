// Reading a fuzz input as a sequence of small fields, so that one input can hold several
// messages (the trajectories of a buffer session, the lines of a protocol exchange) and the
// seeds can be written by seed_writer.cc in the same layout.
//
//   input := field*      field := byte | u16 little-endian | [u16 length][length bytes]
//
// Reading past the end yields zeros and empty strings, so every input is a valid session.
#ifndef FLYWHEEL_FUZZ_FUZZ_INPUT_H_
#define FLYWHEEL_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace flywheel::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(reinterpret_cast<const char*>(data), size) {}

  bool empty() const { return data_.empty(); }
  uint8_t Byte() {
    if (data_.empty()) return 0;
    const uint8_t b = static_cast<uint8_t>(data_[0]);
    data_.remove_prefix(1);
    return b;
  }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | (Byte() << 8)); }
  // A value in [lo, hi] (hi - lo < 256).
  int64_t Small(int64_t lo, int64_t hi) { return lo + Byte() % (hi - lo + 1); }
  std::string_view Bytes() {
    const size_t n = std::min<size_t>(U16(), data_.size());
    std::string_view out = data_.substr(0, n);
    data_.remove_prefix(n);
    return out;
  }

 private:
  std::string_view data_;
};

// Writes fields in the layout FuzzInput reads (seed_writer.cc).
class FuzzOutput {
 public:
  FuzzOutput& Byte(uint8_t b) {
    out_.push_back(static_cast<char>(b));
    return *this;
  }
  FuzzOutput& U16(uint16_t v) { return Byte(v & 0xff).Byte(v >> 8); }
  FuzzOutput& Bytes(std::string_view bytes) {
    U16(static_cast<uint16_t>(bytes.size()));
    out_.append(bytes.substr(0, 0xffff));
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

}  // namespace flywheel::fuzz

#endif  // FLYWHEEL_FUZZ_FUZZ_INPUT_H_
