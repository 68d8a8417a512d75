// A request's output text as tokens arrive: incremental detokenization (never a
// split UTF-8 character) and stop-string matching over the text's tail.
//
// SGLang semantics: when a stop string appears, generation stops, finish_reason
// is {type: stop, matched: "<the string>"}, and the text is cut before it unless
// no_stop_trim. While streaming, text that could be the start of a stop string
// is held back so a client never sees text that is later taken away.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer.hpp"

namespace rl::engine {

class OutputText {
 public:
  // tok may be null (ids-only engine): then stop strings are not allowed and the
  // text stays empty.
  OutputText(const model::Tokenizer* tok, std::vector<std::string> stop, bool skip_special_tokens,
             bool no_stop_trim);

  // Feeds one token; returns the stop string it completed, if any.
  std::optional<std::string> push(int32_t id);
  // End of generation: releases text held back by the decoder.
  void finish();

  // Text a client may see now (complete when finished).
  std::string visible() const;
  bool stopped() const { return stop_at_ != std::string::npos; }

 private:
  std::unique_ptr<model::IncrementalDecoder> decoder_;
  std::vector<std::string> stop_;
  size_t longest_stop_ = 0;
  bool no_stop_trim_ = false;
  bool finished_ = false;
  std::string text_;
  size_t stop_at_ = std::string::npos;   // where the matched stop string starts
  size_t stop_end_ = std::string::npos;  // and ends
};

}  // namespace rl::engine
