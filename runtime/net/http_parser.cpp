#include "net/http_parser.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "base/buffer_pool.hpp"

namespace rl::net {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// RFC 9110 token characters (method and header names).
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (std::isalnum(c)) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) == std::string_view::npos) return false;
  }
  return true;
}

bool contains_token(std::string_view list, std::string_view token) {  // comma list, case-insensitive
  const std::string l = lower(list);
  size_t start = 0;
  while (start <= l.size()) {
    size_t comma = l.find(',', start);
    if (comma == std::string::npos) comma = l.size();
    if (trim(std::string_view(l).substr(start, comma - start)) == token) return true;
    start = comma + 1;
  }
  return false;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 &&
               hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string_view ServerRequest::header(std::string_view name) const {
  for (auto& [k, v] : headers)
    if (k == name) return v;
  return {};
}

std::string ServerRequest::query_param(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    size_t amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    size_t eq = part.find('=');
    if (url_decode(part.substr(0, eq)) == name) return eq == std::string_view::npos ? "" : url_decode(part.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return {};
}

void RequestParser::reset() {
  state_ = State::head;
  head_scanned_ = 0;
  remaining_ = 0;
  expect_continue_ = false;
  req_ = ServerRequest{};
  error_status_ = 0;
  error_.clear();
}

RequestParser::Status RequestParser::fail(int status, std::string message) {
  error_status_ = status;
  error_ = std::move(message);
  return Status::error;
}

RequestParser::Status RequestParser::feed(const std::string& buf, size_t& pos) {
  if (error_status_) return Status::error;
  while (true) {
    const std::string_view in = std::string_view(buf).substr(pos);
    switch (state_) {
      case State::head: {
        if (head_scanned_ == 0) {  // RFC 9112 2.2: ignore empty lines before a request line
          size_t skip = 0;
          while (skip < in.size() && (in[skip] == '\r' || in[skip] == '\n')) ++skip;
          pos += skip;
          if (skip == in.size()) return Status::need_more;
          if (skip) continue;
        }
        const size_t from = head_scanned_ > 3 ? head_scanned_ - 3 : 0;
        size_t a = in.find("\n\r\n", from), b = in.find("\n\n", from);
        size_t end = std::string_view::npos;
        if (a != std::string_view::npos) end = a + 3;
        if (b != std::string_view::npos && (end == std::string_view::npos || b + 2 < end)) end = b + 2;
        if (end == std::string_view::npos) {
          head_scanned_ = in.size();
          if (in.size() > limits_.max_header_bytes)
            return fail(431, "request head larger than " + std::to_string(limits_.max_header_bytes) + " bytes");
          return Status::need_more;
        }
        if (end > limits_.max_header_bytes)
          return fail(431, "request head larger than " + std::to_string(limits_.max_header_bytes) + " bytes");
        head_scanned_ = end;
        if (Status s = parse_head(in.substr(0, end)); s == Status::error) return s;
        pos += end;
        continue;
      }
      case State::body_length: {
        const size_t take = std::min(remaining_, in.size());
        req_.body.append(in.data(), take);
        pos += take;
        remaining_ -= take;
        if (remaining_ > 0) return Status::need_more;
        state_ = State::done;
        continue;
      }
      case State::chunked:
        switch (chunked_.feed(buf, pos, req_.body)) {
          case ChunkedDecoder::Status::need_more:
            return Status::need_more;
          case ChunkedDecoder::Status::error:
            return fail(chunked_.error_status(),
                        (chunked_.error_status() == 413 ? "request " : "") + chunked_.error());
          case ChunkedDecoder::Status::done:
            state_ = State::done;
            continue;
        }
        continue;
      case State::done:
        return Status::done;
    }
  }
}

RequestParser::Status RequestParser::parse_head(std::string_view head) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < head.size()) {
    size_t nl = head.find('\n', start);
    if (nl == std::string_view::npos) nl = head.size();
    std::string_view line = head.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) lines.push_back(line);
    start = nl + 1;
  }
  if (lines.empty()) return fail(400, "empty request");
  // Request line: METHOD SP request-target SP HTTP-version
  const std::string_view rl = lines[0];
  const size_t sp1 = rl.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "malformed request line '" + std::string(rl.substr(0, 80)) + "' (expected 'METHOD /path HTTP/1.1')");
  const std::string_view method = rl.substr(0, sp1), target = rl.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = rl.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "bad method '" + std::string(method.substr(0, 32)) + "'");
  if (version == "HTTP/1.1") {
    req_.version_minor = 1;
  } else if (version == "HTTP/1.0") {
    req_.version_minor = 0;
  } else if (version.rfind("HTTP/", 0) == 0) {
    return fail(505, "HTTP version '" + std::string(version.substr(0, 16)) + "' not supported (HTTP/1.0 and 1.1 are)");
  } else {
    return fail(400, "bad HTTP version '" + std::string(version.substr(0, 16)) + "'");
  }
  if (target.empty() || (target[0] != '/' && target != "*" && target.rfind("http://", 0) != 0))
    return fail(400, "bad request target '" + std::string(target.substr(0, 80)) + "' (expected a path starting with '/')");
  for (unsigned char c : target)
    if (c <= 0x20 || c == 0x7f) return fail(400, "control character in request target");
  req_.method = method;
  req_.target = target;
  std::string_view path = target;
  if (path.rfind("http://", 0) == 0) {  // absolute form: keep the path part
    const size_t slash = path.find('/', 7);
    path = slash == std::string_view::npos ? std::string_view("/") : path.substr(slash);
  }
  const size_t q = path.find('?');
  req_.path = path.substr(0, q);
  if (q != std::string_view::npos) req_.query = path.substr(q + 1);

  if (lines.size() - 1 > limits_.max_headers)
    return fail(431, "more than " + std::to_string(limits_.max_headers) + " header fields");
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    if (line[0] == ' ' || line[0] == '\t') return fail(400, "obsolete header line folding is not accepted");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos)
      return fail(400, "header line without ':' ('" + std::string(line.substr(0, 40)) + "')");
    const std::string_view name = line.substr(0, colon);
    if (!is_token(name)) return fail(400, "bad header name '" + std::string(name.substr(0, 40)) + "'");
    req_.headers.emplace_back(lower(name), std::string(trim(line.substr(colon + 1))));
  }

  // Body framing (RFC 9112 6). Both headers at once is a smuggling vector: refused.
  std::string_view te, cl;
  for (auto& [k, v] : req_.headers) {
    if (k == "transfer-encoding") {
      if (!te.empty()) return fail(400, "repeated Transfer-Encoding header");
      te = v;
    } else if (k == "content-length") {
      if (!cl.empty() && cl != v) return fail(400, "conflicting Content-Length headers");
      cl = v;
    }
  }
  const std::string_view conn = req_.header("connection");
  const bool expects = contains_token(req_.header("expect"), "100-continue") && req_.version_minor == 1;
  req_.keep_alive = req_.version_minor == 1 ? !contains_token(conn, "close") : contains_token(conn, "keep-alive");
  if (!te.empty()) {
    if (!cl.empty()) return fail(400, "both Transfer-Encoding and Content-Length given");
    if (!contains_token(te, "chunked") || lower(trim(te)).rfind("chunked") != lower(trim(te)).size() - 7)
      return fail(501, "Transfer-Encoding '" + std::string(te.substr(0, 40)) + "' not supported (only chunked)");
    chunked_ = ChunkedDecoder({.max_body_bytes = limits_.max_body_bytes, .max_line_bytes = 1024,
                               .max_trailer_bytes = limits_.max_header_bytes});
    state_ = State::chunked;
    expect_continue_ = expects;
    return Status::need_more;
  }
  if (!cl.empty()) {
    size_t n = 0;
    auto [p, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), n);
    if (ec != std::errc() || p != cl.data() + cl.size())
      return fail(400, "bad Content-Length '" + std::string(cl.substr(0, 24)) + "' (a decimal number expected)");
    if (n > limits_.max_body_bytes)
      return fail(413, "request body of " + std::to_string(n) + " bytes is larger than the limit of " +
                           std::to_string(limits_.max_body_bytes) + " bytes");
    if (n >= BufferPool::kMinBytes) req_.body = large_buffers().take(n);   // a kept buffer: no fresh pages
    else req_.body.reserve(n);
    remaining_ = n;
    state_ = n ? State::body_length : State::done;
    expect_continue_ = expects && n > 0;
    return Status::need_more;
  }
  state_ = State::done;
  return Status::need_more;
}

}  // namespace rl::net
