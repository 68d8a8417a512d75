// TensorBoard event files and JSONL metrics (runtime/metrics): CRC-32C against the
// RFC 3720 vectors, TFRecord framing and Event protobuf bytes against bytes worked
// out by hand from the wire format (and confirmed with the tensorboard package's
// protobuf classes), the writer's files, and the error messages for bad paths.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/errors.hpp"
#include "metrics/jsonl_writer.hpp"
#include "metrics/tensorboard_writer.hpp"
#include "metrics/tfrecord.hpp"

namespace fs = std::filesystem;
using namespace rl::metrics;

namespace {

std::string hex(std::string_view s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

uint64_t le64(std::string_view s) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}
uint32_t le32(std::string_view s) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[i]);
  return v;
}

// Splits a TFRecord stream into its payloads, checking both CRCs of every record.
std::vector<std::string> read_records(std::string_view data) {
  std::vector<std::string> out;
  while (!data.empty()) {
    REQUIRE(data.size() >= 12);
    const uint64_t len = le64(data);
    REQUIRE(le32(data.substr(8)) == masked_crc32c(data.substr(0, 8)));
    REQUIRE(data.size() >= 16 + len);
    const std::string_view payload = data.substr(12, len);
    REQUIRE(le32(data.substr(12 + len)) == masked_crc32c(payload));
    out.emplace_back(payload);
    data.remove_prefix(16 + len);
  }
  return out;
}

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("rlhost-tb-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
};

}  // namespace

TEST_CASE("crc32c: RFC 3720 test vectors", "[metrics][tensorboard]") {
  REQUIRE(crc32c("") == 0u);
  REQUIRE(crc32c("123456789") == 0xE3069283u);
  REQUIRE(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  REQUIRE(crc32c(std::string(32, '\xff')) == 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) {
    up += static_cast<char>(i);
    down += static_cast<char>(31 - i);
  }
  REQUIRE(crc32c(up) == 0x46DD794Eu);
  REQUIRE(crc32c(down) == 0x113FDB5Cu);
}

TEST_CASE("crc32c: continuing a CRC equals the CRC of the concatenation", "[metrics][tensorboard]") {
  REQUIRE(crc32c("6789", crc32c("12345")) == crc32c("123456789"));
  REQUIRE(crc32c("", 0x1234u) == 0x1234u);
}

TEST_CASE("masked crc: rotate right by 15 plus 0xa282ead8", "[metrics][tensorboard]") {
  REQUIRE(mask_crc(0) == 0xa282ead8u);
  // 0xE3069283 rotated right by 15 is 0x2507C60D; + 0xa282ead8 = 0xC78AB0E5 (mod 2^32)
  REQUIRE(mask_crc(0xE3069283u) == 0xC78AB0E5u);
  REQUIRE(masked_crc32c("123456789") == 0xC78AB0E5u);
  REQUIRE(masked_crc32c("a") == 0x28E46E78u);
}

TEST_CASE("TFRecord framing: length, masked CRC of the length, data, masked CRC of the data", "[metrics][tensorboard]") {
  std::string out;
  append_record(out, "a");
  // 01 00 00 00 00 00 00 00 | masked_crc(len) 0x41de7501 LE | 'a' | masked_crc('a') 0x28e46e78 LE
  REQUIRE(hex(out) == "0100000000000000" "0175de41" "61" "786ee428");
  append_record(out, "");
  REQUIRE(out.size() == 17 + 16);
  const auto recs = read_records(out);
  REQUIRE(recs.size() == 2);
  REQUIRE(recs[0] == "a");
  REQUIRE(recs[1].empty());
}

TEST_CASE("protobuf wire primitives", "[metrics][tensorboard]") {
  auto varint = [](uint64_t v) {
    std::string s;
    pb::put_varint(s, v);
    return hex(s);
  };
  REQUIRE(varint(0) == "00");
  REQUIRE(varint(1) == "01");
  REQUIRE(varint(127) == "7f");
  REQUIRE(varint(128) == "8001");
  REQUIRE(varint(300) == "ac02");
  REQUIRE(varint(UINT64_MAX) == "ffffffffffffffffff01");
  std::string s;
  pb::put_int64(s, 2, -1);  // key (2 << 3 | 0) = 0x10, then ten bytes of two's complement
  REQUIRE(hex(s) == "10ffffffffffffffffff01");
  s.clear();
  pb::put_double(s, 1, 1.5);  // key 0x09, IEEE 754 0x3FF8000000000000 little-endian
  REQUIRE(hex(s) == "09000000000000f83f");
  s.clear();
  pb::put_float(s, 2, 0.5f);  // key 0x15, 0x3F000000 little-endian
  REQUIRE(hex(s) == "150000003f");
  s.clear();
  pb::put_bytes(s, 3, "hi");  // key 0x1a, length 2
  REQUIRE(hex(s) == "1a026869");
}

TEST_CASE("Event protobuf: file_version and one scalar", "[metrics][tensorboard]") {
  // Event{wall_time=1.5 (field 1, fixed64), file_version="brain.Event:2" (field 3, 13 bytes)}
  REQUIRE(hex(encode_file_version_event(1.5)) == "09000000000000f83f" "1a0d" + hex("brain.Event:2"));

  // Event{wall_time=1.5, step=3, summary{value{tag="a", simple_value=0.5}}}
  //   09 <1.5>  10 03  2a 0a | Summary: 0a 08 | Value: 0a 01 61  15 0000003f
  REQUIRE(hex(encode_scalar_event(1.5, 3, "a", 0.5)) == "09000000000000f83f" "1003" "2a0a" "0a08" "0a0161" "150000003f");

  // wall_time 2.0, step 300 (varint ac 02), tag of 18 bytes, 0.42 as float32 0x3ED70A3D
  REQUIRE(hex(encode_scalar_event(2.0, 300, "rollout/raw_reward", 0.42)) ==
          "090000000000000040" "10ac02" "2a1b" "0a19" "0a12" + hex("rollout/raw_reward") + "153d0ad73e");

  // step 0 is left out (proto3 default); simple_value 0 stays (a oneof member); negative steps are 10-byte varints
  REQUIRE(hex(encode_scalar_event(1.5, 0, "a", 0)) == "09000000000000f83f" "2a0a" "0a08" "0a0161" "1500000000");
  REQUIRE(hex(encode_scalar_event(1700000000.25, -1, "x", 0)) ==
          "0900001040fc54d941" "10ffffffffffffffffff01" "2a0a0a080a01781500000000");
}

TEST_CASE("Event protobuf: a tag that is not UTF-8 gets U+FFFD", "[metrics][tensorboard]") {
  REQUIRE(utf8_or_replacement("ok/é") == "ok/é");
  REQUIRE(utf8_or_replacement("a\xff" "b") == "a\xEF\xBF\xBD" "b");
  REQUIRE(utf8_or_replacement("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  REQUIRE(utf8_or_replacement("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  const std::string ev = encode_scalar_event(1.5, 1, "x\xff", 1);
  REQUIRE(ev.find("x\xEF\xBF\xBD") != std::string::npos);
}

TEST_CASE("TensorBoardWriter: file name, version record, one event per scalar, flushed per batch", "[metrics][tensorboard]") {
  TempDir tmp;
  const fs::path dir = tmp.path / "tensorboard_log" / "proj" / "exp";  // parents are created
  TensorBoardWriter w(dir.string());
  REQUIRE(fs::is_directory(dir));
  const fs::path file(w.path());
  REQUIRE(file.parent_path() == dir);
  const std::string name = file.filename().string();
  REQUIRE(name.rfind("events.out.tfevents.", 0) == 0);
  // events.out.tfevents.<10-digit secs>.<host>.<pid>.<n>
  const std::string secs = name.substr(20, 10);
  REQUIRE(secs.find_first_not_of("0123456789") == std::string::npos);
  REQUIRE(name.find("." + std::to_string(::getpid()) + ".") != std::string::npos);

  // The version record is on disk before any scalar.
  auto recs = read_records(read_file(file));
  REQUIRE(recs.size() == 1);
  REQUIRE(recs[0].find("brain.Event:2") != std::string::npos);

  w.add_scalars({{"rollout/raw_reward", 0.5}, {"perf/rollout_time", 12.25}}, 3, 100.0);
  // Readable while the writer stays open: add_scalars flushed.
  recs = read_records(read_file(file));
  REQUIRE(recs.size() == 3);
  REQUIRE(recs[1] == encode_scalar_event(100.0, 3, "rollout/raw_reward", 0.5));
  REQUIRE(recs[2] == encode_scalar_event(100.0, 3, "perf/rollout_time", 12.25));

  w.add_scalar("a", 1, 4, 101.0);  // queued until flush
  REQUIRE(read_records(read_file(file)).size() == 3);
  w.flush();
  REQUIRE(read_records(read_file(file)).size() == 4);
  w.close();
  w.close();  // idempotent
  REQUIRE_THROWS_WITH(w.add_scalar("a", 1, 5), Catch::Contains("closed"));

  // A second writer in the same directory gets its own file.
  TensorBoardWriter w2(dir.string(), ".suffix");
  REQUIRE(w2.path() != w.path());
  REQUIRE(w2.path().size() > 7);
  REQUIRE(w2.path().substr(w2.path().size() - 7) == ".suffix");
}

TEST_CASE("TensorBoardWriter: a directory that cannot be created names the path and a hint", "[metrics][tensorboard]") {
  TempDir tmp;
  const fs::path blocker = tmp.path / "plain_file";
  std::ofstream(blocker) << "x";
  const std::string bad = (blocker / "tb").string();
  REQUIRE_THROWS_AS(TensorBoardWriter(bad), rl::Error);
  try {
    TensorBoardWriter w(bad);
  } catch (const rl::Error& e) {
    const std::string msg = e.what();
    REQUIRE_THAT(msg, Catch::Contains("tensorboard: cannot create directory '" + bad + "'"));
    REQUIRE_THAT(msg, Catch::Contains("hint:"));
    REQUIRE_THAT(msg, Catch::Contains("--tensorboard-dir"));
  }
  // The directory itself is a file.
  REQUIRE_THROWS_WITH(TensorBoardWriter(blocker.string()), Catch::Contains("cannot create directory '" + blocker.string() + "'"));
  REQUIRE_THROWS_WITH(TensorBoardWriter(""), Catch::Contains("empty"));
}

TEST_CASE("JsonlWriter: one line per object, appended, non-finite numbers as null", "[metrics][jsonl]") {
  TempDir tmp;
  const fs::path path = tmp.path / "run" / "metrics.jsonl";
  {
    JsonlWriter j(path.string());
    j.write_line(R"({"rollout/step":1,"x":0.5})");
    j.write(nlohmann::json{{"rollout/step", 2}, {"x", std::nan("")}, {"y", INFINITY}});
    REQUIRE(read_file(path) == "{\"rollout/step\":1,\"x\":0.5}\n{\"rollout/step\":2,\"x\":null,\"y\":null}\n");
    REQUIRE_THROWS_AS(j.write_line("{\"a\":\n1}"), std::invalid_argument);
    REQUIRE_THROWS_AS(j.write_line(""), std::invalid_argument);
  }
  JsonlWriter again(path.string());  // a resumed run continues the file
  again.write_line("{}");
  REQUIRE(read_file(path).substr(read_file(path).size() - 3) == "{}\n");
  again.close();
  REQUIRE_THROWS_WITH(again.write_line("{}"), Catch::Contains("closed"));
}

TEST_CASE("JsonlWriter: a path that cannot be opened names it and a hint", "[metrics][jsonl]") {
  TempDir tmp;
  const fs::path blocker = tmp.path / "plain_file";
  std::ofstream(blocker) << "x";
  REQUIRE_THROWS_WITH(JsonlWriter((blocker / "metrics.jsonl").string()),
                      Catch::Contains("metrics jsonl: cannot create directory '" + blocker.string() + "'") &&
                          Catch::Contains("hint:"));
  REQUIRE_THROWS_WITH(JsonlWriter(tmp.path.string()),
                      Catch::Contains("cannot open '" + tmp.path.string() + "' for appending"));
}
