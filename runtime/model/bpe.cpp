#include "model/bpe.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <queue>

#include "model/unicode.hpp"

namespace rl::model {

// A small multiply-mix hash (8 bytes per step; the tail is read with fixed-size
// loads, wyhash style); good enough for token strings, fast for short words.
uint64_t hash_bytes(std::string_view s) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = 0xC2B2AE3D27D4EB4Full ^ (s.size() * kMul);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  while (n > 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ (v * kMul)) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t v = 0;
  if (n >= 4) {
    uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    v = (static_cast<uint64_t>(a) << 32) | b;
  } else if (n > 0) {
    v = (uint64_t{p[0]} << 16) | (uint64_t{p[n / 2]} << 8) | p[n - 1];
  }
  h = (h ^ (v * kMul)) * 0xFF51AFD7ED558CCDull;
  h ^= h >> 32;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  return h;
}

// ---- TokenMap ---------------------------------------------------------------------
uint64_t TokenMap::head_of(std::string_view key) {
  uint64_t h = 0;
  std::memcpy(&h, key.data(), std::min<size_t>(8, key.size()));
  return h;
}

// Capacity: a power of two with the load at most 0.7 (linear probing stays short).
void TokenMap::reserve(size_t n) {
  size_t cap = 16;
  while (cap * 7 < n * 10) cap <<= 1;
  if (cap <= slots_.size()) return;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(cap, Slot{});
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    size_t i = s.hash & (cap - 1);
    while (slots_[i].id >= 0) i = (i + 1) & (cap - 1);
    slots_[i] = s;
  }
}

void TokenMap::grow() { reserve(std::max<size_t>(16, slots_.size())); }

void TokenMap::reserve_bytes(size_t n) { arena_.reserve(n); }

bool TokenMap::insert(std::string_view key, int32_t id) {
  if ((size_ + 1) * 10 > slots_.size() * 7) grow();
  const auto h = static_cast<uint32_t>(hash_bytes(key));
  const size_t mask = slots_.size() - 1;
  size_t i = h & mask;
  while (slots_[i].id >= 0) {
    if (slots_[i].hash == h && key_at(slots_[i].offset, slots_[i].length) == key) {
      slots_[i].id = id;
      return false;
    }
    i = (i + 1) & mask;
  }
  slots_[i] = Slot{head_of(key), static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(key.size()), h, id};
  arena_.append(key);
  ++size_;
  return true;
}

int32_t TokenMap::find(std::string_view key) const {
  if (slots_.empty()) return -1;
  const auto h = static_cast<uint32_t>(hash_bytes(key));
  const uint64_t head = head_of(key);
  const size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return -1;
    if (s.hash == h && s.head == head && s.length == key.size() &&
        (key.size() <= 8 || std::memcmp(arena_.data() + s.offset + 8, key.data() + 8, key.size() - 8) == 0))
      return s.id;
  }
}

// ---- byte-level alphabet ------------------------------------------------------------
namespace {
struct ByteAlphabet {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // the alphabet is U+0021..U+0143
  ByteAlphabet() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet kByteAlphabet;
}  // namespace

char32_t byte_level_char(uint8_t b) { return kByteAlphabet.to_char[b]; }

int byte_level_byte(char32_t cp) { return cp < kByteAlphabet.to_byte.size() ? kByteAlphabet.to_byte[cp] : -1; }

// ---- BpeModel: building ---------------------------------------------------------------
BpeModel::BpeModel() {
  byte_ids_.fill(-1);
  fallback_ids_.fill(-1);
}
BpeModel::~BpeModel() = default;

void BpeModel::reserve(size_t vocab, size_t merges) {
  vocab_.reserve(vocab);
  size_t cap = 16;
  while (cap * 7 < merges * 10) cap <<= 1;
  if (cap > merges_.size() && merge_count_ == 0) merges_.assign(cap, MergeSlot{});
}

void BpeModel::reserve_vocab(size_t entries, size_t bytes) {
  vocab_.reserve(entries);
  vocab_.reserve_bytes(bytes);
}

void BpeModel::add_token(std::string_view token, int32_t id) {
  vocab_.insert(token, id);
  max_id_ = std::max(max_id_, id);
}

namespace {
inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
inline size_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xFF51AFD7ED558CCDull;
  k ^= k >> 33;
  return static_cast<size_t>(k);
}
}  // namespace

std::string BpeModel::add_merge(std::string_view left, std::string_view right, uint32_t rank) {
  const int32_t a = vocab_.find(left);
  if (a < 0) return "'" + std::string(left) + "' is not in model.vocab";
  const int32_t b = vocab_.find(right);
  if (b < 0) return "'" + std::string(right) + "' is not in model.vocab";
  const size_t prefix = options.continuing_subword_prefix.size();
  std::string merged(left);
  merged.append(right.substr(std::min(prefix, right.size())));
  const int32_t m = vocab_.find(merged);
  if (m < 0) return "the merged token '" + merged + "' is not in model.vocab";
  if ((merge_count_ + 1) * 10 > merges_.size() * 7) {  // grow (from_json without a reserve)
    std::vector<MergeSlot> old = std::move(merges_);
    merges_.assign(std::max<size_t>(16, old.size() * 2), MergeSlot{});
    for (const MergeSlot& s : old) {
      if (s.key == kEmpty) continue;
      size_t i = mix(s.key) & (merges_.size() - 1);
      while (merges_[i].key != kEmpty) i = (i + 1) & (merges_.size() - 1);
      merges_[i] = s;
    }
  }
  const uint64_t key = pair_key(a, b);
  const size_t mask = merges_.size() - 1;
  size_t i = mix(key) & mask;
  while (merges_[i].key != kEmpty && merges_[i].key != key) i = (i + 1) & mask;
  if (merges_[i].key == kEmpty) ++merge_count_;
  merges_[i] = MergeSlot{key, rank, m};  // a repeated pair keeps the later rank (as HF does)
  return {};
}

std::string BpeModel::finalize(bool byte_level) {
  byte_level_ = byte_level;
  id_to_token_.assign(static_cast<size_t>(max_id_ + 1), {0, ~0u});
  vocab_.for_each([&](uint32_t offset, uint32_t length, int32_t id) {
    id_to_token_[static_cast<size_t>(id)] = {offset, length};
  });
  if (options.unk_token) {
    unk_id_ = vocab_.find(*options.unk_token);
    if (unk_id_ < 0) return "model.unk_token '" + *options.unk_token + "' is not in model.vocab";
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    fallback_ids_[b] = vocab_.find(name);
    if (byte_level) {
      byte_chars_[b].clear();
      unicode::append_utf8(byte_chars_[b], byte_level_char(static_cast<uint8_t>(b)));
      byte_ids_[b] = vocab_.find(byte_chars_[b]);
    }
  }
  return {};
}

std::optional<std::string_view> BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return std::nullopt;
  auto [offset, length] = id_to_token_[static_cast<size_t>(id)];
  if (length == ~0u) return std::nullopt;
  return vocab_.key_at(offset, length);
}

// ---- BpeModel: encoding ----------------------------------------------------------------
const BpeModel::MergeSlot* BpeModel::find_merge(int32_t left, int32_t right) const {
  if (merges_.empty()) return nullptr;
  const uint64_t key = pair_key(left, right);
  const size_t mask = merges_.size() - 1;
  for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
    const MergeSlot& s = merges_[i];
    if (s.key == key) return &s;
    if (s.key == kEmpty) return nullptr;
  }
}

// The symbols a word starts as: one per byte (byte-level) or per character, with
// HF's handling of characters missing from the vocabulary: byte fallback
// ("<0xNN>" per byte), else unk (consecutive unks fused when fuse_unk), else dropped.
void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& sym) const {
  sym.clear();
  const bool affixes = !options.continuing_subword_prefix.empty() || !options.end_of_word_suffix.empty();
  if (byte_level_ && !affixes && unk_id_ < 0 && !options.byte_fallback) {
    for (unsigned char b : word)
      if (byte_ids_[b] >= 0) sym.push_back(byte_ids_[b]);
    return;
  }
  bool pending_unk = false;
  std::string piece;
  size_t i = 0;
  while (i < word.size()) {
    const size_t start = i;
    if (byte_level_) {
      ++i;
    } else {
      const size_t len = unicode::sequence_length(word, i);
      i += len ? len : 1;
    }
    std::string_view ch = word.substr(start, i - start);
    if (byte_level_) ch = byte_chars_[static_cast<unsigned char>(word[start])];
    int32_t id;
    if (!affixes) {
      id = vocab_.find(ch);
    } else {
      piece.clear();
      if (start > 0) piece += options.continuing_subword_prefix;
      piece.append(ch);
      if (i == word.size()) piece += options.end_of_word_suffix;
      id = vocab_.find(piece);
      ch = piece;
    }
    if (id >= 0) {
      if (pending_unk) sym.push_back(unk_id_);
      pending_unk = false;
      sym.push_back(id);
      continue;
    }
    if (options.byte_fallback) {
      bool all = true;
      for (unsigned char b : ch) all = all && fallback_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) sym.push_back(fallback_ids_[b]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk && !options.fuse_unk) sym.push_back(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) sym.push_back(unk_id_);
}

// Few symbols: repeatedly merge the lowest-ranked adjacent pair (leftmost on ties).
void BpeModel::merge_small(std::vector<int32_t>& sym) const {
  const size_t n = sym.size();
  uint32_t ranks[64];
  int32_t merged[64];
  auto look = [&](size_t k) {
    const MergeSlot* m = find_merge(sym[k], sym[k + 1]);
    ranks[k] = m ? m->rank : kNoRank;
    merged[k] = m ? m->merged : -1;
  };
  for (size_t k = 0; k + 1 < n; ++k) look(k);
  size_t m = n;
  while (m > 1) {
    size_t best = 0;
    uint32_t best_rank = kNoRank;
    for (size_t k = 0; k + 1 < m; ++k)
      if (ranks[k] < best_rank) {
        best_rank = ranks[k];
        best = k;
      }
    if (best_rank == kNoRank) break;
    sym[best] = merged[best];
    for (size_t k = best + 1; k + 1 < m; ++k) sym[k] = sym[k + 1];
    for (size_t k = best + 1; k + 2 < m; ++k) {
      ranks[k] = ranks[k + 1];
      merged[k] = merged[k + 1];
    }
    --m;
    if (best > 0) look(best - 1);
    if (best + 1 < m) look(best);
  }
  sym.resize(m);
}

// Many symbols: a heap of candidate merges over a linked list, as HF does
// (rank, then position; stale entries are skipped).
void BpeModel::merge_large(std::vector<int32_t>& sym) const {
  const auto n = static_cast<int32_t>(sym.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (int32_t k = 0; k < n; ++k) {
    prev[k] = k - 1;
    next[k] = k + 1 < n ? k + 1 : -1;
  }
  struct Cand {
    uint32_t rank;
    int32_t pos;
    int32_t merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const MergeSlot* m = find_merge(sym[pos], sym[next[pos]])) heap.push({m->rank, pos, m->merged});
  };
  for (int32_t k = 0; k + 1 < n; ++k) push(k);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] < 0) continue;
    const int32_t right = next[c.pos];
    const MergeSlot* m = find_merge(sym[c.pos], sym[right]);
    if (!m || m->merged != c.merged) continue;  // stale
    sym[c.pos] = c.merged;
    alive[right] = 0;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (int32_t k = 0; k < n; ++k)
    if (alive[k]) sym[w++] = sym[k];
  sym.resize(w);
}

void BpeModel::encode_uncached(std::string_view word, std::vector<int32_t>& out) const {
  thread_local std::vector<int32_t> sym;
  if (options.ignore_merges) {
    int32_t whole;
    if (byte_level_) {
      std::string mapped;
      for (unsigned char b : word) mapped += byte_chars_[b];
      whole = vocab_.find(mapped);
    } else {
      whole = vocab_.find(word);
    }
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  initial_symbols(word, sym);
  if (sym.size() <= 64) merge_small(sym);
  else merge_large(sym);
  out.insert(out.end(), sym.begin(), sym.end());
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() == 1 && byte_level_ && byte_ids_[static_cast<unsigned char>(word[0])] >= 0 &&
      options.continuing_subword_prefix.empty() && options.end_of_word_suffix.empty()) {
    out.push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
    return;
  }
  if (word.size() > WordCache::kMaxWordBytes) {
    encode_uncached(word, out);
    return;
  }
  const uint64_t h = hash_bytes(word);
  if (cache_.find(word, h, out)) return;
  const size_t before = out.size();
  encode_uncached(word, out);
  cache_.insert(word, h, out.data() + before, out.size() - before);
}

}  // namespace rl::model
