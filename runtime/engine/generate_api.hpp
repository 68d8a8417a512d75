// SGLang's /generate request and response shapes, shared by the HTTP server
// (server_generate.cpp) and the in-process Lua path (bindings/torch_engine.cpp),
// so both accept and return exactly the same JSON.
//
//   auto call = parse_generate(body, engine);                 // BadRequest naming the field
//   auto run = GenerateRun::start(engine, std::move(call), listener);
//   ... run->wait() ...; output_json(run->outputs()[i], run->call(), i, tok)
//
// A call is `prompts x n` engine requests in response order: prompt i's sample j
// is index i * n + j (SGLang's order for batched requests with n > 1).
// LibTorch-free.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/errors.hpp"
#include "engine/engine.hpp"

namespace rl::engine {

// The client's mistake: the server answers 400 with the message.
class BadRequest : public rl::Error {
 public:
  using rl::Error::Error;
};

// A request refused by admission control (or because the server is stopping):
// the status (400, 429, 503), the cap it hit (a metrics label) and the seconds
// a client should wait before retrying (0: do not retry).
struct Refused : std::runtime_error {
  Refused(int status, std::string cap, const std::string& message, double retry_after_s = 0)
      : std::runtime_error(message), status(status), cap(std::move(cap)), retry_after_s(retry_after_s) {}
  int status;
  std::string cap;
  double retry_after_s;
};

struct GenerateCall {
  std::vector<GenerateRequest> requests;  // prompt i, sample j at i * n + j
  bool batched = false;                   // the input was a list: respond with a list
  bool stream = false;
  bool return_text_in_logprobs = false;   // [logprob, id, "text"] instead of [.., null]
};

// What one call may ask for, checked before anything is queued (0: no cap).
// The server's come from ServerOptions; the in-process Lua path uses the same.
struct CallLimits {
  int64_t max_sequences = 4096;  // prompts x n: Refused(400) beyond
  int64_t max_top_logprobs = 20; // top_logprobs_num (OpenAI: logprobs / top_logprobs) per position
  // Values the response may hold at most, counted for the longest output each
  // request may produce (max_new_tokens, else what the context leaves):
  // per output token its id, plus its log-prob and each top log-prob when asked.
  // Bounds the response body (and the memory building it) by what was asked.
  int64_t max_response_entries = int64_t{4} << 20;
  // Prompt text longer than this cannot fit the context whatever it encodes to:
  // refused before tokenizing (text_bytes_bound()).
  int64_t max_text_bytes = 0;
  // A prefill or decode engine: bootstrap_host, _port and _room are its to read.
  bool pd_fields = false;
};

// Bytes of text that can fit in `engine`'s context: context length x the longest
// token's bytes x 4 (room for normalizers that shrink text). 0: no tokenizer.
int64_t text_bytes_bound(const Engine& engine);

// Validates a /generate body. Text is tokenized with the engine's tokenizer
// (without one, `text` is a BadRequest). Engine-side checks (vocabulary,
// context length) happen at submit. A call over a limit is Refused (400)
// before any request is built.
GenerateCall parse_generate(const nlohmann::json& body, const Engine& engine, const CallLimits& limits = {});

// Refused(400) when `count` sequences exceed `max_sequences` (0: no cap).
void check_sequence_cap(size_t count, int64_t max_sequences);
// Refused(400) when the call's response could hold more than
// limits.max_response_entries values (see CallLimits).
void check_response_size(const GenerateCall& call, const Engine& engine, const CallLimits& limits);
// BadRequest naming `where` unless 0 <= v <= limits.max_top_logprobs (`hint` names the knob).
int64_t top_logprobs_of(const nlohmann::json& v, const std::string& where, const CallLimits& limits);

// `name` when it is a loaded LoRA adapter of `engine`, else BadRequest naming `where`,
// the name and the loaded adapters. "" (the base model) passes.
std::string check_lora_name(const Engine& engine, const std::string& name, const std::string& where);
// The adapter an OpenAI request names (SGLang's convention): `model` "<base>:<adapter>"
// or an adapter's own name, or `lora_path`; "" for the base model (the served model's
// name, or any other model name, as before adapters existed). BadRequest for
// "<base>:<adapter>" with no such adapter.
std::string openai_lora_name(const nlohmann::json& body, const Engine& engine);

// The prompt's ids, or BadRequest naming `where` (no tokenizer, empty text, text
// longer than max_text_bytes: refused before it is tokenized).
std::vector<int32_t> tokenize(const Engine& engine, const std::string& text, const std::string& where,
                              bool add_special_tokens = true, int64_t max_text_bytes = 0);

// {"type":"stop","matched":..} | {"type":"length","length":N} | {"type":"abort","message":..} | null
nlohmann::json finish_reason_json(const FinishReason& f, bool finished);
// SGLang's meta_info for one request.
nlohmann::json meta_info_json(const RequestOutput& out, const GenerateRequest& req, const model::Tokenizer* tok,
                              bool text_in_logprobs);
// {"text", "output_ids", "meta_info"}; streaming chunks of a batch also carry "index".
nlohmann::json output_json(const RequestOutput& out, const GenerateCall& call, size_t index,
                           const model::Tokenizer* tok, bool with_index = false);
// The whole response: an object, or a list for batched / n > 1 calls.
nlohmann::json response_json(const std::vector<RequestOutput>& outs, const GenerateCall& call,
                             const model::Tokenizer* tok);

// JSON text for responses; invalid UTF-8 (never expected from the decoder, but
// a tokenizer's raw piece could hold some) becomes U+FFFD instead of throwing.
inline std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// One call in flight: submits every request, gathers their cumulative outputs.
// Engine callbacks (scheduler thread) only copy, notify and call `listener`.
class GenerateRun {
 public:
  // index, output; on the scheduler thread, must not block. `last` is true on
  // the call's final update (every request finished).
  using Listener = std::function<void(size_t index, const RequestOutput& out, bool last)>;

  // Submits all requests. If one is refused (rl::Error from Engine::submit),
  // the ones already queued are aborted and a BadRequest is thrown.
  static std::shared_ptr<GenerateRun> start(Engine& engine, GenerateCall call, Listener listener = {});

  void abort();                               // aborts what is unfinished
  bool wait_for(double seconds);              // true once every request finished
  void wait();
  bool done() const;
  std::vector<RequestOutput> outputs() const; // snapshot, in call order
  const GenerateCall& call() const { return call_; }
  std::vector<std::string> rids() const;

 private:
  GenerateRun(Engine& engine, GenerateCall call, Listener listener);
  void on_update(size_t index, const RequestOutput& out);

  Engine& engine_;
  GenerateCall call_;
  Listener listener_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RequestOutput> outs_;
  size_t finished_ = 0;
};

}  // namespace rl::engine
