// safetensors reading (real stories260K checkpoint, every malformed-header
// case, a fuzz of the header parser) and writing (single, sharded, atomic); weight
// update buckets (whole tensors and row slices) that read back as the model.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>

#include "checkpoint_test_support.hpp"
#include "model/tensor_files.hpp"
#include "model/weight_buckets.hpp"

using Catch::Matchers::Contains;
using nlohmann::json;
using namespace rl::model;
namespace fs = std::filesystem;

namespace {

// A safetensors file from a header (padded to 8 bytes) and a data region.
std::vector<std::byte> make_file(const json& header, size_t data_bytes, bool pad = true) {
  std::string h = header.dump();
  if (pad) h.append((8 - h.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8 + h.size() + data_bytes);
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, h.data(), h.size());
  for (size_t i = 0; i < data_bytes; ++i) out[8 + h.size() + i] = std::byte(i * 7 + 1);
  return out;
}

std::string parse_error(const std::vector<std::byte>& bytes, const std::string& name = "model.safetensors") {
  try {
    parse_safetensors(bytes.data(), bytes.size(), name);
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL("expected an error");
  return {};
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  FAIL("expected an error");
  return {};
}

json entry(const char* dtype, std::vector<int64_t> shape, uint64_t b, uint64_t e) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {b, e}}};
}

// Tensors of several dtypes, with their bytes held here.
struct Sample {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<TensorToWrite> tensors;
  void add(const std::string& name, DType dt, std::vector<int64_t> shape, uint8_t seed) {
    size_t n = dtype_size(dt);
    for (int64_t d : shape) n *= size_t(d);
    std::vector<std::byte> b(n);
    for (size_t i = 0; i < n; ++i) b[i] = std::byte(uint8_t(seed + i * 31));
    buffers.push_back(std::move(b));
    tensors.push_back({name, dt, shape, buffers.back().data(), n});
  }
};

Sample sample_tensors() {
  Sample s;
  s.buffers.reserve(16);
  s.add("a.f16", DType::F16, {3, 5}, 1);  // odd byte count first in name order
  s.add("b.bf16", DType::BF16, {7}, 2);
  s.add("c.f32", DType::F32, {4, 3}, 3);
  s.add("d.i64", DType::I64, {2}, 4);
  s.add("e.scalar", DType::F32, {}, 5);
  s.add("f.empty", DType::F32, {0, 3}, 6);
  s.add("g.u8", DType::U8, {5}, 7);
  return s;
}

void check_same(const TensorSet& set, const std::vector<TensorToWrite>& tensors) {
  REQUIRE(set.tensors.size() == tensors.size());
  for (const auto& t : tensors) {
    INFO(t.name);
    const TensorView* v = set.find(t.name);
    REQUIRE(v);
    CHECK(v->dtype == t.dtype);
    CHECK(v->shape == t.shape);
    REQUIRE(v->nbytes == t.nbytes);
    if (t.nbytes) CHECK(std::memcmp(v->data, t.data, t.nbytes) == 0);
    CHECK(reinterpret_cast<uintptr_t>(v->data) % dtype_size(v->dtype) == 0);  // aligned in the mapping
  }
}

bool has_tmp_files(const fs::path& dir) {
  for (const auto& n : rl::test::list_dir(dir))
    if (n.find(".tmp.") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("safetensors: stories260K reads, matches its config", "[safetensors]") {
  const auto set = read_safetensors_dir(rl::test::stories_dir());
  REQUIRE(set.tensors.size() == 47);
  CHECK(set.metadata.at("format") == "pt");
  for (size_t i = 1; i < set.tensors.size(); ++i) CHECK(set.tensors[i - 1].name < set.tensors[i].name);
  const TensorView* e = set.find("model.embed_tokens.weight");
  REQUIRE(e);
  CHECK(e->dtype == DType::F32);
  CHECK(e->shape == std::vector<int64_t>{512, 64});
  CHECK(e->nbytes == 512 * 64 * 4);
  CHECK(e->file == (rl::test::stories_dir() / "model.safetensors").string());
  CHECK(set.find("lm_head.weight") == nullptr);
  CHECK(set.find("nope") == nullptr);

  const auto config = ModelConfig::load(rl::test::stories_dir());
  CHECK_NOTHROW(validate_tensors(set, config));
  int64_t total = 0;
  for (const auto& t : set.tensors) total += t.numel();
  CHECK(total == config.num_parameters());
}

TEST_CASE("safetensors: validate_tensors names the tensor and the problem", "[safetensors]") {
  const auto set = read_safetensors_dir(rl::test::stories_dir());
  auto config = ModelConfig::load(rl::test::stories_dir());

  auto c = config;
  c.intermediate_size = 128;
  CHECK_THAT(error_of([&] { validate_tensors(set, c); }),
             Contains("model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight' has shape [64, 172], the config expects [64, 128]") &&
                 Contains("intermediate_size"));

  c = config;
  c.num_hidden_layers = 6;
  CHECK_THAT(error_of([&] { validate_tensors(set, c); }),
             Contains("missing tensor 'model.layers.5.input_layernorm.weight'") && Contains("(and 8 more"));

  c = config;
  c.num_hidden_layers = 4;
  CHECK_THAT(error_of([&] { validate_tensors(set, c); }), Contains("unexpected tensor 'model.layers.4."));

  c = config;
  c.tie_word_embeddings = false;
  CHECK_THAT(error_of([&] { validate_tensors(set, c); }), Contains("missing tensor 'lm_head.weight' (expected shape [512, 64])"));

  // Non-float weights, and an lm_head.weight next to tied embeddings (allowed).
  TensorSet s2 = set;
  for (auto& t : s2.tensors)
    if (t.name == "model.norm.weight") t.dtype = DType::I32;
  CHECK_THAT(error_of([&] { validate_tensors(s2, config); }), Contains("tensor 'model.norm.weight' has dtype I32"));
  TensorSet s3 = set;
  TensorView lm = *set.find("model.embed_tokens.weight");
  lm.name = "lm_head.weight";
  s3.tensors.push_back(lm);
  std::sort(s3.tensors.begin(), s3.tensors.end(), [](auto& a, auto& b) { return a.name < b.name; });
  CHECK_NOTHROW(validate_tensors(s3, config));
}

TEST_CASE("safetensors: malformed files give errors that name file and tensor", "[safetensors]") {
  const json ok = {{"__metadata__", {{"format", "pt"}}}, {"w", entry("F32", {2, 2}, 0, 16)}};
  REQUIRE_NOTHROW(parse_safetensors(make_file(ok, 16).data(), make_file(ok, 16).size(), "x"));

  CHECK_THAT(parse_error(std::vector<std::byte>(5)), Contains("model.safetensors: 5 bytes, too short"));
  {  // header length beyond the file
    auto f = make_file(ok, 16);
    const uint64_t huge = f.size();
    std::memcpy(f.data(), &huge, 8);
    CHECK_THAT(parse_error(f), Contains("header length " + std::to_string(huge) + " exceeds the file") &&
                                   Contains("truncated"));
  }
  {  // truncated data region
    auto f = make_file(ok, 16);
    f.resize(f.size() - 4);
    CHECK_THAT(parse_error(f), Contains("model.safetensors: tensor 'w': data_offsets [0, 16] exceed the file's data region (12 bytes)") &&
                                   Contains("hint: the file is truncated or corrupt"));
  }
  {  // not JSON
    auto f = make_file(ok, 16);
    f[9] = std::byte('!');
    CHECK_THAT(parse_error(f), Contains("model.safetensors: header: invalid JSON"));
  }
  CHECK_THAT(parse_error(make_file(json::array({1, 2}), 0)), Contains("header must be a JSON object"));
  CHECK_THAT(parse_error(make_file({{"w", entry("F33", {4}, 0, 16)}}, 16)),
             Contains("model.safetensors: tensor 'w': unsupported dtype 'F33'") && Contains("BF16"));
  CHECK_THAT(parse_error(make_file({{"w", entry("F32", {2, 3}, 0, 16)}}, 32)),
             Contains("tensor 'w': data_offsets [0, 16] hold 16 bytes, but F32 [2,3] needs 24"));
  CHECK_THAT(parse_error(make_file({{"w", entry("F32", {2}, 8, 4)}}, 16)), Contains("end before they begin"));
  CHECK_THAT(parse_error(make_file({{"w", entry("F32", {-2}, 0, 8)}}, 16)), Contains("shape must be a list of non-negative integers"));
  CHECK_THAT(parse_error(make_file({{"w", {{"dtype", "F32"}, {"shape", {2}}}}}, 16)), Contains("tensor 'w': missing 'data_offsets'"));
  CHECK_THAT(parse_error(make_file({{"w", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0}}}}}, 16)),
             Contains("data_offsets must be [begin, end]"));
  CHECK_THAT(parse_error(make_file({{"w", entry("F32", {uint64_t(1) << 62, 16}, 0, 8)}}, 16)), Contains("overflows"));
  CHECK_THAT(parse_error(make_file({{"a", entry("F32", {4}, 0, 16)}, {"b", entry("F32", {2}, 8, 16)}}, 16)),
             Contains("tensor 'b' (data_offsets [8, 16]) overlaps tensor 'a' ([0, 16])"));
  CHECK_THAT(parse_error(make_file({{"__metadata__", {{"step", 3}}}}, 0)), Contains("__metadata__['step'] must be a string"));
  {  // deep nesting: refused while parsing, naming the tensor
    const std::string deep = "{\"w\": " + std::string(30000, '[') + std::string(30000, ']') + "}";
    std::vector<std::byte> f(8 + deep.size());
    const uint64_t n = deep.size();
    std::memcpy(f.data(), &n, 8);
    std::memcpy(f.data() + 8, deep.data(), deep.size());
    CHECK_THAT(parse_error(f), Contains("model.safetensors: header: nested deeper than 128 levels in field 'w[0][0]"));
  }
  // Empty tensors take no bytes and may sit anywhere in range.
  CHECK_NOTHROW(parse_safetensors(make_file({{"a", entry("F32", {4}, 0, 16)}, {"e", entry("F32", {0}, 8, 8)}}, 16).data(),
                                  make_file({{"a", entry("F32", {4}, 0, 16)}, {"e", entry("F32", {0}, 8, 8)}}, 16).size(), "x"));

  rl::test::TempDir dir("st-bad");
  CHECK_THAT(error_of([&] { read_safetensors(dir / "missing.safetensors"); }), Contains("missing.safetensors: no such file"));
  rl::test::write_text(dir / "README.md", "hi");
  rl::test::write_text(dir / "pytorch_model.bin", "x");
  CHECK_THAT(error_of([&] { read_safetensors_dir(dir.path()); }),
             Contains("neither model.safetensors nor model.safetensors.index.json (the directory holds: README.md, pytorch_model.bin)"));
  CHECK_THAT(error_of([&] { read_safetensors_dir(dir / "nowhere"); }), Contains("no such directory"));
}

TEST_CASE("safetensors: write and read back one file, F16/BF16 bytes intact", "[safetensors]") {
  rl::test::TempDir dir("st-rt");
  Sample s = sample_tensors();
  write_safetensors(dir / "w.safetensors", s.tensors, {{"step", "12"}});
  CHECK(rl::test::list_dir(dir.path()) == std::vector<std::string>{"w.safetensors"});  // no temp file left

  const auto bytes = rl::test::read_bytes(dir / "w.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  const json header = json::parse(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, n));
  CHECK(header.at("__metadata__") == json{{"format", "pt"}, {"step", "12"}});
  // Data ordered by element size, then name: every tensor stays aligned.
  CHECK(header.at("d.i64").at("data_offsets") == json{0, 16});
  CHECK(header.at("c.f32").at("data_offsets") == json{16, 64});

  const auto set = read_safetensors(dir / "w.safetensors");
  check_same(set, s.tensors);
  CHECK(set.metadata.at("step") == "12");
  CHECK(set.metadata.at("format") == "pt");

  // Overwriting replaces the file in place.
  s.tensors.pop_back();
  write_safetensors(dir / "w.safetensors", s.tensors);
  check_same(read_safetensors(dir / "w.safetensors"), s.tensors);
  CHECK_FALSE(has_tmp_files(dir.path()));
}

TEST_CASE("safetensors: sharded write matches Hugging Face layout and reads back", "[safetensors]") {
  rl::test::TempDir dir("st-shard");
  Sample s = sample_tensors();
  rl::test::write_text(dir / "notes.txt", "keep me");
  rl::test::write_text(dir / "model-1-of-2.safetensors", "not an HF shard name: keep");

  auto written = write_safetensors_dir(dir.path(), s.tensors, 40);
  REQUIRE(written.size() >= 3);
  const size_t n_shards = written.size() - 1;
  CHECK(written.back().filename() == "model.safetensors.index.json");
  CHECK(written.front().filename() == "model-00001-of-0000" + std::to_string(n_shards) + ".safetensors");
  const json index = json::parse(std::string(
      reinterpret_cast<const char*>(rl::test::read_bytes(written.back()).data()), fs::file_size(written.back())));
  uint64_t total = 0;
  for (const auto& t : s.tensors) total += t.nbytes;
  CHECK(index.at("metadata").at("total_size") == total);
  CHECK(index.at("weight_map").size() == s.tensors.size());
  CHECK(index.at("weight_map").at("a.f16") == "model-00001-of-0000" + std::to_string(n_shards) + ".safetensors");
  for (size_t i = 0; i + 1 < written.size(); ++i) CHECK(fs::file_size(written[i]) < 40 + 400);

  auto set = read_safetensors_dir(dir.path());
  check_same(set, s.tensors);
  CHECK(set.metadata.at("total_size") == std::to_string(total));
  CHECK_FALSE(has_tmp_files(dir.path()));

  // Saving again as one file removes the stale shards and index, nothing else.
  written = write_safetensors_dir(dir.path(), s.tensors);
  CHECK(written == std::vector<fs::path>{dir / "model.safetensors"});
  CHECK(rl::test::list_dir(dir.path()) ==
        std::vector<std::string>{"model-1-of-2.safetensors", "model.safetensors", "notes.txt"});
  check_same(read_safetensors_dir(dir.path()), s.tensors);

  // And sharded again: the single file goes (it would shadow the index).
  write_safetensors_dir(dir.path(), s.tensors, 40);
  CHECK_FALSE(fs::exists(dir / "model.safetensors"));
  check_same(read_safetensors_dir(dir.path()), s.tensors);
  check_same(read_safetensors_dir(dir / "model.safetensors.index.json"), s.tensors);
}

TEST_CASE("safetensors: sharded checkpoints that disagree with their index", "[safetensors]") {
  rl::test::TempDir dir("st-shard-bad");
  Sample s = sample_tensors();
  write_safetensors_dir(dir.path(), s.tensors, 40);
  const fs::path index_file = dir / "model.safetensors.index.json";
  const json index = json::parse(std::string(reinterpret_cast<const char*>(rl::test::read_bytes(index_file).data()),
                                             fs::file_size(index_file)));

  json j = index;
  j["weight_map"]["ghost"] = j["weight_map"]["a.f16"];
  rl::test::write_text(index_file, j.dump());
  CHECK_THAT(error_of([&] { read_safetensors_dir(dir.path()); }),
             Contains("has no tensor 'ghost', which model.safetensors.index.json places there"));

  j = index;
  j["weight_map"].erase("g.u8");  // its shard still holds d.i64, e.scalar, f.empty
  rl::test::write_text(index_file, j.dump());
  CHECK_THAT(error_of([&] { read_safetensors_dir(dir.path()); }),
             Contains("tensor 'g.u8' is not listed in model.safetensors.index.json's weight_map"));

  j = index;
  j["weight_map"]["a.f16"] = "../elsewhere.safetensors";
  rl::test::write_text(index_file, j.dump());
  CHECK_THAT(error_of([&] { read_safetensors_dir(dir.path()); }), Contains("is not a file name inside the model directory"));

  j = index;
  j["weight_map"]["a.f16"] = "model-00009-of-00009.safetensors";
  rl::test::write_text(index_file, j.dump());
  CHECK_THAT(error_of([&] { read_safetensors_dir(dir.path()); }),
             Contains("model-00009-of-00009.safetensors: no such file (listed in model.safetensors.index.json for 'a.f16')"));

  rl::test::write_text(index_file, "{\"weight_map\": [}");
  CHECK_THAT(error_of([&] { read_safetensors_dir(dir.path()); }), Contains("model.safetensors.index.json: invalid JSON"));
}

TEST_CASE("safetensors: write rejects inconsistent tensors and leaves nothing behind", "[safetensors]") {
  rl::test::TempDir dir("st-wbad");
  float data[4] = {1, 2, 3, 4};
  std::vector<TensorToWrite> t = {{"w", DType::F32, {2, 2}, data, 12}};
  CHECK_THAT(error_of([&] { write_safetensors(dir / "x.safetensors", t); }),
             Contains("tensor 'w': nbytes is 12 but F32 with 4 elements needs 16"));
  t = {{"w", DType::F32, {4}, data, 16}, {"w", DType::F32, {4}, data, 16}};
  CHECK_THAT(error_of([&] { write_safetensors(dir / "x.safetensors", t); }), Contains("tensor 'w' is given twice"));
  t = {{"__metadata__", DType::F32, {4}, data, 16}};
  CHECK_THAT(error_of([&] { write_safetensors(dir / "x.safetensors", t); }), Contains("reserved"));
  CHECK(rl::test::list_dir(dir.path()).empty());
  CHECK_THAT(error_of([&] { write_safetensors(dir / "no" / "such" / "x.safetensors", {}); }), Contains("cannot create"));
}

namespace {

// float32 tensors, as a sharded trainer streams them layer by layer; 92 bytes in all.
Sample float_tensors() {
  Sample s;
  s.buffers.reserve(16);
  s.add("model.embed_tokens.weight", DType::F32, {3, 2}, 1);       // 24 bytes
  s.add("model.layers.0.mlp.weight", DType::F32, {4, 3}, 2);       // 48: past a 40-byte shard, alone
  s.add("model.layers.0.norm.weight", DType::F32, {2}, 3);         // 8
  s.add("model.layers.0.attn.weight", DType::F32, {1, 0}, 4);      // empty
  s.add("model.layers.1.norm.weight", DType::F32, {}, 5);          // scalar, 4
  s.add("lm_head.weight", DType::F32, {2, 1}, 6);                  // 8
  return s;
}

std::vector<TensorSpec> specs_of(const std::vector<TensorToWrite>& tensors) {
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  return specs;
}

std::vector<fs::path> stream_all(const fs::path& dir, const std::vector<TensorToWrite>& tensors, size_t max_shard_bytes,
                                 const std::map<std::string, std::string>& metadata = {}) {
  SafetensorsStream out(dir, specs_of(tensors), max_shard_bytes, metadata);
  for (const auto& t : tensors) out.write(t.name, t.data, t.nbytes);
  return out.finish();
}

json file_header(const fs::path& file) {
  const auto bytes = rl::test::read_bytes(file);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return json::parse(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, n));
}

std::string file_text(const fs::path& file) {
  const auto bytes = rl::test::read_bytes(file);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace

TEST_CASE("safetensors: stream writes one model.safetensors that reads back", "[safetensors][stream]") {
  rl::test::TempDir dir("st-stream");
  Sample s = float_tensors();
  const auto written = stream_all(dir / "out", s.tensors, size_t(1) << 30, {{"step", "7"}});
  CHECK(written == std::vector<fs::path>{dir / "out" / "model.safetensors"});
  CHECK(rl::test::list_dir(dir / "out") == std::vector<std::string>{"model.safetensors"});  // no temp file left

  // Same header as write_safetensors but data in spec order, still 8-byte padded.
  const auto bytes = rl::test::read_bytes(written[0]);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  const json header = file_header(written[0]);
  CHECK(header.at("__metadata__") == json{{"format", "pt"}, {"step", "7"}});
  CHECK(header.at("model.embed_tokens.weight").at("data_offsets") == json{0, 24});
  CHECK(header.at("model.layers.0.mlp.weight").at("data_offsets") == json{24, 72});
  CHECK(header.at("lm_head.weight").at("data_offsets") == json{84, 92});
  CHECK(bytes.size() == 8 + n + 92);

  auto set = read_safetensors_dir(dir / "out");
  check_same(set, s.tensors);  // names, dtypes, shapes, bytes, alignment
  CHECK(set.metadata.at("step") == "7");

  // No tensors at all: a valid, empty file.
  stream_all(dir / "empty", {}, 1);
  CHECK(read_safetensors_dir(dir / "empty").tensors.empty());
}

TEST_CASE("safetensors: stream shards like write_safetensors_dir", "[safetensors][stream]") {
  rl::test::TempDir dir("st-stream-shard");
  Sample s = float_tensors();
  const auto ref = write_safetensors_dir(dir / "ref", s.tensors, 40);
  const auto got = stream_all(dir / "got", s.tensors, 40);

  REQUIRE(got.size() == ref.size());
  REQUIRE(got.size() == 4);  // 24 | 48 (past the limit, alone) | 8+0+4+8, and the index
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i].filename() == ref[i].filename());
  CHECK(got.back().filename() == "model.safetensors.index.json");
  CHECK(rl::test::list_dir(dir / "got") == rl::test::list_dir(dir / "ref"));
  // Same weight_map and total_size: the index is the same file.
  CHECK(file_text(got.back()) == file_text(ref.back()));
  const json index = json::parse(file_text(got.back()));
  CHECK(index.at("weight_map").at("model.layers.0.mlp.weight") == "model-00002-of-00003.safetensors");

  // Each shard holds its tensors in spec order.
  const json first = file_header(got[0]);
  CHECK(first.at("model.embed_tokens.weight").at("data_offsets") == json{0, 24});

  check_same(read_safetensors_dir(dir / "got"), s.tensors);
  check_same(read_safetensors_dir(dir / "got" / "model.safetensors.index.json"), s.tensors);
}

TEST_CASE("safetensors: stream names the tensor on order, size and missing errors", "[safetensors][stream]") {
  rl::test::TempDir dir("st-stream-bad");
  Sample s = float_tensors();
  const auto& t = s.tensors;
  {
    SafetensorsStream out(dir.path(), specs_of(t), 40);
    CHECK_THAT(error_of([&] { out.write(t[1].name, t[1].data, t[1].nbytes); }),
               Contains("expected tensor 'model.embed_tokens.weight' next, got 'model.layers.0.mlp.weight'"));
    CHECK_THAT(error_of([&] { out.write(t[0].name, t[0].data, 20); }),
               Contains("tensor 'model.embed_tokens.weight': got 20 bytes but F32 [3,2] needs 24"));
    CHECK_THAT(error_of([&] { out.write(t[0].name, nullptr, t[0].nbytes); }), Contains("data is null"));
    CHECK_THAT(error_of([&] { out.finish(); }),
               Contains("tensor 'model.embed_tokens.weight' was never written (nor 5 after it)"));
    // A rejected write writes nothing: the stream goes on.
    for (size_t i = 0; i + 1 < t.size(); ++i) out.write(t[i].name, t[i].data, t[i].nbytes);
    CHECK_THAT(error_of([&] { out.finish(); }), Contains("tensor 'lm_head.weight' was never written (hint:"));
    out.write(t.back().name, t.back().data, t.back().nbytes);
    CHECK_THAT(error_of([&] { out.write("extra", t[0].data, 4); }), Contains("tensor 'extra' comes after all 6 tensors"));
    out.finish();
    CHECK_THAT(error_of([&] { out.finish(); }), Contains("already finished"));
  }
  check_same(read_safetensors_dir(dir.path()), s.tensors);

  // Specs are checked as write_safetensors checks tensors, before any file is made.
  const fs::path none = dir / "none";
  auto spec_error = [&](std::vector<TensorSpec> specs) {
    return error_of([&] { SafetensorsStream(none, std::move(specs), 40); });
  };
  CHECK_THAT(spec_error({{"w", DType::F32, {2}}, {"w", DType::F32, {2}}}), Contains("tensor 'w' is given twice"));
  CHECK_THAT(spec_error({{"__metadata__", DType::F32, {2}}}), Contains("reserved"));
  CHECK_THAT(spec_error({{"", DType::F32, {2}}}), Contains("a tensor has an empty name"));
  CHECK_THAT(spec_error({{"w", DType::F32, {2, -3}}}), Contains("tensor 'w': negative dimension -3"));
  CHECK_THAT(spec_error({{"w", DType::F32, {int64_t(1) << 62, 8}}}), Contains("tensor 'w': shape overflows"));
  CHECK_THAT(spec_error({{"w", DType::F32, {int64_t(1) << 62}}}), Contains("tensor 'w': shape overflows"));
  CHECK_THAT(error_of([&] { SafetensorsStream(none, {}, 0); }), Contains("max_shard_bytes must be positive"));
  CHECK_FALSE(fs::exists(none));
}

TEST_CASE("safetensors: an unfinished stream leaves no file and the earlier save intact", "[safetensors][stream]") {
  rl::test::TempDir dir("st-stream-abort");
  Sample s = float_tensors();
  write_safetensors_dir(dir.path(), s.tensors);
  rl::test::write_text(dir / "notes.txt", "keep me");
  const auto before = rl::test::list_dir(dir.path());
  const auto single = rl::test::read_bytes(dir / "model.safetensors");

  for (size_t max : {size_t(1) << 30, size_t(40)}) {
    INFO("max_shard_bytes " << max);
    {
      SafetensorsStream out(dir.path(), specs_of(s.tensors), max);
      for (size_t i = 0; i < 4; ++i) out.write(s.tensors[i].name, s.tensors[i].data, s.tensors[i].nbytes);
      // Mid-save: only temp names, never a final one, whatever shard has been completed.
      for (const auto& name : rl::test::list_dir(dir.path()))
        if (name != "notes.txt" && name != "model.safetensors") CHECK(name.find(".tmp.") != std::string::npos);
      CHECK_THAT(error_of([&] { out.finish(); }), Contains("was never written"));
    }
    CHECK(rl::test::list_dir(dir.path()) == before);
    CHECK(rl::test::read_bytes(dir / "model.safetensors") == single);
  }
  check_same(read_safetensors_dir(dir.path()), s.tensors);
}

TEST_CASE("safetensors: stream removes stale files of an earlier save", "[safetensors][stream]") {
  rl::test::TempDir dir("st-stream-stale");
  Sample s = float_tensors();
  rl::test::write_text(dir / "notes.txt", "keep me");
  rl::test::write_text(dir / "model-1-of-2.safetensors", "not an HF shard name: keep");
  stream_all(dir.path(), s.tensors, 40);
  CHECK(fs::exists(dir / "model-00003-of-00003.safetensors"));

  // One file now: the shards and index go, nothing else.
  CHECK(stream_all(dir.path(), s.tensors, size_t(1) << 30) == std::vector<fs::path>{dir / "model.safetensors"});
  CHECK(rl::test::list_dir(dir.path()) ==
        std::vector<std::string>{"model-1-of-2.safetensors", "model.safetensors", "notes.txt"});
  check_same(read_safetensors_dir(dir.path()), s.tensors);

  // And sharded again: the single file goes (it would shadow the index).
  stream_all(dir.path(), s.tensors, 40);
  CHECK_FALSE(fs::exists(dir / "model.safetensors"));
  CHECK(fs::exists(dir / "model.safetensors.index.json"));
  check_same(read_safetensors_dir(dir.path()), s.tensors);
  CHECK_FALSE(has_tmp_files(dir.path()));
}

TEST_CASE("safetensors: header parser fuzz (mutations, truncations, random JSON)", "[safetensors][fuzz]") {
  Sample s = sample_tensors();
  rl::test::TempDir dir("st-fuzz");
  write_safetensors(dir / "f.safetensors", s.tensors, {{"k", "v"}});
  const std::vector<std::byte> valid = rl::test::read_bytes(dir / "f.safetensors");
  uint64_t header_len = 0;
  std::memcpy(&header_len, valid.data(), 8);

  std::mt19937_64 rng(20240611);
  size_t ok = 0, failed = 0;
  // Parses an exact-size heap copy (ASan sees any over-read) and touches every
  // byte each view claims.
  auto attempt = [&](const std::vector<std::byte>& input) {
    std::vector<std::byte> copy(input);
    try {
      const auto set = parse_safetensors(copy.data(), copy.size(), "fuzz");
      unsigned sum = 0;
      for (const auto& t : set.tensors) {
        REQUIRE(t.data >= copy.data());
        REQUIRE(t.data + t.nbytes <= copy.data() + copy.size());
        for (size_t i = 0; i < t.nbytes; ++i) sum += unsigned(t.data[i]);
      }
      (void)sum;
      ++ok;
    } catch (const std::exception&) {
      ++failed;
    }
  };

  for (size_t cut = 0; cut < valid.size(); cut += 3) attempt(std::vector<std::byte>(valid.begin(), valid.begin() + cut));

  const char* interesting = "{}[]\",:0123456789-eE.ntfu \\";
  for (int iter = 0; iter < 1200; ++iter) {
    std::vector<std::byte> m = valid;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (iter % 5 == 0 ? m.size() : std::min<size_t>(m.size(), 8 + header_len));
      switch (rng() % 4) {
        case 0: m[at] = std::byte(rng()); break;
        case 1: m[at] = std::byte(interesting[rng() % std::strlen(interesting)]); break;
        case 2: m[at] ^= std::byte(1u << (rng() % 8)); break;
        default: m.erase(m.begin() + long(at)); break;
      }
    }
    attempt(m);
  }

  // JSON headers: a consistent layout of a few tensors, then 0-2 hostile edits
  // (wrong types, negative or huge numbers, shifted offsets, dropped keys).
  auto hostile = [&]() -> json {
    switch (rng() % 7) {
      case 0: return -int64_t(rng() % 100);
      case 1: return rng();
      case 2: return double(rng() % 1000) / 7.0;
      case 3: return "12";
      case 4: return nullptr;
      case 5: return json::array({1, 2});
      default: return rng() % 64;
    }
  };
  const char* dtypes[] = {"F32", "F16", "BF16", "I64", "U8", "BOOL", "F8_E4M3", "", "f32"};
  const size_t sizes[] = {4, 2, 2, 8, 1, 1, 1, 1, 1};
  for (int iter = 0; iter < 800; ++iter) {
    json h = json::object();
    uint64_t offset = 0;
    const int n = int(rng() % 5);
    for (int i = 0; i < n; ++i) {
      const size_t dt = rng() % 6;
      std::vector<int64_t> shape;
      uint64_t numel = 1;
      for (int d = int(rng() % 3); d > 0; --d) shape.push_back(int64_t(rng() % 4)), numel *= uint64_t(shape.back());
      const uint64_t nbytes = numel * sizes[dt];
      h["t" + std::to_string(i)] = entry(dtypes[dt], shape, offset, offset + nbytes);
      offset += nbytes;
    }
    for (int e = int(rng() % 3); e > 0 && n > 0; --e) {
      json& t = h["t" + std::to_string(rng() % uint64_t(n))];
      if (!t.is_object()) continue;
      switch (rng() % 6) {
        case 0: t["dtype"] = dtypes[rng() % 9]; break;
        case 1: t["shape"].push_back(hostile()); break;
        case 2: t["data_offsets"][rng() % 2] = hostile(); break;
        case 3: t.erase(rng() % 2 ? "shape" : "data_offsets"); break;
        case 4: t["data_offsets"] = h["t0"].is_object() ? h["t0"]["data_offsets"] : json(nullptr); break;  // overlap
        default: t = hostile(); break;
      }
    }
    if (rng() % 3 == 0) h["__metadata__"] = rng() % 2 ? json{{"a", "b"}} : json{{"a", 1}};
    const uint64_t data = rng() % 4 ? offset : offset - std::min<uint64_t>(offset, 1 + rng() % 4);
    attempt(make_file(h, size_t(data), rng() % 4 != 0));
  }
  INFO("parsed " << ok << ", rejected " << failed);
  CHECK(ok > 0);
  CHECK(failed > 0);
}

TEST_CASE("safetensors: weight buckets hold every byte once, big tensors in row slices", "[safetensors][buckets]") {
  const auto set = read_safetensors_dir(rl::test::stories_dir());
  const size_t bucket = 16384;   // the 128 KiB embedding goes as 8 slices of 64 rows, each MLP matrix as 3
  const auto plan = plan_buckets(set, bucket);
  std::map<std::string, std::vector<std::byte>> got;
  std::map<std::string, int> slices;
  for (const auto& b : plan) {
    const std::string bytes = encode_bucket(set, b);
    const TensorSet part = parse_safetensors(bytes.data(), bytes.size(), "bucket");
    size_t data = 0;
    for (const auto& t : part.tensors) {
      data += t.nbytes;
      const TensorView* full = set.find(t.name);
      REQUIRE(full);
      auto& dst = got[t.name];
      dst.resize(full->nbytes);
      auto first = part.metadata.find(std::string(kFirstRowKey) + t.name);
      size_t at = 0;
      if (first != part.metadata.end()) {
        ++slices[t.name];
        CHECK(b.size() == 1);   // a slice travels alone
        at = size_t(std::stoll(first->second)) * (full->nbytes / size_t(full->shape[0]));
      } else {
        CHECK(t.shape == full->shape);
      }
      REQUIRE(at + t.nbytes <= dst.size());
      std::memcpy(dst.data() + at, t.data, t.nbytes);
    }
    CHECK(data <= bucket);
  }
  CHECK(slices["model.embed_tokens.weight"] == 8);
  CHECK(slices["model.layers.0.mlp.up_proj.weight"] == 3);   // 172 rows of 256 bytes: 64 + 64 + 44
  CHECK(slices["model.layers.0.mlp.down_proj.weight"] == 3);  // 64 rows of 688 bytes: 23 + 23 + 18
  CHECK(slices.count("model.norm.weight") == 0);
  REQUIRE(got.size() == set.tensors.size());
  for (const auto& t : set.tensors) CHECK(std::memcmp(got[t.name].data(), t.data, t.nbytes) == 0);
  CHECK(plan_buckets(set, size_t(1) << 30).size() == 1);   // everything in one
  CHECK_THROWS_WITH(plan_buckets(set, 0), Contains("bucket_bytes must be > 0"));
}
