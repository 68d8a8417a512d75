// Chunked transfer coding (RFC 9112 §7.1), decoding side: the one decoder of the
// server's request parser (net/http_parser.*) and the upstream client's response
// parser (net/upstream_parse.cpp). Fed the bytes after the head as they arrive (cut
// anywhere), it appends the decoded body and stops after the last chunk's trailer
// (trailer fields are read and dropped; chunk extensions are ignored).
//
//   ChunkedDecoder d({.max_body_bytes = 1 << 20});
//   size_t pos = 0;
//   switch (d.feed(buffer, pos, body)) { case need_more: ...; case done: ...; case error: d.error_status(), d.error(); }
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rl::net {

class ChunkedDecoder {
 public:
  struct Limits {
    size_t max_body_bytes = SIZE_MAX;    // decoded body (413 beyond)
    size_t max_line_bytes = 1024;        // a chunk-size line (400 beyond)
    size_t max_trailer_bytes = 64 * 1024;  // a trailer line (431 beyond)
  };
  enum class Status { need_more, done, error };

  ChunkedDecoder() = default;
  explicit ChunkedDecoder(Limits limits) : limits_(limits) {}

  // Decodes from in[pos..], appending body bytes to `body` and advancing `pos` past
  // what it consumed. `done`: the body is complete; `error`: error_status() (400, 413,
  // 431) and error() say why, and nothing more can be decoded.
  Status feed(std::string_view in, size_t& pos, std::string& body);
  void reset();

  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }

 private:
  enum class State { size, data, data_crlf, trailer, done };
  Status fail(int status, std::string msg);

  Limits limits_;
  State state_ = State::size;
  size_t remaining_ = 0;  // bytes of the current chunk still expected
  size_t decoded_ = 0;    // body bytes so far
  int error_status_ = 0;
  std::string error_;
};

}  // namespace rl::net
