#include "engine/gpu_step.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <map>
#include <stdexcept>
#include <string>

#include "base/log_text.hpp"
#include "engine/step_batch.hpp"

#ifdef RLHOST_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include "nn/gpu_ops.hpp"
#endif

namespace rl::engine {

int64_t GpuStepper::bucket_for(int64_t n) {
  if (n <= 1) return 1;
  if (n <= 2) return 2;
  if (n <= 4) return 4;
  if (n <= 8) return 8;
  if (n <= 64) return (n + 7) / 8 * 8;
  return (n + 15) / 16 * 16;
}

#ifdef RLHOST_WITH_CUDA

bool gpu_step_built() { return true; }

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("engine step: ") + what + ": " + cudaGetErrorString(e));
}

nn::PagedBatch views(const torch::Tensor& d, const StepLayout& L, int64_t n, int64_t s, int64_t max_position) {
  nn::PagedBatch b;
  b.input_ids = d.narrow(0, L.ids(), n);
  b.positions = d.narrow(0, L.pos(), n);
  b.slot_mapping = d.narrow(0, L.slot(), n);
  b.query_seq = d.narrow(0, L.seq(), n);
  b.query_ctx = d.narrow(0, L.ctx(), n);
  b.block_tables = d.narrow(0, L.tables(), L.s * L.w).view({L.s, L.w}).narrow(0, 0, s);
  b.max_position = max_position;
  return b;
}

torch::Tensor pinned(int64_t n, torch::ScalarType t) {
  return torch::empty({n}, torch::TensorOptions().dtype(t).pinned_memory(true));
}

}  // namespace

// One step's host side; two alternate, so a step is filled while the one before runs.
struct HostSlot {
  torch::Tensor hgmeta, hmeta, htok, hlp;  // pinned: the batch (graph / eager layout), tokens, log-probs
  cudaEvent_t done = nullptr;              // after the step's results were copied back
};

// A launched step, until collected.
struct Launched {
  int slot = 0;
  int64_t S = 0;
  std::vector<char> on_cpu;
  std::vector<SampleRow> rows;
  torch::Tensor logits;  // [>= S, V] on the device, for the rows the CPU samples
};

struct GpuStepper::Impl {
  int64_t max_bs, max_rows, context_length, block_size, W;
  std::optional<c10::cuda::CUDAStream> stream;
  cudaEvent_t loads_done = nullptr;  // the default stream's work, waited for before a step
  GpuStepStats stats;
  // Device buffers that outlive a step: the graphs' batch, logits, and every
  // step's sampled tokens and log-probs (a step launched ahead reads its inputs there).
  StepLayout gl;
  torch::Tensor gmeta, logits, tok, lp;
  std::map<int64_t, std::unique_ptr<at::cuda::CUDAGraph>> graphs;
  at::cuda::MempoolId_t pool{0, 0};
  std::vector<const void*> graph_key;  // the memory the graphs read (cache, weights)
  bool graphs_failed = false;
  HostSlot slots[2];
  int next_slot = 0;
  std::deque<Launched> launched;
};

GpuStepper::GpuStepper(int64_t graph_max_bs, int64_t max_rows, int64_t context_length, int64_t block_size)
    : impl_(new Impl) {
  impl_->max_bs = std::max<int64_t>(0, std::min(graph_max_bs, max_rows));
  impl_->max_rows = std::max<int64_t>(1, max_rows);
  impl_->context_length = context_length;
  impl_->block_size = block_size;
  impl_->W = (context_length + block_size - 1) / block_size;
}

GpuStepper::~GpuStepper() {
  try {
    if (impl_->stream) impl_->stream->synchronize();
  } catch (...) {
  }
  if (impl_->loads_done) cudaEventDestroy(impl_->loads_done);
  for (auto& sl : impl_->slots)
    if (sl.done) cudaEventDestroy(sl.done);
}

const GpuStepStats& GpuStepper::stats() const { return impl_->stats; }

void GpuStepper::invalidate() {
  if (impl_->stream) impl_->stream->synchronize();
  impl_->graphs.clear();
  impl_->graph_key.clear();
  // The memory pool went with its last graph: the next capture asks for a new one.
  impl_->pool = {0, 0};
  impl_->stats.graphs = 0;
}

void GpuStepper::launch(nn::Transformer& model, nn::KVCache& cache, const std::vector<Sequence*>& batch,
                        const std::vector<SampleRow>& rows, const std::vector<int32_t>* ahead) {
  Impl& m = *impl_;
  const torch::Tensor& lm_head = model.lm_head_weight();  // [V, hidden]
  const torch::Device dev = lm_head.device();
  const int64_t S = static_cast<int64_t>(batch.size()), V = lm_head.size(0), bs = cache.block_size;
  if (m.launched.size() >= 2) throw std::logic_error("engine step: two steps are in flight already");
  if (S > m.max_rows) throw std::logic_error("engine step: more sequences than max_running_requests");
  if (ahead && m.launched.empty()) throw std::logic_error("engine step: a step ahead with no step in flight");
  c10::cuda::CUDAGuard device_guard(dev);
  if (!m.stream) {
    m.stream = c10::cuda::getStreamFromPool(false, dev.index());
    check(cudaEventCreateWithFlags(&m.loads_done, cudaEventDisableTiming), "cudaEventCreate");
    for (auto& sl : m.slots) check(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming), "cudaEventCreate");
    auto i32 = torch::TensorOptions().dtype(torch::kInt32).device(dev);
    m.tok = torch::zeros({m.max_rows}, i32);
    m.lp = torch::zeros({m.max_rows}, i32.dtype(torch::kFloat32));
    for (auto& sl : m.slots) sl.htok = pinned(m.max_rows, torch::kInt32), sl.hlp = pinned(m.max_rows, torch::kFloat32);
  }
  // Weights and cache are written on the default stream (loads, updates): the
  // engine's stream waits for that work before it reads them.
  check(cudaEventRecord(m.loads_done, c10::cuda::getDefaultCUDAStream(dev.index()).stream()), "cudaEventRecord");
  check(cudaStreamWaitEvent(m.stream->stream(), m.loads_done, 0), "cudaStreamWaitEvent");
  c10::cuda::CUDAStreamGuard stream_guard(*m.stream);
  const cudaStream_t st = m.stream->stream();

  Launched L1;
  L1.slot = m.next_slot;
  m.next_slot ^= 1;
  HostSlot& sl = m.slots[L1.slot];
  L1.S = S;
  L1.rows = rows;
  L1.on_cpu.resize(static_cast<size_t>(S));
  bool decode = true;
  int64_t N = 0, w_used = 0;
  for (int64_t i = 0; i < S; ++i) {
    const Sequence& s = *batch[static_cast<size_t>(i)];
    L1.on_cpu[static_cast<size_t>(i)] = needs_cpu_sampler(rows[static_cast<size_t>(i)], V);
    const int64_t q = ahead ? 1 : s.query_len();
    decode = decode && q == 1;
    N += q;
    w_used = std::max<int64_t>(w_used, static_cast<int64_t>(s.blocks.size()));
  }

  const bool graph = m.max_bs > 0 && !m.graphs_failed && decode && S <= m.max_bs && w_used <= m.W;
  if (graph) {
    if (!m.gmeta.defined()) {
      m.gl = StepLayout{m.max_bs, m.max_bs, m.W};
      m.gmeta = torch::zeros({m.gl.total()}, torch::TensorOptions().dtype(torch::kInt32).device(dev));
      m.logits = torch::empty({m.max_bs, V}, lm_head.options());
    }
    if (!sl.hgmeta.defined()) {
      sl.hgmeta = pinned(m.gl.total(), torch::kInt32);
      std::fill_n(sl.hgmeta.data_ptr<int32_t>(), m.gl.total(), 0);
    }
    const std::vector<const void*> key{cache.k.front().data_ptr(), cache.v.back().data_ptr(), lm_head.data_ptr(),
                                       model.named_parameters().front().second.data_ptr(), &model};
    if (key != m.graph_key) invalidate(), m.graph_key = key;
    const int64_t b = bucket_for(S);
    int32_t* h = sl.hgmeta.data_ptr<int32_t>();
    const StepLayout& L = m.gl;
    const int64_t max_position = m.context_length - 1;  // the RoPE tables a graph reads are sized once
    auto upload = [&](int64_t rows_copied) {
      check(cudaMemcpyAsync(m.gmeta.data_ptr<int32_t>(), h, L.tables() * sizeof(int32_t), cudaMemcpyHostToDevice, st),
            "copy the batch");
      if (rows_copied > 0 && w_used > 0)
        check(cudaMemcpy2DAsync(m.gmeta.data_ptr<int32_t>() + L.tables(), L.w * sizeof(int32_t), h + L.tables(),
                                L.w * sizeof(int32_t), w_used * sizeof(int32_t), rows_copied, cudaMemcpyHostToDevice, st),
              "copy the block tables");
    };
    auto body = [&] {
      auto pb = views(m.gmeta, L, b, b, max_position);
      nn::gpu::resolve_ids(pb.input_ids, m.tok);  // inputs of a step launched ahead: the last step's tokens
      auto hidden = model.forward_paged(pb, cache);
      auto lg = m.logits.narrow(0, 0, b);
      at::mm_out(lg, hidden, lm_head.t());
      nn::gpu::sample(lg, m.gmeta.narrow(0, L.temp(), b).view(torch::kFloat32),
                      m.gmeta.narrow(0, L.u(), b).view(torch::kFloat32), m.tok, m.lp);
    };
    auto it = m.graphs.find(b);
    if (it == m.graphs.end()) {
      // Capture with every row padding, after one eager run of the same work on this
      // stream (it creates the GEMM handles and workspaces outside the capture). That
      // run writes the sampled tokens: the step in flight's are kept aside for a step
      // launched ahead of it.
      const double t0 = now();
      auto kept = m.tok.clone();
      fill_step_batch(h, L, {}, {}, {}, bs, b, b);
      upload(0);
      try {
        body();
        check(cudaStreamSynchronize(st), "warm-up before capture");
        if (m.pool.first == 0 && m.pool.second == 0) m.pool = at::cuda::graph_pool_handle();
        auto g = std::make_unique<at::cuda::CUDAGraph>();
        g->capture_begin(m.pool, cudaStreamCaptureModeThreadLocal);
        try {
          body();
        } catch (...) {
          try {
            g->capture_end();
          } catch (...) {
          }
          throw;
        }
        g->capture_end();
        it = m.graphs.emplace(b, std::move(g)).first;
      } catch (const std::exception& e) {
        m.graphs_failed = true;
        log::warn(std::string("engine: CUDA graph capture failed, decoding without graphs from now on: ") + e.what());
      }
      m.tok.copy_(kept);
      m.stats.capture_seconds += now() - t0;
      m.stats.graphs = static_cast<int64_t>(m.graphs.size());
      if (!m.graphs_failed)
        log::info("engine: captured the decode step for batch " + std::to_string(b) + " in a CUDA graph (" +
                  std::to_string(static_cast<int>(1000 * (now() - t0))) + " ms, " + std::to_string(m.graphs.size()) +
                  " graphs)");
    }
    if (!m.graphs_failed) {
      fill_step_batch(h, L, batch, rows, L1.on_cpu, bs, b, b, ahead);
      upload(S);
      it->second->replay();
      L1.logits = m.logits;
      ++m.stats.graph_steps;
    }
  }
  if (!L1.logits.defined()) {
    const StepLayout L{N, S, std::max<int64_t>(w_used, 1)};
    if (!sl.hmeta.defined() || sl.hmeta.numel() < L.total())
      sl.hmeta = pinned(std::max<int64_t>(L.total(), 1 << 16), torch::kInt32);
    int32_t* h = sl.hmeta.data_ptr<int32_t>();
    const int64_t max_position = fill_step_batch(h, L, batch, rows, L1.on_cpu, bs, N, S, ahead);
    auto d = torch::empty({L.total()}, torch::TensorOptions().dtype(torch::kInt32).device(dev));
    check(cudaMemcpyAsync(d.data_ptr<int32_t>(), h, L.total() * sizeof(int32_t), cudaMemcpyHostToDevice, st),
          "copy the batch");
    auto pb = views(d, L, N, S, max_position);
    if (ahead) nn::gpu::resolve_ids(pb.input_ids, m.tok);
    auto hidden = model.forward_paged(pb, cache);
    auto last = N == S ? hidden : hidden.index_select(0, d.narrow(0, L.last(), S));
    L1.logits = torch::mm(last, lm_head.t());
    nn::gpu::sample(L1.logits, d.narrow(0, L.temp(), S).view(torch::kFloat32),
                    d.narrow(0, L.u(), S).view(torch::kFloat32), m.tok, m.lp);
    ++m.stats.eager_steps;
  }
  if (ahead) ++m.stats.ahead_steps;
  check(cudaMemcpyAsync(sl.htok.data_ptr<int32_t>(), m.tok.data_ptr<int32_t>(), S * sizeof(int32_t),
                        cudaMemcpyDeviceToHost, st),
        "copy the tokens back");
  check(cudaMemcpyAsync(sl.hlp.data_ptr<float>(), m.lp.data_ptr<float>(), S * sizeof(float), cudaMemcpyDeviceToHost,
                        st),
        "copy the log-probs back");
  check(cudaEventRecord(sl.done, st), "cudaEventRecord");
  m.launched.push_back(std::move(L1));
}

SampleOutput GpuStepper::collect() {
  Impl& m = *impl_;
  if (m.launched.empty()) throw std::logic_error("engine step: no step to collect");
  Launched L1 = std::move(m.launched.front());
  m.launched.pop_front();
  HostSlot& sl = m.slots[L1.slot];
  check(cudaEventSynchronize(sl.done), "the step");
  const int64_t S = L1.S;
  SampleOutput out;
  out.tokens.assign(sl.htok.data_ptr<int32_t>(), sl.htok.data_ptr<int32_t>() + S);
  out.logprobs.assign(sl.hlp.data_ptr<float>(), sl.hlp.data_ptr<float>() + S);
  out.top_logprobs.resize(static_cast<size_t>(S));
  std::vector<int64_t> cpu_idx;
  std::vector<SampleRow> cpu_rows;
  for (int64_t i = 0; i < S; ++i)
    if (L1.on_cpu[static_cast<size_t>(i)]) cpu_idx.push_back(i), cpu_rows.push_back(L1.rows[static_cast<size_t>(i)]);
  if (!cpu_idx.empty()) {
    c10::cuda::CUDAGuard device_guard(L1.logits.device());
    c10::cuda::CUDAStreamGuard stream_guard(*m.stream);
    auto idx = torch::tensor(cpu_idx, torch::TensorOptions().dtype(torch::kInt64)).to(L1.logits.device());
    auto host_logits = L1.logits.index_select(0, idx).to(torch::kCPU);
    SampleOutput c = sample_tokens(host_logits, cpu_rows);
    for (size_t k = 0; k < cpu_idx.size(); ++k) {
      const auto i = static_cast<size_t>(cpu_idx[k]);
      out.tokens[i] = c.tokens[k];
      out.logprobs[i] = c.logprobs[k];
      out.top_logprobs[i] = std::move(c.top_logprobs[k]);
    }
    m.stats.cpu_rows += static_cast<int64_t>(cpu_idx.size());
  }
  return out;
}

#else  // a build without CUDA

bool gpu_step_built() { return false; }

struct GpuStepper::Impl {
  GpuStepStats stats;
};
GpuStepper::GpuStepper(int64_t, int64_t, int64_t, int64_t) : impl_(new Impl) {}
GpuStepper::~GpuStepper() = default;
const GpuStepStats& GpuStepper::stats() const { return impl_->stats; }
void GpuStepper::invalidate() {}
void GpuStepper::launch(nn::Transformer&, nn::KVCache&, const std::vector<Sequence*>&, const std::vector<SampleRow>&,
                        const std::vector<int32_t>*) {
  throw std::runtime_error("engine: the GPU step needs a CUDA build of rlhost (-DRLHOST_CUDA=ON)");
}
SampleOutput GpuStepper::collect() {
  throw std::runtime_error("engine: the GPU step needs a CUDA build of rlhost (-DRLHOST_CUDA=ON)");
}

#endif

}  // namespace rl::engine
