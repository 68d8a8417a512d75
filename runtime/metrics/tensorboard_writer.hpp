// TensorBoard event files written natively (no TensorFlow, no protobuf library):
// what torch.utils.tensorboard.SummaryWriter.add_scalar produces, readable by
// TensorBoard, its EventAccumulator, and `wandb sync`.
//
//   TensorBoardWriter tb("tensorboard_log/proj/exp");
//   tb.add_scalars({{"rollout/raw_reward", 0.42}, {"perf/rollout_time", 12.3}}, /*step=*/3);
//
// File: <dir>/events.out.tfevents.<unix secs, 10 digits>.<hostname>.<pid>.<n><suffix>,
// SummaryWriter's naming (n counts writers in this process, so two writers opened
// in the same second never share a file). The first record is the file_version
// event; every scalar is one event. add_scalars() flushes, so a reader (TensorBoard
// polling the directory) sees whole records while the run goes on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "metrics/append_file.hpp"

namespace rl::metrics {

struct Scalar {
  std::string tag;
  double value = 0;
};

// Wall-clock seconds since the epoch (the events' wall_time).
double wall_time_now();

// "events.out.tfevents.<secs>.<host>.<pid>.<n><suffix>"
std::string event_file_name(double wall_time, std::string_view host, long pid, int n, std::string_view suffix);

class TensorBoardWriter {
 public:
  // Creates `dir` (with parents) and a new event file in it. Throws rl::Error
  // naming the directory or file, with a hint, when either cannot be created.
  explicit TensorBoardWriter(std::string dir, std::string_view filename_suffix = {});

  // Queues one scalar event at `step` (wall_time: now unless given).
  void add_scalar(std::string_view tag, double value, int64_t step, std::optional<double> wall_time = {});
  // Queues one event per scalar, in order, all with the same wall_time, then flushes.
  void add_scalars(const std::vector<Scalar>& scalars, int64_t step, std::optional<double> wall_time = {});
  // Writes the queued records (one write(2)). Throws rl::Error on a write failure;
  // the records that failed are dropped, not retried into a half-written file.
  void flush();
  // Flushes and closes; idempotent. Adding after close throws.
  void close();

  bool is_open() const { return file_.is_open(); }
  const std::string& dir() const { return dir_; }
  const std::string& path() const { return file_.path(); }

 private:
  std::string dir_;
  AppendFile file_;
  std::string pending_;  // framed records not yet written
};

}  // namespace rl::metrics
