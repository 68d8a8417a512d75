// A weight update over HTTP in requests of bounded size (the engine's
// /update_weights_from_safetensors): the tensors of a set packed greedily, in the
// set's order, into buckets of at most `bucket_bytes` of tensor data; a tensor bigger
// than a bucket travels as slices of whole rows (its first dimension), one bucket
// each. Each bucket is encoded as one safetensors file; a slice keeps the tensor's
// name and says its first row in the file's metadata ("rlhost.first_row.<name>").
// LibTorch-free.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/tensor_files.hpp"

namespace rl::model {

// The metadata key prefix of a row slice: key + tensor name -> first row (decimal).
inline constexpr const char* kFirstRowKey = "rlhost.first_row.";

struct BucketPiece {
  size_t tensor = 0;       // index into the set's tensors
  int64_t first_row = 0;
  int64_t rows = -1;       // -1: the whole tensor
};
using Bucket = std::vector<BucketPiece>;

// The bytes of one safetensors file holding `tensors` in the given order (a request
// body), written into `into` (emptied first; a buffer with room enough is not
// reallocated). Same checks as write_safetensors (safetensors_write.cpp).
std::string encode_safetensors(const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata = {}, std::string into = {});

// The order a whole model's tensors (Hugging Face names, their bytes) are sent in by
// any path that cuts them into buckets, as indices: the largest first, ties in their
// order, where the parts an engine fuses into one matrix (a layer's q/k/v projections,
// its gate/up, and their biases: fusion_group) count as one and stay together in their
// order. The embedding and the lm_head then go first, each alone (no packing before
// the first byte leaves), the matrices after them, and the small tail makes small last
// buckets. A trainer's model keeps its parameters in one storage in this order and an
// engine lays out its spare weights in the order they are sent, so a bucket of several
// is one range of memory on both sides (nn::Transformer, nn::WeightStage).
std::vector<size_t> weight_send_order(const std::vector<std::string>& names, const std::vector<int64_t>& bytes);
// The fused matrix a parameter is part of ("model.layers.3.self_attn.qkv.weight" for
// its q_proj, k_proj and v_proj weights; "model.layers.3.mlp.gate_up.bias"), else its
// own name.
std::string fusion_group(const std::string& name);

// Throws rl::Error for bucket_bytes 0.
std::vector<Bucket> plan_buckets(const TensorSet& set, size_t bucket_bytes);
// One bucket as safetensors bytes (into `into`, as encode_safetensors).
std::string encode_bucket(const TensorSet& set, const Bucket& bucket, std::string into = {});
// The tensor bytes of one bucket (its body is that plus the header).
size_t bucket_data_bytes(const TensorSet& set, const Bucket& bucket);

}  // namespace rl::model
