// json_input: the JSON input policy (limits while parsing, short printable
// messages naming the field), against hostile texts of the kinds that crashed
// the engine: 80k-deep nesting, huge strings, invalid UTF-8.
#include <catch2/catch.hpp>

#include <string>

#include "base/json_input.hpp"

using Catch::Matchers::Contains;
using rl::json_input::Error;
using rl::json_input::Limits;
namespace ji = rl::json_input;

namespace {

std::string deep(size_t n, const std::string& inner = "1") { return std::string(n, '[') + inner + std::string(n, ']'); }

std::string refusal(std::string_view text, const Limits& lim = ji::limits()) {
  try {
    ji::parse(text, "request body", lim);
  } catch (const Error& e) {
    return e.what();
  }
  return "(parsed)";
}

}  // namespace

TEST_CASE("json_input parses ordinary JSON and keeps key order when asked", "[json_input]") {
  const auto j = ji::parse(R"({"text": "hé", "ids": [1, 2], "p": {"t": 0.5}})", "request body");
  CHECK(j["text"] == "hé");
  CHECK(j["ids"].size() == 2);
  const auto o = ji::parse_ordered(R"({"z": 1, "a": 2})", "request body");
  CHECK(o.begin().key() == "z");
  CHECK(ji::parse(deep(127), "x").is_array());  // 127 arrays around a number: within the default 128
}

TEST_CASE("json_input refuses deep nesting with the field, without echoing the input", "[json_input]") {
  CHECK(refusal(deep(128)) == "(parsed)");
  CHECK_THAT(refusal(deep(129)), Contains("nested deeper than 128 levels"));
  const std::string body = R"({"text": "ok", "sampling_params": {"stop": )" + deep(80000) + "}}";
  const std::string msg = refusal(body);
  CHECK_THAT(msg, Contains("request body: nested deeper than 128 levels in field 'sampling_params.stop[0][0][0][0]... "
                           "(128 levels)'"));
  CHECK_THAT(msg, Contains("RLHOST_JSON_MAX_DEPTH"));
  CHECK(msg.size() < 300);
  try {
    ji::parse(body, "request body");
  } catch (const Error& e) {
    CHECK(e.field() == "sampling_params.stop[0][0][0][0]... (128 levels)");
  }
  // Objects nest the same way.
  std::string objs;
  for (int i = 0; i < 50000; ++i) objs += "{\"k\":";
  CHECK_THAT(refusal(objs), Contains("in field 'k.k.k.k.k.k... (128 levels)'"));
}

TEST_CASE("json_input size limits: body, strings and keys, element count", "[json_input]") {
  Limits lim;
  lim.max_bytes = 100;
  CHECK_THAT(refusal(std::string(101, ' ') + "1", lim), Contains("request body: 102 bytes, over the limit of 100 bytes"));
  lim = Limits{};
  lim.max_string = 10;
  CHECK(refusal(R"({"a": "0123456789"})", lim) == "(parsed)");
  CHECK_THAT(refusal(R"({"a": ["x", "01234567890"]})", lim), Contains("a string of 11 bytes") && Contains("in field 'a[1]'"));
  CHECK_THAT(refusal(R"({"01234567890": 1})", lim), Contains("a key of 11 bytes"));
  lim = Limits{};
  lim.max_elements = 5;
  CHECK(refusal("[1, 2, 3, 4]", lim) == "(parsed)");  // the array and its 4 numbers
  CHECK_THAT(refusal(R"({"ids": [1, 2, 3, 4, 5]})", lim), Contains("more than 5 values") && Contains("'ids[3]'"));
}

TEST_CASE("json_input: malformed text and invalid UTF-8 get short printable messages", "[json_input]") {
  const std::string bad_utf8 = "{\"text\": \"" + std::string(100000, 'a') + "\xff\"}";
  const std::string msg = refusal(bad_utf8);
  CHECK_THAT(msg, Contains("request body: invalid JSON at byte") && Contains("UTF-8") && Contains("in field 'text'"));
  CHECK_THAT(msg, Contains("\\xFF"));
  CHECK(msg.find('\xff') == std::string::npos);
  CHECK(msg.size() < 500);
  // The reply that carries it is valid JSON.
  CHECK_NOTHROW(ji::dump_reply(nlohmann::json{{"error", msg}}));
  CHECK_THAT(refusal("{\"a\": tru}"), Contains("invalid JSON at byte") && Contains("line 1"));
  CHECK_THAT(refusal(""), Contains("invalid JSON"));
  CHECK_THAT(refusal("{no"), Contains("(last read: '{no'); expected string literal"));
  CHECK_THAT(refusal("[1] x"), Contains("invalid JSON"));
  CHECK_THAT(refusal("\"\\ud800\""), Contains("surrogate"));
}

TEST_CASE("json_input brief() and excerpt() stay short whatever the value", "[json_input]") {
  nlohmann::json big = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  const std::string b = ji::brief(big);
  CHECK(b.size() < 140);
  CHECK_THAT(b, Contains("[0, 1, 2") && Contains("(an array of 100000 elements)"));
  CHECK(ji::brief(ji::parse(deep(100), "x")).size() < 140);
  CHECK(ji::brief(nlohmann::json(std::string(1 << 20, 'x'))).size() < 140);
  CHECK(ji::brief(nlohmann::json{{"a", 1}}) == "{\"a\": 1} (an object of 1 keys)");
  CHECK(ji::brief(nlohmann::json(3.5)) == "3.5");
  CHECK(ji::excerpt("ok\n\xc3\xa9\xff", 80) == "ok\\x0A\xc3\xa9\\xFF");
  CHECK(ji::excerpt(std::string(1000, 'x'), 10) == "xxxxxxxxxx... (1000 bytes)");
}
