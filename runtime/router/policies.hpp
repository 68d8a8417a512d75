// Routing policies: given the workers that may take a request now, pick one.
//
//   round_robin         in turn
//   random              uniformly
//   least_load          fewest requests in flight through this router (ties: in turn)
//   power_of_two        two at random, the less loaded one
//   cache_aware         longest cached prefix (radix tree), unless the load is
//                       imbalanced (max-min > balance_abs AND max > min*balance_rel):
//                       then least_load; a weak match (< cache_threshold of the
//                       text) goes to the worker with the smallest cached tree
//   consistent_hashing  rendezvous (highest-random-weight) hashing of the
//                       X-SMG-Routing-Key / x-session-id header over worker URLs:
//                       a key keeps its worker, and adding or removing a worker
//                       moves only the keys it gains or loses. No key: least_load.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "router/radix_tree.hpp"
#include "router/worker_registry.hpp"

namespace rl::router {

struct PolicyOptions {
  double cache_threshold = 0.5;     // cache_aware: matched fraction that counts as a hit
  int balance_abs_threshold = 32;   // cache_aware: imbalance if max-min load exceeds this...
  double balance_rel_threshold = 1.5;  // ...and max > min * this
  size_t max_tree_chars = 8 << 20;  // cache_aware: radix tree budget (bytes)
  uint64_t seed = 0;                // random/power_of_two; 0 = from std::random_device
};

// What a policy may look at. `text` is the routing text (prompt, or input_ids
// packed as bytes) and is filled only for policies that need_text().
struct RouteInput {
  std::string_view text;
  std::string_view routing_key;
  double now = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  virtual bool needs_text() const { return false; }
  // `candidates` is non-empty. Returns one of them.
  virtual Worker* pick(const std::vector<Worker*>& candidates, const RouteInput& in) = 0;
  virtual void on_worker_removed(uint64_t id) {}
};

// Rendezvous (highest-random-weight) hashing of `key` over the candidates' URLs:
// consistent_hashing's choice, and PD mode's for a request with a routing key (so a
// session keeps its prefill and its decode worker whatever the pools' policies).
Worker* rendezvous_pick(const std::vector<Worker*>& candidates, std::string_view key);

// The valid names, for error messages ("round_robin, random, ...").
const std::vector<std::string>& policy_names();
// Throws std::invalid_argument naming the valid choices for an unknown name.
std::unique_ptr<Policy> make_policy(std::string_view name, const PolicyOptions& opts);

// cache_aware, exposed for tests (tree size, decisions).
class CacheAwarePolicy : public Policy {
 public:
  explicit CacheAwarePolicy(const PolicyOptions& opts) : opts_(opts), tree_(opts.max_tree_chars) {}
  const char* name() const override { return "cache_aware"; }
  bool needs_text() const override { return true; }
  Worker* pick(const std::vector<Worker*>& candidates, const RouteInput& in) override;
  void on_worker_removed(uint64_t id) override { tree_.remove_tenant(id); }
  const RadixTree& tree() const { return tree_; }

 private:
  PolicyOptions opts_;
  RadixTree tree_;
  size_t rr_ = 0;
};

}  // namespace rl::router
