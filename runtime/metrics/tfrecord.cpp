// TFRecord framing and the two Event messages TensorBoard needs for scalars.
// Field numbers and wire types follow tensorboard/compat/proto/{event,summary}.proto.
#include "metrics/tfrecord.hpp"

#include <array>
#include <bit>
#include <cstring>

namespace rl::metrics {
namespace {

// One 256-entry table, built at compile time: CRC of each byte value.
constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kCrcTable = make_crc_table();

void put_fixed32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_fixed64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// Length of the well-formed UTF-8 sequence at s[0..avail), or 0 (Unicode table 3-7:
// no overlong forms, no surrogates, nothing above U+10FFFF).
size_t utf8_length(const unsigned char* s, size_t avail) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
  else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
  else return 0;
  if (len > avail || s[1] < lo || s[1] > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((s[k] & 0xC0) != 0x80) return 0;
  return len;
}

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  uint32_t c = ~crc;
  for (unsigned char b : data) c = kCrcTable[(c ^ b) & 0xFF] ^ (c >> 8);
  return ~c;
}

void append_record(std::string& out, std::string_view data) {
  std::string header;
  put_fixed64(header, data.size());
  out += header;
  put_fixed32(out, masked_crc32c(header));
  out.append(data.data(), data.size());
  put_fixed32(out, masked_crc32c(data));
}

namespace pb {
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (uint64_t{field} << 3) | wire_type); }
void put_double(std::string& out, uint32_t field, double v) {
  put_key(out, field, 1);
  put_fixed64(out, std::bit_cast<uint64_t>(v));
}
void put_float(std::string& out, uint32_t field, float v) {
  put_key(out, field, 5);
  put_fixed32(out, std::bit_cast<uint32_t>(v));
}
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));  // negative values take 10 bytes, as protobuf's int64
}
void put_bytes(std::string& out, uint32_t field, std::string_view v) {
  put_key(out, field, 2);
  put_varint(out, v.size());
  out.append(v.data(), v.size());
}
}  // namespace pb

std::string utf8_or_replacement(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_length(p + i, s.size() - i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

// Field numbers (event.proto, summary.proto).
namespace {
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;
}  // namespace

std::string encode_file_version_event(double wall_time, std::string_view file_version) {
  std::string ev;
  pb::put_double(ev, kEventWallTime, wall_time);
  pb::put_bytes(ev, kEventFileVersion, file_version);
  return ev;
}

std::string encode_scalar_event(double wall_time, int64_t step, std::string_view tag, double value) {
  std::string v;
  pb::put_bytes(v, kValueTag, utf8_or_replacement(tag));
  // simple_value sits in a oneof, so proto3 writes it even when it is 0.
  pb::put_float(v, kValueSimpleValue, static_cast<float>(value));
  std::string summary;
  pb::put_bytes(summary, kSummaryValue, v);
  std::string ev;
  pb::put_double(ev, kEventWallTime, wall_time);
  if (step != 0) pb::put_int64(ev, kEventStep, step);  // proto3 leaves default scalars out
  pb::put_bytes(ev, kEventSummary, summary);
  return ev;
}

}  // namespace rl::metrics
