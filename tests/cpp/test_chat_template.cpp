// Chat templates: byte parity with Jinja2 as transformers configures it.
//  - every chat_template row of the Qwen3 / Qwen2.5 reference_encodings.jsonl
//  - tests/data/chat_template_golden.jsonl, rendered by Jinja2 3.1.6 with
//    tests/data/gen_chat_golden.py (targeted constructs, Qwen with tools, a
//    Llama-3.1-style template); rows Jinja2 rejects must throw here as well
//  - error messages (construct + line:column), runaway guards, a mutation fuzz.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/chat_template.hpp"
#include "model/jinja_ast.hpp"
#include "model/jinja_eval.hpp"

#include "test_support.hpp"

namespace fs = std::filesystem;
using rl::model::ChatTemplate;
using ojson = nlohmann::ordered_json;

namespace {

fs::path source_dir() { return RLHOST_TEST_SOURCE_DIR; }
using rl::test::test_data;

std::vector<ojson> read_jsonl(const fs::path& path) {
  std::ifstream in(path);
  INFO(path.string());
  REQUIRE(in.good());
  std::vector<ojson> rows;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(ojson::parse(line));
  return rows;
}

ojson read_json(const fs::path& path) {
  std::ifstream in(path);
  INFO(path.string());
  REQUIRE(in.good());
  return ojson::parse(in);
}

fs::path qwen_dir(const std::string& which) {
  return which == "qwen3" ? test_data() / "tokenizers" / "qwen" : test_data() / "tokenizers" / "qwen" / "qwen2.5";
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

std::string render(const std::string& source, const ojson& ctx = ojson::object()) {
  return ChatTemplate(source).render(ctx);
}

// transformers passes the tokenizer's special tokens (those that are set) as variables.
void add_special_tokens(ojson& ctx, const ojson& config) {
  for (const char* key : {"bos_token", "eos_token", "pad_token", "unk_token"}) {
    if (!config.contains(key)) continue;
    const auto& v = config[key];
    if (v.is_string())
      ctx[key] = v;
    else if (v.is_object() && v.contains("content"))
      ctx[key] = v["content"];
  }
}

}  // namespace

TEST_CASE("chat template: Qwen3 and Qwen2.5 reference renderings are byte-exact", "[chat_template]") {
  for (const std::string which : {"qwen3", "qwen2.5"}) {
    const ojson config = read_json(qwen_dir(which) / "tokenizer_config.json");
    const ChatTemplate tmpl(config["chat_template"].get<std::string>(), which);
    size_t rows = 0;
    for (const auto& row : read_jsonl(qwen_dir(which) / "reference_encodings.jsonl")) {
      if (row["category"] != "chat_template") continue;
      ++rows;
      ojson ctx = row["template_kwargs"];
      ctx["messages"] = row["messages"];
      add_special_tokens(ctx, config);
      INFO(which << " row " << rows << ": " << row["messages"].dump());
      CHECK(tmpl.render(ctx) == row["text"].get<std::string>());
      // The sorted-key overload gives the same text when no key order is printed.
      CHECK(tmpl.render(nlohmann::json::parse(ctx.dump())) == row["text"].get<std::string>());
    }
    CHECK(rows == (which == "qwen3" ? 13u : 12u));
  }
}

TEST_CASE("chat template: golden cases match Jinja2 byte for byte", "[chat_template]") {
  const auto rows = read_jsonl(source_dir() / "tests" / "data" / "chat_template_golden.jsonl");
  REQUIRE(rows.size() > 100);
  std::map<std::string, std::string> refs;
  for (const std::string which : {"qwen3", "qwen2.5"})
    refs[which] = read_json(qwen_dir(which) / "tokenizer_config.json")["chat_template"].get<std::string>();
  size_t outputs = 0, errors = 0;
  for (const auto& row : rows) {
    const std::string name = row["name"];
    const std::string source =
        row.contains("template") ? row["template"].get<std::string>() : refs.at(row["template_ref"]);
    INFO("case " << name << "\ntemplate: " << source << "\ncontext: " << row["context"].dump());
    if (row.contains("output")) {
      ++outputs;
      std::string got;
      try {
        got = ChatTemplate(source, name).render(row["context"]);
      } catch (const std::exception& e) {
        FAIL("threw: " << e.what());
      }
      CHECK(got == row["output"].get<std::string>());
    } else {
      ++errors;
      const std::string jinja_error = row["error"];
      const std::string ours = what_of([&] { ChatTemplate(source, name).render(row["context"]); });
      INFO("Jinja2: " << jinja_error << "\nours: " << ours);
      CHECK(ours != "<no exception>");
      const std::string raised = "TemplateError: ";  // raise_exception(): the message itself
      if (jinja_error.rfind(raised, 0) == 0) CHECK(ours == jinja_error.substr(raised.size()));
    }
  }
  CHECK(outputs > 100);
  CHECK(errors >= 15);
}

TEST_CASE("chat template: Llama-3.1-style date defaults through strftime_now", "[chat_template]") {
  std::string source;
  for (const auto& row : read_jsonl(source_dir() / "tests" / "data" / "chat_template_golden.jsonl"))
    if (row["name"] == "llama31/basic") source = row["template"];
  REQUIRE(!source.empty());
  auto today = [] {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
    return std::string(buf);
  };
  const ojson ctx = {{"bos_token", "<|begin_of_text|>"},
                     {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                     {"add_generation_prompt", true}};
  const std::string before = today();
  const std::string out = ChatTemplate(source).render(ctx);
  const std::string after = today();
  const bool has_date = out.find("Today Date: " + before + "\n") != std::string::npos ||
                        out.find("Today Date: " + after + "\n") != std::string::npos;
  CHECK(has_date);
  CHECK(out.rfind("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n", 0) == 0);
  const std::string tail = "<|start_header_id|>assistant<|end_header_id|>\n\n";  // the generation prompt
  REQUIRE(out.size() >= tail.size());
  CHECK(out.compare(out.size() - tail.size(), tail.size(), tail) == 0);
}

TEST_CASE("chat template: syntax errors and unsupported constructs name what and where", "[chat_template]") {
  CHECK(what_of([] { ChatTemplate("{{ x | wordwrap }}"); }) == "chat_template:1:8: unsupported filter 'wordwrap'");
  CHECK(what_of([] { ChatTemplate("ab\n  {{ x | nosuch(1) }}", "t"); }) == "t:2:10: unknown filter 'nosuch'");
  CHECK(what_of([] { ChatTemplate("{% if x is frob %}{% endif %}"); }) == "chat_template:1:12: unknown test 'frob'");
  CHECK(what_of([] { ChatTemplate("{% include 'x' %}"); }) == "chat_template:1:4: unsupported tag 'include'");
  CHECK(what_of([] { ChatTemplate("\n{% frobnicate %}"); }) == "chat_template:2:4: unknown tag 'frobnicate'");
  CHECK(what_of([] { ChatTemplate("{% for x in y recursive %}{% endfor %}"); }) ==
        "chat_template:1:15: unsupported construct: recursive for loops");
  CHECK(what_of([] { ChatTemplate("{% if a %}\n{% for x in y %}x{% endif %}"); }) ==
        "chat_template:2:21: unexpected tag 'endif'; expected 'endfor' or 'else'");
  CHECK(what_of([] { ChatTemplate("x {% if a %}y"); }) ==
        "chat_template:1:14: unexpected end of template: '{% if %}' opened at 1:6 is not closed "
        "(expected 'elif', 'else' or 'endif')");
  CHECK(what_of([] { ChatTemplate("{{ 'abc }}"); }) == "chat_template:1:4: unterminated string literal");
  CHECK(what_of([] { ChatTemplate("{{ x "); }) ==
        "chat_template:1:1: unexpected end of template: missing '}}' for this tag");
  CHECK(what_of([] { ChatTemplate("{# note"); }) == "chat_template:1:1: missing end of comment tag '#}'");
  CHECK(what_of([] { ChatTemplate("{{ a ! b }}"); }) == "chat_template:1:6: unexpected character '!' in tag");
  CHECK(what_of([] { ChatTemplate("{{ (1, 2] }}"); }) == "chat_template:1:9: unexpected ']', expected ')'");
  CHECK(what_of([] { ChatTemplate("{% break %}"); }) == "chat_template:1:4: 'break' outside of a for loop");
  CHECK(what_of([] { ChatTemplate("{{ f(*args) }}"); }) ==
        "chat_template:1:6: unsupported construct: *args / **kwargs in a call");
  CHECK(what_of([] { ChatTemplate("{% set x %}{% endfor %}"); }) ==
        "chat_template:1:15: unexpected tag 'endfor'; expected 'endset'");
}

TEST_CASE("chat template: evaluation errors carry the position of the failing expression", "[chat_template]") {
  CHECK(what_of([] { render("line\n  {{ u.x }}"); }) == "chat_template:2:6: UndefinedError: 'u' is undefined");
  CHECK(what_of([] {
          render("{{ m.content.startswith('x') }}", {{"m", {{"role", "user"}}}});
        }) == "chat_template:1:4: UndefinedError: 'dict object' has no attribute 'content'");
  CHECK(what_of([] { render("{{ 'a' + 1 }}"); }) ==
        "chat_template:1:8: TypeError: can only concatenate str (not \"int\") to str");
  CHECK(what_of([] { render("{{ 'x'.zfill(3) }}"); }) == "chat_template:1:4: unsupported method 'zfill' of str");
  CHECK(what_of([] { render("{{ [1] | map('wordwrap') | list }}"); }) ==
        "chat_template:1:10: unsupported filter 'wordwrap' (in map)");
  CHECK(what_of([] { render("{{ [1,2]|reverse }}"); }) ==
        "chat_template:1:4: cannot print a list_reverseiterator (Python would print an object address); convert it "
        "with '|list'");
  CHECK(what_of([] { render("{{ 2 ** 64 }}"); }).find("OverflowError") != std::string::npos);
  CHECK(what_of([] { render("{% set ns = {} %}{% set ns.a = 1 %}"); }).find("non-namespace") != std::string::npos);
  // raise_exception propagates the template's message unchanged, like transformers.
  CHECK(what_of([] { render("{{ raise_exception('Only user and assistant roles are supported!') }}"); }) ==
        "Only user and assistant roles are supported!");
  CHECK_THROWS_AS(render("{{ raise_exception('x') }}"), std::runtime_error);
  // The render context must be an object.
  CHECK(what_of([] { ChatTemplate("x").render(ojson::array()); }).find("must be a JSON object") != std::string::npos);
}

TEST_CASE("chat template: runaway templates stop with an error", "[chat_template]") {
  using namespace rl::model::jinja;
  CHECK(what_of([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); }).find("RecursionError") !=
        std::string::npos);
  CHECK(what_of([] { render("{{ 'ab' * 100000000 }}"); }).find("MemoryError") != std::string::npos);
  CHECK(what_of([] { render("{{ range(1000000) | length }}"); }).find("MAX_RANGE") != std::string::npos);
  CHECK(what_of([] {
          ChatTemplate("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}");
        }).find("nested too deeply") != std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 1000; ++i) chain += " + 1";
  CHECK(what_of([&] { ChatTemplate(chain + " }}"); }).find("nested too deeply") != std::string::npos);
  // Just inside the limits, everything still renders (and fits the stack under ASan).
  std::string sum = "{{ 1";
  for (int i = 0; i < 250; ++i) sum += " + 1";
  CHECK(render(sum + " }}") == "251");
  CHECK(
      render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) ~ '' }}{% else %}bottom{% endif %}{% endmacro %}{{ f(60) }}") ==
      "bottom");
  std::string nested = "{{ " + std::string(90, '(') + "'deep'" + std::string(90, ')') + " }}";
  CHECK(render(nested) == "deep");
  std::string ifs;
  for (int i = 0; i < 200; ++i) ifs += "{% if true %}";
  CHECK(what_of([&] { ChatTemplate t(ifs); }).find("nested too deeply") != std::string::npos);

  // Step and output budgets, with small limits so the test stays fast.
  const std::string name = "t";
  const Body loops =
      parse_template("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", name);
  Limits small;
  small.max_steps = 10000;
  CHECK(what_of([&] { Evaluator(name, small).render(loops, DictData()); }).find("runaway loop") != std::string::npos);
  const Body big = parse_template("{% for i in range(10000) %}xxxxxxxxxx{% endfor %}", name);
  Limits tiny_output;
  tiny_output.max_output = 4096;
  CHECK(what_of([&] { Evaluator(name, tiny_output).render(big, DictData()); }).find("exceeds") != std::string::npos);
  // Values nested without bound (through namespaces, lists, bound methods) stop
  // at 512 levels instead of overflowing the stack when printed or destroyed.
  const std::string chain_ns =
      "{% set h = namespace(v=none) %}{% for i in range(2000) %}"
      "{% set h.v = namespace(n=h.v) %}{% endfor %}";
  CHECK(what_of([&] { render(chain_ns + "{{ h }}"); }).find("nested deeper than 512") != std::string::npos);
  CHECK(render(chain_ns + "{% set h.v = none %}done") == "done");
  CHECK(what_of([] {
          render(
              "{% set ns = namespace(x={}) %}{% for i in range(2000) %}{% set ns.x = {'k': ns.x.get} %}{% endfor %}");
        }).find("nested deeper than 512") != std::string::npos);
  // Namespaces referring to themselves are emptied after the render (no leak under LSan).
  CHECK(render("{% set ns = namespace(a=1) %}{% set ns.self = ns %}{% set ns.l = [ns, loop] %}{{ ns.a }}") == "1");
}

TEST_CASE("chat template: key order of tool schemas follows the JSON text", "[chat_template]") {
  const std::string source = "{{ tools | tojson }}";
  const std::string text = R"({"tools": [{"name": "f", "description": "d", "parameters": {"z": 1, "a": 2}}]})";
  CHECK(ChatTemplate(source).render(ojson::parse(text)) ==
        R"([{"name": "f", "description": "d", "parameters": {"z": 1, "a": 2}}])");
  CHECK(ChatTemplate(source).render(nlohmann::json::parse(text)) ==
        R"([{"description": "d", "name": "f", "parameters": {"a": 2, "z": 1}}])");
}

TEST_CASE("chat template: one template renders from several threads", "[chat_template]") {
  const ojson config = read_json(qwen_dir("qwen3") / "tokenizer_config.json");
  const ChatTemplate tmpl(config["chat_template"].get<std::string>(), "qwen3");
  const ojson ctx = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"add_generation_prompt", true}};
  const std::string expected = tmpl.render(ctx);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) ok[t] += tmpl.render(ctx) == expected;
    });
  for (auto& th : threads) th.join();
  for (int n : ok) CHECK(n == 50);
}

TEST_CASE("chat template: mutated Qwen3 templates throw or render, never crash or hang", "[chat_template]") {
  const ojson config = read_json(qwen_dir("qwen3") / "tokenizer_config.json");
  const std::string source = config["chat_template"];
  const ojson ctx = ojson::parse(R"({
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                 {"role": "assistant", "content": "<think>r</think>a",
                  "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "tool", "content": "t"}, {"role": "user", "content": "q2"}],
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "add_generation_prompt": true, "enable_thinking": false})");
  REQUIRE_NOTHROW(ChatTemplate(source).render(ctx));
  std::mt19937 rng(12345);
  const std::string alphabet = "{}%#-+|()[]'\"~ .,=:!<>\n\\abcdefghijklmnopqrstuvwxyz0123456789_";
  int rendered = 0, failed = 0;
  auto attempt = [&](const std::string& text) {
    try {
      ChatTemplate(text, "fuzz").render(ctx);
      ++rendered;
    } catch (const std::exception&) {
      ++failed;
    }
  };
  for (size_t cut = 0; cut <= source.size(); cut += 11) attempt(source.substr(0, cut));
  for (int i = 0; i < 400; ++i) {
    std::string text = source;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t pos = rng() % text.size();
      switch (rng() % 4) {
        case 0:
          text.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
        case 1:
          text.erase(pos, 1 + rng() % 8);
          break;
        case 2:
          text[pos] = alphabet[rng() % alphabet.size()];
          break;
        default: {
          const size_t from = rng() % text.size(), len = 1 + rng() % 40;
          text.insert(pos, text.substr(from, len));
        }
      }
    }
    attempt(text);
  }
  CHECK(rendered > 0);
  CHECK(failed > 0);
}
