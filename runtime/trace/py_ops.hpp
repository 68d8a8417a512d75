// Python's semantics on loaded pickle values, as slime's viewer applies them to a
// dump: truthiness, == and hash for dict keys (1 == 1.0 == True), < for sorting,
// str() / repr(), and the float() / int() conversions of timestamps and attempts.
// A nullptr Value stands for None (a missing key).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "pickle/py_value.hpp"

namespace rl::trace {

using pickle::Value;

bool py_truthy(const Value* v);
bool py_eq(const Value* a, const Value* b);
size_t py_hash(const Value* v);
// a < b for the kinds Python orders (str, numbers, lists); false where Python raises.
bool py_less(const Value* a, const Value* b);
// str(v) / repr(v) appended to `out` (floats as repr; bytes as b'...').
void py_str(const Value* v, std::string& out);
void py_repr(const Value* v, std::string& out);
// float(v): numbers, bools, numeric text ("1.5", " 2e3 ", "1_000"), one-element
// tensors. False where Python raises.
bool py_float(const Value* v, double* out);
// int(v): ints, bools, floats (truncated), integer text, one-element tensors.
bool py_int(const Value* v, int64_t* out);
// A number (int, float, bool) greater than zero.
bool py_positive_number(const Value* v);
// Code points in UTF-8 text (Python's len of the str).
size_t utf8_length(std::string_view s);
// The first `n` code points of UTF-8 text.
std::string_view utf8_prefix(std::string_view s, size_t n);

struct PyHash {
  size_t operator()(const Value* v) const { return py_hash(v); }
};
struct PyEq {
  bool operator()(const Value* a, const Value* b) const { return py_eq(a, b); }
};

}  // namespace rl::trace
