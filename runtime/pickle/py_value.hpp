// A Python object tree as torch.save / torch.load see it, without Python or
// LibTorch: what debug dumps (.pt) hold. None, bool, int, float, str, bytes,
// list, tuple, dict (insertion order) and CPU tensors (typed views of raw
// storage bytes).
//
// Containers are held by shared_ptr because pickle's memo lets one object be
// referenced from several places: a loaded tree is a DAG that keeps Python's
// sharing (a cycle only if the file has one). Ints wider than 64 bits keep their
// bytes (BigInt) so a C++ round trip is exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace rl::pickle {

enum class DType : uint8_t { float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, uint16, uint32, uint64, boolean };
size_t dtype_size(DType d);
const char* dtype_name(DType d);  // torch's spelling: "float32", "bfloat16", "bool", ...
// torch's typed storage class for `d` ("FloatStorage"), or nullptr when torch
// pickles that dtype as an UntypedStorage plus a dtype (uint16/32/64).
const char* dtype_storage_class(DType d);
bool dtype_from_storage_class(std::string_view name, DType* out);  // "FloatStorage" -> float32
bool dtype_from_name(std::string_view name, DType* out);           // "float32" / "float" / "half" ...

// A strided view of a storage: element (i0, i1, ...) sits at element
// storage_offset + sum(ik * stride[k]) of `storage` (raw little-endian bytes).
struct Tensor {
  DType dtype = DType::float32;
  std::vector<int64_t> shape, stride;
  int64_t storage_offset = 0;
  std::shared_ptr<const std::string> storage;

  int64_t numel() const;
  // A contiguous tensor owning a copy of `bytes` (numel(shape) * dtype_size bytes).
  static Tensor contiguous(DType dtype, std::vector<int64_t> shape, std::string bytes);
  // Element `flat` (row-major over shape) as a double (int64 above 2^53 rounds).
  double element(int64_t flat) const;
  // Throws rl::Error (prefixed with `where`) when the view reaches outside its storage.
  void check_bounds(const std::string& where) const;
};

class Value;
struct List { std::vector<Value> items; };
struct Tuple { std::vector<Value> items; };
struct Dict { std::vector<std::pair<Value, Value>> items; };
struct Bytes { std::string data; };
struct BigInt { std::string le_bytes; };  // two's complement, little-endian, > 8 bytes
// A reference to a Python class or function (module.name), e.g. a dtype passed to
// _rebuild_tensor_v3. torch_load rejects one left in its result, naming it.
struct Global { std::string module, name; };
struct None {};

class Value {
 public:
  enum class Kind : uint8_t { none, boolean, integer, big_integer, real, string, bytes, list, tuple, dict, tensor, global };

  Value() = default;
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  Value(int v) : v_(int64_t{v}) {}
  Value(int64_t v) : v_(v) {}
  Value(double v) : v_(v) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(Bytes b) : v_(std::move(b)) {}
  Value(BigInt b) : v_(std::move(b)) {}
  Value(Global g) : v_(std::make_shared<const Global>(std::move(g))) {}
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<Tuple> t) : v_(std::move(t)) {}
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<Tensor> t) : v_(std::move(t)) {}
  Value(Tensor t) : v_(std::make_shared<Tensor>(std::move(t))) {}
  // Freeing a container this Value alone holds walks its subtree with a heap
  // stack, not recursion: a pickle can nest lists a million levels deep.
  ~Value();
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;

  static Value list(std::vector<Value> items = {}) { return std::make_shared<List>(List{std::move(items)}); }
  static Value tuple(std::vector<Value> items = {}) { return std::make_shared<Tuple>(Tuple{std::move(items)}); }
  static Value dict(std::vector<std::pair<Value, Value>> items = {}) {
    return std::make_shared<Dict>(Dict{std::move(items)});
  }

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is(Kind k) const { return kind() == k; }
  bool is_none() const { return kind() == Kind::none; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const Bytes& as_bytes() const { return std::get<Bytes>(v_); }
  const BigInt& as_big_int() const { return std::get<BigInt>(v_); }
  const Global& as_global() const { return *std::get<std::shared_ptr<const Global>>(v_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Tuple& as_tuple() const { return *std::get<std::shared_ptr<Tuple>>(v_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Tensor& as_tensor() const { return *std::get<std::shared_ptr<Tensor>>(v_); }
  // The list's or tuple's items (throws std::bad_variant_access otherwise).
  std::vector<Value>& items() const { return is(Kind::tuple) ? as_tuple().items : as_list().items; }
  // Identity of a container (list, tuple, dict, tensor) for sharing and cycle checks; nullptr for scalars.
  const void* identity() const;
  // How many Values hold this container (0 for scalars): one means no other path
  // reaches it, so walks need not remember it.
  long use_count() const;

  // dict lookup by string key (nullptr when absent or not a dict).
  const Value* get(std::string_view key) const;
  // An integer value as a double (big ints round), for numeric conversions.
  double to_number() const;

  // Python's type name, for error messages ("int", "dict", "torch.Tensor", ...).
  const char* type_name() const;

  // Structural equality (tensors by dtype, shape and element values).
  friend bool operator==(const Value& a, const Value& b);

 private:
  // Order matters: Kind is the variant index.
  // Global is held by pointer: it is rare, and inline it would double every Value's size.
  std::variant<None, bool, int64_t, BigInt, double, std::string, Bytes, std::shared_ptr<List>, std::shared_ptr<Tuple>,
               std::shared_ptr<Dict>, std::shared_ptr<Tensor>, std::shared_ptr<const Global>>
      v_;
};

// IEEE half / bfloat16 bits <-> float.
float half_to_float(uint16_t h);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_half(float f);
uint16_t float_to_bfloat16(float f);

}  // namespace rl::pickle
