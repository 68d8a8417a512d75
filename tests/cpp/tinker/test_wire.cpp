// runtime/tinker/wire: requests built with the generated protobuf classes decode into the
// structs, and the structs' encodings parse back with those classes, field by field; bad
// bytes and bad values throw WireError naming the message and field. (The SDK's own bytes
// and deserializers: tests/e2e/test_tinker_wire.py.)
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tinker/wire.hpp"
#include "tinker_public.pb.h"

namespace pb = ::tinker_public;
namespace tk = rl::tinker;
using Catch::Matchers::Contains;

namespace {

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
template <class T>
std::vector<T> array_of(const std::string& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

void dense(pb::Tensor& t, pb::DType dtype, std::vector<int64_t> shape, std::string data) {
  t.set_dtype(dtype);
  for (auto s : shape) t.add_shape(s);
  t.set_dense(std::move(data));
}

// What the SDK sends for one cross-entropy datum: two text chunks, int64 targets, float weights.
pb::ForwardBackwardRequest sample_request() {
  pb::ForwardBackwardRequest r;
  r.set_model_id("model-7");
  r.set_seq_id(3);
  r.set_loss_fn("cross_entropy");
  pb::Datum* d = r.add_data();
  d->add_model_input()->mutable_encoded_text()->set_tokens(bytes_of(std::vector<int32_t>{11, 12}));
  d->add_model_input()->mutable_encoded_text()->set_tokens(bytes_of(std::vector<int32_t>{13}));
  dense((*d->mutable_loss_fn_inputs())["target_tokens"], pb::DTYPE_INT64, {3}, bytes_of(std::vector<int64_t>{12, 13, 99}));
  dense((*d->mutable_loss_fn_inputs())["weights"], pb::DTYPE_FLOAT32, {3}, bytes_of(std::vector<float>{0, 1, 0.5f}));
  return r;
}

std::string decode_error(const std::string& bytes) {
  try {
    tk::decode_forward_backward_request(bytes);
  } catch (const tk::WireError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("tinker wire: a ForwardBackwardRequest decodes into tokens and named tensors", "[tinker]") {
  pb::ForwardBackwardRequest r = sample_request();
  r.set_forward_only(true);
  (*r.mutable_loss_fn_config())["clip_low"] = 0.8;           // legacy map: numbers only
  (*r.mutable_loss_fn_config_v2())["clip_low"].set_number(0.75);  // v2 wins when present
  (*r.mutable_loss_fn_config_v2())["mode"].set_text("token");
  const tk::ForwardBackwardRequest out = tk::decode_forward_backward_request(r.SerializeAsString());
  CHECK(out.model_id == "model-7");
  CHECK(out.seq_id == 3);
  CHECK(out.loss_fn == "cross_entropy");
  CHECK(out.forward_only);
  REQUIRE(out.loss_fn_config.size() == 2);
  CHECK(out.loss_fn_config.at("clip_low").number == 0.75);
  CHECK(out.loss_fn_config.at("mode").is_text);
  CHECK(out.loss_fn_config.at("mode").text == "token");
  REQUIRE(out.data.size() == 1);
  const tk::Datum& d = out.data[0];
  CHECK(d.tokens == std::vector<int64_t>{11, 12, 13});
  CHECK(d.chunk_lengths == std::vector<size_t>{2, 1});
  const tk::Tensor& tt = d.loss_fn_inputs.at("target_tokens");
  CHECK(tt.dtype == tk::DType::Int64);
  CHECK(tt.shape == std::vector<int64_t>{3});
  CHECK(tt.i64 == std::vector<int64_t>{12, 13, 99});
  const tk::Tensor& w = d.loss_fn_inputs.at("weights");
  CHECK(w.dtype == tk::DType::Float32);
  CHECK(w.f32 == std::vector<float>{0, 1, 0.5f});
}

TEST_CASE("tinker wire: the legacy loss_fn_config is read when v2 is absent", "[tinker]") {
  pb::ForwardBackwardRequest r = sample_request();
  (*r.mutable_loss_fn_config())["clip_high"] = 1.25;
  const auto out = tk::decode_forward_backward_request(r.SerializeAsString());
  REQUIRE(out.loss_fn_config.count("clip_high") == 1);
  CHECK_FALSE(out.loss_fn_config.at("clip_high").is_text);
  CHECK(out.loss_fn_config.at("clip_high").number == 1.25);
  CHECK_FALSE(out.forward_only);
}

TEST_CASE("tinker wire: a sparse CSR tensor comes back dense; a shapeless dense one is a vector", "[tinker]") {
  pb::ForwardBackwardRequest r = sample_request();
  pb::Tensor& t = (*r.mutable_data(0)->mutable_loss_fn_inputs())["mask"];
  t.set_dtype(pb::DTYPE_FLOAT32);
  t.add_shape(2);
  t.add_shape(3);
  // [[0, 2, 0], [0, 0, 5]]
  t.mutable_sparse_csr()->set_values(bytes_of(std::vector<float>{2, 5}));
  t.mutable_sparse_csr()->set_crow_indices(bytes_of(std::vector<int64_t>{0, 1, 2}));
  t.mutable_sparse_csr()->set_col_indices(bytes_of(std::vector<int64_t>{1, 2}));
  pb::Tensor& v = (*r.mutable_data(0)->mutable_loss_fn_inputs())["advantages"];
  v.set_dtype(pb::DTYPE_FLOAT32);
  v.set_dense(bytes_of(std::vector<float>{1.5f, -2}));
  const auto out = tk::decode_forward_backward_request(r.SerializeAsString());
  const tk::Tensor& m = out.data[0].loss_fn_inputs.at("mask");
  CHECK(m.shape == std::vector<int64_t>{2, 3});
  CHECK(m.f32 == std::vector<float>{0, 2, 0, 0, 0, 5});
  const tk::Tensor& a = out.data[0].loss_fn_inputs.at("advantages");
  CHECK(a.shape == std::vector<int64_t>{2});
  CHECK(a.f32 == std::vector<float>{1.5f, -2});
}

TEST_CASE("tinker wire: bad requests name the message and field", "[tinker]") {
  const std::string good = sample_request().SerializeAsString();

  SECTION("truncated bytes") {
    pb::ForwardBackwardRequest r = sample_request();
    r.clear_loss_fn();  // so that the datum is the last field serialized
    const std::string b = r.SerializeAsString();
    CHECK_THAT(decode_error(b.substr(0, b.size() - 5)), Contains("ForwardBackwardRequest.data[0]") && Contains("left"));
    CHECK_THAT(decode_error(good.substr(0, good.size() - 5)), Contains("ForwardBackwardRequest.loss_fn: declares 13 bytes"));
  }
  SECTION("not protobuf at all") {
    CHECK_THAT(decode_error("{\"model_id\": \"x\"}"), Contains("ForwardBackwardRequest") && Contains("hint"));
  }
  SECTION("a string that is not UTF-8") {
    pb::ForwardBackwardRequest r = sample_request();
    std::string b = r.SerializeAsString();
    const auto at = b.find("model-7");
    b[at] = static_cast<char>(0xff);
    CHECK_THAT(decode_error(b), Contains("ForwardBackwardRequest.model_id") && Contains("UTF-8"));
  }
  SECTION("dense bytes that do not fill the shape") {
    pb::ForwardBackwardRequest r = sample_request();
    (*r.mutable_data(0)->mutable_loss_fn_inputs())["weights"].set_dense(bytes_of(std::vector<float>{1, 2}));
    CHECK_THAT(decode_error(r.SerializeAsString()),
               Contains("ForwardBackwardRequest.data[0].loss_fn_inputs['weights'].dense: 8 bytes for shape [3] float32"));
  }
  SECTION("token bytes that are not whole int32s") {
    pb::ForwardBackwardRequest r = sample_request();
    r.mutable_data(0)->mutable_model_input(1)->mutable_encoded_text()->set_tokens("abcde");
    CHECK_THAT(decode_error(r.SerializeAsString()),
               Contains("ForwardBackwardRequest.data[0].model_input[1].encoded_text.tokens: 5 bytes"));
  }
  SECTION("image and audio chunks are refused") {
    pb::ForwardBackwardRequest r = sample_request();
    r.mutable_data(0)->add_model_input()->mutable_image()->set_data("png");
    CHECK_THAT(decode_error(r.SerializeAsString()), Contains("model_input[2]: an image chunk"));
    r.mutable_data(0)->mutable_model_input(2)->mutable_dmel()->set_dmel("x");
    CHECK_THAT(decode_error(r.SerializeAsString()), Contains("model_input[2]: an audio (dmel) chunk"));
  }
  SECTION("a dtype the public wire does not send") {
    pb::ForwardBackwardRequest r = sample_request();
    (*r.mutable_data(0)->mutable_loss_fn_inputs())["weights"].set_dtype(pb::DTYPE_BFLOAT16);
    CHECK_THAT(decode_error(r.SerializeAsString()), Contains("loss_fn_inputs['weights'].dtype: DTYPE_BFLOAT16"));
  }
  SECTION("a negative or huge shape") {
    pb::ForwardBackwardRequest r = sample_request();
    auto& t = (*r.mutable_data(0)->mutable_loss_fn_inputs())["weights"];
    t.set_shape(0, -3);
    CHECK_THAT(decode_error(r.SerializeAsString()), Contains("loss_fn_inputs['weights'].shape: negative"));
    t.set_shape(0, int64_t{1} << 40);
    t.add_shape(int64_t{1} << 40);
    CHECK_THAT(decode_error(r.SerializeAsString()), Contains("too large"));
  }
  SECTION("a sparse tensor that would densify to too much memory") {
    pb::ForwardBackwardRequest r = sample_request();
    pb::Tensor& t = (*r.mutable_data(0)->mutable_loss_fn_inputs())["mask"];
    t.set_dtype(pb::DTYPE_FLOAT32);
    t.add_shape(1);
    t.add_shape(int64_t{1} << 30);  // a few bytes on the wire, 4 GiB dense
    t.mutable_sparse_csr()->set_crow_indices(bytes_of(std::vector<int64_t>{0, 0}));
    CHECK_THAT(decode_error(r.SerializeAsString()), Contains("loss_fn_inputs['mask'].sparse_csr: shape [1, 1073741824] densifies to"));
  }
  SECTION("CSR row pointers that run past the values and back") {
    pb::ForwardBackwardRequest r = sample_request();
    pb::Tensor& t = (*r.mutable_data(0)->mutable_loss_fn_inputs())["mask"];
    t.set_dtype(pb::DTYPE_INT64);
    t.add_shape(2);
    t.add_shape(2);
    t.mutable_sparse_csr()->set_values(bytes_of(std::vector<int64_t>{4}));
    t.mutable_sparse_csr()->set_crow_indices(bytes_of(std::vector<int64_t>{0, 5, 1}));  // found by the fuzzer under ASan
    t.mutable_sparse_csr()->set_col_indices(bytes_of(std::vector<int64_t>{0}));
    CHECK_THAT(decode_error(r.SerializeAsString()), Contains("loss_fn_inputs['mask'].sparse_csr.crow_indices: decreasing at row 1"));
  }
  SECTION("a CSR column outside the shape") {
    pb::ForwardBackwardRequest r = sample_request();
    pb::Tensor& t = (*r.mutable_data(0)->mutable_loss_fn_inputs())["mask"];
    t.set_dtype(pb::DTYPE_INT64);
    t.add_shape(1);
    t.add_shape(2);
    t.mutable_sparse_csr()->set_values(bytes_of(std::vector<int64_t>{4}));
    t.mutable_sparse_csr()->set_crow_indices(bytes_of(std::vector<int64_t>{0, 1}));
    t.mutable_sparse_csr()->set_col_indices(bytes_of(std::vector<int64_t>{2}));
    CHECK_THAT(decode_error(r.SerializeAsString()), Contains("loss_fn_inputs['mask'].sparse_csr.col_indices[0]: 2 is outside"));
  }
}

TEST_CASE("tinker wire: a ForwardBackwardOutput is one ArrayRecord of every datum's tensors", "[tinker]") {
  tk::ForwardBackwardOutput out;
  out.metrics["loss:sum"] = 3.5;
  tk::Tensor a0{tk::DType::Float32, {2}, {-0.5f, -1.25f}, {}};
  tk::Tensor a1{tk::DType::Float32, {3}, {-1, -2, -3}, {}};
  tk::Tensor k0{tk::DType::Int64, {2, 2}, {}, {1, 2, 3, 4}};
  tk::Tensor k1{tk::DType::Int64, {1, 2}, {}, {5, 6}};
  out.loss_fn_outputs = {{{"logprobs", a0}, {"topk", k0}}, {{"logprobs", a1}, {"topk", k1}}};
  pb::ForwardBackwardOutput msg;
  REQUIRE(msg.ParseFromString(tk::encode_forward_backward_output(out)));
  CHECK(msg.loss_fn_output_type() == "ArrayRecord");
  CHECK(msg.metrics().at("loss:sum") == 3.5);
  REQUIRE(msg.loss_fn_outputs_size() == 1);
  const pb::ArrayRecord& rec = msg.loss_fn_outputs(0);
  CHECK(rec.num_datums() == 2);
  const pb::BatchedTensor& lp = rec.fields().at("logprobs");
  CHECK(lp.dtype() == pb::DTYPE_FLOAT32);
  CHECK(lp.trailing_shape_size() == 0);
  CHECK(array_of<int64_t>(lp.offsets()) == std::vector<int64_t>{0, 8, 20});
  CHECK(array_of<float>(lp.data()) == std::vector<float>{-0.5f, -1.25f, -1, -2, -3});
  const pb::BatchedTensor& tk2 = rec.fields().at("topk");
  CHECK(tk2.dtype() == pb::DTYPE_INT64);
  REQUIRE(tk2.trailing_shape_size() == 1);
  CHECK(tk2.trailing_shape(0) == 2);
  CHECK(array_of<int64_t>(tk2.offsets()) == std::vector<int64_t>{0, 32, 48});

  SECTION("no datums: metrics only") {
    tk::ForwardBackwardOutput empty;
    empty.metrics["loss:sum"] = 0;
    pb::ForwardBackwardOutput m;
    REQUIRE(m.ParseFromString(tk::encode_forward_backward_output(empty)));
    CHECK(m.loss_fn_outputs_size() == 0);
    CHECK(m.metrics().size() == 1);
  }
  SECTION("datums with other fields, dtypes or trailing shapes are refused") {
    auto bad = out;
    bad.loss_fn_outputs[1].erase("topk");
    CHECK_THROWS_WITH(tk::encode_forward_backward_output(bad), Contains("loss_fn_outputs[1]: its fields differ"));
    bad = out;
    bad.loss_fn_outputs[1]["topk"].shape = {2, 1};
    CHECK_THROWS_WITH(tk::encode_forward_backward_output(bad), Contains("other trailing dimensions"));
    bad = out;
    bad.loss_fn_outputs[1]["logprobs"] = tk::Tensor{tk::DType::Int64, {1}, {}, {1}};
    CHECK_THROWS_WITH(tk::encode_forward_backward_output(bad), Contains("loss_fn_outputs[1]['logprobs']: int64"));
    bad = out;
    bad.metrics["loss"] = 1;
    CHECK_THROWS_WITH(tk::encode_forward_backward_output(bad), Contains("ForwardBackwardOutput.metrics['loss']: the SDK splits"));
    bad.metrics.erase("loss");
    bad.metrics["a:b:sum"] = 1;
    CHECK_THROWS_WITH(tk::encode_forward_backward_output(bad), Contains("metrics['a:b:sum']"));
    bad = out;
    bad.loss_fn_outputs[0]["logprobs"].shape = {5};
    CHECK_THROWS_WITH(tk::encode_forward_backward_output(bad), Contains("2 values for shape [5]"));
  }
}

TEST_CASE("tinker wire: a SampleResponse carries tokens, logprobs, stop reasons and top-k", "[tinker]") {
  tk::SampleResponse r;
  tk::SampledSequence a;
  a.tokens = {5, 6, 7};
  a.logprobs = std::vector<float>{-0.1f, -0.2f, -0.3f};
  a.stop_reason = tk::StopReason::Length;
  a.topk = tk::TopkLogprobs{2, {5, 9, 6, 9, 7, 9}, {-0.1f, -3, -0.2f, -3, -0.3f, -3}};
  tk::SampledSequence b;
  b.tokens = {8};
  r.sequences = {a, b};
  r.prompt_logprobs = std::vector<float>{std::nanf(""), -2.5f};
  r.prompt_cache_hit_tokens = 4;
  pb::SampleResponse msg;
  REQUIRE(msg.ParseFromString(tk::encode_sample_response(r)));
  REQUIRE(msg.sequences_size() == 2);
  CHECK(msg.sequences(0).stop_reason() == pb::STOP_REASON_LENGTH);
  CHECK(array_of<int32_t>(msg.sequences(0).tokens()) == std::vector<int32_t>{5, 6, 7});
  CHECK(array_of<float>(msg.sequences(0).logprobs()) == std::vector<float>{-0.1f, -0.2f, -0.3f});
  CHECK(msg.sequences(0).topk_sampled_logprobs().k() == 2);
  CHECK(msg.sequences(0).topk_sampled_logprobs().length() == 3);
  CHECK(msg.sequences(1).stop_reason() == pb::STOP_REASON_STOP);
  CHECK_FALSE(msg.sequences(1).has_logprobs());
  CHECK_FALSE(msg.sequences(1).has_topk_sampled_logprobs());
  const auto pl = array_of<float>(msg.prompt_logprobs());
  REQUIRE(pl.size() == 2);
  CHECK(std::isnan(pl[0]));
  CHECK(pl[1] == -2.5f);
  CHECK(msg.prompt_cache_hit_tokens() == 4);

  SECTION("logprobs or top-k that do not match the tokens are refused") {
    auto bad = r;
    bad.sequences[0].logprobs->pop_back();
    CHECK_THROWS_WITH(tk::encode_sample_response(bad), Contains("sequences[0].logprobs: 2 for 3 tokens"));
    bad = r;
    bad.sequences[0].topk->k = 3;
    CHECK_THROWS_WITH(tk::encode_sample_response(bad), Contains("sequences[0].topk_sampled_logprobs"));
  }
}

// Bounded mutation fuzzing of the decoder (the bytes come from any client): a mutated request
// must decode or be refused with WireError; anything else (another exception, a crash, a
// sanitizer report under the ASan stage) is a finding. Fixed seed; a fixed count of inputs
// or about a second, whichever comes first (nothing here asserts a time);
// RLHOST_FUZZ_SECONDS=60 runs that long.
TEST_CASE("tinker wire: fuzzed requests decode or are refused with WireError", "[tinker][fuzz]") {
  std::vector<std::string> seeds;
  {
    pb::ForwardBackwardRequest r = sample_request();
    seeds.push_back(r.SerializeAsString());
    (*r.mutable_loss_fn_config_v2())["mode"].set_text("x");
    pb::Tensor& t = (*r.mutable_data(0)->mutable_loss_fn_inputs())["mask"];
    t.set_dtype(pb::DTYPE_INT64);
    t.add_shape(2);
    t.add_shape(2);
    t.mutable_sparse_csr()->set_values(bytes_of(std::vector<int64_t>{7}));
    t.mutable_sparse_csr()->set_crow_indices(bytes_of(std::vector<int64_t>{0, 1, 1}));
    t.mutable_sparse_csr()->set_col_indices(bytes_of(std::vector<int64_t>{1}));
    *r.add_data() = r.data(0);
    seeds.push_back(r.SerializeAsString());
  }
  std::mt19937_64 rng(20261129);
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  size_t n = 0, refused = 0;
  const char* secs = std::getenv("RLHOST_FUZZ_SECONDS");  // as tests/cpp/test_fuzz_readers.cpp: longer runs
  const double budget = secs && *secs ? std::atof(secs) : 1.0;
  const size_t max_inputs = secs && *secs ? SIZE_MAX : 200000;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(budget);
  for (const auto& s : seeds) REQUIRE_NOTHROW(tk::decode_forward_backward_request(s));
  while (n < max_inputs && std::chrono::steady_clock::now() < end) {
    std::string s = seeds[pick(seeds.size())];
    for (size_t r = 1 + pick(4); r > 0; --r) {
      const size_t at = pick(s.size() + 1);
      switch (pick(6)) {
        case 0: if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << pick(8)); break;
        case 1: if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng()); break;
        case 2: s.insert(at, 1, static_cast<char>(rng())); break;
        case 3: s.erase(at, pick(8) + 1); break;
        case 4: s.resize(at); break;
        default: s.insert(at, s.substr(pick(s.size() + 1), pick(16) + 1)); break;
      }
    }
    ++n;
    try {
      tk::decode_forward_backward_request(s);
    } catch (const tk::WireError& e) {
      ++refused;
      CHECK(std::string(e.what()).rfind("ForwardBackwardRequest", 0) == 0);
    } catch (const std::exception& e) {
      FAIL("input #" << n << " threw " << e.what() << " (not WireError)");
    }
  }
  INFO(n << " inputs, " << refused << " refused");
  CHECK(n > 100);
  CHECK(refused > 0);
}
