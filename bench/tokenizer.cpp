// Tokenizer throughput: rlhost's Tokenizer::encode on every GSM8K train question,
// one thread. bench/tokenizer.sh runs it next to HF `tokenizers` (Python) and
// compares ids and speed; asserts nothing.
//
//   build/bench/bench_tokenizer TOKENIZER_DIR GSM8K_JSONL [--repeat N] [--ids-out FILE]
//
// Prints the load time, a cold pass (empty word cache), the best of N warm passes,
// and one RESULT line. --ids-out writes one JSON array of ids per question.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/tokenizer.hpp"

namespace {

double now() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR GSM8K_JSONL [--repeat N] [--ids-out FILE]\n", argv[0]);
    return 2;
  }
  int repeat = 5;
  std::string ids_out;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--ids-out") ids_out = argv[i + 1];
  }
  std::vector<std::string> questions;
  {
    std::ifstream in(argv[2]);
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) questions.push_back(nlohmann::json::parse(line).at("question").get<std::string>());
  }
  if (questions.empty()) {
    std::fprintf(stderr, "no questions in %s\n", argv[2]);
    return 2;
  }
  size_t bytes = 0;
  for (const auto& q : questions) bytes += q.size();

  const double t0 = now();
  const rl::model::Tokenizer tok = rl::model::Tokenizer::load(argv[1]);
  const double load_s = now() - t0;

  std::vector<std::vector<int32_t>> all(questions.size());
  auto pass = [&] {
    size_t tokens = 0;
    const double start = now();
    for (size_t i = 0; i < questions.size(); ++i) {
      all[i] = tok.encode(questions[i], rl::model::EncodeOptions{false});
      tokens += all[i].size();
    }
    return std::pair<double, size_t>(now() - start, tokens);
  };
  const auto [cold_s, tokens] = pass();
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) best = std::min(best, pass().first);

  std::printf("rlhost: %zu questions, %zu bytes, %zu tokens; load %.3f s\n", questions.size(), bytes, tokens, load_s);
  std::printf("rlhost: cold pass %.4f s (%.0f tokens/s), best of %d warm passes %.4f s (%.0f tokens/s)\n", cold_s,
              tokens / cold_s, repeat, best, tokens / best);
  std::printf("RESULT rlhost load_s=%.4f cold_tokens_per_s=%.0f warm_tokens_per_s=%.0f tokens=%zu\n", load_s,
              tokens / cold_s, tokens / best, tokens);
  if (!ids_out.empty()) {
    std::ofstream out(ids_out);
    for (const auto& ids : all) out << nlohmann::json(ids).dump() << "\n";
  }
  return 0;
}
