// Python str behaviour over UTF-8 (private to runtime/model): code-point
// indexing, str.isspace(), case mapping, strip/split/replace/title.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rl::model::jinja {

// UTF-8 is decoded leniently: an invalid byte stands for itself (U+FFFD is
// never produced), so every byte string round-trips.
std::u32string utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(std::u32string_view s);
bool is_ascii(std::string_view s);
size_t code_point_count(std::string_view s);  // len(s)

bool is_py_space(char32_t cp);      // str.isspace() / re's \s for str patterns
bool is_py_printable(char32_t cp);  // approximation of str.isprintable(), for repr()
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);

std::string str_upper(std::string_view s);
std::string str_lower(std::string_view s);
std::string str_capitalize(std::string_view s);  // str.capitalize()
std::string str_title(std::string_view s);       // Jinja's |title (words split at -, space, brackets)

// strip/lstrip/rstrip: chars = nullopt strips Python whitespace.
std::string str_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1) and str.rsplit.
std::vector<std::string> str_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                   bool from_right);
std::vector<std::string> str_splitlines(std::string_view s, bool keepends);
std::string str_replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count);
int64_t str_count(std::string_view s, std::string_view sub);
// Byte offset of `sub` -> code-point index (str.find); -1 when absent.
int64_t str_find(std::string_view s, std::string_view sub, bool from_right);

// s[start:stop:step] / s[i] with Python index semantics over code points.
std::string str_slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);
std::optional<std::string> str_index(std::string_view s, int64_t i);

// Python slice bounds (PySlice_AdjustIndices): the indices that s[start:stop:step] visits.
std::vector<size_t> slice_indices(size_t len, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step);

}  // namespace rl::model::jinja
