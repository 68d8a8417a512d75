// Incremental parser for server-sent events (the WHATWG "text/event-stream"
// format used by SGLang/OpenAI streaming). Feed it byte chunks cut anywhere --
// in the middle of a line, between the CR and LF of a CRLF, inside a UTF-8
// sequence -- and it hands back complete events.
//
// Spec behaviour kept on purpose: lines end with CRLF, LF or CR; a leading BOM
// is skipped; ':' lines are comments; "data" lines are joined with "\n"; a
// block without data is not an event; "id" persists across events (and is
// ignored when it contains NUL); an unterminated last event is dropped by
// finish(), as browsers do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rl::net {

struct SseEvent {
  std::string event = "message";  // the "event:" field, default "message"
  std::string data;               // "data:" lines joined by "\n"
  std::string id;                 // last event id seen so far (persists)
  std::optional<int64_t> retry;   // "retry:" (ms) seen in this event's block
};

class SseParser {
 public:
  // A line longer than this (no newline seen) is an error: a stream that never
  // ends a line would otherwise grow without bound.
  explicit SseParser(size_t max_line_bytes = 16u << 20) : max_line_(max_line_bytes) {}

  // Parses `bytes`, appending complete events to `out`. Throws
  // std::length_error when a line exceeds max_line_bytes.
  void feed(std::string_view bytes, std::vector<SseEvent>& out);
  std::vector<SseEvent> feed(std::string_view bytes) {
    std::vector<SseEvent> out;
    feed(bytes, out);
    return out;
  }
  // End of stream: discards a partial line and an undispatched event.
  void finish();
  void reset();

  const std::string& last_event_id() const { return last_id_; }
  // The latest valid "retry:" value (ms), the client's reconnection delay.
  std::optional<int64_t> retry_ms() const { return retry_; }
  // Bytes held for a line not yet terminated.
  size_t buffered() const { return line_.size(); }

 private:
  void process_line(std::string_view line, std::vector<SseEvent>& out);
  void dispatch(std::vector<SseEvent>& out);

  size_t max_line_;
  std::string line_;       // partial line carried over between chunks
  bool skip_lf_ = false;   // the previous chunk ended with CR: a leading LF belongs to it
  bool at_start_ = true;   // a UTF-8 BOM may still come
  std::string bom_seen_;   // BOM bytes matched so far at the very start
  std::string data_;
  std::string event_;
  bool has_data_ = false;
  std::optional<int64_t> block_retry_;
  std::string last_id_;
  std::optional<int64_t> retry_;
};

}  // namespace rl::net
