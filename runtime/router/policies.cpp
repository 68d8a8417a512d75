#include "router/policies.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace rl::router {

namespace {

// FNV-1a then a 64-bit finaliser (splitmix): cheap, stable across runs and
// platforms (std::hash is neither guaranteed), well mixed for rendezvous hashing.
uint64_t hash64(std::string_view a, std::string_view b) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : a) h = (h ^ c) * 1099511628211ull;
  h = (h ^ 0xff) * 1099511628211ull;
  for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

uint64_t seed_of(const PolicyOptions& o) { return o.seed ? o.seed : std::random_device{}(); }

// Fewest in flight; ties broken in turn so equal workers share the load.
Worker* least_loaded(const std::vector<Worker*>& c, size_t& rr) {
  const size_t start = rr++ % c.size();
  Worker* best = nullptr;
  for (size_t i = 0; i < c.size(); ++i) {
    Worker* w = c[(start + i) % c.size()];
    if (!best || w->in_flight < best->in_flight) best = w;
  }
  return best;
}

class RoundRobin : public Policy {
 public:
  const char* name() const override { return "round_robin"; }
  Worker* pick(const std::vector<Worker*>& c, const RouteInput&) override { return c[next_++ % c.size()]; }

 private:
  size_t next_ = 0;
};

class Random : public Policy {
 public:
  explicit Random(const PolicyOptions& o) : rng_(seed_of(o)) {}
  const char* name() const override { return "random"; }
  Worker* pick(const std::vector<Worker*>& c, const RouteInput&) override {
    return c[std::uniform_int_distribution<size_t>(0, c.size() - 1)(rng_)];
  }

 private:
  std::mt19937_64 rng_;
};

class LeastLoad : public Policy {
 public:
  const char* name() const override { return "least_load"; }
  Worker* pick(const std::vector<Worker*>& c, const RouteInput&) override { return least_loaded(c, rr_); }

 private:
  size_t rr_ = 0;
};

class PowerOfTwo : public Policy {
 public:
  explicit PowerOfTwo(const PolicyOptions& o) : rng_(seed_of(o)) {}
  const char* name() const override { return "power_of_two"; }
  Worker* pick(const std::vector<Worker*>& c, const RouteInput&) override {
    if (c.size() == 1) return c[0];
    std::uniform_int_distribution<size_t> d(0, c.size() - 1);
    const size_t a = d(rng_);
    size_t b = d(rng_);
    if (b == a) b = (a + 1) % c.size();
    return c[b]->in_flight < c[a]->in_flight ? c[b] : c[a];
  }

 private:
  std::mt19937_64 rng_;
};

class ConsistentHashing : public Policy {
 public:
  const char* name() const override { return "consistent_hashing"; }
  Worker* pick(const std::vector<Worker*>& c, const RouteInput& in) override {
    if (in.routing_key.empty()) return least_loaded(c, rr_);
    return rendezvous_pick(c, in.routing_key);
  }

 private:
  size_t rr_ = 0;
};

}  // namespace

Worker* rendezvous_pick(const std::vector<Worker*>& c, std::string_view key) {
  Worker* best = nullptr;
  uint64_t best_score = 0;
  for (Worker* w : c) {
    const uint64_t s = hash64(key, w->url);
    if (!best || s > best_score) {
      best = w;
      best_score = s;
    }
  }
  return best;
}

Worker* CacheAwarePolicy::pick(const std::vector<Worker*>& c, const RouteInput& in) {
  int min_load = std::numeric_limits<int>::max(), max_load = 0;
  for (Worker* w : c) {
    min_load = std::min(min_load, w->in_flight);
    max_load = std::max(max_load, w->in_flight);
  }
  // Balance guard: a hot prefix must not pile everything onto one worker.
  const bool imbalanced = max_load - min_load > opts_.balance_abs_threshold &&
                          static_cast<double>(max_load) > static_cast<double>(min_load) * opts_.balance_rel_threshold;
  Worker* chosen = nullptr;
  if (imbalanced || in.text.empty()) {
    chosen = least_loaded(c, rr_);
  } else {
    std::vector<uint64_t> ids;
    ids.reserve(c.size());
    for (Worker* w : c) ids.push_back(w->id);
    const RadixTree::Match m = tree_.match(in.text, ids);
    const double rate = static_cast<double>(m.matched) / static_cast<double>(in.text.size());
    if (rate > opts_.cache_threshold && !m.tenants.empty()) {
      for (Worker* w : c)  // among the owners of the prefix, the least loaded
        if (std::find(m.tenants.begin(), m.tenants.end(), w->id) != m.tenants.end() &&
            (!chosen || w->in_flight < chosen->in_flight))
          chosen = w;
    } else {
      // A miss: the worker with the least cached so far (spreads distinct
      // prefixes), ties by load then in turn.
      const size_t start = rr_++ % c.size();
      for (size_t i = 0; i < c.size(); ++i) {
        Worker* w = c[(start + i) % c.size()];
        if (!chosen) {
          chosen = w;
          continue;
        }
        const size_t a = tree_.tenant_chars(w->id), b = tree_.tenant_chars(chosen->id);
        if (a < b || (a == b && w->in_flight < chosen->in_flight)) chosen = w;
      }
    }
  }
  if (!in.text.empty()) tree_.insert(in.text, chosen->id, in.now);
  return chosen;
}

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = {"round_robin",  "random",      "least_load",
                                                 "power_of_two", "cache_aware", "consistent_hashing"};
  return names;
}

std::unique_ptr<Policy> make_policy(std::string_view name, const PolicyOptions& opts) {
  if (name == "round_robin") return std::make_unique<RoundRobin>();
  if (name == "random") return std::make_unique<Random>(opts);
  if (name == "least_load") return std::make_unique<LeastLoad>();
  if (name == "power_of_two") return std::make_unique<PowerOfTwo>(opts);
  if (name == "cache_aware") return std::make_unique<CacheAwarePolicy>(opts);
  if (name == "consistent_hashing") return std::make_unique<ConsistentHashing>();
  std::string valid;
  for (auto& n : policy_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown policy '" + std::string(name) + "' (valid: " + valid + ")");
}

}  // namespace rl::router
