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

// Throws rl::Error for bucket_bytes 0.
std::vector<Bucket> plan_buckets(const TensorSet& set, size_t bucket_bytes);
// One bucket as safetensors bytes (into `into`, as encode_safetensors).
std::string encode_bucket(const TensorSet& set, const Bucket& bucket, std::string into = {});
// The tensor bytes of one bucket (its body is that plus the header).
size_t bucket_data_bytes(const TensorSet& set, const Bucket& bucket);

}  // namespace rl::model
