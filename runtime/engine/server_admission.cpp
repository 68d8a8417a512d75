// Admission control for the engine server: a call is refused before anything
// is queued when it would exceed one of the caps (ServerOptions):
//   max_sequences_per_request  prompts x n in one call             -> 400
//   max_queued_requests        sequences admitted beyond what the  -> 429 + Retry-After
//                              engine runs at once (max_running_requests)
//   max_tokens_in_flight       prompt + max_new_tokens of every    -> 429 + Retry-After
//                              unfinished sequence
// Counts are of what this server admitted (the engine's in-process Lua path
// has its own caller). Refusals are counted in /metrics
// (sglang:num_rejected_requests_total{cap=...}).
//
// Memory: many small allocations of a finished or aborted burst (requests,
// outputs, token vectors) stay in glibc's arenas; once the server has been
// idle for a moment after a large burst, malloc_trim hands them back (and the
// CPU block cache its blocks, tensor/block_cache.hpp) so RSS returns to its idle level.

#include "base/event_loop.hpp"
#include "engine/server.hpp"
#include "tensor/block_cache.hpp"

namespace rl::engine {
namespace {

// Sequences since the last trim that make one worth it (a trim walks the heap).
constexpr int64_t kTrimAfterSequences = 256;
// Idle this long (no sequence in flight) before trimming: the scheduler thread
// frees a finished request's state just after its last update.
constexpr double kTrimDelayS = 0.5;
// Response bytes since the last trim that make one worth it: building a large body
// (its JSON tree, then the text) leaves freed pages glibc keeps otherwise.
constexpr int64_t kTrimAfterResponseBytes = int64_t{16} << 20;

}  // namespace

EngineServer::Admitted EngineServer::admit(const GenerateCall& call) {
  Admitted a;
  a.sequences = static_cast<int64_t>(call.requests.size());
  for (const auto& r : call.requests)
    a.tokens += static_cast<int64_t>(r.input_ids.size()) + std::max<int64_t>(0, r.params.max_new_tokens);
  check_sequence_cap(call.requests.size(), opts_.max_sequences_per_request);

  const int64_t running = engine_->options().max_running_requests;
  const int64_t seqs = seqs_in_flight_.fetch_add(a.sequences) + a.sequences;
  if (opts_.max_queued_requests > 0 && seqs - running > opts_.max_queued_requests) {
    seqs_in_flight_ -= a.sequences;
    throw Refused(429, "max_queued_requests",
                  "engine busy: " + std::to_string(a.sequences) + " more sequence(s) would queue " +
                      std::to_string(seqs - running) + " beyond the " + std::to_string(running) +
                      " running; the cap is max_queued_requests = " + std::to_string(opts_.max_queued_requests) +
                      " (hint: retry after Retry-After seconds, or raise --max-queued-requests)",
                  opts_.retry_after_s);
  }
  const int64_t tokens = tokens_in_flight_.fetch_add(a.tokens) + a.tokens;
  if (opts_.max_tokens_in_flight > 0 && tokens > opts_.max_tokens_in_flight && tokens != a.tokens) {
    // (A single call larger than the cap is let through when nothing else is
    // in flight, or it could never run.)
    seqs_in_flight_ -= a.sequences;
    tokens_in_flight_ -= a.tokens;
    throw Refused(429, "max_tokens_in_flight",
                  "engine busy: " + std::to_string(a.tokens) + " more token(s) (prompt + max_new_tokens) would put " +
                      std::to_string(tokens) + " in flight; the cap is max_tokens_in_flight = " +
                      std::to_string(opts_.max_tokens_in_flight) +
                      " (hint: retry after Retry-After seconds, or raise --max-tokens-in-flight)",
                  opts_.retry_after_s);
  }
  seqs_since_trim_ += a.sequences;
  return a;
}

void EngineServer::finish(const Admitted& a) {
  tokens_in_flight_ -= a.tokens;
  if (seqs_in_flight_.fetch_sub(a.sequences) == a.sequences && seqs_since_trim_.load() >= kTrimAfterSequences)
    loop_->post([this] { loop_->call_later(kTrimDelayS, [this] { trim_heap_when_idle(); }); });
}

void EngineServer::note_response_bytes(size_t bytes) {
  if (bytes_since_trim_.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes) >= kTrimAfterResponseBytes)
    loop_->call_later(kTrimDelayS, [this] { trim_heap_when_idle(); });
}

void EngineServer::trim_heap_when_idle() {
  if (seqs_in_flight_.load() != 0) return;
  if (seqs_since_trim_.load() < kTrimAfterSequences && bytes_since_trim_.load() < kTrimAfterResponseBytes) return;
  // A training step in this process (a colocated recipe's, between rollouts) is reusing
  // the freed memory: left alone, and tried again when the next burst ends.
  if (!tensor::return_idle_memory()) return;
  seqs_since_trim_ = 0;
  bytes_since_trim_ = 0;
}

}  // namespace rl::engine
