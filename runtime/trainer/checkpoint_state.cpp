// AdamW state and generator states of a trainer checkpoint (checkpoint_state.hpp).
//
// optimizer.pt is a LibTorch archive (torch::serialize::OutputArchive, the format
// torch::save writes). LibTorch's own optimizer serialisation keys the state by
// tensor addresses and matches it back by position without looking at shapes, so
// a checkpoint of another model would load silently and fail (or train garbage)
// later; this archive also holds the parameter names and shapes, and reading it
// checks them before anything is applied.
#include "trainer/checkpoint_state.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>

#include <array>
#include <stdexcept>

#include "base/errors.hpp"

namespace rl::trainer {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "rlhost-adamw-1";

std::string shape_str(c10::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// c10::Error's message without the C++ backtrace LibTorch appends.
std::string brief(const std::exception& e) {
  std::string m = e.what();
  if (auto* c = dynamic_cast<const c10::Error*>(&e)) m = c->what_without_backtrace();
  if (auto nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
  return m;
}

std::string key(const char* what, size_t i) { return std::string(what) + "/" + std::to_string(i); }

}  // namespace

// Writes through a file descriptor so the bytes can be fsync'd: the directory
// rename that publishes a checkpoint must never expose data still in the page cache.
//
// The writer callback never throws. LibTorch's archive writer calls it again from
// its destructor (to finish the zip) when an exception unwinds through save_to, and
// a second throw there is std::terminate — the process aborted (exit 134) on a full
// disk. So the first failed write is remembered, the rest of the archive is
// discarded (reported as written, so LibTorch finishes normally), and the error is
// thrown here once save_to has returned; the caller removes the partial file.
void save_archive_synced(torch::serialize::OutputArchive& ar, const fs::path& file) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno(file.string() + ": cannot create");
  int write_errno = 0;
  try {
    ar.save_to([&](const void* data, size_t n) -> size_t {
      const char* p = static_cast<const char*>(data);
      size_t left = n;
      while (left > 0 && write_errno == 0) {
        const ssize_t w = ::write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
          write_errno = errno;
        } else if (w == 0) {
          write_errno = ENOSPC;
        } else {
          p += w;
          left -= size_t(w);
        }
      }
      return n;
    });
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (write_errno != 0) {
    ::close(fd);
    errno = write_errno;
    throw_errno(file.string() + ": write failed");
  }
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    throw_errno(file.string() + ": fsync failed");
  }
  if (::close(fd) != 0) throw_errno(file.string() + ": close failed");
}


void write_optimizer_state(torch::optim::AdamW& optim, const nn::NamedTensors& params, const fs::path& file) {
  torch::serialize::OutputArchive ar;
  c10::List<std::string> names;
  for (const auto& [name, p] : params) names.push_back(name);
  ar.write("format", c10::IValue(std::string(kFormat)));
  ar.write("names", c10::IValue(names));
  const auto& state = optim.state();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i].second;
    ar.write(key("shape", i), torch::tensor(p.sizes().vec(), torch::kInt64), true);
    auto it = state.find(p.unsafeGetTensorImpl());
    if (it == state.end()) continue;  // no step taken with a gradient for it yet
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
    ar.write(key("step", i), torch::tensor(s.step(), torch::kInt64), true);
    ar.write(key("exp_avg", i), s.exp_avg(), true);
    ar.write(key("exp_avg_sq", i), s.exp_avg_sq(), true);
    if (s.max_exp_avg_sq().defined()) ar.write(key("max_exp_avg_sq", i), s.max_exp_avg_sq(), true);
  }
  save_archive_synced(ar, file);
}

std::vector<std::string> open_archive(torch::serialize::InputArchive& ar, const fs::path& file, const char* format_name,
                                      const std::string& what) {
  const std::string where = file.string();
  c10::IValue format, names_v;
  try {
    ar.load_from(where, torch::kCPU);
    ar.read("format", format);
    ar.read("names", names_v);
  } catch (const std::exception& e) {
    throw Error(where + ": cannot read the " + what + " state (" + brief(e) + ")",
                "the file is truncated or is not an rlhost " + what + " archive; load an earlier iter_* directory");
  }
  if (!format.isString() || format.toStringRef() != format_name)
    throw Error(where + ": not an rlhost " + what + " archive (format " +
                    (format.isString() ? "'" + format.toStringRef() + "'" : std::string("missing")) + ", expected '" +
                    format_name + "')");
  std::vector<std::string> names;
  if (names_v.isList())
    for (const auto& v : names_v.toListRef())
      if (v.isString()) names.push_back(v.toStringRef());
  if (!names_v.isList() || names.size() != names_v.toListRef().size())
    throw Error(where + ": 'names' is not a list of parameter names",
                "the file is damaged; load an earlier iter_* directory");
  return names;
}

std::vector<std::optional<AdamWSlot>> read_optimizer_state(const fs::path& file, const nn::NamedTensors& params) {
  const std::string where = file.string();
  const std::string other_model_hint =
      "the checkpoint was saved from another model; resume with the model it was saved from "
      "(rl.trainer.load(dir) without opts.model uses the checkpoint's own)";
  torch::serialize::InputArchive ar;
  const auto names = open_archive(ar, file, kFormat, "optimizer");
  if (names.size() != params.size())
    throw Error(where + ": the optimizer state holds " + std::to_string(names.size()) +
                    " parameters, the trainer's model has " + std::to_string(params.size()),
                other_model_hint);
  std::vector<std::optional<AdamWSlot>> slots(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    if (names[i] != name)
      throw Error(where + ": parameter " + std::to_string(i) + " is '" + names[i] + "' in the checkpoint, '" + name +
                      "' in the trainer's model",
                  other_model_hint);
    try {
      torch::Tensor shape, step;
      ar.read(key("shape", i), shape, true);
      const std::vector<int64_t> saved(shape.data_ptr<int64_t>(), shape.data_ptr<int64_t>() + shape.numel());
      if (c10::IntArrayRef(saved) != p.sizes())
        throw Error(where + ": '" + name + "' has shape " + shape_str(saved) + " in the checkpoint, " +
                        shape_str(p.sizes()) + " in the trainer's model",
                    other_model_hint);
      if (!ar.try_read(key("step", i), step, true)) continue;
      AdamWSlot s;
      s.step = step.item<int64_t>();
      auto tensor = [&](const char* what, bool optional) {
        torch::Tensor t;
        if (!ar.try_read(key(what, i), t, true)) {
          if (optional) return t;
          throw Error(where + ": '" + name + "' has no " + what + " in the optimizer state");
        }
        if (t.sizes() != p.sizes())
          throw Error(where + ": " + what + " of '" + name + "' has shape " + shape_str(t.sizes()) +
                      ", the parameter " + shape_str(p.sizes()));
        // The parameter's dtype and device: a resume in another dtype starts from
        // the state a fresh optimizer of that dtype would have accumulated.
        return t.to(p.device(), p.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
      };
      s.exp_avg = tensor("exp_avg", false);
      s.exp_avg_sq = tensor("exp_avg_sq", false);
      s.max_exp_avg_sq = tensor("max_exp_avg_sq", true);
      slots[i] = std::move(s);
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(where + ": cannot read the state of '" + name + "' (" + brief(e) + ")",
                  "the file is damaged; load an earlier iter_* directory");
    }
  }
  return slots;
}

void apply_optimizer_state(torch::optim::AdamW& optim, const nn::NamedTensors& params,
                           std::vector<std::optional<AdamWSlot>> slots) {
  auto& state = optim.state();
  state.clear();
  for (size_t i = 0; i < params.size(); ++i) {
    if (!slots[i]) continue;
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->step(slots[i]->step);
    s->exp_avg(slots[i]->exp_avg);
    s->exp_avg_sq(slots[i]->exp_avg_sq);
    if (slots[i]->max_exp_avg_sq.defined()) s->max_exp_avg_sq(slots[i]->max_exp_avg_sq);
    state[params[i].second.unsafeGetTensorImpl()] = std::move(s);
  }
}

// ---- generators ------------------------------------------------------------------

namespace {

at::Generator cuda_generator(size_t device) {
  return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device)));
}

nlohmann::json generator_json(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  auto st = gen.get_state().contiguous();
  const std::string bytes(static_cast<const char*>(st.data_ptr()), static_cast<size_t>(st.nbytes()));
  return {{"seed", gen.current_seed()}, {"state", base64_encode(bytes)}};
}

void set_generator(at::Generator gen, const std::string& bytes) {
  auto t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(t);
}

std::string state_bytes(const nlohmann::json& g, const std::string& where) {
  if (!g.is_object() || !g.contains("state") || !g["state"].is_string())
    throw Error(where + ": a generator state {seed, state} expected");
  try {
    return base64_decode(g["state"].get<std::string>());
  } catch (const std::exception& e) {
    throw Error(where + ".state: " + e.what());
  }
}

}  // namespace

nlohmann::json rng_state_json() {
  nlohmann::json j;
  j["cpu"] = generator_json(at::detail::getDefaultCPUGenerator());
  j["cuda"] = nlohmann::json::array();
  for (size_t i = 0; i < static_cast<size_t>(torch::cuda::device_count()); ++i)
    j["cuda"].push_back(generator_json(cuda_generator(i)));
  return j;
}

RngRestore parse_rng_state(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("cpu")) throw Error(where + ": rng.cpu missing");
  RngRestore r;
  r.cpu_state = state_bytes(j["cpu"], where + ": rng.cpu");
  if (j.contains("cuda") && j["cuda"].is_array() &&
      j["cuda"].size() == static_cast<size_t>(torch::cuda::device_count()))
    for (size_t i = 0; i < j["cuda"].size(); ++i)
      r.cuda_states.push_back(state_bytes(j["cuda"][i], where + ": rng.cuda[" + std::to_string(i) + "]"));
  return r;
}

void RngRestore::apply() const {
  set_generator(at::detail::getDefaultCPUGenerator(), cpu_state);
  for (size_t i = 0; i < cuda_states.size(); ++i) set_generator(cuda_generator(i), cuda_states[i]);
}

// ---- base64 (RFC 4648, with padding) ---------------------------------------------

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) v |= uint32_t(uint8_t(bytes[i + 2]));
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  if (text.size() % 4 != 0) throw std::invalid_argument("base64 text length is not a multiple of 4");
  std::array<int, 256> value;
  value.fill(-1);
  for (int i = 0; i < 64; ++i) value[uint8_t(kAlphabet[i])] = i;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      if (pad > 0 || value[uint8_t(c)] < 0)
        throw std::invalid_argument("bad base64 character at offset " + std::to_string(i + k));
      v = (v << 6) | uint32_t(value[uint8_t(c)]);
    }
    out += char((v >> 16) & 255);
    if (pad < 2) out += char((v >> 8) & 255);
    if (pad < 1) out += char(v & 255);
  }
  return out;
}

}  // namespace rl::trainer
