// Prefill/decode disaggregation: what the router does to request and response
// bodies (pure functions; pd_proxy.cpp sends them, tests/cpp/test_router_pd.cpp
// checks them). The wire protocol is SGLang's: the router adds the prefill
// worker's KV bootstrap address and a random room to the body, sends the same body
// to a prefill and a decode worker, and answers with the decode worker's body, into
// which it merges the prefill's input log-probs and its pd_prefill_* / pd_transfer_*
// timings. See docs/router.md#prefilldecode-disaggregation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rl::router::pd {

// 0 for a single request; n for a batch of n (SGLang's `text` a list of strings,
// `input_ids` a list of lists; OpenAI's `prompt` a list).
size_t batch_size(const nlohmann::json& body);

// The host part of a worker URL, as bootstrap_host: "http://[::1]:8000" -> "::1".
std::string url_host(std::string_view url);

// A bootstrap room: uniform in [0, 2^63).
uint64_t new_room(std::mt19937_64& rng);

// Adds bootstrap_host, bootstrap_port (null when port <= 0) and bootstrap_room to
// `body` (an object); for a batch, each is a list with one entry per item (one room
// per item).
void add_bootstrap(nlohmann::json& body, const std::string& host, int port, std::mt19937_64& rng);

// Merges the prefill worker's answer into the decode worker's, per item for a batch
// (both lists of the same length): when the request asked for return_logprob, the
// decode's meta_info.input_token_logprobs (and input_top_logprobs) become the
// prefill's followed by the decode's; every prefill meta_info key starting with
// "pd_prefill_" or "pd_transfer_" is copied over. Anything not shaped like a
// /generate answer is left as it is.
void merge_response(const nlohmann::json& request, const nlohmann::json& prefill, nlohmann::json& decode);

// A routing key carried in the body: `routing_key` (a string), else
// session_params.id (string or number); "" when neither.
std::string body_routing_key(const nlohmann::json& body);

}  // namespace rl::router::pd
