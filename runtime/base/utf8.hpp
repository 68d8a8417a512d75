// Well-formed UTF-8 (Unicode Table 3-7), shared by the JSON policy, rl.json and
// the tokenizer's Unicode code.
#pragma once
#include <cstddef>

namespace rl {

// Length of the well-formed multi-byte UTF-8 sequence at s (2 to 4 bytes: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0 when there is
// none there (ASCII included: callers handle bytes below 0x80 first).
inline size_t utf8_sequence_length(const char* s, size_t avail) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(0);
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (len > avail || b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  return len;
}

}  // namespace rl
