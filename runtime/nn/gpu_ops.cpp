#include "nn/gpu_ops.hpp"

#include <stdexcept>
#include <string>

#ifdef RLHOST_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>

#include "nn/cuda/kernels.hpp"
#endif

namespace rl::nn::gpu {

#ifdef RLHOST_WITH_CUDA
namespace {

namespace k = rl::nn::cuda;

k::DType dtype_of(const torch::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case torch::kFloat32: return k::DType::kFloat32;
    case torch::kBFloat16: return k::DType::kBFloat16;
    case torch::kFloat16: return k::DType::kFloat16;
    default: throw std::invalid_argument(std::string(what) + ": dtype " + c10::toString(t.scalar_type()) +
                                         " is not float32, bfloat16 or float16");
  }
}

void need(bool ok, const char* what, const std::string& why) {
  if (!ok) throw std::invalid_argument(std::string(what) + ": " + why);
}

void need_int32(const torch::Tensor& t, const char* what, const char* name) {
  need(t.defined() && t.is_cuda() && t.scalar_type() == torch::kInt32 && t.is_contiguous(), what,
       std::string(name) + " must be a contiguous int32 CUDA tensor");
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": CUDA error: " + cudaGetErrorString(e));
}

cudaStream_t stream() { return at::cuda::getCurrentCUDAStream().stream(); }

const void* ptr_or_null(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace

bool available(const torch::Tensor& t) {
  return t.defined() && t.is_cuda() &&
         (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16 ||
          t.scalar_type() == torch::kFloat16);
}

void add_rms_norm(torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& w, double eps,
                  torch::Tensor& out) {
  const char* what = "add_rms_norm";
  need(x.dim() == 2 && x.is_contiguous() && out.sizes() == x.sizes() && out.is_contiguous() &&
           out.scalar_type() == x.scalar_type() && w.numel() == x.size(1) && w.is_contiguous() &&
           w.scalar_type() == x.scalar_type(),
       what, "x, out [rows, n] contiguous, w [n], one dtype");
  need(!delta.defined() || (delta.sizes() == x.sizes() && delta.is_contiguous() && delta.scalar_type() == x.scalar_type()),
       what, "delta must match x");
  check(k::add_rms_norm(dtype_of(x, what), x.data_ptr(), ptr_or_null(delta), w.data_ptr(), out.data_ptr(), x.size(0),
                        x.size(1), static_cast<float>(eps), stream()),
        what);
}

torch::Tensor qk_norm_rope_store(const torch::Tensor& qkv, int64_t H, int64_t KV, int64_t D,
                                 const torch::Tensor& q_norm, const torch::Tensor& k_norm, double eps,
                                 const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& positions,
                                 const torch::Tensor& slots, torch::Tensor& k_cache, torch::Tensor& v_cache) {
  const char* what = "qk_norm_rope_store";
  const int64_t N = qkv.size(0);
  need(qkv.dim() == 2 && qkv.size(1) == (H + 2 * KV) * D && qkv.stride(1) == 1, what, "qkv must be [N, (H + 2KV) D]");
  need(k_cache.is_contiguous() && v_cache.is_contiguous() && k_cache.dim() == 3 && k_cache.size(1) == KV &&
           k_cache.size(2) == D && v_cache.sizes() == k_cache.sizes() && k_cache.scalar_type() == qkv.scalar_type() &&
           v_cache.scalar_type() == qkv.scalar_type(),
       what, "caches must be [slots, KV, D] contiguous in qkv's dtype");
  need(cos.is_contiguous() && sin.is_contiguous() && cos.dim() == 2 && cos.size(1) == D && sin.sizes() == cos.sizes() &&
           cos.scalar_type() == qkv.scalar_type() && sin.scalar_type() == qkv.scalar_type(),
       what, "cos/sin must be [P, D] contiguous in qkv's dtype");
  need(!q_norm.defined() || (q_norm.numel() == D && q_norm.is_contiguous() && q_norm.scalar_type() == qkv.scalar_type()),
       what, "q_norm must be [D]");
  need(!k_norm.defined() || (k_norm.numel() == D && k_norm.is_contiguous() && k_norm.scalar_type() == qkv.scalar_type()),
       what, "k_norm must be [D]");
  need_int32(positions, what, "positions");
  need_int32(slots, what, "slots");
  need(positions.numel() == N && slots.numel() == N, what, "positions and slots need one entry per token");
  auto q = torch::empty({N, H, D}, qkv.options());
  k::QkvArgs a{qkv.data_ptr(), qkv.stride(0), N, H, KV, D, ptr_or_null(q_norm), ptr_or_null(k_norm),
               static_cast<float>(eps), cos.data_ptr(), sin.data_ptr(), positions.data_ptr<int32_t>(),
               slots.data_ptr<int32_t>(), k_cache.data_ptr(), v_cache.data_ptr(), q.data_ptr()};
  check(k::qk_norm_rope_store(dtype_of(qkv, what), a, stream()), what);
  return q;
}

torch::Tensor silu_mul(const torch::Tensor& gu) {
  const char* what = "silu_mul";
  need(gu.dim() == 2 && gu.is_contiguous() && gu.size(1) % 2 == 0, what, "gu must be [rows, 2I] contiguous");
  const int64_t I = gu.size(1) / 2;
  auto out = torch::empty({gu.size(0), I}, gu.options());
  check(k::silu_mul(dtype_of(gu, what), gu.data_ptr(), out.data_ptr(), gu.size(0), I, stream()), what);
  return out;
}

torch::Tensor paged_attention(const torch::Tensor& q_in, const torch::Tensor& k_cache, const torch::Tensor& v_cache,
                              const torch::Tensor& tables, int64_t block_size, const torch::Tensor& seq,
                              const torch::Tensor& ctx, double scale) {
  const char* what = "paged_attention";
  auto q = q_in.contiguous();
  need(q.dim() == 3 && k_cache.dim() == 3 && k_cache.is_contiguous() && v_cache.sizes() == k_cache.sizes() &&
           v_cache.is_contiguous() && k_cache.size(2) == q.size(2) && q.size(1) % k_cache.size(1) == 0 &&
           k_cache.scalar_type() == q.scalar_type() && v_cache.scalar_type() == q.scalar_type(),
       what, "q [Q, H, D] and caches [slots, KV, D] (H a multiple of KV, one dtype)");
  need_int32(tables, what, "tables");
  need_int32(seq, what, "seq");
  need_int32(ctx, what, "ctx");
  need(tables.dim() == 2 && seq.numel() == q.size(0) && ctx.numel() == q.size(0), what,
       "tables [S, W], seq and ctx one entry per query");
  static const int sm_count = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  auto out = torch::empty_like(q);
  k::AttentionArgs a{q.data_ptr(),      k_cache.data_ptr(), v_cache.data_ptr(), tables.data_ptr<int32_t>(),
                     tables.size(1),    block_size,         seq.data_ptr<int32_t>(), ctx.data_ptr<int32_t>(),
                     q.size(0),         q.size(1),          k_cache.size(1),    q.size(2),
                     static_cast<float>(scale), out.data_ptr(), sm_count};
  check(k::paged_attention(dtype_of(q, what), a, stream()), what);
  return out;
}

void resolve_ids(torch::Tensor& ids, const torch::Tensor& prev) {
  const char* what = "resolve_ids";
  need_int32(ids, what, "ids");
  need_int32(prev, what, "prev");
  check(k::resolve_ids(ids.data_ptr<int32_t>(), ids.numel(), prev.data_ptr<int32_t>(), stream()), what);
}

void sample(const torch::Tensor& logits, const torch::Tensor& temps, const torch::Tensor& u, torch::Tensor& tokens,
            torch::Tensor& logprobs) {
  const char* what = "sample";
  const int64_t R = logits.size(0);
  need(logits.dim() == 2 && logits.stride(1) == 1, what, "logits must be [R, V] with unit column stride");
  need(temps.scalar_type() == torch::kFloat32 && u.scalar_type() == torch::kFloat32 && temps.is_contiguous() &&
           u.is_contiguous() && temps.numel() >= R && u.numel() >= R && temps.is_cuda() && u.is_cuda(),
       what, "temps and u must be float32 CUDA tensors with a value per row");
  need(tokens.scalar_type() == torch::kInt32 && logprobs.scalar_type() == torch::kFloat32 && tokens.numel() >= R &&
           logprobs.numel() >= R && tokens.is_contiguous() && logprobs.is_contiguous(),
       what, "tokens int32 and logprobs float32, a value per row");
  check(k::sample_rows(dtype_of(logits, what), logits.data_ptr(), logits.stride(0), R, logits.size(1),
                       temps.data_ptr<float>(), u.data_ptr<float>(), tokens.data_ptr<int32_t>(),
                       logprobs.data_ptr<float>(), stream()),
        what);
}

#else  // a build without CUDA: nothing to launch

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw std::runtime_error(std::string(what) + ": this rlhost was built without CUDA (-DRLHOST_CUDA=ON builds it)");
}
}  // namespace

bool available(const torch::Tensor&) { return false; }
void add_rms_norm(torch::Tensor&, const torch::Tensor&, const torch::Tensor&, double, torch::Tensor&) {
  no_cuda("add_rms_norm");
}
torch::Tensor qk_norm_rope_store(const torch::Tensor&, int64_t, int64_t, int64_t, const torch::Tensor&,
                                 const torch::Tensor&, double, const torch::Tensor&, const torch::Tensor&,
                                 const torch::Tensor&, const torch::Tensor&, torch::Tensor&, torch::Tensor&) {
  no_cuda("qk_norm_rope_store");
}
torch::Tensor silu_mul(const torch::Tensor&) { no_cuda("silu_mul"); }
torch::Tensor paged_attention(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                              int64_t, const torch::Tensor&, const torch::Tensor&, double) {
  no_cuda("paged_attention");
}
void resolve_ids(torch::Tensor&, const torch::Tensor&) { no_cuda("resolve_ids"); }
void sample(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, torch::Tensor&, torch::Tensor&) {
  no_cuda("sample");
}

#endif

}  // namespace rl::nn::gpu
