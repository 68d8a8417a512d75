#include "net/sse.hpp"

#include <cstring>
#include <stdexcept>

namespace rl::net {

namespace {
constexpr std::string_view kBom = "\xEF\xBB\xBF";

// Position of the next CR or LF at or after `from`, or npos.
size_t find_eol(std::string_view s, size_t from) {
  for (size_t i = from; i < s.size(); ++i)
    if (s[i] == '\n' || s[i] == '\r') return i;
  return std::string_view::npos;
}

bool all_digits(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;  // 18 digits always fit in int64
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}
}  // namespace

void SseParser::reset() {
  line_.clear();
  skip_lf_ = false;
  at_start_ = true;
  bom_seen_.clear();
  data_.clear();
  event_.clear();
  has_data_ = false;
  block_retry_.reset();
  last_id_.clear();
  retry_.reset();
}

void SseParser::finish() {
  line_.clear();
  skip_lf_ = false;
  data_.clear();
  event_.clear();
  has_data_ = false;
  block_retry_.reset();
}

void SseParser::feed(std::string_view bytes, std::vector<SseEvent>& out) {
  std::string joined;  // only used when a BOM prefix turned out not to be one
  if (at_start_) {
    size_t i = 0;
    while (i < bytes.size() && bom_seen_.size() < kBom.size() && bytes[i] == kBom[bom_seen_.size()])
      bom_seen_ += bytes[i++];
    if (bom_seen_.size() == kBom.size()) {
      at_start_ = false;  // a whole BOM: drop it
      bom_seen_.clear();
      bytes.remove_prefix(i);
    } else if (i == bytes.size()) {
      return;  // still a BOM prefix: wait for more bytes
    } else {
      at_start_ = false;  // not a BOM: what we held is ordinary data
      joined = bom_seen_;
      joined.append(bytes.substr(i));
      bom_seen_.clear();
      bytes = joined;
    }
  }
  size_t pos = 0;
  if (skip_lf_ && !bytes.empty()) {
    if (bytes[0] == '\n') pos = 1;
    skip_lf_ = false;
  }
  while (pos < bytes.size()) {
    const size_t eol = find_eol(bytes, pos);
    if (eol == std::string_view::npos) {
      if (line_.size() + (bytes.size() - pos) > max_line_)
        throw std::length_error("SSE line longer than " + std::to_string(max_line_) + " bytes without a line break");
      line_.append(bytes.substr(pos));
      return;
    }
    if (line_.empty()) {
      process_line(bytes.substr(pos, eol - pos), out);
    } else {
      line_.append(bytes.substr(pos, eol - pos));
      process_line(line_, out);
      line_.clear();
    }
    pos = eol + 1;
    if (bytes[eol] == '\r') {
      if (pos < bytes.size()) {
        if (bytes[pos] == '\n') ++pos;
      } else {
        skip_lf_ = true;  // the LF of this CRLF may start the next chunk
      }
    }
  }
}

void SseParser::process_line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    dispatch(out);
    return;
  }
  if (line[0] == ':') return;  // comment (often a keep-alive ping)
  std::string_view field = line, value;
  if (auto colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    data_.append(value);
    data_ += '\n';
    has_data_ = true;
  } else if (field == "event") {
    event_.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) last_id_.assign(value);
  } else if (field == "retry") {
    if (all_digits(value)) {
      retry_ = std::stoll(std::string(value));
      block_retry_ = retry_;
    }
  }
  // Other fields are ignored, as the spec says.
}

void SseParser::dispatch(std::vector<SseEvent>& out) {
  if (!has_data_) {  // a block without data (e.g. only "event:" or "retry:") is no event
    event_.clear();
    block_retry_.reset();
    return;
  }
  SseEvent ev;
  data_.pop_back();  // the "\n" after the last data line
  ev.data = std::move(data_);
  if (!event_.empty()) ev.event = std::move(event_);
  ev.id = last_id_;
  ev.retry = block_retry_;
  out.push_back(std::move(ev));
  data_.clear();
  event_.clear();
  has_data_ = false;
  block_retry_.reset();
}

}  // namespace rl::net
