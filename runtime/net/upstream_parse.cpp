// The response side of rl::net::UpstreamPool: an incremental HTTP/1.1
// response parser (status line, headers, Content-Length / chunked (net/chunked.hpp) /
// close-delimited bodies, interim 1xx skipped) that hands decoded body bytes
// to the request once per read.
#include <strings.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "net/upstream_impl.hpp"

namespace rl::net {

using upstream_detail::lower;
using upstream_detail::trim;

// Parses what is buffered; hands decoded body bytes to the transaction once per
// call. Returns false when the transaction or connection is gone afterwards.
bool UpstreamPool::parse(Conn* c) {
  Txn* t = c->txn;
  const uint64_t id = t->id;
  std::string& body = c->decoded;  // reused per connection: no allocation per read
  body.clear();
  bool done = false;
  while (!done) {
    std::string_view in = std::string_view(c->in).substr(c->in_pos);
    switch (c->st) {
      case Parse::head: {
        const size_t from = c->head_scanned > 3 ? c->head_scanned - 3 : 0;
        const size_t end = in.find("\r\n\r\n", from);
        if (end == std::string_view::npos) {
          c->head_scanned = in.size();
          if (in.size() > opts_.max_head_bytes) {
            fail(t, "response head larger than " + std::to_string(opts_.max_head_bytes) + " bytes");
            return false;
          }
          goto out;
        }
        const std::string_view head = in.substr(0, end);
        c->in_pos += end + 4;
        c->head_scanned = 0;
        size_t nl = head.find("\r\n");
        const std::string_view status_line = head.substr(0, nl);
        int status = 0;
        if (status_line.size() < 12 || status_line.rfind("HTTP/1.", 0) != 0 ||
            std::from_chars(status_line.data() + 9, status_line.data() + 12, status).ec != std::errc()) {
          fail(t, "bad response status line '" + std::string(status_line.substr(0, 60)) + "'");
          return false;
        }
        const bool http10 = status_line[7] == '0';
        HttpResponse& r = t->resp;
        r.headers.clear();
        std::string_view te, cl, conn;
        while (nl != std::string_view::npos) {
          const size_t next = head.find("\r\n", nl + 2);
          const std::string_view line = head.substr(nl + 2, next == std::string_view::npos ? std::string_view::npos : next - nl - 2);
          nl = next;
          const size_t colon = line.find(':');
          if (colon == std::string_view::npos) continue;
          r.headers.emplace_back(lower(trim(line.substr(0, colon))), std::string(trim(line.substr(colon + 1))));
          const auto& [k, v] = r.headers.back();
          if (k == "transfer-encoding") te = v;
          else if (k == "content-length") cl = v;
          else if (k == "connection") conn = v;
        }
        if (status >= 100 && status < 200 && status != 101) continue;  // interim (100 Continue): the real one follows
        r.status = status;
        c->keep_alive = http10 ? strcasestr(std::string(conn).c_str(), "keep-alive") != nullptr
                               : strcasestr(std::string(conn).c_str(), "close") == nullptr;
        if (t->req.method == "HEAD" || status == 204 || status == 304) {
          c->st = Parse::done;
        } else if (!te.empty() && strcasestr(std::string(te).c_str(), "chunked")) {
          c->chunked = ChunkedDecoder({.max_trailer_bytes = opts_.max_head_bytes});
          c->st = Parse::chunked;
        } else if (!cl.empty()) {
          size_t n = 0;
          if (std::from_chars(cl.data(), cl.data() + cl.size(), n).ec != std::errc()) {
            fail(t, "bad Content-Length '" + std::string(cl) + "' in response");
            return false;
          }
          c->remaining = n;
          c->st = n ? Parse::body_len : Parse::done;
          if (!t->on_chunk) t->resp.body.reserve(n);
        } else {
          c->st = Parse::body_close;
          c->keep_alive = false;
        }
        continue;
      }
      case Parse::body_len: {
        const size_t take = std::min(c->remaining, in.size());
        body.append(in.data(), take);
        c->in_pos += take;
        c->remaining -= take;
        if (c->remaining) goto out;
        c->st = Parse::done;
        continue;
      }
      case Parse::chunked: {
        size_t pos = c->in_pos;
        const auto st = c->chunked.feed(c->in, pos, body);
        c->in_pos = pos;
        if (st == ChunkedDecoder::Status::need_more) goto out;
        if (st == ChunkedDecoder::Status::error) {
          fail(t, c->chunked.error() + " (in a chunked response)");
          return false;
        }
        c->st = Parse::done;
        continue;
      }
      case Parse::body_close:
        body.append(in.data(), in.size());
        c->in_pos += in.size();
        goto out;
      case Parse::done:
        done = true;
        break;
    }
  }
out:
  if (c->in_pos == c->in.size()) {
    c->in.clear();
    c->in_pos = 0;
  }
  if (!body.empty()) {
    if (t->on_chunk) {
      // Moved out rather than copied (a copy allocates): the callback may cancel
      // this transaction, which must not destroy the function while it runs.
      HttpClient::ChunkFn fn = std::move(t->on_chunk);
      fn(body);
      auto it = txns_.find(id);
      if (it == txns_.end()) return false;
      it->second->on_chunk = std::move(fn);
      if (it->second->conn != c || c->closed) return false;
    } else {
      t->resp.body.append(body);
    }
  }
  if (done) {
    // Reusable only if the exchange ended cleanly on both sides: nothing extra
    // received, and our request fully sent (a server may answer early, e.g. 413).
    complete(t, c->keep_alive && c->in.empty() && c->out_pos == t->wire.size());
    return false;
  }
  return true;
}

}  // namespace rl::net
