// A JSON value plus where it is (file and path), so that every loader error reads
//   "tokenizer.json: model.merges[12] is not a pair (hint: expected 'a b' or ["a","b"])".
// Private to the tokenizer loader; cheap to copy (a pointer and a path string).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/errors.hpp"

namespace rl::model {

class JsonNode {
 public:
  JsonNode(const nlohmann::json& value, std::string path, const std::string& source)
      : value_(&value), path_(std::move(path)), source_(&source) {}

  const nlohmann::json& raw() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& source() const { return *source_; }
  bool is_null() const { return value_->is_null(); }  // also true for an absent member
  bool is_string() const { return value_->is_string(); }
  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  size_t size() const { return value_->is_array() || value_->is_object() ? value_->size() : 0; }

  // "<source>: <path> <what>" (+ hint) as rl::Error.
  [[noreturn]] void fail(const std::string& what, const std::string& hint = {}) const {
    throw Error(*source_ + ": " + (path_.empty() ? std::string("(top level)") : path_) + " " + what, hint);
  }

  // Member `key` (null when absent); the value must be an object (or null: every member absent).
  JsonNode operator[](const char* key) const {
    if (value_->is_null()) return {null_value(), join(key), *source_};
    expect_object();
    auto it = value_->find(key);
    return {it == value_->end() ? null_value() : *it, join(key), *source_};
  }
  JsonNode at(size_t i) const {
    return {(*value_)[i], path_ + "[" + std::to_string(i) + "]", *source_};
  }
  bool has(const char* key) const { return value_->is_object() && value_->contains(key); }

  void expect_object() const {
    if (!value_->is_object()) fail("must be an object, got " + type_name());
  }
  void expect_array() const {
    if (!value_->is_array()) fail("must be an array, got " + type_name());
  }
  std::string string() const {
    if (!value_->is_string()) fail("must be a string, got " + type_name());
    return value_->get<std::string>();
  }
  std::string string_or(std::string fallback) const { return is_null() ? fallback : string(); }
  bool boolean_or(bool fallback) const {
    if (is_null()) return fallback;
    if (!value_->is_boolean()) fail("must be true or false, got " + type_name());
    return value_->get<bool>();
  }
  int64_t integer(int64_t lo, int64_t hi) const {
    if (!value_->is_number_integer()) fail("must be an integer, got " + type_name());
    const int64_t v = value_->is_number_unsigned() && value_->get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : value_->get<int64_t>();
    if (v < lo || v > hi) fail("is out of range (" + std::to_string(v) + "; expected " + std::to_string(lo) + ".." +
                               std::to_string(hi) + ")");
    return v;
  }
  int64_t integer_or(int64_t fallback, int64_t lo, int64_t hi) const { return is_null() ? fallback : integer(lo, hi); }
  std::string type_name() const {
    if (value_->is_number_integer()) return "an integer";
    if (value_->is_number()) return "a number";
    if (value_->is_string()) return "a string";
    if (value_->is_boolean()) return "a boolean";
    if (value_->is_array()) return "an array";
    if (value_->is_object()) return "an object";
    return "null";
  }
  // The component's "type" field, required.
  std::string component_type() const {
    expect_object();
    JsonNode t = (*this)["type"];
    if (t.is_null()) fail("has no \"type\"");
    return t.string();
  }

 private:
  static const nlohmann::json& null_value() {
    static const nlohmann::json kNull;
    return kNull;
  }
  std::string join(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  const nlohmann::json* value_;
  std::string path_;
  const std::string* source_;
};

}  // namespace rl::model
