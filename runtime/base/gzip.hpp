// gzip in memory (zlib): decompress what SGLang, vLLM and our own profiler write
// (`*.trace.json.gz`), compress for tests and tools. No files, no Lua.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace rl::gzip {

// True when `data` starts with the gzip magic bytes (1f 8b).
bool is_gzip(std::string_view data);

// Inflates a gzip stream (several concatenated members are joined, as `gzip -d`
// does) or a zlib stream. Throws rl::Error for corrupt or truncated input, or
// when the output would exceed `max_bytes`.
std::string decompress(std::string_view data, size_t max_bytes);

// One gzip member at `level` (0-9, -1 = zlib's default). Throws rl::Error.
std::string compress(std::string_view data, int level = -1);

}  // namespace rl::gzip
