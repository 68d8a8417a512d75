#include "pickle/py_value.hpp"

#include <cmath>
#include <cstring>

#include "base/errors.hpp"

namespace rl::pickle {

namespace {

struct DTypeInfo {
  DType dtype;
  const char* name;
  size_t size;
  const char* storage_class;  // torch's legacy typed storage, if any
};

constexpr DTypeInfo kDTypes[] = {
    {DType::float32, "float32", 4, "FloatStorage"},   {DType::float64, "float64", 8, "DoubleStorage"},
    {DType::float16, "float16", 2, "HalfStorage"},    {DType::bfloat16, "bfloat16", 2, "BFloat16Storage"},
    {DType::int64, "int64", 8, "LongStorage"},        {DType::int32, "int32", 4, "IntStorage"},
    {DType::int16, "int16", 2, "ShortStorage"},       {DType::int8, "int8", 1, "CharStorage"},
    {DType::uint8, "uint8", 1, "ByteStorage"},        {DType::uint16, "uint16", 2, nullptr},
    {DType::uint32, "uint32", 4, nullptr},            {DType::uint64, "uint64", 8, nullptr},
    {DType::boolean, "bool", 1, "BoolStorage"},
};

const DTypeInfo& info(DType d) { return kDTypes[static_cast<size_t>(d)]; }

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

size_t dtype_size(DType d) { return info(d).size; }
const char* dtype_name(DType d) { return info(d).name; }
const char* dtype_storage_class(DType d) { return info(d).storage_class; }

bool dtype_from_storage_class(std::string_view name, DType* out) {
  for (const auto& i : kDTypes)
    if (i.storage_class && name == i.storage_class) { *out = i.dtype; return true; }
  return false;
}

bool dtype_from_name(std::string_view name, DType* out) {
  // torch's aliases, as `torch.float` pickles by its canonical name but older
  // files and users may spell it either way.
  static constexpr std::pair<const char*, DType> kAliases[] = {
      {"float", DType::float32}, {"double", DType::float64}, {"half", DType::float16},
      {"long", DType::int64},    {"int", DType::int32},      {"short", DType::int16},
  };
  for (const auto& i : kDTypes)
    if (name == i.name) { *out = i.dtype; return true; }
  for (const auto& [alias, d] : kAliases)
    if (name == alias) { *out = d; return true; }
  return false;
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Tensor Tensor::contiguous(DType dtype, std::vector<int64_t> shape, std::string bytes) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.stride.assign(t.shape.size(), 1);
  for (size_t k = t.shape.size(); k-- > 1;) t.stride[k - 1] = t.stride[k] * t.shape[k];
  if (static_cast<int64_t>(bytes.size()) != t.numel() * static_cast<int64_t>(dtype_size(dtype)))
    throw Error("Tensor::contiguous: " + std::to_string(bytes.size()) + " bytes for " + std::to_string(t.numel()) +
                " elements of " + dtype_name(dtype));
  t.storage = std::make_shared<const std::string>(std::move(bytes));
  return t;
}

double Tensor::element(int64_t flat) const {
  int64_t at = storage_offset;
  for (size_t k = shape.size(); k-- > 0;) {
    at += (flat % shape[k]) * stride[k];
    flat /= shape[k];
  }
  const char* p = storage->data() + at * static_cast<int64_t>(dtype_size(dtype));
  switch (dtype) {
    case DType::float32: return load<float>(p);
    case DType::float64: return load<double>(p);
    case DType::float16: return half_to_float(load<uint16_t>(p));
    case DType::bfloat16: return bfloat16_to_float(load<uint16_t>(p));
    case DType::int64: return static_cast<double>(load<int64_t>(p));
    case DType::int32: return load<int32_t>(p);
    case DType::int16: return load<int16_t>(p);
    case DType::int8: return load<int8_t>(p);
    case DType::uint8: return load<uint8_t>(p);
    case DType::uint16: return load<uint16_t>(p);
    case DType::uint32: return load<uint32_t>(p);
    case DType::uint64: return static_cast<double>(load<uint64_t>(p));
    case DType::boolean: return load<uint8_t>(p) ? 1.0 : 0.0;
  }
  return 0;
}

void Tensor::check_bounds(const std::string& where) const {
  if (stride.size() != shape.size())
    throw Error(where + ": tensor has " + std::to_string(shape.size()) + " sizes but " + std::to_string(stride.size()) +
                " strides");
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t have = storage ? static_cast<int64_t>(storage->size()) / esize : 0;
  if (storage_offset < 0) throw Error(where + ": negative storage offset " + std::to_string(storage_offset));
  // The farthest element: offset + sum((size-1) * stride); every size must be >= 0
  // and strides >= 0 (torch never pickles negative strides).
  int64_t last = storage_offset;
  bool empty = false;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] < 0 || stride[k] < 0)
      throw Error(where + ": negative size or stride in tensor dimension " + std::to_string(k));
    if (shape[k] == 0) empty = true;
    int64_t reach = 0;
    if (shape[k] > 0 && (__builtin_mul_overflow(shape[k] - 1, stride[k], &reach) ||
                         __builtin_add_overflow(last, reach, &last)))
      throw Error(where + ": tensor sizes and strides overflow");
  }
  int64_t count = 1;  // numel() must not overflow either (a broadcast view may be huge)
  for (int64_t n : shape)
    if (__builtin_mul_overflow(count, n, &count)) throw Error(where + ": tensor sizes overflow");
  if (!empty && last >= have)
    throw Error(where + ": tensor view reaches element " + std::to_string(last) + " of a storage with " +
                    std::to_string(have) + " " + dtype_name(dtype) + " elements",
                "the file is truncated or corrupt");
}

namespace {

// Moves the containers only `v` holds out of it into `work` (their subtrees die there).
void take_children(const Value& v, std::vector<Value>& work) {
  auto take = [&](Value& c) {
    if (c.use_count() == 1 && (c.is(Value::Kind::list) || c.is(Value::Kind::tuple) || c.is(Value::Kind::dict)))
      work.push_back(std::move(c));
  };
  if (v.is(Value::Kind::list) || v.is(Value::Kind::tuple)) {
    for (Value& c : v.items()) take(c);
  } else if (v.is(Value::Kind::dict)) {
    for (auto& [k, c] : v.as_dict().items) {
      take(k);
      take(c);
    }
  }
}

}  // namespace

Value::~Value() {
  if (use_count() != 1 || identity() == nullptr || is(Kind::tensor)) return;  // scalars, shared or moved-from
  std::vector<Value> work;
  take_children(*this, work);
  while (!work.empty()) {
    Value v = std::move(work.back());
    work.pop_back();
    take_children(v, work);
  }  // each v dies with only scalars and shared containers left in it
}

long Value::use_count() const {
  switch (kind()) {
    case Kind::list: return std::get<std::shared_ptr<List>>(v_).use_count();
    case Kind::tuple: return std::get<std::shared_ptr<Tuple>>(v_).use_count();
    case Kind::dict: return std::get<std::shared_ptr<Dict>>(v_).use_count();
    case Kind::tensor: return std::get<std::shared_ptr<Tensor>>(v_).use_count();
    default: return 0;
  }
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::list: return std::get<std::shared_ptr<List>>(v_).get();
    case Kind::tuple: return std::get<std::shared_ptr<Tuple>>(v_).get();
    case Kind::dict: return std::get<std::shared_ptr<Dict>>(v_).get();
    case Kind::tensor: return std::get<std::shared_ptr<Tensor>>(v_).get();
    default: return nullptr;
  }
}

const Value* Value::get(std::string_view key) const {
  if (!is(Kind::dict)) return nullptr;
  for (const auto& [k, v] : as_dict().items)
    if (k.is(Kind::string) && k.as_string() == key) return &v;
  return nullptr;
}

double Value::to_number() const {
  switch (kind()) {
    case Kind::boolean: return as_bool() ? 1 : 0;
    case Kind::integer: return static_cast<double>(as_int());
    case Kind::real: return as_float();
    case Kind::big_integer: {
      // Little-endian two's complement: sum bytes from the most significant one.
      const std::string& b = as_big_int().le_bytes;
      const bool negative = !b.empty() && (static_cast<unsigned char>(b.back()) & 0x80);
      double v = 0;
      for (size_t i = b.size(); i-- > 0;) {
        const unsigned char c = static_cast<unsigned char>(b[i]);
        v = v * 256 + (negative ? 255 - c : c);
      }
      return negative ? -(v + 1) : v;
    }
    default: return 0;
  }
}

const char* Value::type_name() const {
  static constexpr const char* kNames[] = {"NoneType", "bool",  "int",  "int",          "float", "str",
                                           "bytes",    "list",  "tuple", "dict", "torch.Tensor", "global"};
  return kNames[static_cast<size_t>(kind())];
}

bool operator==(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::none: return true;
    case K::boolean: return a.as_bool() == b.as_bool();
    case K::integer: return a.as_int() == b.as_int();
    case K::big_integer: return a.as_big_int().le_bytes == b.as_big_int().le_bytes;
    case K::real: return a.as_float() == b.as_float() || (std::isnan(a.as_float()) && std::isnan(b.as_float()));
    case K::string: return a.as_string() == b.as_string();
    case K::bytes: return a.as_bytes().data == b.as_bytes().data;
    case K::list:
    case K::tuple: return a.identity() == b.identity() || a.items() == b.items();
    case K::dict: return a.identity() == b.identity() || a.as_dict().items == b.as_dict().items;
    case K::global: return a.as_global().module == b.as_global().module && a.as_global().name == b.as_global().name;
    case K::tensor: {
      const Tensor& x = a.as_tensor();
      const Tensor& y = b.as_tensor();
      if (x.dtype != y.dtype || x.shape != y.shape) return false;
      for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        const double u = x.element(i), v = y.element(i);
        if (u != v && !(std::isnan(u) && std::isnan(v))) return false;
      }
      return true;
    }
  }
  return false;
}

// ---- half / bfloat16 ------------------------------------------------------------

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);           // zero / subnormal
  else if (exp == 31) v = mant ? NAN : INFINITY;                          // inf / nan
  else v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  bits |= sign;
  std::memcpy(&v, &bits, 4);
  return v;
}

float bfloat16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even, as torch
  return static_cast<uint16_t>(bits >> 16);
}

uint16_t float_to_half(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  if (std::isnan(f)) return sign | 0x7e00;
  const float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {          // subnormal: a multiple of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint(std::ldexp(m, 11)));  // 11 significant bits
  if (mant == 2048) { mant = 1024; ++e; }
  const uint32_t exp = static_cast<uint32_t>(e + 14);
  return sign | static_cast<uint16_t>((exp << 10) | (mant & 0x3ff));
}

}  // namespace rl::pickle
