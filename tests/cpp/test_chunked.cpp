// The one chunked-transfer decoder (runtime/net/chunked.*), which the server's request
// parser and the upstream client's response parser both use (their own tests:
// test_event_server.cpp, test_upstream.cpp): input cut at every byte, extensions and
// trailers, and each malformed case named.
#include <catch2/catch.hpp>

#include <string>

#include "net/chunked.hpp"

using rl::net::ChunkedDecoder;

namespace {

// Feeds `wire` in pieces of `step` bytes; returns the final status, the body and what is left.
ChunkedDecoder::Status decode(ChunkedDecoder& d, const std::string& wire, size_t step, std::string& body,
                              std::string* rest = nullptr) {
  std::string buf;
  size_t pos = 0, fed = 0;
  auto st = ChunkedDecoder::Status::need_more;
  while (st == ChunkedDecoder::Status::need_more && fed < wire.size()) {
    buf.append(wire, fed, step);
    fed += step;
    st = d.feed(buf, pos, body);
  }
  if (rest) *rest = buf.substr(pos) + (fed < wire.size() ? wire.substr(fed) : "");
  return st;
}

}  // namespace

TEST_CASE("chunked: a body cut anywhere decodes the same; what follows stays unconsumed", "[chunked]") {
  const std::string wire = "4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
  for (size_t step : {1, 2, 3, 7, 1000}) {
    ChunkedDecoder d;
    std::string body, rest;
    REQUIRE(decode(d, wire, step, body, &rest) == ChunkedDecoder::Status::done);
    CHECK(body == "Wikipedia in\r\n\r\nchunks.");
    CHECK(rest == "NEXT");
  }
  ChunkedDecoder d;  // bare LF line ends are taken too
  std::string body;
  CHECK(decode(d, "3\nabc\n0\n\n", 1, body) == ChunkedDecoder::Status::done);
  CHECK(body == "abc");
}

TEST_CASE("chunked: malformed input is named, with its status", "[chunked]") {
  struct Case {
    std::string wire;
    ChunkedDecoder::Limits limits;
    int status;
    std::string message;
  };
  const Case cases[] = {
      {"zz\r\n", {}, 400, "bad chunk size 'zz' (hex digits expected)"},
      {"3x\r\nabc\r\n", {}, 400, "bad chunk size '3x'"},
      {"3\r\nabcd\r\n", {}, 400, "chunk data longer than its declared size"},
      {"3\r\nabc\rX", {}, 400, "chunk data not followed by CRLF"},
      {"10\r\n", {.max_body_bytes = 8}, 413, "body larger than 8 bytes"},
      {std::string(40, '1'), {.max_line_bytes = 32}, 400, "chunk size line longer than 32 bytes"},
      {"0\r\n" + std::string(40, 'x'), {.max_trailer_bytes = 32}, 431, "chunked trailer too large"},
  };
  for (const auto& c : cases) {
    INFO(c.wire);
    ChunkedDecoder d(c.limits);
    std::string body;
    REQUIRE(decode(d, c.wire, 1, body) == ChunkedDecoder::Status::error);
    CHECK(d.error_status() == c.status);
    CHECK_THAT(d.error(), Catch::Contains(c.message));
    size_t pos = 0;
    CHECK(d.feed("0\r\n\r\n", pos, body) == ChunkedDecoder::Status::error);  // stays failed
  }
}
