#include "metrics/tensorboard_writer.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <utility>

#include "base/errors.hpp"
#include "metrics/tfrecord.hpp"

namespace rl::metrics {
namespace {

constexpr std::string_view kWhat = "tensorboard";
constexpr std::string_view kHint =
    "choose a writable directory with --tensorboard-dir or $TENSORBOARD_DIR, or turn TensorBoard off";

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "localhost";
  return buf;
}

int next_writer_number() {
  static std::atomic<int> n{0};
  return n.fetch_add(1);
}

}  // namespace

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string event_file_name(double wall_time, std::string_view host, long pid, int n, std::string_view suffix) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%010lld", static_cast<long long>(std::floor(wall_time)));
  std::string name = "events.out.tfevents.";
  name += secs;
  name += '.';
  name += host;
  name += '.' + std::to_string(pid) + '.' + std::to_string(n);
  name += suffix;
  return name;
}

TensorBoardWriter::TensorBoardWriter(std::string dir, std::string_view filename_suffix) : dir_(std::move(dir)) {
  if (dir_.empty()) throw Error(std::string(kWhat) + ": the log directory is empty", std::string(kHint));
  if (filename_suffix.find('/') != std::string_view::npos)
    throw Error(std::string(kWhat) + ": filename suffix '" + std::string(filename_suffix) + "' contains '/'");
  create_directories(dir_, kWhat, kHint);
  const double now = wall_time_now();
  std::string path = dir_;
  if (path.back() != '/') path += '/';
  path += event_file_name(now, host_name(), static_cast<long>(::getpid()), next_writer_number(), filename_suffix);
  file_ = AppendFile(std::move(path), /*exclusive=*/true, kWhat, kHint);
  append_record(pending_, encode_file_version_event(now));
  flush();
}

void TensorBoardWriter::add_scalar(std::string_view tag, double value, int64_t step, std::optional<double> wall_time) {
  if (!is_open()) throw Error(std::string(kWhat) + ": writer for '" + dir_ + "' is closed");
  append_record(pending_, encode_scalar_event(wall_time.value_or(wall_time_now()), step, tag, value));
}

void TensorBoardWriter::add_scalars(const std::vector<Scalar>& scalars, int64_t step, std::optional<double> wall_time) {
  const double t = wall_time.value_or(wall_time_now());
  for (const auto& s : scalars) add_scalar(s.tag, s.value, step, t);
  flush();
}

void TensorBoardWriter::flush() {
  if (pending_.empty() || !is_open()) return;
  std::string data = std::exchange(pending_, {});
  file_.write(data);
}

void TensorBoardWriter::close() {
  if (!is_open()) return;
  try {
    flush();
  } catch (...) {
    file_.close();
    throw;
  }
  file_.close();
}

}  // namespace rl::metrics
