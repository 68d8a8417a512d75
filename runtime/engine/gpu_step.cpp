#include "engine/gpu_step.hpp"

#include <algorithm>
#include <chrono>
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

struct GpuStepper::Impl {
  int64_t max_bs, context_length, block_size, W;
  std::optional<c10::cuda::CUDAStream> stream;
  cudaEvent_t loads_done = nullptr;  // the default stream's work, waited for before a step
  GpuStepStats stats;
  // Graph path: static device buffers sized for max_bs rows, graphs per bucket.
  StepLayout gl;
  torch::Tensor gmeta, hgmeta, logits, tok, lp;
  std::map<int64_t, std::unique_ptr<at::cuda::CUDAGraph>> graphs;
  at::cuda::MempoolId_t pool{0, 0};
  std::vector<const void*> graph_key;  // the memory the graphs read (cache, weights)
  bool graphs_failed = false;
  // Eager path and results.
  torch::Tensor hmeta, htok, hlp;
};

GpuStepper::GpuStepper(int64_t graph_max_bs, int64_t context_length, int64_t block_size) : impl_(new Impl) {
  impl_->max_bs = std::max<int64_t>(0, graph_max_bs);
  impl_->context_length = context_length;
  impl_->block_size = block_size;
  impl_->W = (context_length + block_size - 1) / block_size;
}

GpuStepper::~GpuStepper() {
  if (impl_->loads_done) cudaEventDestroy(impl_->loads_done);
}

const GpuStepStats& GpuStepper::stats() const { return impl_->stats; }

void GpuStepper::invalidate() {
  if (impl_->stream) impl_->stream->synchronize();
  impl_->graphs.clear();
  impl_->graph_key.clear();
  impl_->stats.graphs = 0;
}

SampleOutput GpuStepper::step(nn::Transformer& model, nn::KVCache& cache, const std::vector<Sequence*>& batch,
                              const std::vector<SampleRow>& rows) {
  Impl& m = *impl_;
  const torch::Tensor& lm_head = model.lm_head_weight();  // [V, hidden]
  const torch::Device dev = lm_head.device();
  const int64_t S = static_cast<int64_t>(batch.size()), V = lm_head.size(0), bs = cache.block_size;
  c10::cuda::CUDAGuard device_guard(dev);
  if (!m.stream) {
    m.stream = c10::cuda::getStreamFromPool(false, dev.index());
    check(cudaEventCreateWithFlags(&m.loads_done, cudaEventDisableTiming), "cudaEventCreate");
  }
  // Weights and cache are written on the default stream (loads, updates): the
  // engine's stream waits for that work before it reads them.
  check(cudaEventRecord(m.loads_done, c10::cuda::getDefaultCUDAStream(dev.index()).stream()), "cudaEventRecord");
  check(cudaStreamWaitEvent(m.stream->stream(), m.loads_done, 0), "cudaStreamWaitEvent");
  c10::cuda::CUDAStreamGuard stream_guard(*m.stream);
  const cudaStream_t st = m.stream->stream();

  std::vector<char> on_cpu(static_cast<size_t>(S));
  bool decode = true;
  int64_t N = 0, w_used = 0;
  for (int64_t i = 0; i < S; ++i) {
    on_cpu[static_cast<size_t>(i)] = needs_cpu_sampler(rows[static_cast<size_t>(i)], V);
    decode = decode && batch[static_cast<size_t>(i)]->query_len() == 1;
    N += batch[static_cast<size_t>(i)]->query_len();
    w_used = std::max<int64_t>(w_used, static_cast<int64_t>(batch[static_cast<size_t>(i)]->blocks.size()));
  }
  if (!m.htok.defined() || m.htok.numel() < S) {
    m.htok = pinned(std::max<int64_t>(S, 64), torch::kInt32);
    m.hlp = pinned(std::max<int64_t>(S, 64), torch::kFloat32);
  }

  torch::Tensor logits, tok, lp;  // [>= S, V], [>= S], [>= S] on the device
  const bool graph = m.max_bs > 0 && !m.graphs_failed && decode && S <= m.max_bs && w_used <= m.W;
  if (graph) {
    if (!m.gmeta.defined()) {
      m.gl = StepLayout{m.max_bs, m.max_bs, m.W};
      m.gmeta = torch::zeros({m.gl.total()}, torch::TensorOptions().dtype(torch::kInt32).device(dev));
      m.hgmeta = pinned(m.gl.total(), torch::kInt32);
      std::fill_n(m.hgmeta.data_ptr<int32_t>(), m.gl.total(), 0);
      m.logits = torch::empty({m.max_bs, V}, lm_head.options());
      m.tok = torch::zeros({m.max_bs}, torch::TensorOptions().dtype(torch::kInt32).device(dev));
      m.lp = torch::zeros({m.max_bs}, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    }
    const std::vector<const void*> key{cache.k.front().data_ptr(), cache.v.back().data_ptr(), lm_head.data_ptr(),
                                       model.named_parameters().front().second.data_ptr(), &model};
    if (key != m.graph_key) invalidate(), m.graph_key = key;
    const int64_t b = bucket_for(S);
    int32_t* h = m.hgmeta.data_ptr<int32_t>();
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
      auto hidden = model.forward_paged(pb, cache);
      auto lg = m.logits.narrow(0, 0, b);
      at::mm_out(lg, hidden, lm_head.t());
      nn::gpu::sample(lg, m.gmeta.narrow(0, L.temp(), b).view(torch::kFloat32),
                      m.gmeta.narrow(0, L.u(), b).view(torch::kFloat32), m.tok, m.lp);
    };
    auto it = m.graphs.find(b);
    if (it == m.graphs.end()) {
      // Capture with every row padding, after one eager run of the same work on this
      // stream (it creates the GEMM handles and workspaces outside the capture).
      const double t0 = now();
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
      m.stats.capture_seconds += now() - t0;
      m.stats.graphs = static_cast<int64_t>(m.graphs.size());
      if (!m.graphs_failed)
        log::info("engine: captured the decode step for batch " + std::to_string(b) + " in a CUDA graph (" +
                  std::to_string(static_cast<int>(1000 * (now() - t0))) + " ms, " + std::to_string(m.graphs.size()) +
                  " graphs)");
    }
    if (!m.graphs_failed) {
      fill_step_batch(h, L, batch, rows, on_cpu, bs, b, b);
      upload(S);
      it->second->replay();
      logits = m.logits, tok = m.tok, lp = m.lp;
      ++m.stats.graph_steps;
    }
  }
  if (!logits.defined()) {
    const StepLayout L{N, S, std::max<int64_t>(w_used, 1)};
    if (!m.hmeta.defined() || m.hmeta.numel() < L.total()) m.hmeta = pinned(std::max<int64_t>(L.total(), 1 << 16), torch::kInt32);
    int32_t* h = m.hmeta.data_ptr<int32_t>();
    const int64_t max_position = fill_step_batch(h, L, batch, rows, on_cpu, bs, N, S);
    auto d = torch::empty({L.total()}, torch::TensorOptions().dtype(torch::kInt32).device(dev));
    check(cudaMemcpyAsync(d.data_ptr<int32_t>(), h, L.total() * sizeof(int32_t), cudaMemcpyHostToDevice, st),
          "copy the batch");
    auto hidden = model.forward_paged(views(d, L, N, S, max_position), cache);
    auto last = N == S ? hidden : hidden.index_select(0, d.narrow(0, L.last(), S));
    logits = torch::mm(last, lm_head.t());
    tok = torch::empty({S}, torch::TensorOptions().dtype(torch::kInt32).device(dev));
    lp = torch::empty({S}, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    nn::gpu::sample(logits, d.narrow(0, L.temp(), S).view(torch::kFloat32), d.narrow(0, L.u(), S).view(torch::kFloat32),
                    tok, lp);
    ++m.stats.eager_steps;
  }
  check(cudaMemcpyAsync(m.htok.data_ptr<int32_t>(), tok.data_ptr<int32_t>(), S * sizeof(int32_t),
                        cudaMemcpyDeviceToHost, st),
        "copy the tokens back");
  check(cudaMemcpyAsync(m.hlp.data_ptr<float>(), lp.data_ptr<float>(), S * sizeof(float), cudaMemcpyDeviceToHost, st),
        "copy the log-probs back");
  check(cudaStreamSynchronize(st), "the step");

  SampleOutput out;
  out.tokens.assign(m.htok.data_ptr<int32_t>(), m.htok.data_ptr<int32_t>() + S);
  out.logprobs.assign(m.hlp.data_ptr<float>(), m.hlp.data_ptr<float>() + S);
  out.top_logprobs.resize(static_cast<size_t>(S));
  std::vector<int64_t> cpu_idx;
  std::vector<SampleRow> cpu_rows;
  for (int64_t i = 0; i < S; ++i)
    if (on_cpu[static_cast<size_t>(i)]) cpu_idx.push_back(i), cpu_rows.push_back(rows[static_cast<size_t>(i)]);
  if (!cpu_idx.empty()) {
    auto idx = torch::tensor(cpu_idx, torch::TensorOptions().dtype(torch::kInt64)).to(dev);
    auto host_logits = logits.index_select(0, idx).to(torch::kCPU);
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
GpuStepper::GpuStepper(int64_t, int64_t, int64_t) : impl_(new Impl) {}
GpuStepper::~GpuStepper() = default;
const GpuStepStats& GpuStepper::stats() const { return impl_->stats; }
void GpuStepper::invalidate() {}
SampleOutput GpuStepper::step(nn::Transformer&, nn::KVCache&, const std::vector<Sequence*>&,
                              const std::vector<SampleRow>&) {
  throw std::runtime_error("engine: the GPU step needs a CUDA build of rlhost (-DRLHOST_CUDA=ON)");
}

#endif

}  // namespace rl::engine
