#include "metrics/jsonl_writer.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <stdexcept>

namespace rl::metrics {
namespace {

constexpr std::string_view kWhat = "metrics jsonl";
constexpr std::string_view kHint = "choose a writable path with --metrics-dir, or leave it unset to write no JSONL";

AppendFile open_jsonl(std::string path) {
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) create_directories(parent.string(), kWhat, kHint);
  return AppendFile(std::move(path), /*exclusive=*/false, kWhat, kHint);
}

}  // namespace

JsonlWriter::JsonlWriter(std::string path) : file_(open_jsonl(std::move(path))) {}

void JsonlWriter::write_line(std::string_view json_object) {
  if (json_object.empty()) throw std::invalid_argument("a JSONL line cannot be empty");
  if (json_object.find_first_of("\r\n") != std::string_view::npos)
    throw std::invalid_argument("a JSONL line cannot contain a line break");
  std::string line;
  line.reserve(json_object.size() + 1);
  line.append(json_object);
  line += '\n';
  file_.write(line);  // one write(2): the line is atomic with respect to other appenders
}

void JsonlWriter::write(const nlohmann::json& value) {
  // nlohmann writes NaN and infinities as null, the JSONL convention here.
  write_line(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace rl::metrics
