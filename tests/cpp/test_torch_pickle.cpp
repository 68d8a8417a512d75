// Debug dumps without LibTorch (runtime/pickle): zip archives, the pickle
// writer and reader, torch.save's file layout, the legacy format, and every kind
// of bad input (which must throw rl::Error naming the file, never crash).
// Python's side of the compatibility is tests/e2e/test_dump_pickle.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/errors.hpp"
#include "pickle/torch_file.hpp"
#include "pickle/torch_pickle.hpp"
#include "pickle/zip_archive.hpp"

using Catch::Matchers::Contains;
using namespace rl::pickle;
using K = Value::Kind;
namespace fs = std::filesystem;

namespace {

// CPython pickle.dumps(obj, protocol=2)
const char kProto2[] =
    "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x78\x71\x01\x63\x63\x6f\x6c\x6c\x65\x63\x74\x69\x6f\x6e\x73\x0a\x4f"
    "\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x0a\x71\x02\x29\x52\x71\x03\x58\x01\x00\x00\x00\x61\x71\x04\x4b\x01\x73"
    "\x58\x01\x00\x00\x00\x73\x71\x05\x5d\x71\x06\x28\x5d\x71\x07\x4b\x01\x61\x68\x07\x65\x58\x01\x00\x00\x00\x74\x71"
    "\x08\x4b\x01\x85\x71\x09\x58\x01\x00\x00\x00\x75\x71\x0a\x58\x0a\x00\x00\x00\x68\xc3\xa9\x6c\x6c\x6f\x20\xe2\x98"
    "\x83\x71\x0b\x58\x03\x00\x00\x00\x62\x69\x67\x71\x0c\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x58\x03\x00\x00"
    "\x00\x6e\x65\x67\x71\x0d\x8a\x06\x00\x00\x00\x00\x00\xff\x58\x01\x00\x00\x00\x66\x71\x0e\x47\x3f\xd0\x00\x00\x00"
    "\x00\x00\x00\x58\x01\x00\x00\x00\x6e\x71\x0f\x4e\x58\x02\x00\x00\x00\x62\x79\x71\x10\x63\x5f\x63\x6f\x64\x65\x63"
    "\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x11\x58\x03\x00\x00\x00\x00\xc3\xbf\x71\x12\x58\x06\x00\x00\x00\x6c\x61"
    "\x74\x69\x6e\x31\x71\x13\x86\x71\x14\x52\x71\x15\x58\x01\x00\x00\x00\x65\x71\x16\x63\x5f\x5f\x62\x75\x69\x6c\x74"
    "\x69\x6e\x5f\x5f\x0a\x62\x79\x74\x65\x73\x0a\x71\x17\x29\x52\x71\x18\x58\x02\x00\x00\x00\x6f\x6b\x71\x19\x88\x58"
    "\x03\x00\x00\x00\x73\x65\x74\x71\x1a\x63\x5f\x5f\x62\x75\x69\x6c\x74\x69\x6e\x5f\x5f\x0a\x73\x65\x74\x0a\x71\x1b"
    "\x5d\x71\x1c\x4b\x03\x61\x85\x71\x1d\x52\x71\x1e\x75\x2e";
// CPython pickle.dumps(obj, protocol=4)
const char kProto4[] =
    "\x80\x04\x95\xad\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x78\x94\x8c\x0b\x63\x6f\x6c\x6c\x65\x63\x74\x69"
    "\x6f\x6e\x73\x94\x8c\x0b\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x94\x93\x94\x29\x52\x94\x8c\x01\x61\x94\x4b"
    "\x01\x73\x8c\x01\x73\x94\x5d\x94\x28\x5d\x94\x4b\x01\x61\x68\x09\x65\x8c\x01\x74\x94\x4b\x01\x85\x94\x8c\x01\x75"
    "\x94\x8c\x0a\x68\xc3\xa9\x6c\x6c\x6f\x20\xe2\x98\x83\x94\x8c\x03\x62\x69\x67\x94\x8a\x09\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x40\x8c\x03\x6e\x65\x67\x94\x8a\x06\x00\x00\x00\x00\x00\xff\x8c\x01\x66\x94\x47\x3f\xd0\x00\x00\x00\x00"
    "\x00\x00\x8c\x01\x6e\x94\x4e\x8c\x02\x62\x79\x94\x43\x02\x00\xff\x94\x8c\x01\x65\x94\x43\x00\x94\x8c\x02\x6f\x6b"
    "\x94\x88\x8c\x03\x73\x65\x74\x94\x8f\x94\x28\x4b\x03\x90\x75\x2e";
// CPython pickle.dumps(obj, protocol=5)
const char kProto5[] =
    "\x80\x05\x95\xad\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x78\x94\x8c\x0b\x63\x6f\x6c\x6c\x65\x63\x74\x69"
    "\x6f\x6e\x73\x94\x8c\x0b\x4f\x72\x64\x65\x72\x65\x64\x44\x69\x63\x74\x94\x93\x94\x29\x52\x94\x8c\x01\x61\x94\x4b"
    "\x01\x73\x8c\x01\x73\x94\x5d\x94\x28\x5d\x94\x4b\x01\x61\x68\x09\x65\x8c\x01\x74\x94\x4b\x01\x85\x94\x8c\x01\x75"
    "\x94\x8c\x0a\x68\xc3\xa9\x6c\x6c\x6f\x20\xe2\x98\x83\x94\x8c\x03\x62\x69\x67\x94\x8a\x09\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x40\x8c\x03\x6e\x65\x67\x94\x8a\x06\x00\x00\x00\x00\x00\xff\x8c\x01\x66\x94\x47\x3f\xd0\x00\x00\x00\x00"
    "\x00\x00\x8c\x01\x6e\x94\x4e\x8c\x02\x62\x79\x94\x43\x02\x00\xff\x94\x8c\x01\x65\x94\x43\x00\x94\x8c\x02\x6f\x6b"
    "\x94\x88\x8c\x03\x73\x65\x74\x94\x8f\x94\x28\x4b\x03\x90\x75\x2e";

template <size_t N>
std::string lit(const char (&s)[N]) { return std::string(s, N - 1); }

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const rl::Error& e) {
    return e.what();
  }
  FAIL("expected an rl::Error");
  return {};
}

template <class T>
std::string raw(std::initializer_list<T> xs) {
  std::string b;
  for (T x : xs) b.append(reinterpret_cast<const char*>(&x), sizeof x);
  return b;
}


// One of everything a dump may hold.
Value rich_value() {
  auto storage = std::make_shared<const std::string>(raw<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  Tensor view;  // x[2:8:2] of a shared storage
  view.dtype = DType::float32;
  view.shape = {3};
  view.stride = {2};
  view.storage_offset = 2;
  view.storage = storage;
  Tensor whole = Tensor::contiguous(DType::float32, {2, 5}, *storage);
  whole.storage = storage;  // the same storage object: one data/<key> entry
  std::vector<std::pair<Value, Value>> tensors = {
      {"f32", Tensor::contiguous(DType::float32, {2, 2}, raw<float>({1.5f, -2, 3, 4}))},
      {"f64", Tensor::contiguous(DType::float64, {3}, raw<double>({0.1, -1e300, 7}))},
      {"f16", Tensor::contiguous(DType::float16, {2}, raw<uint16_t>({float_to_half(1.5f), float_to_half(-65504)}))},
      {"bf16", Tensor::contiguous(DType::bfloat16, {2}, raw<uint16_t>({float_to_bfloat16(3.0f), float_to_bfloat16(-0.5f)}))},
      {"i64", Tensor::contiguous(DType::int64, {2}, raw<int64_t>({INT64_MIN, 1ll << 40}))},
      {"i32", Tensor::contiguous(DType::int32, {1, 2}, raw<int32_t>({-7, 7}))},
      {"i16", Tensor::contiguous(DType::int16, {1}, raw<int16_t>({-300}))},
      {"i8", Tensor::contiguous(DType::int8, {1}, raw<int8_t>({-3}))},
      {"u8", Tensor::contiguous(DType::uint8, {2}, raw<uint8_t>({0, 255}))},
      {"u16", Tensor::contiguous(DType::uint16, {1}, raw<uint16_t>({65535}))},
      {"bool", Tensor::contiguous(DType::boolean, {3}, raw<uint8_t>({1, 0, 1}))},
      {"scalar", Tensor::contiguous(DType::float32, {}, raw<float>({42}))},
      {"empty", Tensor::contiguous(DType::float32, {0, 3}, "")},
      {"view", view},
      {"whole", whole},
  };
  return Value::dict({
      {"rollout_id", 3},
      {"none", nullptr},
      {"t", true},
      {"f", false},
      {"ints", Value::list({0, 255, 256, 65535, 65536, -1, -129, int64_t{INT32_MAX}, int64_t{INT32_MIN},
                            int64_t{INT32_MAX} + 1, int64_t{INT32_MIN} - 1, INT64_MAX, INT64_MIN})},
      {"big", BigInt{std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x40", 9)}},  // 2^70
      {"floats", Value::list({0.5, -0.0, 1e-310, INFINITY, -INFINITY, NAN, 1.0})},
      {"text", std::string("h\xc3\xa9llo \xe2\x98\x83 \xf0\x9f\x98\x80")},
      {"bytes", Bytes{std::string("\x00\x7f\x80\xff", 4)}},
      {"no_bytes", Bytes{}},
      {"empty_list", Value::list()},
      {"empty_dict", Value::dict()},
      {"one", Value::list({1})},
      {"tuple1", Value::tuple({"a"})},
      {"tuple5", Value::tuple({1, 2, 3, 4, 5})},
      {7, "int key"},
      {"nested", Value::list({Value::dict({{"a", Value::list({Value::list({})})}})})},
      {"tensors", Value::dict(std::move(tensors))},
  });
}

}  // namespace

TEST_CASE("crc32 and zip archives", "[dump]") {
  CHECK(crc32("123456789", 9) == 0xCBF43926u);
  CHECK(crc32("", 0) == 0u);
  ZipWriter w;
  w.add("a/one", "1");
  w.add("a/data/0", std::string(100, 'x'));
  w.add("a/unaligned", "zz", 1);
  const std::string zip = w.finish();
  CHECK(looks_like_zip(zip));
  ZipReader r(zip, "t.zip");
  REQUIRE(r.entries().size() == 3);
  CHECK(r.find("a/data/0")->data_offset % 64 == 0);
  CHECK(r.find("a/one")->data_offset % 64 == 0);
  CHECK(r.read(*r.find("a/data/0")) == std::string(100, 'x'));
  CHECK(r.read(*r.find("a/unaligned")) == "zz");
  CHECK(r.find("missing") == nullptr);
}

TEST_CASE("pickle writer emits CPython's protocol 2 opcodes", "[dump]") {
  // {"a": 1, "b": [1.5]} as CPython writes it, minus the memo (BINPUT) ops.
  const Value v = Value::dict({{"a", 1}, {"b", Value::list({1.5})}});
  CHECK(pickle_dump(v, nullptr) == lit("\x80\x02}(X\x01\x00\x00\x00" "aK\x01X\x01\x00\x00\x00" "b]G\x3f\xf8\0\0\0\0\0\0" "au."));
  CHECK(pickle_dump(Value::tuple({1}), nullptr) == lit("\x80\x02K\x01\x85."));
  CHECK(pickle_dump(Value(int64_t{1} << 31), nullptr) == lit("\x80\x02\x8a\x05\0\0\0\x80\0."));
  CHECK(pickle_dump(Value(int64_t{-(1ll << 31) - 1}), nullptr) == lit("\x80\x02\x8a\x05\xff\xff\xff\x7f\xff."));
  CHECK(pickle_dump(Value(-1), nullptr) == lit("\x80\x02J\xff\xff\xff\xff."));
}

TEST_CASE("values round-trip through torch.save's zip format", "[dump]") {
  const Value v = rich_value();
  const std::string bytes = torch_save_bytes(v, "rollout_3");
  const Value back = torch_load_bytes(bytes, "rollout_3.pt");
  CHECK(back == v);
  // Layout as torch.save writes it.
  ZipReader zip(bytes, "rollout_3.pt");
  CHECK(zip.entries().front().name == "rollout_3/data.pkl");
  CHECK(zip.read(*zip.find("rollout_3/version")) == "3\n");
  CHECK(zip.read(*zip.find("rollout_3/byteorder")) == "little");
  REQUIRE(zip.find("rollout_3/.data/serialization_id"));
  for (const auto& e : zip.entries())
    if (e.name.rfind("rollout_3/data/", 0) == 0) CHECK(e.data_offset % 64 == 0);
  // 15 tensors, two of which share one storage.
  int storages = 0;
  for (const auto& e : zip.entries()) storages += e.name.rfind("rollout_3/data/", 0) == 0;
  CHECK(storages == 14);
  // Types survive: ints stay ints, floats floats, tuples tuples, a view keeps its strides.
  CHECK(back.get("ints")->items().back().as_int() == INT64_MIN);
  CHECK(back.get("floats")->items()[6].is(K::real));
  CHECK(std::signbit(back.get("floats")->items()[1].as_float()));
  CHECK(back.get("tuple1")->is(K::tuple));
  const Tensor& view = back.get("tensors")->get("view")->as_tensor();
  CHECK(view.stride == std::vector<int64_t>{2});
  CHECK(view.element(2) == 6);
  CHECK(back.get("tensors")->get("whole")->as_tensor().storage == view.storage);
  CHECK(back.get("big")->to_number() == std::ldexp(1.0, 70));
  CHECK(back.get("tensors")->get("f16")->as_tensor().element(1) == -65504);
}

TEST_CASE("CPython's pickles of protocols 2, 4 and 5 load", "[dump]") {
  for (const std::string& p : {lit(kProto2), lit(kProto4), lit(kProto5)}) {
    size_t pos = 0;
    const Value v = pickle_load(p, &pos, nullptr, "golden");
    CHECK(pos == p.size());
    check_loaded(v, "golden");
    CHECK(*v.get("x") == Value::dict({{"a", 1}}));
    const auto& s = v.get("s")->items();
    CHECK(s[0].identity() == s[1].identity());  // one list, referenced twice
    CHECK(*v.get("t") == Value::tuple({1}));
    CHECK(v.get("u")->as_string() == "h\xc3\xa9llo \xe2\x98\x83");
    CHECK(v.get("big")->to_number() == std::ldexp(1.0, 70));
    CHECK(v.get("neg")->as_int() == -(1ll << 40));
    CHECK(v.get("f")->as_float() == 0.25);
    CHECK(v.get("n")->is_none());
    CHECK(v.get("by")->as_bytes().data == std::string("\x00\xff", 2));
    CHECK(v.get("e")->as_bytes().data.empty());
    CHECK(v.get("ok")->as_bool());
    CHECK(*v.get("set") == Value::list({3}));
  }
}

TEST_CASE("the legacy (pre-zip) torch.save format loads", "[dump]") {
  std::vector<PickledStorage> storages;
  const Value obj = Value::dict({{"x", Tensor::contiguous(DType::int64, {2}, raw<int64_t>({5, -6}))}, {"y", 1}});
  std::string file = pickle_dump(BigInt{std::string("\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 10)}, nullptr);
  file += pickle_dump(1001, nullptr);
  file += pickle_dump(Value::dict({{"protocol_version", 1001}, {"little_endian", true}}), nullptr);
  file += pickle_dump(obj, &storages);
  std::vector<Value> keys;
  for (const auto& s : storages) keys.emplace_back(s.key);
  file += pickle_dump(Value::list(keys), nullptr);
  for (const auto& s : storages) {
    file += raw<int64_t>({static_cast<int64_t>(s.bytes->size() / 8)});
    file += *s.bytes;
  }
  CHECK(torch_load_bytes(file, "legacy.pt") == obj);
  CHECK_THAT(error_of([&] { torch_load_bytes(file.substr(0, file.size() - 3), "legacy.pt"); }), Contains("truncated"));
}

TEST_CASE("files are written atomically into new folders", "[dump]") {
  const fs::path dir = fs::temp_directory_path() / ("rlhost_dump_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const fs::path file = dir / "a" / "b" / "rollout_1.pt";
  torch_save(rich_value(), file);
  CHECK(torch_load(file) == rich_value());
  for (const auto& e : fs::recursive_directory_iterator(dir)) CHECK(e.path().string().find(".tmp.") == std::string::npos);
  CHECK_THAT(error_of([&] { torch_load(dir / "missing.pt"); }), Contains("missing.pt: no such file"));
  fs::remove_all(dir);
}

TEST_CASE("bad dumps fail with the file name and what is wrong", "[dump]") {
  const std::string good = torch_save_bytes(rich_value(), "d");
  CHECK_THAT(error_of([] { torch_load_bytes("", "x.pt"); }), Contains("x.pt: the file is empty"));
  CHECK_THAT(error_of([] { torch_load_bytes("hello world", "x.pt"); }), Contains("x.pt: not a torch file"));
  CHECK_THAT(error_of([] { torch_load_bytes("PK\x03\x04", "x.pt"); }), Contains("x.pt: too short"));
  CHECK_THAT(error_of([&] { torch_load_bytes(good.substr(0, good.size() / 2), "x.pt"); }),
             Contains("no end-of-central-directory"));

  SECTION("a flipped byte in a zip entry fails its CRC") {
    ZipReader zip(good, "x.pt");
    std::string bad = good;
    bad[zip.find("d/data.pkl")->data_offset + 5] ^= 0x20;
    CHECK_THAT(error_of([&] { torch_load_bytes(bad, "x.pt"); }), Contains("x.pt: zip entry d/data.pkl fails its CRC check"));
  }
  SECTION("a compressed entry is named") {
    std::string bad = good;
    const size_t cd = bad.find("PK\x01\x02");
    bad[cd + 10] = 8;  // method: deflate
    CHECK_THAT(error_of([&] { torch_load_bytes(bad, "x.pt"); }), Contains("is compressed"));
  }
  auto with_pickle = [](const std::string& pkl, const std::vector<std::pair<std::string, std::string>>& extra = {}) {
    ZipWriter w;
    w.add("d/data.pkl", pkl);
    for (const auto& [k, v] : extra) w.add(k, v);
    return w.finish();
  };
  SECTION("unknown opcodes, unknown globals, truncated pickles") {
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(lit("\x80\x02\xff.")), "x.pt"); }),
               Contains("x.pt: d/data.pkl at byte 2 (opcode 0xff): unknown or unsupported pickle opcode 0xff"));
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(lit("\x80\x02" "cnumpy\nndarray\n)R.")), "x.pt"); }),
               Contains("unsupported Python class or function numpy.ndarray"));
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(lit("\x80\x02]cos\nsystem\na.")), "x.pt"); }),
               Contains("unsupported Python object os.system at $[0]"));
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(lit("\x80\x02X\xff\x00\x00\x00" "ab.")), "x.pt"); }),
               Contains("truncated"));
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(lit("\x80\x02h\x05.")), "x.pt"); }),
               Contains("memo entry 5 was never stored"));
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(lit("\x80\x02u.")), "x.pt"); }), Contains("no MARK"));
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(lit("\x80\x02.")), "x.pt"); }), Contains("stack underflow"));
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(lit("\x80\x02K\x01K\x02" "a.")), "x.pt"); }),
               Contains("APPEND to a int, not a list"));
  }
  SECTION("storages: missing, short, out-of-bounds views") {
    std::vector<PickledStorage> st;
    Tensor t = Tensor::contiguous(DType::float32, {4}, raw<float>({1, 2, 3, 4}));
    const std::string pkl = pickle_dump(Value(t), &st);
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(pkl), "x.pt"); }), Contains("d/data/0, which is not in the archive"));
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(pkl, {{"d/data/0", "abcd"}}), "x.pt"); }),
               Contains("holds 4 bytes but 4 float32 elements need 16"));
    t.storage_offset = 1;  // reaches element 4 of 4 (the writer refuses it too)
    CHECK_THAT(error_of([&] { check_loaded(Value(t), "x.pt"); }),
               Contains("x.pt at $: tensor view reaches element 4 of a storage with 4 float32 elements"));
    CHECK_THAT(error_of([&] { pickle_dump(Value(t), nullptr); }), Contains("tensor view reaches element 4"));
  }
  SECTION("big-endian dumps and archives without data.pkl") {
    CHECK_THAT(error_of([&] { torch_load_bytes(with_pickle(lit("\x80\x02N."), {{"d/byteorder", "big"}}), "x.pt"); }),
               Contains("big-endian"));
    ZipWriter w;
    w.add("d/other", "x");
    CHECK_THAT(error_of([&] { torch_load_bytes(w.finish(), "x.pt"); }), Contains("no <archive>/data.pkl"));
  }
  SECTION("cycles are refused") {
    Value l = Value::list();
    l.as_list().items.push_back(l);
    CHECK_THAT(error_of([&] { check_loaded(l, "x.pt"); }), Contains("cycle at $[0]"));
    l.as_list().items.clear();  // break the cycle so it is freed
  }
  SECTION("a pickle of a container holding itself is refused and freed (LeakSanitizer checks the freeing)") {
    // CPython: l = []; l.append(l) and d = {}; d['a'] = [d], pickled with protocol 2.
    for (std::string p : {lit("\x80\x02]q\x00h\x00a."), lit("\x80\x02}q\x00X\x01\x00\x00\x00aq\x01]q\x02h\x00as."),
                          lit("\x80\x02]q\x00h\x00a")}) {  // the last one breaks off before STOP
      size_t pos = 0;
      const auto err = error_of([&] { pickle_load(p, &pos, nullptr, "x.pkl"); });
      CHECK((err.find("cycle") != std::string::npos || err.find("x.pkl") != std::string::npos));
    }
  }
}

TEST_CASE("every truncation and random corruption fails cleanly", "[dump]") {
  const std::string good = torch_save_bytes(Value::dict({{"a", Value::list({1, 2.5, "x"})},
                                                          {"t", Tensor::contiguous(DType::int32, {2}, raw<int32_t>({1, 2}))}}),
                                            "d");
  for (size_t n = 0; n < good.size(); ++n) {
    try {
      torch_load_bytes(good.substr(0, n), "cut.pt");
    } catch (const rl::Error&) {
    }
  }
  // Corrupt the pickle inside a valid archive (so the CRC does not catch it first).
  ZipReader zip(good, "d.pt");
  const std::string pkl(zip.read(*zip.find("d/data.pkl")));
  std::mt19937 rng(7);
  int loaded = 0, failed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string p = pkl;
    for (int k = 0; k < 3; ++k) p[rng() % p.size()] = static_cast<char>(rng());
    ZipWriter w;
    w.add("d/data.pkl", p);
    w.add("d/data/0", raw<int32_t>({1, 2}));
    try {
      torch_load_bytes(w.finish(), "fuzz.pt");
      ++loaded;
    } catch (const rl::Error&) {
      ++failed;
    }
  }
  CHECK(loaded + failed == 3000);
  CHECK(failed > 0);
  // Flips anywhere: local headers, central directory, end records.
  for (int i = 0; i < 3000; ++i) {
    std::string f = good;
    for (int k = 0; k < 2; ++k) f[rng() % f.size()] = static_cast<char>(rng());
    try {
      torch_load_bytes(f, "fuzz.pt");
    } catch (const rl::Error&) {
    }
  }
}
