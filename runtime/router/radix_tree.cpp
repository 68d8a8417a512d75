#include "router/radix_tree.hpp"

#include <algorithm>
#include <functional>

namespace rl::router {

namespace {
size_t common_prefix(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}
bool allowed_tenant(const std::vector<uint64_t>& allowed, uint64_t t) {
  return allowed.empty() || std::find(allowed.begin(), allowed.end(), t) != allowed.end();
}
}  // namespace

RadixTree::Match RadixTree::match(std::string_view text, const std::vector<uint64_t>& allowed) const {
  Match m;
  const Node* n = root_.get();
  size_t depth = 0;
  while (depth < text.size()) {
    auto it = n->children.find(static_cast<unsigned char>(text[depth]));
    if (it == n->children.end()) break;
    const Node* child = it->second.get();
    const size_t k = common_prefix(child->label, text.substr(depth));
    // A tenant on `child` has all of child's label cached, so a partial edge
    // match still counts its matched bytes.
    std::vector<uint64_t> owners;
    for (auto& [t, when] : child->tenants)
      if (allowed_tenant(allowed, t)) owners.push_back(t);
    if (owners.empty()) break;  // deeper nodes only hold subsets of these tenants
    m.matched = depth + k;
    m.tenants = std::move(owners);
    if (k < child->label.size()) break;
    depth += k;
    n = child;
  }
  std::sort(m.tenants.begin(), m.tenants.end());
  return m;
}

void RadixTree::insert(std::string_view text, uint64_t tenant, double now) {
  Node* n = root_.get();
  size_t depth = 0;
  auto touch = [&](Node* node, size_t chars) {
    auto [it, fresh] = node->tenants.try_emplace(tenant, now);
    it->second = now;
    node->last_use = now;
    if (fresh) tenant_chars_[tenant] += chars;
  };
  while (depth < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[depth]);
    auto it = n->children.find(c);
    if (it == n->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->label = std::string(text.substr(depth));
      leaf->parent = n;
      total_chars_ += leaf->label.size();
      nodes_++;
      Node* raw = leaf.get();
      n->children.emplace(c, std::move(leaf));
      touch(raw, raw->label.size());
      break;
    }
    Node* child = it->second.get();
    const size_t k = common_prefix(child->label, text.substr(depth));
    if (k < child->label.size()) {
      // Split the edge: a new middle node takes the common part and inherits
      // the child's tenants (they have that part cached too).
      auto mid = std::make_unique<Node>();
      mid->label = child->label.substr(0, k);
      mid->parent = n;
      mid->tenants = child->tenants;
      mid->last_use = child->last_use;
      std::unique_ptr<Node> moved = std::move(it->second);
      moved->label.erase(0, k);
      moved->parent = mid.get();
      mid->children.emplace(static_cast<unsigned char>(moved->label[0]), std::move(moved));
      nodes_++;
      it->second = std::move(mid);
      child = it->second.get();
    }
    touch(child, child->label.size());
    depth += k;
    n = child;
  }
  if (total_chars_ > max_chars_) evict();
}

void RadixTree::drop_tenant_on(Node* n, uint64_t tenant) {
  if (n->tenants.erase(tenant)) {
    auto it = tenant_chars_.find(tenant);
    if (it != tenant_chars_.end()) it->second -= std::min(it->second, n->label.size());
  }
}

void RadixTree::remove_tenant(uint64_t tenant) {
  std::function<void(Node*)> walk = [&](Node* n) {
    drop_tenant_on(n, tenant);
    for (auto& [c, child] : n->children) walk(child.get());
  };
  walk(root_.get());
  tenant_chars_.erase(tenant);
  // Nodes left without tenants are garbage now: evict() collects leaves only,
  // so prune bottom-up here.
  std::function<void(Node*)> prune = [&](Node* n) {
    for (auto it = n->children.begin(); it != n->children.end();) {
      prune(it->second.get());
      if (it->second->tenants.empty() && it->second->children.empty()) {
        total_chars_ -= it->second->label.size();
        nodes_--;
        it = n->children.erase(it);
      } else {
        ++it;
      }
    }
  };
  prune(root_.get());
}

size_t RadixTree::tenant_chars(uint64_t tenant) const {
  auto it = tenant_chars_.find(tenant);
  return it == tenant_chars_.end() ? 0 : it->second;
}

void RadixTree::evict() {
  // Collect leaves, oldest first; remove until 90% of the budget (hysteresis,
  // so that eviction is not paid on every insert).
  std::vector<Node*> leaves;
  std::function<void(Node*)> walk = [&](Node* n) {
    if (n != root_.get() && n->children.empty()) leaves.push_back(n);
    for (auto& [c, child] : n->children) walk(child.get());
  };
  while (total_chars_ > max_chars_ * 9 / 10) {
    leaves.clear();
    walk(root_.get());
    if (leaves.empty()) return;
    std::sort(leaves.begin(), leaves.end(), [](Node* a, Node* b) { return a->last_use < b->last_use; });
    const size_t batch = std::max<size_t>(1, leaves.size() / 4);
    for (size_t i = 0; i < batch && total_chars_ > max_chars_ * 9 / 10; ++i) {
      Node* leaf = leaves[i];
      for (auto& [t, when] : leaf->tenants) {
        auto it = tenant_chars_.find(t);
        if (it != tenant_chars_.end()) it->second -= std::min(it->second, leaf->label.size());
      }
      total_chars_ -= leaf->label.size();
      nodes_--;
      Node* parent = leaf->parent;
      parent->children.erase(static_cast<unsigned char>(leaf->label[0]));
    }
  }
}

}  // namespace rl::router
