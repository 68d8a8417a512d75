// Built-ins of the chat-template interpreter (private to runtime/model):
// filters (jinja_filters.cpp), tests, globals and the attribute/item/method
// access of Jinja's sandboxed environment (jinja_methods.cpp).
#pragma once
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "model/jinja_value.hpp"

namespace rl::model::jinja {

using FilterFn = Value (*)(Evaluator& ev, const Value& operand, CallArgs& args);
using TestFn = bool (*)(Evaluator& ev, const Value& operand, CallArgs& args);

// nullptr when this interpreter has no such filter / test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// Whether Jinja2 itself has it (then a missing one is "unsupported", not "unknown").
bool is_jinja_filter(std::string_view name);
bool is_jinja_test(std::string_view name);

// Template globals: range, namespace, dict, raise_exception, strftime_now.
// Undefined (with a hint for Jinja globals not provided here) for other names.
Value global(std::string_view name);

// Jinja's sandboxed getattr (`x.name`) and getitem (`x[key]`): dict keys,
// str/dict/list methods, namespace and loop attributes; Undefined when absent.
Value get_attr(const Value& obj, std::string_view name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python-style argument binding: positional then keyword arguments onto
// `params`; throws TypeError-like EvalErrors naming `fn` for surplus, duplicate
// or missing (the first `required`) arguments.
std::vector<std::optional<Value>> bind_args(std::string_view fn, CallArgs& args,
                                            std::initializer_list<std::string_view> params, size_t required = 0);
// Argument helpers for built-ins: typed access with messages naming the function.
int64_t int_arg(std::string_view fn, std::string_view param, const Value& v);
const std::string& str_arg(std::string_view fn, std::string_view param, const Value& v);

// Python's str % args for the subset %s %r %d %i %f %% (other conversions raise).
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace rl::model::jinja
