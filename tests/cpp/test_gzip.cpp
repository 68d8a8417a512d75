// rl::gzip: round trips, zlib streams, joined members, and the failures a
// half-written trace file produces (truncated, corrupt, too large).
#include <catch2/catch.hpp>

#include <zlib.h>

#include <string>

#include "base/errors.hpp"
#include "base/gzip.hpp"

namespace gz = rl::gzip;

TEST_CASE("gzip round-trips at every level, binary and empty input") {
  std::string big;
  for (long long i = 0; i < 300000; ++i) big += static_cast<char>((i * 7919) % 251);  // no int overflow (UB)
  for (const std::string& s : {std::string(), std::string("hello"), std::string("\0\1\2", 3), big}) {
    for (int level : {-1, 0, 1, 9}) {
      const auto z = gz::compress(s, level);
      REQUIRE(gz::is_gzip(z));
      REQUIRE(gz::decompress(z, 1 << 30) == s);
    }
  }
}

TEST_CASE("gzip joins concatenated members and reads zlib streams") {
  REQUIRE(gz::decompress(gz::compress("ab") + gz::compress("cd"), 100) == "abcd");
  std::string src = "zlib stream, not gzip";
  uLongf n = compressBound(src.size());
  std::string z(n, '\0');
  REQUIRE(compress2(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(src.data()), src.size(), 6) == Z_OK);
  z.resize(n);
  REQUIRE_FALSE(gz::is_gzip(z));
  REQUIRE(gz::decompress(z, 100) == src);
}

TEST_CASE("gzip failures name what is wrong") {
  const auto z = gz::compress(std::string(5000, 'x'));
  REQUIRE_THROWS_WITH(gz::decompress(z.substr(0, z.size() - 8), 1 << 20), Catch::Contains("truncated input"));
  REQUIRE_THROWS_WITH(gz::decompress("plain text", 1 << 20), Catch::Contains("corrupt input"));
  REQUIRE_THROWS_WITH(gz::decompress("", 1 << 20), Catch::Contains("empty input"));
  REQUIRE_THROWS_WITH(gz::decompress(z, 100), Catch::Contains("larger than 100 bytes"));
  REQUIRE_THROWS_AS(gz::compress("x", 11), rl::Error);
}
