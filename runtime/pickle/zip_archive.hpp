// Zip archives of stored (uncompressed) entries, in memory: what torch.save
// writes (PyTorchStreamWriter never compresses). The writer aligns each entry's
// data (torch aligns storages to 64 bytes so they can be memory-mapped) with a
// padding extra field, as torch does. The reader takes the central directory
// (so local headers with data descriptors, as torch writes them, are fine),
// understands ZIP64 end records and sizes, and CRC-checks every entry it reads.
// Bad input throws rl::Error naming the file, the entry and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rl::pickle {

// CRC-32 (ISO-HDLC, as zip and zlib), continuing from `crc`.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

// True when `data` starts with a zip local file header.
bool looks_like_zip(std::string_view data);

class ZipWriter {
 public:
  // Appends an entry whose data starts at a multiple of `align` bytes.
  void add(const std::string& name, std::string_view data, size_t align = 64);
  // The archive: entries, then the central directory and end record. Throws when
  // it would need ZIP64 (over 4 GiB or 65535 entries).
  std::string finish();

 private:
  struct Entry {
    std::string name;
    uint32_t crc;
    uint64_t size, header_offset;
  };
  std::string out_;
  std::vector<Entry> entries_;
};

struct ZipEntry {
  std::string name;
  uint64_t size = 0;         // uncompressed
  uint64_t stored_size = 0;  // compressed (== size for stored entries)
  uint32_t crc = 0;
  uint16_t method = 0;       // 0 = stored
  uint16_t flags = 0;
  uint64_t data_offset = 0;  // of the entry's data in the archive
};

class ZipReader {
 public:
  // Parses the directory of `data` (which must outlive the reader); `where`
  // (the file name) prefixes error messages.
  ZipReader(std::string_view data, std::string where);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view name) const;  // nullptr when absent
  // The entry's bytes, a view into the archive; CRC-checked. Throws for
  // compressed or encrypted entries.
  std::string_view read(const ZipEntry& e) const;

 private:
  std::string_view data_;
  std::string where_;
  std::vector<ZipEntry> entries_;
};

}  // namespace rl::pickle
