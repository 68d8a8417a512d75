// zlib's streaming API with windowBits 15+32 (gzip or zlib header, detected)
// for inflate and 15+16 (gzip header) for deflate. Input is fed in chunks of at
// most UINT_MAX bytes because z_stream counts in `unsigned`.
#include "base/gzip.hpp"

#include <zlib.h>

#include <algorithm>
#include <climits>

#include "base/errors.hpp"

namespace rl::gzip {
namespace {

constexpr size_t kChunk = 1 << 20;

std::string zmsg(const z_stream& zs, int rc) {
  if (zs.msg) return zs.msg;
  return "zlib error " + std::to_string(rc);
}

// Feeds more of `data` into zs when its input is exhausted.
void refill(z_stream& zs, std::string_view data, size_t& fed) {
  if (zs.avail_in == 0 && fed < data.size()) {
    const size_t n = std::min<size_t>(data.size() - fed, UINT_MAX);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + fed));
    zs.avail_in = static_cast<uInt>(n);
    fed += n;
  }
}

}  // namespace

bool is_gzip(std::string_view data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f && static_cast<unsigned char>(data[1]) == 0x8b;
}

std::string decompress(std::string_view data, size_t max_bytes) {
  if (data.empty()) throw Error("gzip: empty input", "not a gzip file");
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) throw Error("gzip: inflateInit2 failed");
  std::string out;
  size_t fed = 0;
  try {
    for (;;) {
      refill(zs, data, fed);
      const size_t before = out.size();
      out.resize(before + kChunk);
      zs.next_out = reinterpret_cast<Bytef*>(out.data() + before);
      zs.avail_out = static_cast<uInt>(kChunk);
      const int rc = inflate(&zs, Z_NO_FLUSH);
      out.resize(before + (kChunk - zs.avail_out));
      if (out.size() > max_bytes) {
        throw Error("gzip: output larger than " + std::to_string(max_bytes) + " bytes",
                    "raise max_bytes, or is this a gzip bomb?");
      }
      if (rc == Z_STREAM_END) {
        // Concatenated members: continue when another gzip header follows.
        const size_t rest = zs.avail_in + (data.size() - fed);
        if (rest == 0) break;
        const std::string_view tail = data.substr(data.size() - rest);
        if (!is_gzip(tail)) break;  // trailing garbage after a member: ignored, as gzip -d warns
        if (inflateReset(&zs) != Z_OK) throw Error("gzip: inflateReset failed");
        continue;
      }
      if (rc == Z_BUF_ERROR && zs.avail_in == 0 && fed == data.size()) {
        throw Error("gzip: truncated input (" + std::to_string(data.size()) + " bytes, stream not finished)",
                    "was the file still being written?");
      }
      if (rc != Z_OK && rc != Z_BUF_ERROR) throw Error("gzip: corrupt input: " + zmsg(zs, rc), "not a gzip or zlib stream?");
    }
  } catch (...) {
    inflateEnd(&zs);
    throw;
  }
  inflateEnd(&zs);
  return out;
}

std::string compress(std::string_view data, int level) {
  if (level < -1 || level > 9) throw Error("gzip: level must be -1..9, got " + std::to_string(level));
  z_stream zs{};
  if (deflateInit2(&zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw Error("gzip: deflateInit2 failed");
  std::string out;
  size_t fed = 0;
  int rc = Z_OK;
  do {
    refill(zs, data, fed);
    const int flush = (fed == data.size() && zs.avail_in == 0) ? Z_FINISH : Z_NO_FLUSH;
    const size_t before = out.size();
    out.resize(before + kChunk);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + before);
    zs.avail_out = static_cast<uInt>(kChunk);
    rc = deflate(&zs, flush);
    out.resize(before + (kChunk - zs.avail_out));
    if (rc == Z_STREAM_ERROR) {
      deflateEnd(&zs);
      throw Error("gzip: deflate failed");
    }
  } while (rc != Z_STREAM_END);
  deflateEnd(&zs);
  return out;
}

}  // namespace rl::gzip
