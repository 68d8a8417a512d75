// Prefill/decode disaggregation, the engine's half (SGLang's PD): a prefill engine
// runs a request's prompt and first token and hands over the prompt's K/V as the
// request finishes; a decode engine takes a request whose prompt K/V arrives from
// elsewhere: it reserves KV blocks for the prompt (serving what it can from its own
// prefix cache), waits for the rest, and decodes on. The servers move the bytes
// (server_pd.cpp, pd_transfer.cpp); this header is what they and the engine share.
//
// K/V travel token-major, so any token range is one contiguous run of bytes:
// [token][layer][K, V][kv_head][head_dim], in the cache's dtype. LibTorch-free.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace rl::engine::pd {

struct KvLayout {
  int64_t layers = 0, kv_heads = 0, head_dim = 0, elem_size = 0;
  std::string dtype;
  int64_t token_bytes() const { return layers * 2 * kv_heads * head_dim * elem_size; }
  int64_t bytes(int64_t tokens) const { return tokens * token_bytes(); }
  bool operator==(const KvLayout&) const = default;
  std::string describe() const;  // "24 layers x 2 x 2 kv heads x 64 x float32"
};

// The prefill's first sampled token, and the request's sampler after drawing it.
struct FirstToken {
  bool sampled = false;  // false: the request asked for no new token
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
  std::string rng_state;  // std::mt19937_64 in its text form
};

// What a prefill engine produced for one request (GenerateRequest::pd_export).
struct Export {
  // Scheduler thread, once, as the request finishes (before its blocks go back):
  // ok with the K/V and first token, or not ok with why. Must not block.
  std::function<void(const std::shared_ptr<Export>&)> on_ready;
  bool ok = false;
  std::string error;
  KvLayout layout;
  int64_t prompt_len = 0;
  std::vector<char> kv;  // prompt tokens [0, prompt_len), token-major
  FirstToken first;
  std::string weight_version, weights_digest;
  int64_t cached_tokens = 0;                     // prompt tokens its prefix cache served
  double queue_time = 0, forward_time = 0;       // seconds: arrival -> scheduled -> first token
};

// A decode engine's request whose prompt K/V comes from a prefill (GenerateRequest::pd_import).
struct Import {
  // Scheduler thread, once its KV blocks are reserved: prompt tokens [0, cached) are
  // this engine's own (prefix cache); [cached, prompt_len) must be delivered
  // (Engine::deliver_kv). Must not block.
  std::function<void(int64_t cached)> on_reserved;
};

// The K/V of prompt tokens [from, from + tokens) and the prefill's first token,
// or why none comes (error).
struct Delivery {
  std::string error;
  KvLayout layout;
  int64_t from = 0, tokens = 0;
  const char* data = nullptr;    // layout.bytes(tokens) bytes, token-major
  std::shared_ptr<void> keep;    // owns data
  FirstToken first;
  std::string weight_version, weights_digest;
  int64_t cached_tokens = 0;
  std::vector<std::pair<std::string, double>> meta;  // pd_* figures for meta_info
};

// A 64-bit checksum of bytes (SGLang's SGLANG_DISAGGREGATION_KV_CHECKSUM idea): both
// sides compute it, so a row changed on the way is caught.
uint64_t checksum(const char* data, size_t n);

}  // namespace rl::engine::pd
