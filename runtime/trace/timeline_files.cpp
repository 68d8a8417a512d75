// Whole-file reads and atomic writes for the timeline's outputs (cache, page,
// Chrome trace): tens of MB each, written straight from C++ without a Lua copy.
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/errors.hpp"
#include "trace/timeline.hpp"

namespace rl::trace {

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("cannot write " + path + ": " + std::strerror(errno), "is its folder writable?");
  bool ok = true;
  for (auto p : parts) ok = ok && std::fwrite(p.data(), 1, p.size(), f) == p.size();
  const int saved = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    throw Error("cannot write " + path + ": " + std::strerror(saved ? saved : errno), "disk full?");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw Error("cannot write " + path + ": " + std::strerror(e));
  }
}

void write_timeline_page(const std::string& path, std::string_view head, std::string_view mid, std::string_view tail,
                         std::string_view cache, size_t first_rows) {
  // Rows are separated by ",\n" and nothing else in the text has a raw newline.
  size_t nl = std::string_view::npos, from = 0;
  for (size_t k = 0; k < first_rows; ++k, from = nl + 1)
    if ((nl = cache.find('\n', from)) == std::string_view::npos) break;
  const size_t rows_end = cache.rfind("]}");
  if (nl == std::string_view::npos || nl == 0 || cache[nl - 1] != ',' || rows_end == std::string_view::npos ||
      rows_end < nl) {
    write_file_atomic(path, {head, cache, mid, "[]", tail});
    return;
  }
  write_file_atomic(path, {head, cache.substr(0, nl - 1), "]}", mid, "[", cache.substr(nl + 1, rows_end - nl - 1), "]", tail});
}

std::string read_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error("cannot read " + path + ": " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) throw Error("cannot read " + path + ": read error");
  return out;
}

}  // namespace rl::trace
