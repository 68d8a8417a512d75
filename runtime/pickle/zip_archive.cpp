#include "pickle/zip_archive.hpp"

#include <array>
#include <cstdio>
#include <cstring>

#include "base/errors.hpp"

namespace rl::pickle {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr uint16_t kUtf8Flag = 0x0800, kVersion = 20, kDosDate = 0x21;  // 1980-01-01, a valid DOS date
constexpr uint16_t kPaddingId = 0x4246;  // "FB": torch's alignment padding extra field

// CRC-32 (zip's polynomial), slice-by-8: eight tables, eight bytes per step
// (a 50 MB dump is checked on every load).
const std::array<std::array<uint32_t, 256>, 8>& crc_tables() {
  static const auto tables = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xff];
    return t;
  }();
  return tables;
}

void put16(std::string& out, uint16_t v) { out.append(reinterpret_cast<const char*>(&v), 2); }
void put32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto& t = crc_tables();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    const uint32_t lo = crc ^ (uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][p[4]] ^
          t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; n > 0; --n, ++p) crc = t[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
  return ~crc;
}

bool looks_like_zip(std::string_view data) { return data.size() >= 4 && data.substr(0, 4) == "PK\x03\x04"; }

// ---- writer ------------------------------------------------------------------------

void ZipWriter::add(const std::string& name, std::string_view data, size_t align) {
  if (name.size() > 0xffff) throw Error("zip: entry name too long: " + name.substr(0, 64) + "...");
  const uint64_t offset = out_.size();
  const uint64_t before_pad = offset + 30 + name.size() + 4;
  const size_t pad = align > 1 ? static_cast<size_t>((align - before_pad % align) % align) : 0;
  const uint32_t crc = crc32(data.data(), data.size());
  if (data.size() > 0xffffffffu) throw Error("zip: entry " + name + " is larger than 4 GiB", "ZIP64 writing is not supported");
  put32(out_, kLocalSig);
  put16(out_, kVersion);
  put16(out_, kUtf8Flag);
  put16(out_, 0);  // stored
  put16(out_, 0);  // time
  put16(out_, kDosDate);
  put32(out_, crc);
  put32(out_, static_cast<uint32_t>(data.size()));
  put32(out_, static_cast<uint32_t>(data.size()));
  put16(out_, static_cast<uint16_t>(name.size()));
  put16(out_, static_cast<uint16_t>(4 + pad));
  out_ += name;
  put16(out_, kPaddingId);
  put16(out_, static_cast<uint16_t>(pad));
  out_.append(pad, 'Z');
  out_.append(data.data(), data.size());
  entries_.push_back({name, crc, data.size(), offset});
}

std::string ZipWriter::finish() {
  const uint64_t cd_offset = out_.size();
  for (const auto& e : entries_) {
    if (e.header_offset > 0xffffffffu) throw Error("zip: archive larger than 4 GiB", "ZIP64 writing is not supported");
    put32(out_, kCentralSig);
    put16(out_, kVersion);  // made by
    put16(out_, kVersion);  // needed
    put16(out_, kUtf8Flag);
    put16(out_, 0);
    put16(out_, 0);
    put16(out_, kDosDate);
    put32(out_, e.crc);
    put32(out_, static_cast<uint32_t>(e.size));
    put32(out_, static_cast<uint32_t>(e.size));
    put16(out_, static_cast<uint16_t>(e.name.size()));
    put16(out_, 0);  // extra
    put16(out_, 0);  // comment
    put16(out_, 0);  // disk
    put16(out_, 0);  // internal attributes
    put32(out_, 0);  // external attributes
    put32(out_, static_cast<uint32_t>(e.header_offset));
    out_ += e.name;
  }
  const uint64_t cd_size = out_.size() - cd_offset;
  if (entries_.size() > 0xffff || cd_offset + cd_size > 0xffffffffu)
    throw Error("zip: archive larger than 4 GiB or with more than 65535 entries", "ZIP64 writing is not supported");
  put32(out_, kEndSig);
  put16(out_, 0);
  put16(out_, 0);
  put16(out_, static_cast<uint16_t>(entries_.size()));
  put16(out_, static_cast<uint16_t>(entries_.size()));
  put32(out_, static_cast<uint32_t>(cd_size));
  put32(out_, static_cast<uint32_t>(cd_offset));
  put16(out_, 0);
  entries_.clear();
  return std::move(out_);
}

// ---- reader ------------------------------------------------------------------------

namespace {

// Bounds-checked little-endian reads of the archive.
struct Cursor {
  std::string_view d;
  const std::string& where;
  [[noreturn]] void bad(const std::string& what) const {
    throw Error(where + ": " + what, "the file is truncated or not a zip archive written by torch.save");
  }
  void need(uint64_t at, uint64_t n, const char* what) const {
    if (at > d.size() || n > d.size() - at) bad(std::string(what) + " lies outside the file (" + std::to_string(d.size()) + " bytes)");
  }
  uint16_t u16(uint64_t at) const { uint16_t v; need(at, 2, "a header"); std::memcpy(&v, d.data() + at, 2); return v; }
  uint32_t u32(uint64_t at) const { uint32_t v; need(at, 4, "a header"); std::memcpy(&v, d.data() + at, 4); return v; }
  uint64_t u64(uint64_t at) const { uint64_t v; need(at, 8, "a header"); std::memcpy(&v, d.data() + at, 8); return v; }
};

}  // namespace

ZipReader::ZipReader(std::string_view data, std::string where) : data_(data), where_(std::move(where)) {
  const Cursor b{data_, where_};
  if (data_.size() < 22) b.bad("too short for a zip archive (" + std::to_string(data_.size()) + " bytes)");
  // The end record sits in the last 22 + 65535 (comment) bytes.
  uint64_t end = data_.size() - 22;
  const uint64_t lowest = data_.size() > 22 + 0xffff ? data_.size() - 22 - 0xffff : 0;
  while (b.u32(end) != kEndSig) {
    if (end == lowest) b.bad("no end-of-central-directory record");
    --end;
  }
  uint64_t count = b.u16(end + 10), cd_size = b.u32(end + 12), cd_offset = b.u32(end + 16);
  if (count == 0xffff || cd_size == 0xffffffffu || cd_offset == 0xffffffffu) {
    if (end < 20 || b.u32(end - 20) != kZip64LocatorSig) b.bad("a ZIP64 archive without its ZIP64 locator");
    const uint64_t z = b.u64(end - 20 + 8);
    if (b.u32(z) != kZip64EndSig) b.bad("the ZIP64 end record is missing");
    count = b.u64(z + 32);
    cd_size = b.u64(z + 40);
    cd_offset = b.u64(z + 48);
  }
  b.need(cd_offset, cd_size, "the central directory");
  uint64_t at = cd_offset;
  entries_.reserve(static_cast<size_t>(std::min<uint64_t>(count, cd_size / 46 + 1)));
  for (uint64_t i = 0; i < count; ++i) {
    if (b.u32(at) != kCentralSig) b.bad("central directory entry " + std::to_string(i) + " is damaged");
    ZipEntry e;
    e.flags = b.u16(at + 8);
    e.method = b.u16(at + 10);
    e.crc = b.u32(at + 16);
    e.stored_size = b.u32(at + 20);
    e.size = b.u32(at + 24);
    const uint16_t name_len = b.u16(at + 28), extra_len = b.u16(at + 30), comment_len = b.u16(at + 32);
    uint64_t header = b.u32(at + 42);
    b.need(at + 46, uint64_t{name_len} + extra_len + comment_len, "a central directory entry");
    e.name.assign(data_.data() + at + 46, name_len);
    // ZIP64 extended information: the 8-byte values of the fields that read 0xffffffff, in order.
    for (uint64_t x = at + 46 + name_len, xend = x + extra_len; x + 4 <= xend;) {
      const uint16_t id = b.u16(x), len = b.u16(x + 2);
      if (x + 4 + len > xend) b.bad("entry " + e.name + " has a damaged extra field");
      if (id == 0x0001) {
        uint64_t f = x + 4;
        auto next = [&](uint64_t& field) {
          if (f + 8 > x + 4 + len) b.bad("entry " + e.name + " has a short ZIP64 extra field");
          field = b.u64(f);
          f += 8;
        };
        if (e.size == 0xffffffffu) next(e.size);
        if (e.stored_size == 0xffffffffu) next(e.stored_size);
        if (header == 0xffffffffu) next(header);
      }
      x += 4 + len;
    }
    if (b.u32(header) != kLocalSig) b.bad("entry " + e.name + ": no local header at offset " + std::to_string(header));
    e.data_offset = header + 30 + b.u16(header + 26) + b.u16(header + 28);
    b.need(e.data_offset, e.stored_size, ("the data of entry " + e.name).c_str());
    entries_.push_back(std::move(e));
    at += 46 + name_len + extra_len + comment_len;
  }
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

std::string_view ZipReader::read(const ZipEntry& e) const {
  if (e.flags & 1) throw Error(where_ + ": zip entry " + e.name + " is encrypted", "torch.save never encrypts; re-save the dump");
  if (e.method != 0 || e.stored_size != e.size)
    throw Error(where_ + ": zip entry " + e.name + " is compressed (method " + std::to_string(e.method) + ")",
                "torch.save writes stored entries; re-save the dump with torch.save rather than re-zipping it");
  const std::string_view bytes = data_.substr(e.data_offset, e.size);
  const uint32_t crc = crc32(bytes.data(), bytes.size());
  if (crc != e.crc)
    throw Error(where_ + ": zip entry " + e.name + " fails its CRC check (stored " + hex32(e.crc) + ", computed " + hex32(crc) + ")",
                "the file is corrupt or was modified after it was written");
  return bytes;
}

}  // namespace rl::pickle
