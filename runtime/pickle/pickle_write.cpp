// The pickle writer (protocol 2). See torch_pickle.hpp for the layout and why.
#include <cstring>
#include <unordered_map>

#include "base/errors.hpp"
#include "pickle/torch_pickle.hpp"

namespace rl::pickle {
namespace {

constexpr size_t kBatch = 1000;  // CPython's batch size for APPENDS / SETITEMS
constexpr int kMaxDepth = 512;

class Writer {
 public:
  explicit Writer(std::vector<PickledStorage>* storages) : storages_(storages) {}
  std::string out;

  void value(const Value& v, int depth) {
    if (depth > kMaxDepth) throw Error("pickle: nested deeper than " + std::to_string(kMaxDepth) + " levels (a cycle?)");
    using K = Value::Kind;
    switch (v.kind()) {
      case K::none: op('N'); return;
      case K::boolean: op(v.as_bool() ? 0x88 : 0x89); return;
      case K::integer: integer(v.as_int()); return;
      case K::big_integer: long_bytes(v.as_big_int().le_bytes); return;
      case K::real: real(v.as_float()); return;
      case K::string: string(v.as_string()); return;
      case K::bytes: bytes(v.as_bytes().data); return;
      case K::global: global(v.as_global().module, v.as_global().name); return;
      case K::tensor: tensor(v.as_tensor()); return;
      case K::tuple: tuple(v.as_tuple().items, depth); return;
      case K::list: list(v.as_list().items, depth); return;
      case K::dict: dict(v.as_dict().items, depth); return;
    }
  }

 private:
  void op(int code) { out += static_cast<char>(code); }
  void raw(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
  template <class T>
  void le(T v) { raw(&v, sizeof v); }  // x86 / ARM hosts: little-endian, as pickle wants

  void integer(int64_t v) {
    if (v >= 0 && v < 256) { op('K'); le(static_cast<uint8_t>(v)); return; }
    if (v >= 0 && v < 65536) { op('M'); le(static_cast<uint16_t>(v)); return; }
    if (v >= INT32_MIN && v <= INT32_MAX) { op('J'); le(static_cast<int32_t>(v)); return; }
    // LONG1: the fewest little-endian two's complement bytes that keep the sign.
    std::string b(8, '\0');
    std::memcpy(b.data(), &v, 8);
    while (b.size() > 1) {
      const auto last = static_cast<unsigned char>(b.back());
      const auto prev = static_cast<unsigned char>(b[b.size() - 2]);
      if ((last == 0 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80))) b.pop_back();
      else break;
    }
    long_bytes(b);
  }

  void long_bytes(const std::string& b) {
    if (b.size() < 256) { op(0x8a); le(static_cast<uint8_t>(b.size())); }
    else { op(0x8b); le(static_cast<int32_t>(b.size())); }
    out += b;
  }

  void real(double v) {  // BINFLOAT is big-endian
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    op('G');
    for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>((bits >> shift) & 0xff);
  }

  void string(const std::string& s) {
    if (s.size() > UINT32_MAX) throw Error("pickle: a string of " + std::to_string(s.size()) + " bytes is too long");
    op('X');
    le(static_cast<uint32_t>(s.size()));
    out += s;
  }

  // Protocol 2 has no bytes opcode; CPython writes bytes(...) as a call:
  // b"" -> __builtin__.bytes(), else _codecs.encode(<latin-1 text>, "latin1").
  void bytes(const std::string& b) {
    if (b.empty()) {
      global("__builtin__", "bytes");
      op(')');
      op('R');
      return;
    }
    global("_codecs", "encode");
    std::string text;  // each byte as the code point of the same value, UTF-8 encoded
    text.reserve(b.size() * 2);
    for (unsigned char c : b) {
      if (c < 0x80) text += static_cast<char>(c);
      else { text += static_cast<char>(0xc0 | (c >> 6)); text += static_cast<char>(0x80 | (c & 0x3f)); }
    }
    string(text);
    string("latin1");
    op(0x86);  // TUPLE2
    op('R');
  }

  void global(const std::string& module, const std::string& name) {
    op('c');
    out += module;
    out += '\n';
    out += name;
    out += '\n';
  }

  void tuple(const std::vector<Value>& items, int depth) {
    if (items.empty()) { op(')'); return; }
    if (items.size() <= 3) {
      for (const auto& x : items) value(x, depth + 1);
      op(0x84 + static_cast<int>(items.size()));  // TUPLE1..TUPLE3
      return;
    }
    op('(');
    for (const auto& x : items) value(x, depth + 1);
    op('t');
  }

  void list(const std::vector<Value>& items, int depth) {
    op(']');
    for (size_t i = 0; i < items.size(); i += kBatch) {
      const size_t n = std::min(kBatch, items.size() - i);
      if (n > 1) op('(');
      for (size_t k = i; k < i + n; ++k) value(items[k], depth + 1);
      op(n > 1 ? 'e' : 'a');
    }
  }

  void dict(const std::vector<std::pair<Value, Value>>& items, int depth) {
    op('}');
    for (size_t i = 0; i < items.size(); i += kBatch) {
      const size_t n = std::min(kBatch, items.size() - i);
      if (n > 1) op('(');
      for (size_t k = i; k < i + n; ++k) {
        value(items[k].first, depth + 1);
        value(items[k].second, depth + 1);
      }
      op(n > 1 ? 'u' : 's');
    }
  }

  // torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
  // backward_hooks), or _v3 with an UntypedStorage and a dtype for the dtypes
  // torch has no typed storage class for.
  void tensor(const Tensor& t) {
    t.check_bounds("pickle: tensor");
    const char* cls = dtype_storage_class(t.dtype);
    const size_t esize = dtype_size(t.dtype);
    const int64_t numel = static_cast<int64_t>(t.storage ? t.storage->size() : 0) / static_cast<int64_t>(esize);
    global("torch._utils", cls ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    op('(');
    op('(');
    string("storage");
    if (cls) global("torch", cls);
    else global("torch.storage", "UntypedStorage");
    string(storage_key(t.storage));
    string("cpu");
    integer(cls ? numel : numel * static_cast<int64_t>(esize));
    op('t');
    op('Q');  // BINPERSID
    integer(t.storage_offset);
    ints_tuple(t.shape);
    ints_tuple(t.stride);
    op(0x89);  // requires_grad = False
    global("collections", "OrderedDict");
    op(')');
    op('R');
    if (!cls) global("torch", dtype_name(t.dtype));
    op('t');
    op('R');
  }

  void ints_tuple(const std::vector<int64_t>& xs) {
    std::vector<Value> items(xs.begin(), xs.end());
    tuple(items, 0);
  }

  std::string storage_key(const std::shared_ptr<const std::string>& bytes) {
    static const auto empty = std::make_shared<const std::string>();
    const auto& b = bytes ? bytes : empty;
    auto [it, added] = keys_.try_emplace(b.get(), std::to_string(keys_.size()));
    if (added) storages_->push_back({it->second, b});
    return it->second;
  }

  std::vector<PickledStorage>* storages_;
  std::unordered_map<const std::string*, std::string> keys_;
};

}  // namespace

std::string pickle_dump(const Value& v, std::vector<PickledStorage>* storages) {
  std::vector<PickledStorage> ignored;
  Writer w(storages ? storages : &ignored);
  w.out = "\x80\x02";  // PROTO 2
  w.value(v, 0);
  w.out += '.';  // STOP
  return std::move(w.out);
}

}  // namespace rl::pickle
