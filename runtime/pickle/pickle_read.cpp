// The pickle reader. See torch_pickle.hpp for what it accepts and why.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "base/errors.hpp"
#include "pickle/torch_pickle.hpp"

namespace rl::pickle {
namespace {

const char* kHint = "is the file a torch.save dump that finished writing?";

class Reader {
 public:
  Reader(std::string_view data, size_t pos, const PersistentLoader& persistent, const std::string& where)
      : d_(data), pos_(pos), persistent_(persistent), where_(where) {}

  Value run();
  size_t pos() const { return pos_; }
  // What the reader still holds (stack, memo): with the result, every container it made.
  void roots(std::vector<const Value*>& out) const {
    for (const auto& v : stack_) out.push_back(&v);
    for (const auto& [k, v] : memo_) out.push_back(&v);
  }

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& hint = {}) const {
    char at[48];
    std::snprintf(at, sizeof at, " at byte %zu (opcode 0x%02x)", op_pos_, op_);
    throw Error(where_ + at + ": " + what, hint);
  }

  const char* take(uint64_t n) {
    if (n > d_.size() - pos_)
      fail("truncated: " + std::to_string(n) + " bytes needed, " + std::to_string(d_.size() - pos_) + " left", kHint);
    const char* p = d_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  T le() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  std::string line() {  // text argument of protocol 0 opcodes, up to '\n'
    const size_t end = d_.find('\n', pos_);
    if (end == std::string_view::npos) fail("truncated: a text argument has no end of line", kHint);
    std::string s(d_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }
  std::string text(uint64_t n) { return std::string(take(n), n); }

  Value pop() {
    if (stack_.size() <= floor()) fail("stack underflow", "the pickle is corrupt");
    Value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Value& top() {
    if (stack_.size() <= floor()) fail("stack underflow", "the pickle is corrupt");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // Pops the innermost MARK; the items above it stay on the stack from the returned index.
  size_t take_mark() {
    if (marks_.empty()) fail("no MARK to pop to", "the pickle is corrupt");
    const size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  // Moves stack[m..] into `out` as key/value pairs or items, without a temporary vector
  // (a dump has a container per event and per attrs: one allocation less each).
  void move_pairs(size_t m, std::vector<std::pair<Value, Value>>& out, const char* opname) {
    if ((stack_.size() - m) % 2) fail(std::string(opname) + " with an odd number of items", "the pickle is corrupt");
    out.reserve(out.size() + (stack_.size() - m) / 2);
    for (size_t i = m; i < stack_.size(); i += 2) out.emplace_back(std::move(stack_[i]), std::move(stack_[i + 1]));
    stack_.resize(m);
  }
  void move_items(size_t m, std::vector<Value>& out) {
    out.reserve(out.size() + (stack_.size() - m));
    for (size_t i = m; i < stack_.size(); ++i) out.push_back(std::move(stack_[i]));
    stack_.resize(m);
  }
  std::vector<Value> pop_mark() {
    const size_t m = take_mark();
    std::vector<Value> items(std::make_move_iterator(stack_.begin() + static_cast<ptrdiff_t>(m)),
                             std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  void push(Value v) { stack_.push_back(std::move(v)); }

  void memo_put(uint64_t key) { memo_[key] = top(); }
  void memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo entry " + std::to_string(key) + " was never stored", "the pickle is corrupt");
    push(it->second);
  }

  Value long_from_bytes(std::string_view b);
  Value long_from_text(std::string s);
  Value reduce(const Value& callable, const Value& args);
  Value rebuild_tensor(const std::vector<Value>& a, bool v3);
  Value bytes_from_text(const Value& text, const Value& encoding);
  List& list_at_top(const char* opname) {
    Value& t = top();
    if (!t.is(Value::Kind::list)) fail(std::string(opname) + " to a " + t.type_name() + ", not a list", "the pickle is corrupt");
    return t.as_list();
  }
  Dict& dict_at_top(const char* opname) {
    Value& t = top();
    if (!t.is(Value::Kind::dict)) fail(std::string(opname) + " to a " + t.type_name() + ", not a dict", "the pickle is corrupt");
    return t.as_dict();
  }

  std::string_view d_;
  size_t pos_;
  const PersistentLoader& persistent_;
  const std::string& where_;
  size_t op_pos_ = 0;
  int op_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value> memo_;
};

Value Reader::run() {
  for (;;) {
    op_pos_ = pos_;
    op_ = static_cast<unsigned char>(*take(1));
    switch (op_) {
      case 0x80: {  // PROTO
        const int proto = le<uint8_t>();
        if (proto > 5) fail("pickle protocol " + std::to_string(proto) + " is newer than 5", "re-save with pickle_protocol <= 5");
        break;
      }
      case 0x95: le<uint64_t>(); break;  // FRAME: a length prefix we do not need
      case '.': {                        // STOP
        if (!marks_.empty()) fail("STOP inside an open MARK", "the pickle is corrupt");
        Value v = pop();
        return v;
      }
      case '(': marks_.push_back(stack_.size()); break;
      case '0': pop(); break;
      case '1': pop_mark(); break;
      case '2': push(top()); break;
      case 'N': push(Value()); break;
      case 0x88: push(true); break;
      case 0x89: push(false); break;
      case 'J': push(int64_t{le<int32_t>()}); break;
      case 'K': push(int64_t{le<uint8_t>()}); break;
      case 'M': push(int64_t{le<uint16_t>()}); break;
      case 0x8a: { const uint8_t n = le<uint8_t>(); push(long_from_bytes({take(n), n})); break; }
      case 0x8b: {
        const int32_t n = le<int32_t>();
        if (n < 0) fail("LONG4 with a negative length", "the pickle is corrupt");
        push(long_from_bytes({take(static_cast<uint64_t>(n)), static_cast<size_t>(n)}));
        break;
      }
      case 'I': {  // protocol 0 int; "01"/"00" are True/False
        std::string s = line();
        if (s == "01" || s == "00") push(s == "01");
        else push(long_from_text(std::move(s)));
        break;
      }
      case 'L': push(long_from_text(line())); break;
      case 'G': {
        uint64_t bits = 0;
        const char* p = take(8);
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(p[i]);
        double v;
        std::memcpy(&v, &bits, 8);
        push(v);
        break;
      }
      case 'F': {
        std::string s = line();
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end) fail("FLOAT '" + s + "' is not a number", "the pickle is corrupt");
        push(v);
        break;
      }
      case 'X': push(text(le<uint32_t>())); break;
      case 0x8c: push(text(le<uint8_t>())); break;
      case 0x8d: push(text(le<uint64_t>())); break;
      // Python 2 str (BINSTRING / SHORT_BINSTRING): torch.load decodes them as text.
      case 'T': {
        const int32_t n = le<int32_t>();
        if (n < 0) fail("BINSTRING with a negative length", "the pickle is corrupt");
        push(text(static_cast<uint64_t>(n)));
        break;
      }
      case 'U': push(text(le<uint8_t>())); break;
      case 'B': push(Bytes{text(le<uint32_t>())}); break;
      case 'C': push(Bytes{text(le<uint8_t>())}); break;
      case 0x8e: case 0x96: push(Bytes{text(le<uint64_t>())}); break;  // BINBYTES8, BYTEARRAY8
      case '}': push(Value::dict()); break;
      case ']': push(Value::list()); break;
      case ')': push(Value::tuple()); break;
      case 0x8f: push(Value::list()); break;  // EMPTY_SET: sets load as lists
      case 'd': {
        const size_t m = take_mark();
        Value v = Value::dict();
        move_pairs(m, v.as_dict().items, "DICT");
        push(std::move(v));
        break;
      }
      case 'l': push(Value::list(pop_mark())); break;
      case 0x91: push(Value::list(pop_mark())); break;  // FROZENSET
      case 't': push(Value::tuple(pop_mark())); break;
      case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
        const size_t n = static_cast<size_t>(op_ - 0x84);
        if (stack_.size() < floor() + n) fail("stack underflow", "the pickle is corrupt");
        std::vector<Value> items(std::make_move_iterator(stack_.end() - static_cast<ptrdiff_t>(n)),
                                 std::make_move_iterator(stack_.end()));
        stack_.resize(stack_.size() - n);
        push(Value::tuple(std::move(items)));
        break;
      }
      case 'a': { Value v = pop(); list_at_top("APPEND").items.push_back(std::move(v)); break; }
      case 'e': case 0x90: {  // APPENDS, ADDITEMS (a set is a list here)
        const size_t m = take_mark();
        if (m <= floor()) fail("stack underflow", "the pickle is corrupt");
        Value& target = stack_[m - 1];
        if (!target.is(Value::Kind::list))
          fail(std::string(op_ == 'e' ? "APPENDS" : "ADDITEMS") + " to a " + target.type_name() + ", not a list",
               "the pickle is corrupt");
        move_items(m, target.as_list().items);
        break;
      }
      case 's': {
        Value v = pop();
        Value k = pop();
        dict_at_top("SETITEM").items.emplace_back(std::move(k), std::move(v));
        break;
      }
      case 'u': {
        const size_t m = take_mark();
        if (m <= floor()) fail("stack underflow", "the pickle is corrupt");
        Value& target = stack_[m - 1];
        if (!target.is(Value::Kind::dict))
          fail(std::string("SETITEMS to a ") + target.type_name() + ", not a dict", "the pickle is corrupt");
        move_pairs(m, target.as_dict().items, "SETITEMS");
        break;
      }
      case 'c': {
        std::string module = line();
        std::string name = line();
        push(Global{std::move(module), std::move(name)});
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Value name = pop(), module = pop();
        if (!name.is(Value::Kind::string) || !module.is(Value::Kind::string))
          fail("STACK_GLOBAL needs two strings", "the pickle is corrupt");
        push(Global{module.as_string(), name.as_string()});
        break;
      }
      case 'R': case 0x81: {  // REDUCE, NEWOBJ: callable(*args) for the globals we know
        Value args = pop(), callable = pop();
        push(reduce(callable, args));
        break;
      }
      case 'b': {  // BUILD: only a no-op state is accepted
        Value state = pop();
        const bool empty = state.is_none() || (state.is(Value::Kind::dict) && state.as_dict().items.empty());
        if (!empty) fail(std::string("setting the state of a ") + top().type_name() + " object (BUILD) is not supported",
                         "dumps hold plain dicts, lists, numbers, strings and tensors");
        break;
      }
      case 'Q': { Value pid = pop(); push(persistent_(pid)); break; }
      case 'P': push(persistent_(Value(line()))); break;
      case 'q': memo_put(le<uint8_t>()); break;
      case 'r': memo_put(le<uint32_t>()); break;
      case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
      case 'p': memo_put(std::strtoull(line().c_str(), nullptr, 10)); break;
      case 'h': memo_get(le<uint8_t>()); break;
      case 'j': memo_get(le<uint32_t>()); break;
      case 'g': memo_get(std::strtoull(line().c_str(), nullptr, 10)); break;
      default: {
        char buf[64];
        std::snprintf(buf, sizeof buf, "unknown or unsupported pickle opcode 0x%02x", op_);
        fail(buf, "the file is corrupt, or holds Python objects a dump should not");
      }
    }
  }
}

Value Reader::long_from_bytes(std::string_view b) {
  if (b.empty()) return int64_t{0};
  if (b.size() <= 8) {
    const bool negative = static_cast<unsigned char>(b.back()) & 0x80;
    uint64_t u = negative ? ~uint64_t{0} : 0;
    std::memcpy(&u, b.data(), b.size());  // little-endian host: low bytes first
    if (negative && b.size() < 8) u |= ~uint64_t{0} << (8 * b.size());
    return static_cast<int64_t>(u);
  }
  // Drop redundant sign bytes; what still needs more than 8 bytes stays big.
  std::string s(b);
  while (s.size() > 8) {
    const auto last = static_cast<unsigned char>(s.back());
    const auto prev = static_cast<unsigned char>(s[s.size() - 2]);
    if ((last == 0 && !(prev & 0x80)) || (last == 0xff && (prev & 0x80))) s.pop_back();
    else break;
  }
  if (s.size() <= 8) return long_from_bytes(s);
  return BigInt{std::move(s)};
}

Value Reader::long_from_text(std::string s) {
  if (!s.empty() && s.back() == 'L') s.pop_back();
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end) fail("'" + s + "' is not an integer", "the pickle is corrupt");
  if (errno == ERANGE) fail("the protocol 0 integer " + s + " does not fit in 64 bits", "save with protocol 2 or later");
  return int64_t{v};
}

}  // namespace

// ---- the globals torch files use -----------------------------------------------------

namespace {
bool is(const Global& g, std::string_view module, std::string_view name) {
  const bool builtins = module == "builtins";
  return g.name == name && (g.module == module || (builtins && g.module == "__builtin__"));
}
}  // namespace

Value Reader::reduce(const Value& callable, const Value& args) {
  if (!callable.is(Value::Kind::global))
    fail(std::string("calling a ") + callable.type_name() + " (REDUCE) is not supported", "the pickle is corrupt");
  if (!args.is(Value::Kind::tuple)) fail(std::string("REDUCE arguments are a ") + args.type_name() + ", not a tuple");
  const Global& g = callable.as_global();
  const auto& a = args.as_tuple().items;
  if (is(g, "collections", "OrderedDict")) {
    Value d = Value::dict();
    if (a.empty()) return d;
    if (a.size() == 1 && (a[0].is(Value::Kind::list) || a[0].is(Value::Kind::tuple))) {
      for (const auto& pair : a[0].items()) {
        if (!(pair.is(Value::Kind::tuple) || pair.is(Value::Kind::list)) || pair.items().size() != 2)
          fail("OrderedDict items must be (key, value) pairs");
        d.as_dict().items.emplace_back(pair.items()[0], pair.items()[1]);
      }
      return d;
    }
    fail("unsupported OrderedDict arguments");
  }
  if (is(g, "torch._utils", "_rebuild_tensor_v2")) return rebuild_tensor(a, false);
  if (is(g, "torch._utils", "_rebuild_tensor_v3")) return rebuild_tensor(a, true);
  if (is(g, "torch._utils", "_rebuild_parameter") || is(g, "torch._utils", "_rebuild_parameter_with_state")) {
    if (a.empty() || !a[0].is(Value::Kind::tensor)) fail("_rebuild_parameter without a tensor");
    return a[0];
  }
  if (is(g, "_codecs", "encode")) {
    if (a.size() != 2) fail("_codecs.encode needs (text, encoding)");
    return bytes_from_text(a[0], a[1]);
  }
  if (is(g, "builtins", "bytes") || is(g, "builtins", "bytearray")) {
    if (a.empty()) return Bytes{};
    if (a.size() == 1 && a[0].is(Value::Kind::bytes)) return a[0];
    if (a.size() == 1 && a[0].is(Value::Kind::list)) {
      std::string out;
      for (const auto& x : a[0].items()) {
        if (!x.is(Value::Kind::integer) || x.as_int() < 0 || x.as_int() > 255) fail("bytes() of a list that is not bytes");
        out += static_cast<char>(x.as_int());
      }
      return Bytes{std::move(out)};
    }
    if (a.size() == 2) return bytes_from_text(a[0], a[1]);
    fail("unsupported bytes() arguments");
  }
  if (is(g, "builtins", "set") || is(g, "builtins", "frozenset")) {
    if (a.empty()) return Value::list();
    if (a.size() == 1 && (a[0].is(Value::Kind::list) || a[0].is(Value::Kind::tuple))) return Value::list(a[0].items());
    fail("unsupported set() arguments");
  }
  fail("unsupported Python class or function " + g.module + "." + g.name,
       "dumps hold plain dicts, lists, numbers, strings and tensors; convert such objects before saving "
       "(slime's Sample.to_dict does)");
}

// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
// _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype[, metadata])
Value Reader::rebuild_tensor(const std::vector<Value>& a, bool v3) {
  const char* fn = v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2";
  if (a.size() < (v3 ? 7u : 4u)) fail(std::string(fn) + " with " + std::to_string(a.size()) + " arguments");
  if (!a[0].is(Value::Kind::tensor)) fail(std::string(fn) + ": argument 1 is a " + a[0].type_name() + ", not a storage");
  auto ints = [&](const Value& v, const char* what) {
    if (!(v.is(Value::Kind::tuple) || v.is(Value::Kind::list))) fail(std::string(fn) + ": " + what + " is not a tuple");
    std::vector<int64_t> out;
    for (const auto& x : v.items()) {
      if (!x.is(Value::Kind::integer)) fail(std::string(fn) + ": " + what + " holds a " + x.type_name());
      out.push_back(x.as_int());
    }
    return out;
  };
  const Tensor& storage = a[0].as_tensor();
  Tensor t;
  t.dtype = storage.dtype;
  t.storage = storage.storage;
  if (!a[1].is(Value::Kind::integer)) fail(std::string(fn) + ": the storage offset is not an int");
  t.storage_offset = a[1].as_int();
  t.shape = ints(a[2], "size");
  t.stride = ints(a[3], "stride");
  if (t.shape.size() != t.stride.size()) fail(std::string(fn) + ": size and stride differ in length");
  if (v3) {
    if (!a[6].is(Value::Kind::global) || a[6].as_global().module != "torch" ||
        !dtype_from_name(a[6].as_global().name, &t.dtype))
      fail(std::string(fn) + ": unsupported dtype " +
           (a[6].is(Value::Kind::global) ? a[6].as_global().module + "." + a[6].as_global().name : a[6].type_name()));
  }
  return t;  // bounds are checked once every storage is loaded (check_loaded)
}

Value Reader::bytes_from_text(const Value& text, const Value& encoding) {
  if (!text.is(Value::Kind::string) || !encoding.is(Value::Kind::string)) fail("bytes from something other than text");
  const std::string& enc = encoding.as_string();
  const std::string& s = text.as_string();
  if (enc == "utf-8" || enc == "utf8" || enc == "ascii") return Bytes{s};
  if (enc != "latin1" && enc != "latin-1" && enc != "iso-8859-1") fail("bytes in the text encoding '" + enc + "'");
  std::string out;  // UTF-8 text whose code points are all < 256, back to those bytes
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) out += static_cast<char>(c);
    else if ((c == 0xc2 || c == 0xc3) && i + 1 < s.size()) out += static_cast<char>(((c & 0x03) << 6) | (s[++i] & 0x3f));
    else fail("latin-1 bytes text holds a code point above 255");
  }
  return Bytes{std::move(out)};
}

// ---- the final check ------------------------------------------------------------------

namespace {

class Checker {
 public:
  Checker(const std::string& where, int max_depth) : where_(where), max_depth_(max_depth) {}

  void walk(const Value& v) {
    using K = Value::Kind;
    if (path_.size() > static_cast<size_t>(max_depth_))
      throw Error(where_ + ": nested deeper than " + std::to_string(max_depth_) + " levels at " + path());
    if (v.is(K::global))
      throw Error(where_ + ": unsupported Python object " + v.as_global().module + "." + v.as_global().name + " at " +
                      path(),
                  "dumps hold plain dicts, lists, numbers, strings and tensors");
    const void* id = v.identity();
    if (!id) return;
    // A container held by one Value is met once: only shared ones can close a cycle
    // or come again, so only they are remembered (most of a dump is unshared).
    const bool shared = v.use_count() > 1;
    if (shared) {
      auto [it, first] = state_.try_emplace(id, 1);
      if (!first) {
        if (it->second == 1) throw Error(where_ + ": the object graph has a cycle at " + path(), "dumps must be trees");
        return;  // shared and already checked
      }
    }
    if (v.is(K::tensor)) {
      v.as_tensor().check_bounds(where_ + " at " + path());
    } else if (v.is(K::dict)) {
      for (const auto& [k, x] : v.as_dict().items) {
        path_.push_back({&k, 0});
        walk(k);
        walk(x);
        path_.pop_back();
      }
    } else {
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        path_.push_back({nullptr, i});
        walk(items[i]);
        path_.pop_back();
      }
    }
    if (shared) state_.find(id)->second = 2;
  }

 private:
  // "$.samples[3].trace": dict keys as .key (or [repr] when not a string), list items as [i].
  std::string path() const {
    std::string p = "$";
    for (const auto& [key, index] : path_) {
      if (!key) p += "[" + std::to_string(index) + "]";
      else if (key->is(Value::Kind::string)) p += "." + key->as_string();
      else if (key->is(Value::Kind::integer)) p += "[" + std::to_string(key->as_int()) + "]";
      else p += std::string("[<") + key->type_name() + ">]";
    }
    return p;
  }

  const std::string& where_;
  int max_depth_;
  std::vector<std::pair<const Value*, size_t>> path_;
  std::unordered_map<const void*, int> state_;  // 1: being walked, 2: done
};

}  // namespace

void check_loaded(const Value& v, const std::string& where, int max_depth) { Checker(where, max_depth).walk(v); }

namespace {

size_t child_count(const Value& v) {
  if (v.is(Value::Kind::dict)) return 2 * v.as_dict().items.size();
  return v.items().size();
}

const Value& child(const Value& v, size_t i) {
  if (v.is(Value::Kind::dict)) {
    const auto& kv = v.as_dict().items[i / 2];
    return i % 2 ? kv.second : kv.first;
  }
  return v.items()[i];
}

bool is_container(const Value& v) { return v.identity() != nullptr && !v.is(Value::Kind::tensor); }

// Whether a container reachable from `roots` reaches itself (iterative: dumps may
// nest deeply). A cycle always passes through a container held twice, so only
// those are remembered.
bool has_cycle(const std::vector<const Value*>& roots) {
  std::unordered_map<const void*, int> state;  // shared containers: 1 on the path, 2 done
  struct Frame {
    const Value* v;
    size_t next;
    bool shared;
  };
  std::vector<Frame> path;
  auto enter = [&](const Value* v) {  // true: a cycle
    if (!is_container(*v)) return false;
    const bool shared = v->use_count() > 1;
    if (shared) {
      auto [it, first] = state.try_emplace(v->identity(), 1);
      if (!first) return it->second == 1;
    }
    path.push_back({v, 0, shared});
    return false;
  };
  for (const Value* root : roots) {
    if (enter(root)) return true;
    while (!path.empty()) {
      const size_t top = path.size() - 1;
      if (path[top].next < child_count(*path[top].v)) {
        const Value* c = &child(*path[top].v, path[top].next++);
        if (enter(c)) return true;
      } else {
        if (path[top].shared) state[path[top].v->identity()] = 2;
        path.pop_back();
      }
    }
  }
  return false;
}

// Empties every container reachable from `roots`, so that cycles among them
// cannot keep them alive (the whole graph is being thrown away).
void release_graph(const std::vector<const Value*>& roots) {
  std::unordered_set<const void*> seen;
  std::vector<Value> all, work;
  for (const Value* r : roots) work.push_back(*r);
  while (!work.empty()) {
    Value v = std::move(work.back());
    work.pop_back();
    if (!is_container(v) || !seen.insert(v.identity()).second) continue;
    for (size_t i = 0, n = child_count(v); i < n; ++i) work.push_back(child(v, i));
    all.push_back(std::move(v));
  }
  for (auto& v : all) {
    if (v.is(Value::Kind::dict)) v.as_dict().items.clear();
    else v.items().clear();
  }
}

}  // namespace

Value pickle_load(std::string_view data, size_t* pos, const PersistentLoader& persistent, const std::string& where) {
  Reader r(data, *pos, persistent, where);
  std::vector<const Value*> roots;
  Value v;
  try {
    v = r.run();
  } catch (...) {
    r.roots(roots);  // a corrupt pickle may have built cycles before it broke
    release_graph(roots);
    throw;
  }
  roots.push_back(&v);
  r.roots(roots);
  if (has_cycle(roots)) {
    release_graph(roots);
    throw Error(where + ": the object graph has a cycle (a container that holds itself)", "dumps must be trees");
  }
  *pos = r.pos();
  return v;
}

}  // namespace rl::pickle
