// Approximate prefix cache of every worker, for the cache_aware policy.
//
// A byte-level radix tree over request text (or input_ids packed as bytes).
// Each node records which workers ("tenants") were sent a request whose text
// runs through it, and when. Routing a request to the worker with the longest
// matching prefix lets that worker's KV cache (SGLang's RadixAttention, the
// native engine's prefix cache) reuse the shared prompt.
//
// It is approximate on purpose, like sglang-router's: it never hears about the
// engine's own evictions. Memory is bounded by `max_chars`: past it, the least
// recently used leaves are evicted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rl::router {

class RadixTree {
 public:
  explicit RadixTree(size_t max_chars = 8 << 20) : max_chars_(max_chars) { root_ = std::make_unique<Node>(); }

  struct Match {
    size_t matched = 0;               // bytes of the text matched by some allowed tenant
    std::vector<uint64_t> tenants;    // allowed tenants owning that longest prefix
  };

  // Longest prefix of `text` cached by any tenant in `allowed` (all when empty).
  Match match(std::string_view text, const std::vector<uint64_t>& allowed = {}) const;
  // Records that `tenant` was sent `text` (touches the path, splits edges as needed).
  void insert(std::string_view text, uint64_t tenant, double now);
  // Forgets a tenant everywhere (a removed worker).
  void remove_tenant(uint64_t tenant);
  // Bytes attributed to `tenant` (its approximate cache size).
  size_t tenant_chars(uint64_t tenant) const;
  size_t total_chars() const { return total_chars_; }
  size_t nodes() const { return nodes_; }

 private:
  struct Node {
    std::string label;  // edge label from the parent
    Node* parent = nullptr;
    std::map<unsigned char, std::unique_ptr<Node>> children;
    std::unordered_map<uint64_t, double> tenants;  // tenant -> last use
    double last_use = 0;
  };

  void evict();
  void drop_tenant_on(Node* n, uint64_t tenant);

  std::unique_ptr<Node> root_;
  size_t max_chars_;
  size_t total_chars_ = 0;  // sum of label lengths
  size_t nodes_ = 1;
  std::unordered_map<uint64_t, size_t> tenant_chars_;
};

}  // namespace rl::router
