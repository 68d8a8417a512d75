#include "net/chunked.hpp"

#include <algorithm>
#include <charconv>

namespace rl::net {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}
}  // namespace

void ChunkedDecoder::reset() {
  state_ = State::size;
  remaining_ = decoded_ = 0;
  error_status_ = 0;
  error_.clear();
}

ChunkedDecoder::Status ChunkedDecoder::fail(int status, std::string msg) {
  error_status_ = status;
  error_ = std::move(msg);
  return Status::error;
}

ChunkedDecoder::Status ChunkedDecoder::feed(std::string_view all, size_t& pos, std::string& body) {
  if (error_status_) return Status::error;
  while (true) {
    const std::string_view in = all.substr(std::min(pos, all.size()));
    switch (state_) {
      case State::size: {
        const size_t nl = in.find('\n');
        if (nl == std::string_view::npos) {
          if (in.size() > limits_.max_line_bytes)
            return fail(400, "chunk size line longer than " + std::to_string(limits_.max_line_bytes) + " bytes");
          return Status::need_more;
        }
        std::string_view line = trim(in.substr(0, nl));
        line = trim(line.substr(0, line.find(';')));  // chunk extensions are ignored
        size_t size = 0;
        auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), size, 16);
        if (line.empty() || ec != std::errc() || p != line.data() + line.size())
          return fail(400, "bad chunk size '" + std::string(line.substr(0, 32)) + "' (hex digits expected)");
        pos += nl + 1;
        if (size == 0) {
          state_ = State::trailer;
          continue;
        }
        if (size > limits_.max_body_bytes || decoded_ + size > limits_.max_body_bytes)
          return fail(413, "body larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
        remaining_ = size;
        state_ = State::data;
        continue;
      }
      case State::data: {
        const size_t take = std::min(remaining_, in.size());
        body.append(in.data(), take);
        pos += take;
        remaining_ -= take;
        decoded_ += take;
        if (remaining_ > 0) return Status::need_more;
        state_ = State::data_crlf;
        continue;
      }
      case State::data_crlf: {
        if (in.empty()) return Status::need_more;
        if (in[0] == '\n') {
          pos += 1;
        } else if (in[0] == '\r') {
          if (in.size() < 2) return Status::need_more;
          if (in[1] != '\n') return fail(400, "chunk data not followed by CRLF");
          pos += 2;
        } else {
          return fail(400, "chunk data longer than its declared size");
        }
        state_ = State::size;
        continue;
      }
      case State::trailer: {
        const size_t nl = in.find('\n');
        if (nl == std::string_view::npos) {
          if (in.size() > limits_.max_trailer_bytes) return fail(431, "chunked trailer too large");
          return Status::need_more;
        }
        const bool empty = trim(in.substr(0, nl)).empty();
        pos += nl + 1;
        if (empty) state_ = State::done;
        continue;
      }
      case State::done:
        return Status::done;
    }
  }
}

}  // namespace rl::net
