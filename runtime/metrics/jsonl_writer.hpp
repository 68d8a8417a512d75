// A JSONL metrics file: one JSON object per line, appended and written with one
// write(2) per line, so each line is whole on disk as soon as the call returns and
// a concurrent reader (tail -f, a dashboard) never sees half of one.
//
//   JsonlWriter out("runs/x/metrics.jsonl");
//   out.write({{"rollout/step", 3}, {"rollout/raw_reward", 0.42}});   // NaN/inf → null
//   out.write_line(R"({"rollout/step":4})");                          // text already encoded
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>

#include "metrics/append_file.hpp"

namespace rl::metrics {

class JsonlWriter {
 public:
  // Creates the parent directory if needed and opens `path` for appending (an
  // existing file is continued, as for a resumed run). Throws rl::Error naming
  // the path, with a hint, when that fails.
  explicit JsonlWriter(std::string path);

  // Appends `json_object` (one JSON value, no newline inside) and '\n'.
  // Throws std::invalid_argument for empty text or text with a line break;
  // rl::Error when the write fails.
  void write_line(std::string_view json_object);
  // Appends `value` (compact; NaN and infinities become null, invalid UTF-8 is replaced).
  void write(const nlohmann::json& value);
  void close() { file_.close(); }

  bool is_open() const { return file_.is_open(); }
  const std::string& path() const { return file_.path(); }

 private:
  AppendFile file_;
};

}  // namespace rl::metrics
