#include "flywheel/buffer/trajectory_wire.h"

#include <cstdint>
#include <cstring>

namespace flywheel {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };

class Reader {
 public:
  explicit Reader(std::string_view s)
      : p_(reinterpret_cast<const uint8_t*>(s.data())), end_(p_ + s.size()) {}

  bool done() const { return p_ == end_; }

  // Protobuf's rule: at most 10 bytes, bits past 64 dropped.
  bool Varint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p_ == end_) return false;
      const uint8_t b = *p_++;
      result |= static_cast<uint64_t>(b & 0x7f) << (shift < 64 ? shift : 63);
      if (b < 0x80) {
        *v = result;
        return true;
      }
    }
    return false;
  }

  bool Length(std::string_view* out) {
    uint64_t n = 0;
    if (!Varint(&n) || n > static_cast<uint64_t>(end_ - p_)) return false;
    *out = std::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }

  bool Fixed32(uint32_t* v) {
    if (end_ - p_ < 4) return false;
    std::memcpy(v, p_, 4);
    p_ += 4;
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// proto3 `string` fields must be UTF-8; ASCII is, and anything else is left to protobuf.
bool AsciiString(std::string_view bytes, std::string* out) {
  for (char c : bytes) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  out->assign(bytes.data(), bytes.size());
  return true;
}

// Appends a packed array of varints, each converted by `convert`. The element count is the
// number of bytes without the continuation bit, so the vector grows once.
template <typename T, typename Convert>
bool PackedVarints(std::string_view bytes, std::vector<T>* out, Convert convert) {
  size_t count = 0;
  for (char c : bytes) count += static_cast<uint8_t>(c) < 0x80 ? 1 : 0;
  const size_t old = out->size();
  out->resize(old + count);
  T* dst = out->data() + old;
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint8_t* end = p + bytes.size();
  while (p != end) {
    // One- and two-byte varints (flags, versions, token ids below 16384) take a short path.
    if (p[0] < 0x80) {
      *dst++ = convert(p[0]);
      p += 1;
      continue;
    }
    if (end - p >= 2 && p[1] < 0x80) {
      *dst++ = convert(static_cast<uint64_t>(p[0] & 0x7f) | (static_cast<uint64_t>(p[1]) << 7));
      p += 2;
      continue;
    }
    uint64_t v = 0;
    int shift = 0;
    while (true) {
      if (p == end || shift >= 70) return false;
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << (shift < 64 ? shift : 63);
      shift += 7;
      if (b < 0x80) break;
    }
    *dst++ = convert(v);
  }
  return true;
}

template <typename T>
bool PackedFixed32(std::string_view bytes, std::vector<T>* out) {
  static_assert(sizeof(T) == 4);
  if (bytes.size() % 4 != 0) return false;
  const size_t old = out->size();
  out->resize(old + bytes.size() / 4);
  std::memcpy(out->data() + old, bytes.data(), bytes.size());
  return true;
}

int32_t ToInt32(uint64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }
float ToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace

bool DecodeTrajectoryWire(std::string_view wire, Trajectory* out) {
  static_assert(sizeof(float) == 4);
  *out = Trajectory();
  Reader r(wire);
  int64_t fork_position = 0;
  int32_t role = 0;
  int32_t termination = 0;
  while (!r.done()) {
    uint64_t tag = 0;
    if (!r.Varint(&tag) || tag > UINT32_MAX) return false;
    const uint32_t field = static_cast<uint32_t>(tag >> 3);
    const uint32_t type = static_cast<uint32_t>(tag & 7);
    uint64_t v = 0;
    uint32_t bits = 0;
    std::string_view bytes;
    bool ok = false;
    switch (field) {
      case 1:
        ok = type == kLength && r.Length(&bytes) && AsciiString(bytes, &out->id);
        break;
      case 2:
        ok = type == kLength && r.Length(&bytes) && AsciiString(bytes, &out->execution_id);
        break;
      case 3:
        ok = type == kLength && r.Length(&bytes) && AsciiString(bytes, &out->group_id);
        break;
      case 4:
        ok = type == kLength && r.Length(&bytes) && AsciiString(bytes, &out->task_id);
        break;
      case 5:
        ok = type == kLength && r.Length(&bytes) && AsciiString(bytes, &out->env_name);
        break;
      case 6:
        ok = type == kVarint && r.Varint(&v);
        role = ToInt32(v);
        break;
      case 7:
        ok = type == kLength && r.Length(&bytes) && AsciiString(bytes, &out->parent_id);
        break;
      case 8:
        ok = type == kVarint && r.Varint(&v);
        fork_position = static_cast<int64_t>(v);
        break;
      case 10:
        ok = type == kLength && r.Length(&bytes) && PackedVarints(bytes, &out->tokens, ToInt32);
        break;
      case 11:
        ok = type == kLength && r.Length(&bytes) &&
             PackedVarints(bytes, &out->trainable, [](uint64_t x) -> uint8_t { return x != 0; });
        break;
      case 12:
        ok = type == kLength && r.Length(&bytes) && PackedFixed32(bytes, &out->logprobs);
        break;
      case 13:
        ok = type == kLength && r.Length(&bytes) &&
             PackedVarints(bytes, &out->versions,
                           [](uint64_t x) { return static_cast<int64_t>(x); });
        break;
      case 20:
        ok = type == kLength && r.Length(&bytes) && PackedVarints(bytes, &out->turn_ends, ToInt32);
        break;
      case 21:
        ok = type == kLength && r.Length(&bytes) && PackedFixed32(bytes, &out->turn_rewards);
        break;
      case 22:
        ok = type == kFixed32 && r.Fixed32(&bits);
        out->final_reward = ToFloat(bits);
        break;
      case 23:
        ok = type == kFixed32 && r.Fixed32(&bits);
        out->partial_score = ToFloat(bits);
        break;
      case 24:
        ok = type == kVarint && r.Varint(&v);
        termination = ToInt32(v);
        break;
      case 30:
        ok = type == kLength && r.Length(&bytes) && AsciiString(bytes, &out->actor_id);
        break;
      case 31:
        ok = type == kVarint && r.Varint(&v);
        out->created_unix_ns = static_cast<int64_t>(v);
        break;
      case 32:
        ok = type == kVarint && r.Varint(&v);
        out->finished_unix_ns = static_cast<int64_t>(v);
        break;
      default:  // unknown fields (and field 0) are protobuf's business
        return false;
    }
    if (!ok) return false;
  }
  // FromProto's range checks: out of range goes the slow way for its error message.
  if (role < 0 || role > static_cast<int32_t>(Role::kSubAgentSummary)) return false;
  if (termination < 0 || termination > static_cast<int32_t>(Termination::kCancelled)) {
    return false;
  }
  out->role = static_cast<Role>(role);
  out->termination = static_cast<Termination>(termination);
  // proto3 cannot tell an unset field from 0: a root path (no parent) has no fork position.
  out->fork_position = out->parent_id.empty() ? -1 : fork_position;
  return true;
}

}  // namespace flywheel
