// The one policy for JSON that comes from outside (HTTP bodies, the control
// channel, rl.json.decode, model files): limits checked while parsing, so a
// hostile text is refused before it can cost memory or, later, stack (nlohmann's
// dump, copy and compare recurse once per level), and error messages that name
// the field and never echo more than a short, printable excerpt of the input.
//
//   json body = json_input::parse(req.body, "request body");      // throws json_input::Error
//   "request body: nested deeper than 128 levels in field 'text[0][0][0][0][0][0]... (128 levels)' (hint: ...)"
//
// Limits (process-wide defaults, from the environment when set):
//   RLHOST_JSON_MAX_DEPTH     nesting of arrays and objects   (128)
//   RLHOST_JSON_MAX_BYTES     the whole text                  (64 MiB)
//   RLHOST_JSON_MAX_STRING    one string or key, in bytes     (16 MiB)
//   RLHOST_JSON_MAX_ELEMENTS  values in all (each scalar, array, object)  (8 Mi)
// Files (tokenizer.json, config.json, safetensors headers) use file_limits():
// the same depth, no size caps (the file's owner chose its size).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/errors.hpp"

namespace rl::json_input {

struct Limits {
  size_t max_depth = 128;
  size_t max_bytes = size_t(64) << 20;
  size_t max_string = size_t(16) << 20;
  size_t max_elements = size_t(8) << 20;
};

// The defaults above, overridden by RLHOST_JSON_MAX_* (read once).
const Limits& limits();
// For trusted-size inputs (model files): limits().max_depth, no size caps.
Limits file_limits();

// A refused or malformed JSON text. what() is the whole message; field() the
// path where it broke ("" at the top level), already shortened and printable.
class Error : public rl::Error {
 public:
  Error(const std::string& message, std::string field, bool hinted)
      : rl::Error(message), field_(std::move(field)), hinted_(hinted) {}
  const std::string& field() const { return field_; }
  bool hinted() const { return hinted_; }  // the message ends with its own "(hint: ...)"

 private:
  std::string field_;
  bool hinted_;
};

// Parses `text` under `lim`; `what` names the input in messages ("request body",
// "config.json"). Throws Error (never nlohmann's parse_error).
nlohmann::json parse(std::string_view text, std::string_view what, const Limits& lim = limits());
nlohmann::ordered_json parse_ordered(std::string_view text, std::string_view what, const Limits& lim = limits());

// The bookkeeping behind parse(), for SAX consumers that build their own values
// (rl.json.decode builds Lua tables). Call the event methods in SAX order; each
// returns false once a limit is crossed, after which message() explains.
class Guard {
 public:
  Guard(std::string_view what, const Limits& lim);
  bool check_size(size_t text_bytes);
  bool scalar();
  bool string(size_t bytes);
  bool key(std::string_view k);
  // The key just seen (key()) was already in its object: refused, naming it and where.
  bool duplicate_key();
  bool open(bool array);
  void close();
  // nlohmann's parse_error: keeps its reason (line, column, what was expected),
  // with the excerpt of input it quotes made short and printable.
  void parse_error(size_t byte, std::string_view nlohmann_what);

  const std::string& message() const { return message_; }
  const std::string& field() const { return field_; }
  size_t depth() const { return frames_.size(); }
  [[noreturn]] void raise() const;

 private:
  struct Frame {
    bool array;
    size_t index;     // next element's index (arrays)
    std::string key;  // last key seen, shortened (objects)
  };
  bool count();  // one more value
  void value_done();
  bool refuse(const std::string& problem, const std::string& hint);
  std::string path() const;

  std::string what_;
  Limits lim_;
  std::vector<Frame> frames_;
  size_t elements_ = 0;
  std::string message_, field_;
  bool hinted_ = false;
};

// A short, printable excerpt of untrusted text for an error message: valid UTF-8
// kept, other bytes and control characters as \xNN, cut after max_bytes with the
// full size said.
std::string excerpt(std::string_view text, size_t max_bytes = 80);

// A short rendering of a value for an error message ("[1, 2, ...] (an array of
// 5000 elements)"): looks at most a few levels deep and max_chars characters, so
// it costs little whatever the value holds.
std::string brief(const nlohmann::json& v, size_t max_chars = 80);
std::string brief(const nlohmann::ordered_json& v, size_t max_chars = 80);

// dump() for replies that may carry client text: invalid UTF-8 replaced, never throws
// on it (only call it on values built under the limits above).
std::string dump_reply(const nlohmann::json& v);

}  // namespace rl::json_input
