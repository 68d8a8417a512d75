// Internals of rl::net::UpstreamPool shared by upstream.cpp (connections,
// requests, pooling) and upstream_parse.cpp (the response parser). Not a
// public header.
#pragma once

#include <sys/socket.h>

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "net/upstream.hpp"
#include "net/chunked.hpp"

namespace rl::net::upstream_detail {

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>((c >= 'A' && c <= 'Z') ? c + 32 : c);
  return out;
}

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Where a connection's response parser is.
enum class Parse { head, body_len, chunked, body_close, done };

}  // namespace rl::net::upstream_detail

namespace rl::net {

using upstream_detail::Parse;

struct UpstreamPool::Host {
  std::string authority;  // "host:port", also the Host header
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  std::vector<Conn*> idle;  // LIFO: the warmest connection first
  std::deque<Txn*> queue;
  int active = 0;
};

struct UpstreamPool::Conn {
  int fd = -1;
  Host* host = nullptr;
  Txn* txn = nullptr;
  bool connecting = false;
  bool closed = false;
  bool used = false;    // served a request before: may have been closed by the server meanwhile
  bool got_any = false; // a response byte arrived for the current request
  uint32_t events = 0;
  std::string in;
  size_t in_pos = 0;
  size_t head_scanned = 0;
  size_t out_pos = 0;   // into txn->wire
  Parse st = Parse::head;
  size_t remaining = 0;       // Content-Length body bytes still expected
  ChunkedDecoder chunked;     // a chunked body (net/chunked.hpp, shared with the server's request parser)
  bool keep_alive = true;
  uint64_t connect_timer = 0;
  bool paused = false;
  std::string decoded;  // body bytes decoded from the last read, handed to on_chunk
};

struct UpstreamPool::Txn {
  uint64_t id = 0;
  HttpRequest req;
  HttpClient::DoneFn done;
  HttpClient::ChunkFn on_chunk;
  Host* host = nullptr;
  Conn* conn = nullptr;
  std::string wire;  // the serialized request (kept for a stale-connection retry)
  HttpResponse resp;
  double submitted = 0;
  uint64_t deadline_timer = 0;
  bool queued = false;
  bool active = false;      // holds one of the host's slots
  bool stale_retried = false;
  bool finished = false;    // result waiting for deferred delivery
  HttpResult result;
  std::string prefix() const { return req.method + " " + req.url + ": "; }
};

}  // namespace rl::net
