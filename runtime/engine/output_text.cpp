#include "engine/output_text.hpp"

#include <algorithm>

namespace rl::engine {

OutputText::OutputText(const model::Tokenizer* tok, std::vector<std::string> stop, bool skip_special_tokens,
                       bool no_stop_trim)
    : stop_(std::move(stop)), no_stop_trim_(no_stop_trim) {
  if (tok) {
    model::DecodeOptions opts;
    opts.skip_special_tokens = skip_special_tokens;
    decoder_ = std::make_unique<model::IncrementalDecoder>(*tok, opts);
  }
  for (const auto& s : stop_) longest_stop_ = std::max(longest_stop_, s.size());
}

std::optional<std::string> OutputText::push(int32_t id) {
  if (!decoder_ || stopped()) return std::nullopt;
  const size_t old = text_.size();
  text_ += decoder_->push(id);
  if (stop_.empty() || text_.size() == old) return std::nullopt;
  // Only a match that ends in the new text is new; search from where one could start.
  const size_t from = old >= longest_stop_ ? old - longest_stop_ + 1 : 0;
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stop_) {
    size_t pos = text_.find(s, from);
    if (pos != std::string::npos && pos < best) {
      best = pos;
      which = &s;
    }
  }
  if (!which) return std::nullopt;
  stop_at_ = best;
  stop_end_ = best + which->size();
  return *which;
}

void OutputText::finish() {
  if (finished_) return;
  finished_ = true;
  if (decoder_ && !stopped()) text_ += decoder_->finish();
}

std::string OutputText::visible() const {
  if (stopped()) return text_.substr(0, no_stop_trim_ ? stop_end_ : stop_at_);
  if (finished_ || stop_.empty()) return text_;
  // Hold back a tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stop_) {
    for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return text_.substr(0, text_.size() - hold);
}

}  // namespace rl::engine
