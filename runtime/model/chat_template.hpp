// Chat templates: the Jinja subset that Hugging Face chat templates use
// (Qwen2.5, Qwen3, Llama-3 style), rendered like transformers does
// (trim_blocks, lstrip_blocks, loop controls, tojson, raise_exception, strftime_now).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace rl::model {

class ChatTemplate {
 public:
  // Parses once; throws std::runtime_error naming the line, column and construct
  // for syntax errors and unsupported constructs.
  explicit ChatTemplate(const std::string& source, const std::string& name = "chat_template");
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // `context` holds the template variables: messages, add_generation_prompt,
  // tools, bos_token, eos_token and any template kwargs (enable_thinking, ...).
  // Throws std::runtime_error "<name>:<line>:<col>: <what>" for evaluation errors
  // (undefined values used, type errors, unsupported methods, runaway loops), and
  // exactly the template's message for raise_exception(msg). Thread-safe (const).
  std::string render(const nlohmann::json& context) const;
  // Same, keeping object key order: nlohmann::json sorts keys, while Python dicts
  // (and so `tools | tojson` in transformers) keep insertion order. Use this one
  // when the context came from JSON text with tool schemas or tool-call arguments.
  std::string render(const nlohmann::ordered_json& context) const;

  const std::string& name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rl::model
