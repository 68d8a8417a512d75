// Kineto through LibTorch's C++ API (torch/csrc/autograd/profiler_kineto.h):
// prepareProfiler -> enableProfiler -> ... -> disableProfiler -> ProfilerResult::save,
// the same calls torch.profiler.profile makes from Python. save() writes plain
// Chrome-trace JSON; we gzip it because SGLang's traces are .trace.json.gz and
// Perfetto opens those directly.
#include "profile/torch_profiler.hpp"

#include <torch/csrc/autograd/profiler_kineto.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <system_error>

#include "base/errors.hpp"

namespace rl::profile {
namespace fs = std::filesystem;
namespace tp = torch::profiler::impl;
namespace ta = torch::autograd::profiler;

namespace {

std::set<tp::ActivityType> parse_activities(const std::vector<std::string>& names, bool& memory) {
  std::set<tp::ActivityType> out;
  for (const auto& n : names) {
    if (n == "CPU" || n == "cpu") {
      out.insert(tp::ActivityType::CPU);
    } else if (n == "GPU" || n == "CUDA" || n == "cuda" || n == "gpu") {
      out.insert(tp::ActivityType::CUDA);
    } else if (n == "MEM" || n == "mem") {
      memory = true;
    } else if (n == "RPD") {
      throw Error("start_profile: activity 'RPD' (ROCm) is not supported by rlhost", "use CPU, GPU or MEM");
    } else {
      throw Error("start_profile: unknown activity '" + n + "'", "activities are CPU, GPU (or CUDA) and MEM");
    }
  }
  if (out.empty()) out.insert(tp::ActivityType::CPU);  // MEM alone still records the CPU timeline
  return out;
}

std::string unix_ms() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
}

}  // namespace

TorchProfiler::~TorchProfiler() {
  try {
    cancel();
  } catch (...) {
  }
}

void TorchProfiler::start(const ProfileOptions& opts) {
  if (running_) throw Error("start_profile: a profile is already running", "POST /stop_profile first");
  bool memory = opts.profile_memory;
  const auto activities = parse_activities(opts.activities, memory);
  std::error_code ec;
  fs::create_directories(opts.output_dir, ec);
  if (ec) throw Error("start_profile: cannot create output_dir '" + opts.output_dir.string() + "': " + ec.message());
  const tp::ProfilerConfig config(tp::ProfilerState::KINETO, opts.record_shapes, memory, opts.with_stack);
  ta::prepareProfiler(config, activities);
  ta::enableProfiler(config, activities);
  opts_ = opts;
  running_ = true;
}

fs::path TorchProfiler::stop(const std::string& stage) {
  if (!running_) throw Error("stop_profile: no profile is running", "POST /start_profile first");
  running_ = false;
  auto result = ta::disableProfiler();
  std::string name = opts_.file_prefix + "-" + unix_ms();
  if (!stage.empty()) name += "-" + stage;
  const fs::path json = opts_.output_dir / (name + ".trace.json");
  const fs::path gz = opts_.output_dir / (name + ".trace.json.gz");
  result->save(json.string());
  try {
    gzip_file(json, gz);
  } catch (...) {
    std::error_code ec;
    fs::remove(json, ec);
    throw;
  }
  std::error_code ec;
  fs::remove(json, ec);
  return gz;
}

void TorchProfiler::cancel() {
  if (!running_) return;
  running_ = false;
  ta::disableProfiler();  // the result is dropped
}

void gzip_file(const fs::path& src, const fs::path& dst) {
  std::ifstream in(src, std::ios::binary);
  if (!in) throw Error("cannot read '" + src.string() + "' to compress it");
  const fs::path tmp = dst.string() + ".tmp";
  gzFile out = gzopen(tmp.c_str(), "wb6");
  if (!out) throw Error("cannot create '" + tmp.string() + "'", "is the profile output_dir writable?");
  std::vector<char> buf(1 << 20);
  bool ok = true;
  while (in && ok) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = in.gcount();
    if (n > 0 && gzwrite(out, buf.data(), static_cast<unsigned>(n)) != static_cast<int>(n)) ok = false;
  }
  if (gzclose(out) != Z_OK) ok = false;
  if (!ok) {
    std::remove(tmp.c_str());
    throw Error("cannot write '" + dst.string() + "' (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, dst, ec);
  if (ec) throw Error("cannot rename '" + tmp.string() + "' to '" + dst.string() + "': " + ec.message());
}

}  // namespace rl::profile
