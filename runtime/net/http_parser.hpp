// Incremental HTTP/1.1 request parser for rl::net::EventServer.
//
// Fed the bytes of one connection as they arrive (cut anywhere), it yields one
// complete request at a time: request line, headers (names lowercased),
// and the body framed by Content-Length or chunked transfer coding (trailers
// are read and dropped). Bytes after a complete request stay unconsumed, so a
// pipelined next request is parsed only once the current one has been
// answered. Limits turn oversized input into 431/413 instead of unbounded
// memory; anything malformed is a 400 with a message saying what was wrong.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/chunked.hpp"

namespace rl::net {

struct ServerRequest {
  std::string method;
  std::string target;  // as sent: "/path?query"
  std::string path;    // target up to '?', not percent-decoded
  std::string query;   // after '?', raw
  int version_minor = 1;  // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  // lowercased names, in order
  std::string body;
  bool keep_alive = true;  // from the version and the Connection header
  std::string remote_addr;

  // The first value of header `name` (lowercase), or "" when absent.
  std::string_view header(std::string_view name) const;
  // Value of query parameter `name`, percent-decoded; "" when absent.
  std::string query_param(std::string_view name) const;
};

// Percent-decoding for query strings ('+' is a space).
std::string url_decode(std::string_view s);

class RequestParser {
 public:
  struct Limits {
    size_t max_header_bytes = 64 * 1024;         // request line + headers
    size_t max_body_bytes = 256 * 1024 * 1024;  // decoded body
    size_t max_headers = 128;
  };
  enum class Status { need_more, done, error };

  RequestParser() = default;
  explicit RequestParser(Limits limits) : limits_(limits) {}

  // Parses from `buf` starting at `pos`, advancing `pos` past what it consumed.
  // `done`: request() holds a complete request; call reset() before the next.
  // `error`: error_status() (400, 413, 431, 501, 505) and error_message() say why;
  // the connection cannot be parsed further and must be closed after answering.
  Status feed(const std::string& buf, size_t& pos);

  ServerRequest& request() { return req_; }
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_; }
  // True once any byte of the current request has been seen (for idle timeouts).
  bool in_progress() const { return state_ != State::head || head_scanned_ > 0; }
  // True once per request whose head said "Expect: 100-continue" and whose body
  // has not arrived yet: the server should send "100 Continue" now (curl waits
  // a second for it before sending bodies over 1 KiB). Cleared by the call.
  bool take_expect_continue() {
    const bool v = expect_continue_;
    expect_continue_ = false;
    return v;
  }
  void reset();

  // A Content-Length body still arriving: the bytes it still expects (0 in any other
  // state). A server with nothing buffered past the head may read them straight into
  // the body (no copy through its input buffer): read_body(n, fill) lets fill(dst, n)
  // write up to n <= body_remaining() bytes at dst and return how many it wrote (<= 0:
  // none); the next feed() then finishes the request once all have come.
  size_t body_remaining() const { return state_ == State::body_length ? remaining_ : 0; }
  template <class Fill>
  auto read_body(size_t n, Fill&& fill) {
    const size_t had = req_.body.size();
    req_.body.resize(had + n);   // zeros, overwritten by fill (reserved at the head: no reallocation)
    const auto got = fill(req_.body.data() + had, n);
    const size_t kept = got > 0 ? static_cast<size_t>(got) : 0;
    req_.body.resize(had + kept);
    remaining_ -= kept;
    if (remaining_ == 0) state_ = State::done;
    return got;
  }

 private:
  enum class State { head, body_length, chunked, done };

  Status fail(int status, std::string message);
  Status parse_head(std::string_view head);

  Limits limits_;
  State state_ = State::head;
  size_t head_scanned_ = 0;  // bytes of the head already searched for its end
  size_t remaining_ = 0;     // Content-Length body bytes still expected
  ChunkedDecoder chunked_;   // a chunked body (net/chunked.hpp, shared with the upstream client)
  bool expect_continue_ = false;
  ServerRequest req_;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace rl::net
