// rl::net::SseParser against the WHATWG event-stream rules, with the input cut
// at every possible chunk boundary.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "net/sse.hpp"

using rl::net::SseEvent;
using rl::net::SseParser;

namespace {

std::vector<SseEvent> parse_whole(const std::string& s) {
  SseParser p;
  return p.feed(s);
}

// Feeds `s` split at every single position (two chunks), then byte by byte,
// and checks every split gives the same events as one feed.
void check_all_splits(const std::string& s) {
  const auto whole = parse_whole(s);
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    SseParser p;
    std::vector<SseEvent> got;
    p.feed(std::string_view(s).substr(0, cut), got);
    p.feed(std::string_view(s).substr(cut), got);
    REQUIRE(got.size() == whole.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("cut at " << cut << ", event " << i);
      REQUIRE(got[i].data == whole[i].data);
      REQUIRE(got[i].event == whole[i].event);
      REQUIRE(got[i].id == whole[i].id);
      REQUIRE(got[i].retry == whole[i].retry);
    }
  }
  SseParser p;
  std::vector<SseEvent> got;
  for (char c : s) p.feed(std::string_view(&c, 1), got);
  REQUIRE(got.size() == whole.size());
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i].data == whole[i].data);
}

}  // namespace

TEST_CASE("sse: single and multiple events", "[sse]") {
  auto ev = parse_whole("data: hello\n\ndata: world\n\n");
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].data == "hello");
  CHECK(ev[0].event == "message");
  CHECK(ev[1].data == "world");
}

TEST_CASE("sse: multi-line data joined with newline; one leading space stripped", "[sse]") {
  auto ev = parse_whole("data: a\ndata:b\ndata:  c\n\n");
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].data == "a\nb\n c");
}

TEST_CASE("sse: event, id and retry fields; comments ignored", "[sse]") {
  auto ev = parse_whole(": keep-alive\nevent: token\nid: 7\nretry: 1500\ndata: {\"x\":1}\n\n: ping\n\ndata: next\n\n");
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].event == "token");
  CHECK(ev[0].id == "7");
  CHECK(ev[0].data == "{\"x\":1}");
  REQUIRE(ev[0].retry.has_value());
  CHECK(*ev[0].retry == 1500);
  // id persists, event type resets, retry belongs to its block only
  CHECK(ev[1].event == "message");
  CHECK(ev[1].id == "7");
  CHECK_FALSE(ev[1].retry.has_value());
}

TEST_CASE("sse: CRLF, CR and LF line endings all work", "[sse]") {
  for (const char* eol : {"\n", "\r\n", "\r"}) {
    std::string e = eol;
    auto ev = parse_whole("event: x" + e + "data: 1" + e + "data: 2" + e + e + "data: 3" + e + e);
    INFO("eol " << (e == "\n" ? "LF" : e == "\r" ? "CR" : "CRLF"));
    REQUIRE(ev.size() == 2);
    CHECK(ev[0].event == "x");
    CHECK(ev[0].data == "1\n2");
    CHECK(ev[1].data == "3");
  }
}

TEST_CASE("sse: chunk boundaries anywhere give the same events", "[sse]") {
  check_all_splits("event: a\r\nid: 1\r\ndata: x\r\ndata: y\r\n\r\n: c\r\ndata: z\r\r\ndata: w\n\n");
  check_all_splits("\xEF\xBB\xBF" "data: after bom\n\ndata: \xC3\xA9t\xC3\xA9\n\n");
}

TEST_CASE("sse: a CR at the end of one chunk and LF at the start of the next is one line end", "[sse]") {
  SseParser p;
  std::vector<SseEvent> got;
  p.feed("data: a\r", got);
  p.feed("\n\r", got);  // LF completes the CRLF; the CR is the empty line
  REQUIRE(got.size() == 1);
  CHECK(got[0].data == "a");
  p.feed("\ndata: b\n\n", got);  // CR then LF across chunks again: one line end, no extra event
  REQUIRE(got.size() == 2);
  CHECK(got[1].data == "b");
}

TEST_CASE("sse: BOM only at the very start, also when split", "[sse]") {
  SseParser p;
  std::vector<SseEvent> got;
  p.feed("\xEF", got);
  p.feed("\xBB", got);
  p.feed("\xBF" "data: x\n\n", got);
  REQUIRE(got.size() == 1);
  CHECK(got[0].data == "x");
}

TEST_CASE("sse: blocks without data are not events; empty data is", "[sse]") {
  auto ev = parse_whole("event: only-type\n\nretry: 10\n\ndata\n\ndata:\n\n");
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].data == "");
  CHECK(ev[1].data == "");
}

TEST_CASE("sse: id with NUL is ignored; unknown fields ignored; bad retry ignored", "[sse]") {
  std::string s = "id: 5\ndata: a\n\n";
  s += std::string("id: x\0y\n", 8);
  s += "foo: bar\nretry: 12a\ndata: b\n\n";
  auto ev = parse_whole(s);
  REQUIRE(ev.size() == 2);
  CHECK(ev[1].id == "5");
  CHECK_FALSE(ev[1].retry.has_value());
}

TEST_CASE("sse: finish drops an unterminated event; reset forgets the id", "[sse]") {
  SseParser p;
  std::vector<SseEvent> got;
  p.feed("id: 3\ndata: complete\n\ndata: partial", got);
  REQUIRE(got.size() == 1);
  CHECK(p.buffered() == std::string("data: partial").size());
  p.finish();
  CHECK(p.buffered() == 0);
  p.feed("\n\n", got);
  CHECK(got.size() == 1);  // the partial line was dropped, not completed
  CHECK(p.last_event_id() == "3");
  p.reset();
  CHECK(p.last_event_id().empty());
}

TEST_CASE("sse: an endless line is an error, not unbounded memory", "[sse]") {
  SseParser p(64);
  std::vector<SseEvent> got;
  p.feed(std::string(60, 'a'), got);
  CHECK_THROWS_AS(p.feed(std::string(10, 'a'), got), std::length_error);
}

TEST_CASE("sse: OpenAI-style stream", "[sse]") {
  std::string s;
  for (int i = 0; i < 50; ++i) s += "data: {\"choices\":[{\"text\":\"t" + std::to_string(i) + "\"}]}\n\n";
  s += "data: [DONE]\n\n";
  auto ev = parse_whole(s);
  REQUIRE(ev.size() == 51);
  CHECK(ev[49].data == "{\"choices\":[{\"text\":\"t49\"}]}");
  CHECK(ev[50].data == "[DONE]");
}
