// Bounded mutation fuzzing of the readers that take outside bytes: the HTTP
// request parser, JSON input (json_input), config.json, tokenizer.json,
// safetensors, GGUF and pickles. Each starts from its committed seed corpus
// (tests/fuzz/corpus/<reader>/, written by tests/fuzz/make_corpus.py), mutates
// with a fixed-seed PRNG, and stops after a fixed number of inputs or a few
// seconds, whichever comes first (so the ASan stage stays fast; nothing here
// asserts a time). A finding is anything but the reader's own clean error: a
// crash or sanitizer report, or another exception type, which fails the test
// and leaves the input in fuzz-finding-<reader>.bin in the working directory.
//
//   RLHOST_FUZZ_SECONDS=60 rlhost_cpp_tests '[fuzz]'    a longer run
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "base/json_input.hpp"
#include "model/tensor_files.hpp"
#include "model/config.hpp"
#include "model/tokenizer.hpp"
#include "net/http_parser.hpp"
#include "pickle/torch_file.hpp"
#include "pickle/torch_pickle.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

std::vector<std::string> corpus(const std::string& reader) {
  std::vector<std::string> out;
  const fs::path dir = fs::path(RLHOST_TEST_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / reader;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::sort(out.begin(), out.end());  // directory order varies: keep runs reproducible
  REQUIRE(!out.empty());
  return out;
}

double budget_s() {
  const char* s = std::getenv("RLHOST_FUZZ_SECONDS");
  return s && *s ? std::atof(s) : 2.0;
}

// Byte-level mutations in the style of libFuzzer's: flips, inserts, erases,
// copies within the input and splices with another seed, and the tokens that
// make parsers take rarer paths.
class Mutator {
 public:
  explicit Mutator(const std::vector<std::string>& seeds, std::vector<std::string> tokens)
      : seeds_(seeds), tokens_(std::move(tokens)), rng_(20261126) {}

  std::string next() {
    std::string s = seeds_[pick(seeds_.size())];
    const size_t rounds = 1 + pick(6);
    for (size_t r = 0; r < rounds; ++r) mutate(s);
    return s;
  }

 private:
  size_t pick(size_t n) { return n ? static_cast<size_t>(rng_() % n) : 0; }
  void mutate(std::string& s) {
    const size_t at = pick(s.size() + 1);
    switch (pick(9)) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8));
        break;
      case 1:
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng_());
        break;
      case 2: s.insert(at, 1, static_cast<char>(rng_())); break;
      case 3: s.erase(at, pick(16) + 1); break;
      case 4: {  // copy a piece of itself elsewhere (repeats structure)
        const size_t from = pick(s.size() + 1), n = pick(32) + 1;
        s.insert(at, s.substr(from, n));
        break;
      }
      case 5: {  // splice: our head, another seed's tail
        const std::string& o = seeds_[pick(seeds_.size())];
        s = s.substr(0, at) + o.substr(pick(o.size() + 1));
        break;
      }
      case 6: s.insert(at, tokens_[pick(tokens_.size())]); break;
      case 7: s.resize(at); break;
      default: {  // an interesting integer over a few bytes (lengths, counts, offsets)
        static const uint64_t kValues[] = {0, 1, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF,
                                           0xFFFFFFFFFFFFFFFFull, 0x8000000000000000ull, 1ull << 32};
        const uint64_t v = kValues[pick(std::size(kValues))];
        const size_t n = std::min<size_t>(8, s.size() - std::min(s.size(), at));
        for (size_t k = 0; k < n; ++k) s[at + k] = static_cast<char>(v >> (8 * k));
      }
    }
    if (s.size() > (1u << 16)) s.resize(1u << 16);  // keep inputs small: depth and counts, not bulk
  }

  const std::vector<std::string>& seeds_;
  std::vector<std::string> tokens_;
  std::mt19937_64 rng_;
};

// Runs `fn` on the seeds and then on mutations. `fn` returns normally or throws
// rl::Error (the clean refusal); anything else is a finding.
void fuzz(const std::string& reader, const std::vector<std::string>& seeds, std::vector<std::string> tokens,
          const std::function<void(const std::string&)>& fn, size_t max_inputs = 200000) {
  Mutator m(seeds, std::move(tokens));
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget_s());
  size_t n = 0, refused = 0;
  std::string last_refusal;
  auto one = [&](const std::string& input) {
    try {
      fn(input);
    } catch (const rl::Error& e) {
      ++refused;
      last_refusal = e.what();
    } catch (const std::exception& e) {
      const std::string file = "fuzz-finding-" + reader + ".bin";
      std::ofstream(file, std::ios::binary) << input;
      FAIL(reader << ": input #" << n << " threw " << e.what() << " (not rl::Error); input saved to " << file);
    }
    ++n;
  };
  for (const auto& s : seeds) {
    one(s);
    INFO("a seed was refused: " << last_refusal);
    REQUIRE(refused == 0);  // the seeds themselves are valid
  }
  while (n < max_inputs && std::chrono::steady_clock::now() < end) one(m.next());
  INFO(reader << ": " << n << " inputs, " << refused << " refused");
  CHECK(n > seeds.size());
  CHECK(refused > 0);  // the mutations reached the error paths
}

}  // namespace

TEST_CASE("fuzz: HTTP request parser", "[fuzz]") {
  using rl::net::RequestParser;
  fuzz("http", corpus("http"), {"\r\n", "\r\n\r\n", "Content-Length: ", "Transfer-Encoding: chunked\r\n", "ffffffffffffffff\r\n",
                "0\r\n\r\n", " HTTP/1.1\r\n", "Expect: 100-continue\r\n", ";", ":", "\n"},
       [](const std::string& input) {
         RequestParser::Limits lim;
         lim.max_body_bytes = 1 << 20;
         lim.max_header_bytes = 8192;
         RequestParser p(lim);
         // Fed in pieces cut at varying places, as a socket delivers them.
         std::string buf;
         size_t pos = 0, fed = 0, cut = 1;
         while (fed < input.size()) {
           const size_t n = std::min(input.size() - fed, cut);
           buf.append(input, fed, n);
           fed += n;
           cut = cut * 3 + 1;
           for (;;) {
             const auto st = p.feed(buf, pos);
             if (st == RequestParser::Status::error) {
               if (p.error_status() < 400 || p.error_status() > 505 || p.error_message().empty())
                 throw std::logic_error("bad error status " + std::to_string(p.error_status()));
               throw rl::Error(p.error_message());  // the clean refusal
             }
             if (st == RequestParser::Status::need_more) break;
             (void)p.request().header("content-type");
             (void)p.request().query_param("x");
             p.reset();  // a pipelined next request
           }
         }
       });
}

TEST_CASE("fuzz: JSON input", "[fuzz]") {
  rl::json_input::Limits lim;
  lim.max_depth = 32;
  lim.max_string = 4096;
  lim.max_elements = 20000;
  fuzz("json", corpus("json"), {"[", "{", "]", "}", "\"", "\\u", "\\ud800", "\xff", "\xc3", "1e999", "-0", ",", ":", "null"},
       [&](const std::string& input) {
         const auto j = rl::json_input::parse(input, "request body", lim);
         const auto o = rl::json_input::parse_ordered(input, "request body", lim);
         if (rl::json_input::brief(j).size() > 200 || rl::json_input::brief(o).size() > 200)
           throw std::logic_error("brief() longer than its bound");
         (void)rl::json_input::dump_reply(j);
       });
}

TEST_CASE("fuzz: config.json", "[fuzz]") {
  fuzz("config", corpus("config"), {"null", "-1", "1e308", "[]", "{}", "\"", "18446744073709551616", "0.0", "true"},
       [](const std::string& input) {
         const auto j = rl::json_input::parse(input, "config.json", rl::json_input::file_limits());
         (void)rl::model::ModelConfig::from_json(j, "config.json");
       });
}

TEST_CASE("fuzz: tokenizer.json", "[fuzz]") {
  fuzz("tokenizer", corpus("tokenizer"), {"[", "{", "\"", "\"a b\"", "[\"a\", \"b\"]", "null", "\"type\": \"", "-1", "4294967296", "\xe2\x96"},
       [](const std::string& input) {
         const auto tok = rl::model::Tokenizer::from_json_text(input);
         const auto ids = tok.encode("ab c\xe2\x98\x83 abc<s>\xff");
         (void)tok.decode(ids);
       }, 20000);
}

TEST_CASE("fuzz: safetensors", "[fuzz]") {
  fuzz("safetensors", corpus("safetensors"), {"\"data_offsets\"", "[0, 0]", "\"shape\": [", "\"F64\"", "\"__metadata__\"", "-1", "1e20"},
       [](const std::string& input) { (void)rl::model::parse_safetensors(input.data(), input.size(), "fuzz.safetensors"); });
}

TEST_CASE("fuzz: GGUF", "[fuzz]") {
  fuzz("gguf", corpus("gguf"), {"GGUF", std::string("\x09\x00\x00\x00", 4), std::string("\x08\x00\x00\x00", 4)},
       [](const std::string& input) { (void)rl::model::parse_gguf(input.data(), input.size(), "fuzz.gguf"); });
}

TEST_CASE("fuzz: pickles", "[fuzz]") {
  using namespace rl::pickle;
  fuzz("pickle", corpus("pickle"), {"(", "]", "}", ")", "a", "e", "s", "u", "t", "\x85", "\x86", "\x87", "\x94", "h\x00", "q\x01", ".",
                  "c__builtin__\nset\n", "\x8a\x09", "X\xff\xff\xff\x7f", "Q"},
       [](const std::string& input) {
         size_t pos = 0;
         const Value v = pickle_load(input, &pos, [](const Value&) -> Value { throw rl::Error("no storages here"); },
                                     "fuzz.pkl");
         check_loaded(v, "fuzz.pkl");
       });
}

TEST_CASE("fuzz: torch.save archives", "[fuzz]") {
  using namespace rl::pickle;
  // The zip layer around the pickles: the seed pickles saved as torch.save
  // archives (with a tensor), then mutated; CRCs turn most blind flips into clean
  // refusals, the rest reach the directory, header and pickle parsers.
  std::vector<std::string> seeds;
  for (const auto& pkl : corpus("pickle")) {
    size_t pos = 0;
    const Value v = pickle_load(pkl, &pos, [](const Value&) -> Value { throw rl::Error("no storages"); }, "seed");
    const std::string raw("\x01\x00\x00\x00\x02\x00\x00\x00", 8);
    seeds.push_back(torch_save_bytes(Value::list({v, Tensor::contiguous(DType::int32, {2}, raw)}), "f"));
  }
  fuzz("torch_file", seeds, {"PK\x03\x04", "PK\x01\x02", "PK\x05\x06", "data.pkl", "version"},
       [](const std::string& input) { (void)torch_load_bytes(input, "fuzz.pt"); }, 20000);
}

TEST_CASE("a pickle nested a million levels deep is refused and freed without overflowing the stack", "[fuzz]") {
  using namespace rl::pickle;
  const size_t n = 1000000;
  // PROTO 2, n EMPTY_LISTs, n-1 APPENDs (each list into the one below), STOP: 2 MB.
  std::string p = "\x80\x02" + std::string(n, ']') + std::string(n - 1, 'a') + ".";
  size_t pos = 0;
  const auto none = [](const Value&) -> Value { throw rl::Error("no storages"); };
  {
    const Value v = pickle_load(p, &pos, none, "deep.pkl");
    CHECK_THROWS_WITH(check_loaded(v, "deep.pkl"), Contains("nested deeper than 512 levels"));
  }  // v freed here
  // Left on the unpickler's stack when it fails (no STOP).
  p.pop_back();
  pos = 0;
  CHECK_THROWS_AS(pickle_load(p, &pos, none, "deep.pkl"), rl::Error);
}
