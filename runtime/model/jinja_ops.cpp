// Operators of the chat-template interpreter with Python's rules: int/float
// promotion (bool is an int), floor division and modulo signs, str and list
// concatenation/repetition, `in`, and TypeErrors where Python raises them.
// Integers are 64-bit: where Python would grow a big int this raises instead.
#include <cmath>

#include "model/jinja_ast.hpp"
#include "model/jinja_builtins.hpp"
#include "model/jinja_text.hpp"

namespace rl::model::jinja {
namespace {

const char* op_text(BinOp op) {
  switch (op) {
    case BinOp::Add:
      return "+";
    case BinOp::Sub:
      return "-";
    case BinOp::Mul:
      return "*";
    case BinOp::Div:
      return "/";
    case BinOp::FloorDiv:
      return "//";
    case BinOp::Mod:
      return "%";
    case BinOp::Pow:
      return "**";
    case BinOp::Concat:
      return "~";
  }
  return "?";
}

[[noreturn]] void unsupported_operands(BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::Add && (a.is_string() || a.is_list()) && !b.is_undefined())
    throw EvalError("TypeError: can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " +
                    type_name(a));
  throw EvalError(std::string("TypeError: unsupported operand type(s) for ") + op_text(op) + ": '" + type_name(a) +
                  "' and '" + type_name(b) + "'");
}

[[noreturn]] void overflow() {
  throw EvalError(
      "OverflowError: integer result does not fit in 64 bits (Python integers are unbounded; this "
      "interpreter's are not)");
}

template <class Op>
int64_t checked(Op op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op(x, y, &r)) overflow();
  return r;
}
bool add_overflow(int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); }
bool sub_overflow(int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); }
bool mul_overflow(int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); }

Value repeat(const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value(std::string()) : Value::list({}, seq.as_list().is_tuple);
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().items.size() * sizeof(Value);
  if (unit != 0 && static_cast<uint64_t>(n) > kMaxStringBytes / unit)
    throw EvalError("MemoryError: repetition result larger than 64 MiB");
  if (seq.is_string()) {
    std::string out;
    out.reserve(unit * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq.as_list().items.begin(), seq.as_list().items.end());
  return Value::list(std::move(items), seq.as_list().is_tuple);
}

// CPython's float floor division / modulo (Objects/floatobject.c: _float_div_mod).
std::pair<double, double> float_divmod(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

Value int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = checked(mul_overflow, result, base);
    exp >>= 1;
    if (exp) base = checked(mul_overflow, base, base);
  }
  return Value::integer(result);
}

Value arithmetic(BinOp op, const Value& a, const Value& b) {
  const bool floats = a.is_float() || b.is_float();
  if (!floats) {
    const int64_t x = a.as_int(), y = b.as_int();
    switch (op) {
      case BinOp::Add:
        return Value::integer(checked(add_overflow, x, y));
      case BinOp::Sub:
        return Value::integer(checked(sub_overflow, x, y));
      case BinOp::Mul:
        return Value::integer(checked(mul_overflow, x, y));
      case BinOp::Div:
        if (y == 0) throw EvalError("ZeroDivisionError: division by zero");
        return Value::floating(static_cast<double>(x) / static_cast<double>(y));
      case BinOp::FloorDiv:
      case BinOp::Mod: {
        if (y == 0) throw EvalError("ZeroDivisionError: integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
          if (op == BinOp::Mod) return Value::integer(0);
          overflow();
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          m += y;
          --q;
        }
        return Value::integer(op == BinOp::FloorDiv ? q : m);
      }
      case BinOp::Pow:
        if (y >= 0) return int_pow(x, y);
        if (x == 0) throw EvalError("ZeroDivisionError: 0.0 cannot be raised to a negative power");
        return Value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
      default:
        break;
    }
  }
  const double x = a.as_float(), y = b.as_float();
  switch (op) {
    case BinOp::Add:
      return Value::floating(x + y);
    case BinOp::Sub:
      return Value::floating(x - y);
    case BinOp::Mul:
      return Value::floating(x * y);
    case BinOp::Div:
      if (y == 0) throw EvalError("ZeroDivisionError: float division by zero");
      return Value::floating(x / y);
    case BinOp::FloorDiv:
      if (y == 0) throw EvalError("ZeroDivisionError: float floor division by zero");
      return Value::floating(float_divmod(x, y).first);
    case BinOp::Mod:
      if (y == 0) throw EvalError("ZeroDivisionError: float modulo");
      return Value::floating(float_divmod(x, y).second);
    case BinOp::Pow: {
      if (x == 0 && y < 0) throw EvalError("ZeroDivisionError: 0.0 cannot be raised to a negative power");
      if (x < 0 && std::floor(y) != y)
        throw EvalError("unsupported: a negative number to a fractional power (complex result)");
      const double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
        throw EvalError("OverflowError: numerical result out of range");
      return Value::floating(r);
    }
    default:
      break;
  }
  unsupported_operands(op, a, b);
}

}  // namespace

Value binary_op(BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::Concat) {
    std::string out = to_str(a);
    append_str(out, b);
    return Value(std::move(out));
  }
  if (op == BinOp::Mod && a.is_string()) return Value(percent_format(a.as_string(), b));  // str % Undefined works too
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  switch (op) {
    case BinOp::Add:
      if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
        std::vector<Value> items = a.as_list().items;
        items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
        return Value::list(std::move(items), a.as_list().is_tuple);
      }
      break;
    case BinOp::Mul:
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
      if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
      break;
    default:
      break;
  }
  unsupported_operands(op, a, b);
}

Value negate(const Value& v) {
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_float()) return Value::floating(-v.as_float());
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) overflow();
    return Value::integer(-v.as_int());
  }
  throw EvalError("TypeError: bad operand type for unary -: '" + type_name(v) + "'");
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) throw_undefined(v);
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  throw EvalError("TypeError: bad operand type for unary +: '" + type_name(v) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined:
      return false;  // Jinja's Undefined iterates as empty
    case Value::Kind::String:
      if (!item.is_string())
        throw EvalError("TypeError: 'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const auto& x : container.as_list().items)
        if (equals(x, item)) return true;
      return false;
    case Value::Kind::Dict:
      if (item.is_list() || item.is_dict()) throw EvalError("TypeError: unhashable type: '" + type_name(item) + "'");
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    case Value::Kind::Iterator: {
      auto& it = container.as_iterator();
      while (it.pos < it.items->items.size())
        if (equals(it.items->items[it.pos++], item)) return true;
      return false;
    }
    default:
      throw EvalError("TypeError: argument of type '" + type_name(container) + "' is not iterable");
  }
}

}  // namespace rl::model::jinja
