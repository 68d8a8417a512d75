#include "model/unicode.hpp"

#include "base/utf8.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <vector>

namespace rl::model::unicode {
namespace {

struct CodeRange {
  char32_t first, last;
};
struct ClassRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp;
  uint16_t offset, length;  // into kDecompositionPool
};
struct Composition {
  char32_t first, second, composite;
};

#include "model/unicode_data.inc"

constexpr char32_t kMaxCodePoint = 0x10FFFF;

// Hangul syllables compose and decompose arithmetically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Class bits in a two-stage table: stage1[cp >> 8] picks a 256-entry block of
// stage2. Built once from the range lists; identical blocks are shared.
class FlagTable {
 public:
  FlagTable() {
    std::vector<uint8_t> flat(kMaxCodePoint + 1, 0);
    auto mark = [&](const auto& ranges, uint8_t bit) {
      for (const auto& r : ranges)
        for (char32_t cp = r.first; cp <= r.last; ++cp) flat[cp] |= bit;
    };
    mark(kLetterRanges, kLetter);
    mark(kNumberRanges, kNumber);
    mark(kNfcUnsafeRanges, kNfcUnsafe);
    for (char32_t cp : kWhiteSpace) flat[cp] |= unicode::kWhiteSpace;
    std::map<std::string, uint16_t> seen;
    for (size_t block = 0; block < stage1_.size(); ++block) {
      std::string key(reinterpret_cast<const char*>(flat.data() + block * 256), 256);
      auto [it, inserted] = seen.emplace(key, static_cast<uint16_t>(seen.size()));
      if (inserted) stage2_.insert(stage2_.end(), key.begin(), key.end());
      stage1_[block] = it->second;
    }
  }
  uint8_t get(char32_t cp) const {
    if (cp > kMaxCodePoint) return 0;
    return static_cast<uint8_t>(stage2_[size_t{stage1_[cp >> 8]} * 256 + (cp & 0xFF)]);
  }

 private:
  std::array<uint16_t, (kMaxCodePoint + 1) / 256> stage1_{};
  std::vector<char> stage2_;
};

const FlagTable& flag_table() {
  static const FlagTable table;
  return table;
}

const Decomposition* find_decomposition(char32_t cp) {
  auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                             [](const Decomposition& d, char32_t c) { return d.cp < c; });
  return it != std::end(kDecompositions) && it->cp == cp ? &*it : nullptr;
}

// The primary composite of (a, b), or 0.
char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::pair{a, b},
                             [](const Composition& c, const std::pair<char32_t, char32_t>& k) {
                               return c.first != k.first ? c.first < k.first : c.second < k.second;
                             });
  return it != std::end(kCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

void decompose_into(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const Decomposition* d = find_decomposition(cp)) {
    out.insert(out.end(), kDecompositionPool + d->offset, kDecompositionPool + d->offset + d->length);
    return;
  }
  out.push_back(cp);
}

}  // namespace

uint8_t detail::flags_table(char32_t cp) { return flag_table().get(cp); }

uint8_t combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  auto it = std::upper_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                             [](char32_t c, const ClassRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClasses)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

const char* unicode_version() { return kUnicodeVersion; }

size_t sequence_length(std::string_view s, size_t i) {
  if (static_cast<unsigned char>(s[i]) < 0x80) return 1;
  return utf8_sequence_length(s.data() + i, s.size() - i);
}

char32_t decode(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  const size_t len = sequence_length(s, i);
  if (len == 0) {
    // Maximal subpart: a valid lead byte followed by as many valid continuation
    // bytes as fit its pattern (Unicode 3.9, "U+FFFD substitution of maximal subparts").
    size_t k = 1;
    for (size_t want = 2; want <= 4 && i + want <= s.size(); ++want) {
      std::string_view probe(s.data() + i, want);
      // the prefix is valid so far if completing it could still give a valid sequence
      bool ok = true;
      const auto b0 = static_cast<unsigned char>(probe[0]);
      const auto b1 = static_cast<unsigned char>(probe[1]);
      if (b0 >= 0xC2 && b0 <= 0xDF) ok = want <= 2 && b1 >= 0x80 && b1 <= 0xBF;
      else if (b0 >= 0xE0 && b0 <= 0xEF) {
        const unsigned char lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
        ok = want <= 3 && b1 >= lo && b1 <= hi;
      } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        const unsigned char lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
        ok = b1 >= lo && b1 <= hi;
      } else {
        ok = false;
      }
      for (size_t m = 2; ok && m < want; ++m) {
        const auto bm = static_cast<unsigned char>(probe[m]);
        ok = bm >= 0x80 && bm <= 0xBF;
      }
      if (!ok) break;
      k = want;
    }
    i += k;
    return kReplacement;
  }
  char32_t cp;
  if (len == 2) cp = c & 0x1F;
  else if (len == 3) cp = c & 0x0F;
  else cp = c & 0x07;
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) cp = kReplacement;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = sequence_length(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t cp = decode(s, i);
    if (cp == kReplacement && sequence_length(s, start) == 0) append_utf8(out, kReplacement);
    else out.append(s.data() + start, i - start);
  }
  return out;
}

bool is_nfc_quick(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    if (flags(decode(s, i)) & kNfcUnsafe) return false;
  }
  return true;
}

std::string nfc(std::string_view s) {
  if (is_nfc_quick(s)) return std::string(s);
  // 1. full canonical decomposition
  std::vector<char32_t> cps;
  cps.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) decompose_into(decode(s, i), cps);
  // 2. canonical ordering: stable sort of each run of non-starters by class
  std::vector<uint8_t> ccc(cps.size());
  for (size_t k = 0; k < cps.size(); ++k) ccc[k] = combining_class(cps[k]);
  for (size_t k = 0; k < cps.size();) {
    if (ccc[k] == 0) {
      ++k;
      continue;
    }
    size_t end = k;
    while (end < cps.size() && ccc[end] != 0) ++end;
    for (size_t a = k + 1; a < end; ++a)  // insertion sort: runs are short
      for (size_t b = a; b > k && ccc[b - 1] > ccc[b]; --b) {
        std::swap(ccc[b - 1], ccc[b]);
        std::swap(cps[b - 1], cps[b]);
      }
    k = end;
  }
  // 3. canonical composition (UAX #15 reference algorithm)
  std::string out;
  out.reserve(s.size());
  if (cps.empty()) return out;
  size_t starter = 0;
  int last_class = ccc[0] == 0 ? 0 : 256;  // a leading non-starter composes with nothing
  size_t w = 1;
  for (size_t r = 1; r < cps.size(); ++r) {
    const char32_t ch = cps[r];
    const int cls = ccc[r];
    const char32_t composite = compose_pair(cps[starter], ch);
    if (composite != 0 && (last_class < cls || last_class == 0)) {
      cps[starter] = composite;
      continue;
    }
    if (cls == 0) starter = w;
    last_class = cls;
    cps[w] = ch;
    ccc[w] = static_cast<uint8_t>(cls);
    ++w;
  }
  for (size_t k = 0; k < w; ++k) append_utf8(out, cps[k]);
  return out;
}

}  // namespace rl::model::unicode
