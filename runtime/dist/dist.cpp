// c10d process groups (docs/trainer.md, "Data parallel" and "Distributed weight
// sync"). The only translation unit that includes c10d: TCPStore, Gloo, NCCL.
#include "dist/dist.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <deque>
#include <mutex>

#include <torch/torch.h>

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if defined(RLHOST_WITH_CUDA) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "base/errors.hpp"
#include "base/log_text.hpp"
#include "nn/weights.hpp"
#include "tensor/huge_pages.hpp"

namespace rl::dist {

namespace {

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

int env_int(const char* name, const char* value, int lo, int hi) {
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (!*value || *end || v < lo || v > hi)
    throw Error(std::string("dist: ") + name + "='" + value + "' is not an integer in [" + std::to_string(lo) + ", " +
                std::to_string(hi) + "]");
  return static_cast<int>(v);
}

}  // namespace

std::optional<GroupOptions> options_from_env() {
  const char* ws = std::getenv("WORLD_SIZE");
  if (!ws || !*ws) return std::nullopt;
  GroupOptions o;
  o.world_size = env_int("WORLD_SIZE", ws, 1, 1 << 20);
  const char* rank = std::getenv("RANK");
  const char* port = std::getenv("MASTER_PORT");
  const char* addr = std::getenv("MASTER_ADDR");
  const std::string hint = "launch with `rlhost --nproc N script.lua` or torchrun, which set RANK, WORLD_SIZE, "
                           "MASTER_ADDR and MASTER_PORT, or call rl.dist.init{...} with explicit values";
  if (!rank || !*rank) throw Error("dist: WORLD_SIZE=" + std::string(ws) + " is set but RANK is not", hint);
  o.rank = env_int("RANK", rank, 0, o.world_size - 1);
  if (o.world_size > 1 && (!port || !*port))
    throw Error("dist: WORLD_SIZE=" + std::string(ws) + " is set but MASTER_PORT is not", hint);
  if (port && *port) o.master_port = env_int("MASTER_PORT", port, 1, 65535);
  if (addr && *addr) o.master_addr = addr;
  if (const char* lr = std::getenv("LOCAL_RANK"); lr && *lr) o.device_index = env_int("LOCAL_RANK", lr, 0, 1 << 16);
  if (const char* as = std::getenv("TORCHELASTIC_USE_AGENT_STORE"); as && (!std::strcmp(as, "True") ||
                                                                          !std::strcmp(as, "true") || !std::strcmp(as, "1")))
    o.agent_store = true;
  return o;
}

namespace {

// Under torchrun the agent's store outlives the workers: a restarted attempt must not
// read the last one's keys (a dead rank's Gloo address). TORCHELASTIC_RESTART_COUNT
// cannot tell attempts apart — an agent restarting its workers for another host's
// failure keeps its count ("membership changes do not count as retries") while the
// failed host's agent counts one more — so the attempt is counted in the store itself:
// every worker adds 1 to a counter when it first groups, and attempt k is made of
// adds k*W+1 .. (k+1)*W. Once per process. (A worker that dies before its first group
// would shift the count; it dies before any training, and the next attempt's
// rendezvous then times out naming the group.)
std::mutex g_attempt_mu;
std::string g_attempt_prefix;

// A client connection to the store at o.master_addr:o.master_port (rank 0's or the agent's).
c10::intrusive_ptr<c10d::TCPStore> store_client(const GroupOptions& o, double timeout_s) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(o.master_port);
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  return c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
}

std::string attempt_prefix(const GroupOptions& o) {
  std::lock_guard lk(g_attempt_mu);
  if (!g_attempt_prefix.empty()) return g_attempt_prefix;
  const int64_t n = store_client(o, o.timeout_s)->add("rlhost/workers_started", 1);
  g_attempt_prefix = "rlhost/attempt_" + std::to_string((n - 1) / std::max(o.world_size, 1)) + "/";
  return g_attempt_prefix;
}

}  // namespace

struct ProcessGroup::Impl {
  GroupOptions o;
  c10::intrusive_ptr<c10d::Store> store;  // the TCPStore, under the options' prefix
  c10::intrusive_ptr<c10d::Backend> backend;
  torch::Device device = torch::kCPU;
  std::mutex mu;  // one collective at a time from this process
  bool no_reduce_scatter = false;  // the backend lacks it: all-reduce instead
  bool failed = false;  // a collective failed or timed out: abort (not shut down) on close

  std::string where(const std::string& op) const {
    return "dist: " + op + " (group '" + o.name + "', rank " + std::to_string(o.rank) + " of " +
           std::to_string(o.world_size) + ", timeout " + fmt_seconds(o.timeout_s) + " s)";
  }
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  }
  // Waits for `work` within the timeout; any failure becomes an rl::Error naming the op.
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& op) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      if (!work->wait(timeout())) {
        failed = true;
        throw Error(where(op) + " did not finish in time");
      }
    } catch (const Error&) {
      failed = true;
      throw;
    } catch (const std::exception& e) {
      failed = true;
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::string msg = e.what();
      if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
      if (dt >= o.timeout_s * 0.95)
        throw Error(where(op) + " timed out: " + msg, "a peer is gone or stuck; raise the timeout if it is just slow");
      throw Error(where(op) + " failed: " + msg, "a peer exited or closed its connection");
    }
  }
};

ProcessGroup::ProcessGroup(GroupOptions o) : impl_(std::make_unique<Impl>()) {
  if (o.world_size < 1) throw Error("dist: world_size must be >= 1, got " + std::to_string(o.world_size));
  if (o.rank < 0 || o.rank >= o.world_size)
    throw Error("dist: rank " + std::to_string(o.rank) + " is outside [0, world_size " + std::to_string(o.world_size) +
                ")");
  if (!(o.timeout_s > 0)) throw Error("dist: timeout must be > 0 seconds");
  if (o.backend == "auto") {  // NCCL when this build and machine can, else Gloo
#if defined(RLHOST_WITH_CUDA) && defined(USE_C10D_NCCL)
    o.backend = torch::cuda::is_available() ? "nccl" : "gloo";
#else
    o.backend = "gloo";
#endif
  }
  if (o.backend != "gloo" && o.backend != "nccl")
    throw Error("dist: unknown backend '" + o.backend + "'", "use gloo (CPU), nccl (CUDA) or auto");
#if !(defined(RLHOST_WITH_CUDA) && defined(USE_C10D_NCCL))
  if (o.backend == "nccl") throw Error("dist: backend nccl needs a CUDA build of rlhost", "use backend gloo");
#endif
  if (o.rank != 0 && o.master_port <= 0)
    throw Error("dist: rank " + std::to_string(o.rank) + " needs master_port (rank 0's store)");
  impl_->o = std::move(o);
  auto& g = impl_->o;
  if (g.backend == "nccl") impl_->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(g.device_index));
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(g.master_port);
  // torchrun (TORCHELASTIC_USE_AGENT_STORE): a group at its agent's address joins that store
  if (auto env = options_from_env(); env && env->agent_store && env->master_port == g.master_port &&
                                     env->master_addr == g.master_addr)
    g.agent_store = true;
  const bool server = g.rank == 0 && !g.agent_store;  // under torchrun its agent serves the store
  so.isServer = server;
  so.numWorkers = std::nullopt;
  so.waitWorkers = false;
  so.timeout = impl_->timeout();
  c10::intrusive_ptr<c10d::TCPStore> tcp;
  try {
    tcp = c10::make_intrusive<c10d::TCPStore>(g.master_addr, so);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    const std::string at = g.master_addr + ":" + std::to_string(g.master_port);
    throw Error(impl_->where(server ? "starting the store on " + at : "connecting to the store at " + at) + ": " + msg,
                server ? "is the port in use?"
                       : g.agent_store ? "is torchrun's agent running and MASTER_ADDR/MASTER_PORT right?"
                                       : "is rank 0 running and MASTER_ADDR/MASTER_PORT right?");
  }
  if (server) g.master_port = tcp->getPort();
  if (g.agent_store && g.store_prefix.empty()) g.store_prefix = attempt_prefix(g);
  if (g.store_prefix.empty()) impl_->store = tcp;
  else impl_->store = c10::make_intrusive<c10d::PrefixStore>(g.store_prefix + g.name, tcp);
}

// NCCL needs an explicit shutdown (torch warns at exit otherwise, and may hang on a
// group whose peer died); Gloo's is a no-op. Never throws: it runs on error paths.
ProcessGroup::~ProcessGroup() {
  if (!impl_ || !impl_->backend) return;
  try {
    if (impl_->failed) impl_->backend->abort();
    else impl_->backend->shutdown();
  } catch (const std::exception& e) {
    log::warn("dist: group '" + impl_->o.name + "': shutting down the " + impl_->o.backend + " backend: " + e.what());
  }
  impl_->backend.reset();
}

void ProcessGroup::connect() {
  auto& im = *impl_;
  std::lock_guard lk(im.mu);
  if (im.backend) return;
  const auto& g = im.o;
  try {
    if (g.backend == "gloo") {
      auto opts = c10d::ProcessGroupGloo::Options::create(im.timeout());
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (g.master_addr == "127.0.0.1" || g.master_addr == "localhost")
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      // The job's data-parallel group: one thread keeps its collectives in issue order on
      // two cores. A weight-sync group moves large tensors one way, and two threads carry
      // them ~1.6x faster over a host link (bench/weight_broadcast.sh).
      opts->threads = g.name == "default" ? 1 : 2;
      im.backend = c10::make_intrusive<c10d::ProcessGroupGloo>(im.store, g.rank, g.world_size, opts);
    } else {
#if defined(RLHOST_WITH_CUDA) && defined(USE_C10D_NCCL)
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = im.timeout();
      im.backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(im.store, g.rank, g.world_size, opts);
#endif
    }
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    throw Error(im.where("rendezvous of " + std::to_string(g.world_size) + " ranks at " + g.master_addr + ":" +
                         std::to_string(g.master_port)) + " failed: " + msg,
                "every rank must join within the timeout; check that all ranks started and agree on world_size");
  }
  log::info("dist: group '" + g.name + "' formed: rank " + std::to_string(g.rank) + " of " +
            std::to_string(g.world_size) + " (" + g.backend + ", " + g.master_addr + ":" +
            std::to_string(g.master_port) + ")");
}

int ProcessGroup::rank() const { return impl_->o.rank; }
int ProcessGroup::world_size() const { return impl_->o.world_size; }
int ProcessGroup::port() const { return impl_->o.master_port; }
double ProcessGroup::timeout_s() const { return impl_->o.timeout_s; }
const GroupOptions& ProcessGroup::options() const { return impl_->o; }

void ProcessGroup::allreduce_sum(std::vector<at::Tensor>& tensors, const std::string& what) {
  connect();
  std::lock_guard lk(impl_->mu);
  c10d::AllreduceOptions ao;
  ao.timeout = impl_->timeout();
  for (auto& t : tensors) {
    // Collectives need contiguous tensors on the group's device; stage others.
    const bool direct = t.is_contiguous() && t.device() == impl_->device;
    std::vector<at::Tensor> one{direct ? t : t.contiguous().to(impl_->device)};
    impl_->wait(impl_->backend->allreduce(one, ao), "all-reduce of " + what);
    if (!direct) t.copy_(one[0]);
  }
}

void ProcessGroup::allreduce_mean_grads(const std::vector<at::Tensor>& params, const std::string& what) {
  torch::NoGradGuard ng;
  constexpr int64_t kBucket = int64_t(1) << 24;  // elements per flattened bucket
  std::vector<at::Tensor> grads;
  for (const auto& p : params) {
    auto g = p.grad();
    if (!g.defined()) {
      g = torch::zeros_like(p);
      p.mutable_grad() = g;
    }
    grads.push_back(g);
  }
  const double inv = 1.0 / world_size();
  size_t i = 0;
  while (i < grads.size()) {
    // A bucket: consecutive gradients of one dtype and device, up to kBucket elements.
    size_t j = i;
    int64_t n = 0;
    while (j < grads.size() && grads[j].scalar_type() == grads[i].scalar_type() &&
           grads[j].device() == grads[i].device() && (j == i || n + grads[j].numel() <= kBucket))
      n += grads[j++].numel();
    std::vector<at::Tensor> flat_parts;
    for (size_t k = i; k < j; ++k) flat_parts.push_back(grads[k].reshape({-1}));
    std::vector<at::Tensor> buf{torch::cat(flat_parts).to(impl_->device)};
    allreduce_sum(buf, what);
    buf[0].mul_(inv);
    int64_t off = 0;
    for (size_t k = i; k < j; ++k) {
      const int64_t m = grads[k].numel();
      grads[k].copy_(buf[0].narrow(0, off, m).view_as(grads[k]));
      off += m;
    }
    i = j;
  }
}

void ProcessGroup::broadcast(std::vector<at::Tensor>& tensors, int root, const std::string& what) {
  connect();
  std::lock_guard lk(impl_->mu);
  c10d::BroadcastOptions bo;
  bo.rootRank = root;
  bo.timeout = impl_->timeout();
  for (auto& t : tensors) {
    // Collectives need contiguous tensors on the group's device; stage others.
    const bool direct = t.is_contiguous() && t.device() == impl_->device;
    std::vector<at::Tensor> one{direct ? t : t.contiguous().to(impl_->device)};
    impl_->wait(impl_->backend->broadcast(one, bo), "broadcast of " + what);
    if (!direct) t.copy_(one[0]);
  }
}

ProcessGroup::Pending::Pending(ProcessGroup* g, std::string what, std::function<void()> wait)
    : g_(g), what_(std::move(what)), wait_(std::move(wait)) {}

ProcessGroup::Pending::~Pending() {
  // After a collective of the group failed or timed out, the ones still in flight are
  // not waited for (each could take the whole timeout): the group is aborted on close.
  if (done_ || g_->impl_->failed) return;
  try {
    wait();
  } catch (const std::exception& e) {
    log::warn("dist: " + what_ + " left unfinished: " + e.what());
  }
}

void ProcessGroup::Pending::wait() {
  if (done_) return;
  done_ = true;
  wait_();
}

std::shared_ptr<ProcessGroup::Pending> ProcessGroup::broadcast_async(const at::Tensor& t, int root,
                                                                     const std::string& what) {
  connect();
  // Collectives need contiguous tensors on the group's device; others go through a copy.
  const bool direct = t.is_contiguous() && t.device() == impl_->device;
  at::Tensor moved = direct ? t : t.contiguous().to(impl_->device);
  c10::intrusive_ptr<c10d::Work> work;
  {
    std::lock_guard lk(impl_->mu);
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    bo.timeout = impl_->timeout();
    std::vector<at::Tensor> one{moved};  // the work holds the tensor until it is done
    work = impl_->backend->broadcast(one, bo);
  }
  const std::string op = "broadcast of " + what;
  const bool back = !direct && rank() != root;
  return std::make_shared<Pending>(this, op, [this, work, op, back, t, moved]() mutable {
    impl_->wait(work, op);
    if (back) t.copy_(moved);
  });
}

std::shared_ptr<ProcessGroup::Pending> ProcessGroup::all_gather_async(const at::Tensor& out, const at::Tensor& in,
                                                                      const std::string& what) {
  connect();
  if (!out.is_contiguous() || !in.is_contiguous() || out.numel() != in.numel() * world_size() ||
      out.scalar_type() != in.scalar_type())
    throw Error("dist: all-gather of " + what + ": the output must be contiguous and world_size times the input");
  c10::intrusive_ptr<c10d::Work> work;
  {
    std::lock_guard lk(impl_->mu);
    c10d::AllgatherOptions ao;
    ao.timeout = impl_->timeout();
    at::Tensor o = out, i = in;
    work = impl_->backend->_allgather_base(o, i, ao);
  }
  const std::string op = "all-gather of " + what;
  return std::make_shared<Pending>(this, op, [this, work, op] { impl_->wait(work, op); });
}

void ProcessGroup::reduce_scatter_sum(const at::Tensor& out, const at::Tensor& in, const std::string& what) {
  connect();
  if (!out.is_contiguous() || !in.is_contiguous() || in.numel() != out.numel() * world_size() ||
      out.scalar_type() != in.scalar_type())
    throw Error("dist: reduce-scatter of " + what + ": the input must be contiguous and world_size times the output");
  c10::intrusive_ptr<c10d::Work> work;
  if (!impl_->no_reduce_scatter) {
    std::lock_guard lk(impl_->mu);
    c10d::ReduceScatterOptions ro;
    ro.timeout = impl_->timeout();
    at::Tensor o = out, i = in;
    try {
      work = impl_->backend->_reduce_scatter_base(o, i, ro);
    } catch (const c10::Error& e) {
      // Gloo before PyTorch 2.1 has no reduce-scatter: an all-reduce of the whole
      // input, of which this rank keeps its slice (twice the bytes on the wire).
      if (std::string(e.what()).find("support") == std::string::npos) throw;
      impl_->no_reduce_scatter = true;
      log::warn("dist: group '" + impl_->o.name + "': the " + impl_->o.backend +
                " backend has no reduce-scatter; using all-reduce (2x the traffic)");
    }
  }
  if (work) return impl_->wait(work, "reduce-scatter of " + what);
  std::vector<at::Tensor> whole{in.clone()};
  allreduce_sum(whole, what);
  out.copy_(whole[0].narrow(0, out.numel() * rank(), out.numel()));
}

void ProcessGroup::reduce_sum(const at::Tensor& t, int root, const std::string& what) {
  connect();
  if (!t.is_contiguous() || t.device() != impl_->device)
    throw Error("dist: reduce of " + what + ": the tensor must be contiguous on the group's device");
  std::lock_guard lk(impl_->mu);
  c10d::ReduceOptions ro;
  ro.rootRank = root;
  ro.reduceOp = c10d::ReduceOp::SUM;
  ro.timeout = impl_->timeout();
  std::vector<at::Tensor> one{t};
  impl_->wait(impl_->backend->reduce(one, ro), "reduce of " + what);
}

void ProcessGroup::barrier() {
  std::vector<at::Tensor> one{torch::zeros({1}, torch::TensorOptions().device(impl_->device))};
  allreduce_sum(one, "barrier");
}

std::string ProcessGroup::broadcast_bytes(const std::string& blob, int root) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(impl_->device);
  std::vector<at::Tensor> len{torch::tensor({static_cast<int64_t>(blob.size())}, i64)};
  broadcast(len, root, "a byte length");
  const int64_t n = len[0].cpu().item<int64_t>();
  if (n == 0) return {};
  auto buf = torch::empty({n}, torch::kUInt8);
  if (rank() == root) std::memcpy(buf.data_ptr(), blob.data(), blob.size());
  std::vector<at::Tensor> data{buf.to(impl_->device)};
  broadcast(data, root, std::to_string(n) + " bytes");
  auto out = data[0].cpu().contiguous();
  return std::string(static_cast<const char*>(out.data_ptr()), static_cast<size_t>(n));
}

std::string ProcessGroup::scatter_bytes(const std::vector<std::string>& blobs, int root) {
  const int W = world_size();
  auto lens = torch::zeros({W}, torch::kInt64);
  if (rank() == root) {
    if (static_cast<int>(blobs.size()) != W)
      throw Error("dist: scatter needs one entry per rank on the root: got " + std::to_string(blobs.size()) +
                  " for world_size " + std::to_string(W));
    for (int r = 0; r < W; ++r) lens[r] = static_cast<int64_t>(blobs[r].size());
  }
  std::vector<at::Tensor> lv{lens.to(impl_->device)};
  broadcast(lv, root, "the scatter lengths");
  lens = lv[0].cpu();
  const int64_t longest = std::max<int64_t>(1, lens.max().item<int64_t>());
  const int64_t mine = lens[rank()].item<int64_t>();
  const auto u8 = torch::TensorOptions().dtype(torch::kUInt8).device(impl_->device);
  std::vector<at::Tensor> out{torch::empty({longest}, u8)};
  std::vector<std::vector<at::Tensor>> in;
  if (rank() == root) {
    in.emplace_back();
    for (int r = 0; r < W; ++r) {
      auto t = torch::zeros({longest}, torch::kUInt8);
      std::memcpy(t.data_ptr(), blobs[r].data(), blobs[r].size());
      in[0].push_back(t.to(impl_->device));
    }
  }
  connect();
  {
    std::lock_guard lk(impl_->mu);
    c10d::ScatterOptions so;
    so.rootRank = root;
    so.timeout = impl_->timeout();
    impl_->wait(impl_->backend->scatter(out, in, so), "scatter of " + std::to_string(longest) + " bytes per rank");
  }
  auto host = out[0].cpu().contiguous();
  return std::string(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(mine));
}

namespace {
std::mutex g_default_mu;
std::shared_ptr<ProcessGroup> g_default;
}  // namespace

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard lk(g_default_mu);
  return g_default;
}

void set_default_group(std::shared_ptr<ProcessGroup> g) {
  std::shared_ptr<ProcessGroup> old;
  {
    std::lock_guard lk(g_default_mu);
    old = std::exchange(g_default, std::move(g));
  }
}

// ---- the job's key-value store ---------------------------------------------------------

struct KeyValueStore::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::string at;
  std::mutex mu;
  template <class F>
  auto run(const std::string& op, const std::string& key, F&& f) {
    std::lock_guard lk(mu);
    try {
      return f();
    } catch (const std::exception& e) {
      std::string msg = e.what();
      if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
      throw Error("dist: store " + op + " of '" + key + "' at " + at + ": " + msg, "is rank 0 (the controller) still running?");
    }
  }
};

KeyValueStore::KeyValueStore(const GroupOptions& o, const std::string& name, double timeout_s)
    : impl_(std::make_unique<Impl>()) {
  if (o.master_port <= 0) throw Error("dist: the job's store needs master_port (MASTER_PORT)");
  impl_->at = o.master_addr + ":" + std::to_string(o.master_port);
  c10::intrusive_ptr<c10d::TCPStore> tcp;
  try {
    tcp = store_client(o, timeout_s);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    throw Error("dist: connecting to the job's store at " + impl_->at + ": " + msg,
                "is rank 0 running and MASTER_ADDR/MASTER_PORT right?");
  }
  impl_->store = c10::make_intrusive<c10d::PrefixStore>(
      (o.agent_store ? attempt_prefix(o) : std::string()) + "rlhost/kv/" + name, tcp);
}

KeyValueStore::~KeyValueStore() = default;

void KeyValueStore::set(const std::string& key, const std::string& value) {
  impl_->run("set", key, [&] { impl_->store->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
}

std::optional<std::string> KeyValueStore::get(const std::string& key) {
  return impl_->run("get", key, [&]() -> std::optional<std::string> {
    if (!impl_->store->check({key})) return std::nullopt;
    const auto v = impl_->store->get(key);
    return std::string(v.begin(), v.end());
  });
}

int64_t KeyValueStore::add(const std::string& key, int64_t delta) {
  return impl_->run("add", key, [&] { return impl_->store->add(key, delta); });
}

// ---- weight sync -----------------------------------------------------------------------

std::vector<std::pair<size_t, size_t>> weight_buckets(const std::vector<std::string>& dtypes,
                                                      const std::vector<int64_t>& bytes, int64_t bucket_bytes) {
  std::vector<std::pair<size_t, size_t>> out;
  int64_t left = 0;
  for (int64_t b : bytes) left += b;
  size_t i = 0;
  while (i < bytes.size()) {
    size_t j = i + 1;
    int64_t sum = bytes[i];
    const int64_t cap = std::min(bucket_bytes, std::max(bucket_bytes / 16, left / 2));
    if (bucket_bytes > 0)
      while (j < bytes.size() && dtypes[j] == dtypes[i] && sum + bytes[j] <= cap) sum += bytes[j++];
    out.emplace_back(i, j);
    left -= sum;
    i = j;
  }
  return out;
}

namespace {

// Broadcasts issued and not yet waited for, oldest first, with their bytes.
struct InFlight {
  struct Op {
    std::shared_ptr<ProcessGroup::Pending> pending;
    int64_t bytes;
    size_t bucket;
    at::Tensor buffer;
    int64_t ring_offset = -1;  // where buffer lies in the receive ring (-1: not in it)
  };
  std::deque<Op> ops;
  int64_t bytes = 0;
  Op pop() {  // waits for the oldest
    Op op = std::move(ops.front());
    ops.pop_front();
    bytes -= op.bytes;
    op.pending->wait();
    return op;
  }
};

std::string bucket_name(const std::vector<std::string>& names, size_t b, size_t e) {
  return e - b == 1 ? "weight " + names[b] : "weights " + names[b] + " .. " + names[e - 1];
}

// Buffers for broadcasts in flight, cut in turn from one arena in huge pages, kept for
// the next update of the same size (tensor/huge_pages.hpp: fresh memory costs a fault
// and a zeroing per page on first touch): each goes after the newest, wrapping to the
// front, never over the oldest still in flight. Below a huge page: no ring (usable()).
class Ring {
 public:
  explicit Ring(int64_t bytes)
      : size_(bytes), arena_(bytes >= tensor::kHugePageBytes ? tensor::HugePageArena::make(bytes) : nullptr) {}
  bool usable() const { return arena_ != nullptr; }
  // Where n bytes go, or -1 while the ops in flight leave no room (an empty queue: always).
  int64_t place(int64_t n, const InFlight& q) const {
    const InFlight::Op* oldest = nullptr;
    for (const auto& op : q.ops)
      if (op.ring_offset >= 0) {
        oldest = &op;
        break;
      }
    if (!oldest) return n <= size_ ? 0 : -1;
    const int64_t tail = oldest->ring_offset;
    if (head_ > tail) return head_ + n <= size_ ? head_ : (n <= tail ? 0 : -1);
    return head_ + n <= tail ? head_ : -1;
  }
  // `numel` values of `type` at `offset` (from place); the next buffer goes after them.
  at::Tensor buffer(int64_t offset, int64_t numel, torch::ScalarType type) {
    const int64_t n = numel * static_cast<int64_t>(c10::elementSize(type));
    head_ = offset + (n + 63) / 64 * 64;
    return torch::empty({0}, torch::TensorOptions().dtype(type)).set_(arena_->storage(offset, n), 0, {numel}, {1});
  }

 private:
  int64_t size_, head_ = 0;
  std::shared_ptr<tensor::HugePageArena> arena_;
};

// Waits for the oldest broadcasts (each handed to done) until no more than `limit`
// bytes would be in flight with n more and, for a buffer of the ring (in_ring), the
// ring has room for it. → its offset in the ring (-1: not in it).
template <class Done>
int64_t make_room(InFlight& q, int64_t limit, Ring& ring, bool in_ring, int64_t n, Done&& done) {
  int64_t place = -1;
  while (!q.ops.empty() && (q.bytes + n > limit || (in_ring && (place = ring.place(n, q)) < 0))) done(q.pop());
  if (in_ring && place < 0) place = ring.place(n, q);  // the queue is empty now
  return place;
}

// `ts` as one flat tensor over their memory when each is contiguous, of ts[0]'s dtype
// and device, and starts where the one before it ends; else undefined. It owns nothing:
// valid while ts' memory is.
at::Tensor end_to_end(const std::vector<at::Tensor>& ts) {
  const char* next = nullptr;
  int64_t numel = 0;
  for (const at::Tensor& t : ts) {
    if (!t.defined() || !t.is_contiguous() || t.scalar_type() != ts[0].scalar_type() ||
        t.device() != ts[0].device() || (next && static_cast<const char*>(t.const_data_ptr()) != next))
      return {};
    next = static_cast<const char*>(t.const_data_ptr()) + t.nbytes();
    numel += t.numel();
  }
  return torch::from_blob(ts[0].data_ptr(), {numel}, ts[0].options().requires_grad(false));
}

}  // namespace

SentWeights send_weights(ProcessGroup& g, const std::vector<std::pair<std::string, at::Tensor>>& params,
                         int64_t bucket_bytes) {
  torch::NoGradGuard ng;
  std::vector<std::string> names, dtypes;
  std::vector<int64_t> bytes;
  for (const auto& [name, t] : params) {
    names.push_back(name);
    dtypes.emplace_back(c10::toString(t.scalar_type()));
    bytes.push_back(t.numel() * static_cast<int64_t>(t.element_size()));
  }
  // A tensor sent alone goes as it is, so does a bucket of tensors end to end in one
  // storage; any other bucket of several is packed into the ring.
  const auto buckets = weight_buckets(dtypes, bytes, bucket_bytes);
  std::vector<at::Tensor> views(buckets.size());
  int64_t scratch = 0, largest = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto [b, e] = buckets[i];
    if (e - b == 1) continue;
    std::vector<at::Tensor> parts;
    for (size_t k = b; k < e; ++k) parts.push_back(params[k].second.detach());
    if ((views[i] = end_to_end(parts)).defined()) continue;
    int64_t n = 0;
    for (size_t k = b; k < e; ++k) n += bytes[k];
    scratch += (n + 63) / 64 * 64;
    largest = std::max(largest, (n + 63) / 64 * 64);
  }
  const bool cpu = params.empty() || params.front().second.device().is_cpu();
  Ring ring(cpu ? std::min(scratch, std::max(kWeightBytesInFlight, largest)) : 0);
  InFlight q;
  SentWeights sent;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto [b, e] = buckets[i];
    const at::Tensor& first = params[b].second;
    int64_t n = 0, numel = 0;
    for (size_t k = b; k < e; ++k) {
      n += bytes[k];
      numel += params[k].second.numel();
    }
    const bool in_ring = e - b > 1 && !views[i].defined() && ring.usable();
    const int64_t place = make_room(q, kWeightBytesInFlight, ring, in_ring, n, [](InFlight::Op) {});
    at::Tensor one;
    if (e - b == 1) {
      one = first.detach().contiguous();
    } else if (views[i].defined()) {
      one = views[i];
    } else {
      one = in_ring ? ring.buffer(place, numel, first.scalar_type())
                    : torch::empty({numel}, torch::TensorOptions().dtype(first.scalar_type()).device(first.device()));
      int64_t off = 0;
      for (size_t k = b; k < e; ++k) {
        const at::Tensor src = params[k].second.detach();
        one.narrow(0, off, src.numel()).view(src.sizes()).copy_(src);
        off += src.numel();
      }
      sent.copied_bytes += n;
    }
    q.ops.push_back({g.broadcast_async(one, 0, bucket_name(names, b, e)), n, i, one, in_ring ? place : -1});
    q.bytes += n;
    sent.bytes += n;
    ++sent.broadcasts;
  }
  while (!q.ops.empty()) q.pop();
  log::debug("dist: sent " + std::to_string(params.size()) + " tensors (" + std::to_string(sent.bytes) + " bytes) in " +
             std::to_string(sent.broadcasts) + " broadcasts, " + std::to_string(sent.copied_bytes) +
             " bytes of them packed first");
  return sent;
}

int64_t WeightMeta::values() const {
  constexpr int64_t kCap = int64_t{1} << 50;
  int64_t total = 0;
  for (const auto& shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n = d < 0 || (d > 0 && n > kCap / d) ? kCap : n * d;
    total = std::min(total + n, kCap);
  }
  return total;
}

void receive_weights(ProcessGroup& g, const WeightMeta& meta, int64_t bucket_bytes,
                     const std::function<void(size_t, const at::Tensor&)>& take,
                     const std::function<at::Tensor(size_t)>& into, int64_t in_flight_bytes) {
  const size_t n = meta.names.size();
  if (meta.dtypes.size() != n || meta.shapes.size() != n)
    throw Error("update_weights_from_distributed: names, dtypes and shapes differ in length (" + std::to_string(n) +
                ", " + std::to_string(meta.dtypes.size()) + ", " + std::to_string(meta.shapes.size()) + ")");
  if (bucket_bytes < 0) throw Error("update_weights_from_distributed: bucket_bytes must be >= 0");
  if (in_flight_bytes <= 0) throw std::invalid_argument("receive_weights: in_flight_bytes must be > 0");
  torch::NoGradGuard ng;
  std::vector<torch::ScalarType> types(n);
  std::vector<std::string> dtypes(n);
  std::vector<int64_t> numels(n), bytes(n);
  for (size_t i = 0; i < n; ++i) {
    std::string dt = meta.dtypes[i];
    if (dt.rfind("torch.", 0) == 0) dt = dt.substr(6);
    try {
      types[i] = nn::parse_dtype(dt);
    } catch (const std::exception& e) {
      throw Error("update_weights_from_distributed: dtypes[" + std::to_string(i) + "] ('" + meta.dtypes[i] +
                  "'): " + e.what());
    }
    numels[i] = 1;
    for (int64_t d : meta.shapes[i]) {
      if (d < 0) throw Error("update_weights_from_distributed: shapes[" + std::to_string(i) + "] has a negative size");
      numels[i] *= d;
    }
    dtypes[i] = c10::toString(types[i]);
    bytes[i] = numels[i] * static_cast<int64_t>(c10::elementSize(types[i]));
  }
  const auto buckets = weight_buckets(dtypes, bytes, bucket_bytes);
  // Where each bucket lands: into(b)'s memory (a tensor sent alone), else a buffer.
  std::vector<at::Tensor> dest(buckets.size());
  std::vector<int64_t> sizes(buckets.size()), totals(buckets.size());
  int64_t scratch = 0, largest = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto [b, e] = buckets[i];
    for (size_t k = b; k < e; ++k) totals[i] += numels[k];
    sizes[i] = totals[i] * static_cast<int64_t>(c10::elementSize(types[b]));
    // into(k)'s memory for each tensor of the bucket, in the sent dtype and size, end to end
    std::vector<at::Tensor> parts;
    for (size_t k = b; into && k < e; ++k) {
      at::Tensor t = into(k);
      if (!t.defined() || t.scalar_type() != types[k] || t.numel() != numels[k] || !t.device().is_cpu()) break;
      parts.push_back(std::move(t));
    }
    if (parts.size() == e - b) dest[i] = end_to_end(parts);
    if (!dest[i].defined()) {
      scratch += (sizes[i] + 63) / 64 * 64;
      largest = std::max(largest, (sizes[i] + 63) / 64 * 64);
    }
  }
  // With `into` (take copies what it gets), the buffers are one ring, reused as the
  // oldest broadcasts are handed over. Without, each buffer is a tensor of its own (take
  // keeps them).
  Ring ring(into ? std::min(scratch, std::max(in_flight_bytes, largest)) : 0);
  std::exception_ptr failed;  // from take: kept until every broadcast is in
  InFlight q;
  auto hand_over = [&](InFlight::Op op) {
    if (failed) return;
    const auto [b, e] = buckets[op.bucket];
    int64_t off = 0;
    try {
      for (size_t k = b; k < e; ++k) {
        take(k, op.buffer.narrow(0, off, numels[k]).view(meta.shapes[k]));
        off += numels[k];
      }
    } catch (...) {
      failed = std::current_exception();
    }
  };
  for (size_t i = 0; i < buckets.size(); ++i) {
    const auto [b, e] = buckets[i];
    const int64_t nb = sizes[i];
    const bool in_ring = ring.usable() && !dest[i].defined();
    const int64_t place = make_room(q, in_flight_bytes, ring, in_ring, nb, hand_over);
    at::Tensor buf;
    if (dest[i].defined()) {
      buf = dest[i];
    } else if (in_ring) {
      buf = ring.buffer(place, totals[i], types[b]);
    } else {
      buf = torch::empty({totals[i]}, torch::TensorOptions().dtype(types[b]));
    }
    q.ops.push_back({g.broadcast_async(buf, 0, bucket_name(meta.names, b, e)), nb, i, buf, in_ring ? place : -1});
    q.bytes += nb;
  }
  while (!q.ops.empty()) hand_over(q.pop());
  if (failed) std::rethrow_exception(failed);
}

std::vector<std::pair<std::string, at::Tensor>> receive_weights(ProcessGroup& g, const WeightMeta& meta,
                                                                int64_t bucket_bytes) {
  std::vector<std::pair<std::string, at::Tensor>> got;
  got.reserve(meta.names.size());
  receive_weights(g, meta, bucket_bytes, [&](size_t k, const at::Tensor& t) { got.emplace_back(meta.names[k], t); });
  return got;
}

}  // namespace rl::dist
