// LibTorch's profiler (kineto) as a start/stop object that writes Chrome traces
// (`*.trace.json.gz`, opened by Perfetto and chrome://tracing), the format
// SGLang's /start_profile writes with torch.profiler.
//
// LibTorch's profiler state is per thread: start() and stop() must run on the
// thread whose work is recorded (the engine calls them on its scheduler thread,
// between two steps). Intra-op worker threads are followed by LibTorch itself.
// This header is LibTorch-free so servers can hold a profiler cheaply.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace rl::profile {

struct ProfileOptions {
  std::filesystem::path output_dir;      // created if missing
  std::vector<std::string> activities = {"CPU"};  // CPU, GPU|CUDA (CUDA builds only)
  bool with_stack = false;               // Python/C++ stacks per op (costly)
  bool record_shapes = false;            // input shapes per op
  bool profile_memory = false;           // allocator events ("MEM" activity)
  std::string file_prefix = "rlhost";    // <prefix>-<unix ms>[-<stage>].trace.json.gz
};

class TorchProfiler {
 public:
  TorchProfiler() = default;
  ~TorchProfiler();  // stops a running profile without saving
  TorchProfiler(const TorchProfiler&) = delete;
  TorchProfiler& operator=(const TorchProfiler&) = delete;

  // Throws rl::Error naming the bad activity, or when already running.
  void start(const ProfileOptions& opts);
  // Stops and writes the trace; returns its path. `stage` (e.g. "prefill")
  // goes into the file name. Throws rl::Error when not running or on I/O errors.
  std::filesystem::path stop(const std::string& stage = {});
  // Stops and drops what was recorded.
  void cancel();
  bool running() const { return running_; }

 private:
  bool running_ = false;
  ProfileOptions opts_;
};

// Gzips `src` into `dst` (zlib, level 6) atomically (temp file + rename).
void gzip_file(const std::filesystem::path& src, const std::filesystem::path& dst);

}  // namespace rl::profile
