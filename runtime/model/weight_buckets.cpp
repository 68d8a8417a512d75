#include "model/weight_buckets.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "base/errors.hpp"

namespace rl::model {

std::string fusion_group(const std::string& name) {
  static const std::string layers = "model.layers.";
  if (name.rfind(layers, 0) != 0) return name;
  const size_t dot = name.find('.', layers.size());
  if (dot == std::string::npos) return name;
  const std::string layer = name.substr(0, dot + 1), rest = name.substr(dot + 1);
  for (const char* kind : {"weight", "bias"}) {
    for (const char* part : {"q", "k", "v"})
      if (rest == std::string("self_attn.") + part + "_proj." + kind) return layer + "self_attn.qkv." + kind;
    for (const char* part : {"gate", "up"})
      if (rest == std::string("mlp.") + part + "_proj." + kind) return layer + "mlp.gate_up." + kind;
  }
  return name;
}

std::vector<size_t> weight_send_order(const std::vector<std::string>& names, const std::vector<int64_t>& bytes) {
  if (names.size() != bytes.size()) throw std::invalid_argument("weight_send_order: names and bytes differ in length");
  // Groups in the order of their first member, each with its members and bytes.
  std::vector<std::vector<size_t>> groups;
  std::vector<int64_t> group_bytes;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < names.size(); ++i) {
    const auto [it, fresh] = index.emplace(fusion_group(names[i]), groups.size());
    if (fresh) {
      groups.emplace_back();
      group_bytes.push_back(0);
    }
    groups[it->second].push_back(i);
    group_bytes[it->second] += bytes[i];
  }
  std::vector<size_t> by_size(groups.size());
  for (size_t g = 0; g < by_size.size(); ++g) by_size[g] = g;
  std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) { return group_bytes[a] > group_bytes[b]; });
  std::vector<size_t> order;
  order.reserve(names.size());
  for (size_t g : by_size) order.insert(order.end(), groups[g].begin(), groups[g].end());
  return order;
}

std::vector<Bucket> plan_buckets(const TensorSet& set, size_t bucket_bytes) {
  if (bucket_bytes == 0) throw Error("weight buckets: bucket_bytes must be > 0");
  std::vector<Bucket> out;
  size_t used = 0;
  for (size_t i = 0; i < set.tensors.size(); ++i) {
    const TensorView& t = set.tensors[i];
    if (t.nbytes > bucket_bytes && !t.shape.empty() && t.shape[0] > 1) {
      // Row slices of at most bucket_bytes (at least one row), each a bucket of its own.
      const size_t row_bytes = t.nbytes / size_t(t.shape[0]);
      const int64_t per = std::max<int64_t>(1, int64_t(bucket_bytes / std::max<size_t>(row_bytes, 1)));
      for (int64_t r = 0; r < t.shape[0]; r += per) out.push_back({{i, r, std::min(per, t.shape[0] - r)}});
      used = bucket_bytes;  // nothing joins the last slice
      continue;
    }
    if (out.empty() || used + t.nbytes > bucket_bytes) {
      out.emplace_back();
      used = 0;
    }
    out.back().push_back({i, 0, -1});
    used += t.nbytes;
  }
  return out;
}

size_t bucket_data_bytes(const TensorSet& set, const Bucket& bucket) {
  size_t n = 0;
  for (const BucketPiece& p : bucket) {
    if (p.tensor >= set.tensors.size()) continue;
    const TensorView& t = set.tensors[p.tensor];
    n += p.rows < 0 || t.shape.empty() ? t.nbytes : size_t(p.rows) * (t.nbytes / size_t(t.shape[0]));
  }
  return n;
}

std::string encode_bucket(const TensorSet& set, const Bucket& bucket, std::string into) {
  std::vector<TensorToWrite> parts;
  std::map<std::string, std::string> metadata;
  parts.reserve(bucket.size());
  for (const BucketPiece& p : bucket) {
    if (p.tensor >= set.tensors.size()) throw Error("weight buckets: no tensor " + std::to_string(p.tensor));
    const TensorView& t = set.tensors[p.tensor];
    if (p.rows < 0) {
      parts.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
      continue;
    }
    if (t.shape.empty() || p.first_row < 0 || p.first_row + p.rows > t.shape[0])
      throw Error("weight buckets: rows " + std::to_string(p.first_row) + "+" + std::to_string(p.rows) + " of '" +
                  t.name + "' are outside it");
    const size_t row_bytes = t.nbytes / size_t(t.shape[0]);
    std::vector<int64_t> shape = t.shape;
    shape[0] = p.rows;
    parts.push_back({t.name, t.dtype, shape, t.data + size_t(p.first_row) * row_bytes, size_t(p.rows) * row_bytes});
    metadata[std::string(kFirstRowKey) + t.name] = std::to_string(p.first_row);
  }
  return encode_safetensors(parts, metadata, std::move(into));
}

}  // namespace rl::model
