#include "nn/weights.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rl::nn {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_norm(const std::string& name) {
  return ends_with(name, "layernorm.weight") || ends_with(name, "_norm.weight") || name == "model.norm.weight";
}

// d[c * ld + r] = s[r * cols + c] for a row-major [rows, cols] source, in 64 x 64
// tiles (both sides stay in L1), a band of 64 source rows at a time (the source
// is read in order: a whole 42M model's weights copy 1.25x faster than in
// column stripes), the bands spread over LibTorch's intra-op threads.
// Inside a tile, whole kBlock x kBlock blocks go through `block` (kBlock loads,
// kBlock stores in SIMD registers), the ragged edges element by element through
// `elem` (a copy, or a conversion when kSrc != kDst).
template <size_t kSrc, size_t kDst, int64_t kBlock, class Block, class Elem>
void transpose_tiles(char* d, const char* s, int64_t rows, int64_t cols, int64_t ld, Block&& block, Elem&& elem) {
  constexpr int64_t kTile = 64;
  const auto one = [&](int64_t r, int64_t c) { elem(d + (c * ld + r) * kDst, s + (r * cols + c) * kSrc); };
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  at::parallel_for(0, row_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t rt = begin; rt < end; ++rt) {
      const int64_t r0 = rt * kTile, r1 = std::min(rows, r0 + kTile);
      for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
        const int64_t c1 = std::min(cols, c0 + kTile);
        int64_t c = c0;
        for (; c + kBlock <= c1; c += kBlock) {
          int64_t r = r0;
          for (; r + kBlock <= r1; r += kBlock) block(d + (c * ld + r) * kDst, s + (r * cols + c) * kSrc, cols, ld);
          for (; r < r1; ++r)
            for (int64_t k = c; k < c + kBlock; ++k) one(r, k);
        }
        for (; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) one(r, c);
      }
    }
  });
}

template <size_t kBytes>
void copy_elem(char* d, const char* s) { std::memcpy(d, s, kBytes); }

void f32_to_bf16_elem(char* d, const char* s) {
  float f;
  std::memcpy(&f, s, 4);
  const c10::BFloat16 b(f);  // round to nearest even, as copy_ does
  std::memcpy(d, &b, 2);
}

template <size_t kBytes>
void transpose_same(char* d, const char* s, int64_t rows, int64_t cols, int64_t ld, void (*block)(char*, const char*, int64_t, int64_t)) {
  transpose_tiles<kBytes, kBytes, 4>(d, s, rows, cols, ld, block, copy_elem<kBytes>);
}

// One 4 x 4 block: dst row j (stride ld) = src column j (src rows of stride cols).
template <size_t kBytes>
void block4_scalar(char* d, const char* s, int64_t cols, int64_t ld) {
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t i = 0; i < 4; ++i) std::memcpy(d + (j * ld + i) * kBytes, s + (i * cols + j) * kBytes, kBytes);
}

#if defined(__x86_64__)
void block4_f32(char* d, const char* s, int64_t cols, int64_t ld) {
  const auto* src = reinterpret_cast<const float*>(s);
  auto* dst = reinterpret_cast<float*>(d);
  __m128 a = _mm_loadu_ps(src), b = _mm_loadu_ps(src + cols), c = _mm_loadu_ps(src + 2 * cols),
         e = _mm_loadu_ps(src + 3 * cols);
  _MM_TRANSPOSE4_PS(a, b, c, e);
  _mm_storeu_ps(dst, a);
  _mm_storeu_ps(dst + ld, b);
  _mm_storeu_ps(dst + 2 * ld, c);
  _mm_storeu_ps(dst + 3 * ld, e);
}

void transpose_f32(char* d, const char* s, int64_t rows, int64_t cols, int64_t ld) {
  // SSE 4 x 4 blocks: measured faster here than AVX 8 x 8 ones, and non-temporal
  // stores measured no faster over a whole model's weights.
  transpose_same<4>(d, s, rows, cols, ld, block4_f32);
}

// Four floats to bfloat16, rounded to nearest even (NaN stays NaN), in the low 8 bytes.
__m128i bf16_round(__m128 x) {
  const __m128i u = _mm_castps_si128(x);
  const __m128i lsb = _mm_and_si128(_mm_srli_epi32(u, 16), _mm_set1_epi32(1));
  __m128i r = _mm_srli_epi32(_mm_add_epi32(u, _mm_add_epi32(lsb, _mm_set1_epi32(0x7FFF))), 16);
  const __m128i nan = _mm_castps_si128(_mm_cmpunord_ps(x, x));
  r = _mm_or_si128(_mm_andnot_si128(nan, r), _mm_and_si128(nan, _mm_set1_epi32(0x7FC0)));
  r = _mm_shufflelo_epi16(r, _MM_SHUFFLE(2, 0, 2, 0));  // the low 16 bits of each 32-bit lane...
  r = _mm_shufflehi_epi16(r, _MM_SHUFFLE(2, 0, 2, 0));
  return _mm_shuffle_epi32(r, _MM_SHUFFLE(3, 1, 2, 0));  // ...gathered into the low 8 bytes
}

// float32 source block into a bfloat16 destination: transpose, then round each row.
void block4_f32_bf16(char* d, const char* s, int64_t cols, int64_t ld) {
  const auto* src = reinterpret_cast<const float*>(s);
  __m128 a = _mm_loadu_ps(src), b = _mm_loadu_ps(src + cols), c = _mm_loadu_ps(src + 2 * cols),
         e = _mm_loadu_ps(src + 3 * cols);
  _MM_TRANSPOSE4_PS(a, b, c, e);
  const int64_t db = ld * 2;
  _mm_storel_epi64(reinterpret_cast<__m128i*>(d), bf16_round(a));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(d + db), bf16_round(b));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(d + 2 * db), bf16_round(c));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(d + 3 * db), bf16_round(e));
}

void transpose_f32_bf16(char* d, const char* s, int64_t rows, int64_t cols, int64_t ld) {
  transpose_tiles<4, 2, 4>(d, s, rows, cols, ld, block4_f32_bf16, f32_to_bf16_elem);
}

// 4 x 4 blocks of 2-byte values (bfloat16, float16): four 8-byte rows interleaved
// by 16 then by 32 bits give the four columns.
void block4_b16(char* d, const char* s, int64_t cols, int64_t ld) {
  const int64_t sb = cols * 2, db = ld * 2;
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + sb));
  const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 2 * sb));
  const __m128i e = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 3 * sb));
  const __m128i ab = _mm_unpacklo_epi16(a, b), ce = _mm_unpacklo_epi16(c, e);
  const __m128i lo = _mm_unpacklo_epi32(ab, ce), hi = _mm_unpackhi_epi32(ab, ce);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(d), lo);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(d + db), _mm_srli_si128(lo, 8));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(d + 2 * db), hi);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(d + 3 * db), _mm_srli_si128(hi, 8));
}

void transpose_b16(char* d, const char* s, int64_t rows, int64_t cols, int64_t ld) {
  transpose_same<2>(d, s, rows, cols, ld, block4_b16);
}
#else
void transpose_f32(char* d, const char* s, int64_t rows, int64_t cols, int64_t ld) {
  transpose_same<4>(d, s, rows, cols, ld, block4_scalar<4>);
}
void transpose_b16(char* d, const char* s, int64_t rows, int64_t cols, int64_t ld) {
  transpose_same<2>(d, s, rows, cols, ld, block4_scalar<2>);
}
void block4_f32_bf16_scalar(char* d, const char* s, int64_t cols, int64_t ld) {
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t i = 0; i < 4; ++i) f32_to_bf16_elem(d + (j * ld + i) * 2, s + (i * cols + j) * 4);
}
void transpose_f32_bf16(char* d, const char* s, int64_t rows, int64_t cols, int64_t ld) {
  transpose_tiles<4, 2, 4>(d, s, rows, cols, ld, block4_f32_bf16_scalar, f32_to_bf16_elem);
}
#endif

}  // namespace

void copy_weight(const torch::Tensor& dst, const torch::Tensor& src) {
  const size_t bytes = dst.element_size();
  const bool tiled = dst.device().is_cpu() && src.device().is_cpu() && dst.dim() == 2 && dst.stride(0) == 1 &&
                     dst.size(0) > 1 && dst.sizes() == src.sizes() && src.is_contiguous() && (bytes == 4 || bytes == 2);
  if (!tiled) {
    dst.copy_(src);
    return;
  }
  auto* d = static_cast<char*>(dst.data_ptr());
  const auto* s = static_cast<const char*>(src.data_ptr());
  if (dst.scalar_type() == torch::kBFloat16 && src.scalar_type() == torch::kFloat32) {
    transpose_f32_bf16(d, s, dst.size(0), dst.size(1), dst.stride(1));  // float32 master weights, bf16 engine
    return;
  }
  if (dst.scalar_type() != src.scalar_type()) {  // other conversions: in order (vectorised), then transposed
    copy_weight(dst, src.to(dst.scalar_type()));
    return;
  }
  if (bytes == 4) transpose_f32(d, s, dst.size(0), dst.size(1), dst.stride(1));
  else transpose_b16(d, s, dst.size(0), dst.size(1), dst.stride(1));
}

torch::ScalarType scalar_type(model::DType d) {
  switch (d) {
    case model::DType::F32: return torch::kFloat32;
    case model::DType::F16: return torch::kFloat16;
    case model::DType::BF16: return torch::kBFloat16;
    case model::DType::F64: return torch::kFloat64;
    case model::DType::I64: return torch::kInt64;
    case model::DType::I32: return torch::kInt32;
    case model::DType::I16: return torch::kInt16;
    case model::DType::I8: return torch::kInt8;
    case model::DType::U8: return torch::kUInt8;
    case model::DType::BOOL: return torch::kBool;
  }
  throw std::invalid_argument("unknown dtype");
}

model::DType dtype_of(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return model::DType::F32;
    case torch::kFloat16: return model::DType::F16;
    case torch::kBFloat16: return model::DType::BF16;
    case torch::kFloat64: return model::DType::F64;
    case torch::kInt64: return model::DType::I64;
    case torch::kInt32: return model::DType::I32;
    case torch::kInt16: return model::DType::I16;
    case torch::kInt8: return model::DType::I8;
    case torch::kUInt8: return model::DType::U8;
    case torch::kBool: return model::DType::BOOL;
    default: throw std::invalid_argument(std::string("dtype ") + c10::toString(t) + " cannot be stored in safetensors");
  }
}

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "float") return torch::kFloat32;
  if (name == "bfloat16" || name == "bf16") return torch::kBFloat16;
  if (name == "float16" || name == "fp16" || name == "half") return torch::kFloat16;
  throw std::invalid_argument("unknown dtype '" + name + "'; expected float32, bfloat16 or float16");
}

const char* dtype_config_name(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    default: throw std::invalid_argument(std::string("dtype ") + c10::toString(t) + " is not a model dtype");
  }
}

// Throws unless the view holds exactly the bytes its shape needs.
static const torch::Tensor& check_size(const torch::Tensor& t, const model::TensorView& view) {
  if (static_cast<size_t>(t.nbytes()) != view.nbytes)
    throw std::runtime_error(view.file + ": tensor '" + view.name + "' holds " + std::to_string(view.nbytes) +
                             " bytes, its shape needs " + std::to_string(t.nbytes()));
  return t;
}

torch::Tensor tensor_from_view(const model::TensorView& view) {
  auto t = check_size(torch::empty(view.shape, torch::TensorOptions().dtype(scalar_type(view.dtype))), view);
  std::memcpy(t.data_ptr(), view.data, view.nbytes);  // copy: the mapping may be unaligned or go away
  return t;
}

torch::Tensor tensor_over_view(const model::TensorView& view) {
  const auto type = scalar_type(view.dtype);
  const auto align = static_cast<uintptr_t>(c10::elementSize(type));
  if (reinterpret_cast<uintptr_t>(view.data) % align != 0) return tensor_from_view(view);
  return check_size(torch::from_blob(const_cast<void*>(static_cast<const void*>(view.data)), view.shape,
                                     torch::TensorOptions().dtype(type)),
                    view);
}

void init_parameters(NamedTensors& params, uint64_t seed, double std) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& [name, p] : params) {
    if (is_norm(name)) {
      p.fill_(1.0);
    } else if (ends_with(name, ".bias")) {
      p.zero_();
    } else {
      auto values = torch::empty(p.sizes(), torch::kFloat32);
      values.normal_(0.0, std, gen);
      p.copy_(values);
    }
  }
}

void save_model_dir(const std::filesystem::path& dir, const model::ModelConfig& config, const NamedTensors& params,
                    torch::ScalarType dtype, size_t max_shard_bytes) {
  std::filesystem::create_directories(dir);
  std::vector<torch::Tensor> keep;  // contiguous CPU copies, alive until written
  std::vector<model::TensorToWrite> out;
  keep.reserve(params.size());
  for (const auto& [name, p] : params) {
    keep.push_back(p.detach().to(torch::kCPU, dtype).contiguous());
    const auto& t = keep.back();
    out.push_back({name, dtype_of(dtype), t.sizes().vec(), t.data_ptr(), static_cast<size_t>(t.nbytes())});
  }
  model::write_safetensors_dir(dir, out, max_shard_bytes);
  auto j = config.to_json();
  j["torch_dtype"] = dtype_config_name(dtype);
  model::write_file_atomic(dir / "config.json", j.dump(2) + "\n");
}

}  // namespace rl::nn
