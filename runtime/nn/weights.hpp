// Between checkpoint bytes (runtime/model) and torch tensors: conversion on load,
// Hugging Face-style random initialisation, and saving a model directory.
#pragma once
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "model/tensor_files.hpp"
#include "model/config.hpp"

namespace rl::nn {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

torch::ScalarType scalar_type(model::DType d);  // throws for dtypes torch lacks
model::DType dtype_of(torch::ScalarType t);     // throws for dtypes safetensors lacks
torch::ScalarType parse_dtype(const std::string& name);  // "float32"|"fp32"|"bfloat16"|"bf16"|"float16"|"fp16"
const char* dtype_config_name(torch::ScalarType t);      // config.json spelling: "float32", "bfloat16", ...

// A CPU tensor holding a copy of the view's bytes.
torch::Tensor tensor_from_view(const model::TensorView& view);
// A CPU tensor over the view's bytes, without a copy, valid while the view's
// storage (the mapped file) is; a copy when the bytes are not aligned to the
// element size. Read-only use: copying from it into parameters.
torch::Tensor tensor_over_view(const model::TensorView& view);

// dst.copy_(src), fast for the engine's CPU inference layout: when dst is an
// [out, in] view of [in, out] storage (dst.stride(0) == 1) and src is contiguous, a
// transpose in 64 × 64 tiles on LibTorch's threads (the generic copy walks a column
// stride per element, several times slower); float32 into bfloat16 is rounded inside
// the tiles exactly as copy_ rounds, other dtype pairs are converted first; otherwise copy_.
void copy_weight(const torch::Tensor& dst, const torch::Tensor& src);

// normal(0, std) for weight matrices and embeddings, ones for norms, zeros for
// biases; values drawn in float32 on the CPU from one generator seeded with `seed`,
// in parameter order, so the result does not depend on dtype or device.
void init_parameters(NamedTensors& params, uint64_t seed, double std);

// config.json (torch_dtype set to `dtype`) and safetensors in `dir` (created if needed).
void save_model_dir(const std::filesystem::path& dir, const model::ModelConfig& config, const NamedTensors& params,
                    torch::ScalarType dtype, size_t max_shard_bytes);

}  // namespace rl::nn
