// Rows of a Parquet file as JSON-like values, read with Apache Arrow's Parquet library
// row group by row group, in batches of at most 4096 rows (only the selected top-level
// columns are decoded), so memory holds one batch's values, never the whole table.
//
//   data::ParquetRows r("train.parquet");          // throws data::ParquetError
//   r.select({"prompt", "label"});                 // missing / unusable column: ParquetError
//   std::vector<nlohmann::json> rows;
//   while (r.next(rows)) { ... }                   // a batch: {column: value} each
//
// Values: struct -> object; list -> array; map -> object (string keys) or an array of
// {key, value} objects; strings and binary -> string; integers, floats, decimals ->
// numbers; bool; null -> null; date32/date64/timestamp -> ISO 8601 text (UTC). Other
// types (unions, durations, intervals, extension types) are refused by select().
//
// Built only where Arrow is found (cmake/Arrow.cmake); nothing here includes Arrow.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace rl::data {

// A file that cannot be read, or a selection it cannot give. The message does not
// repeat the path (the caller names the file).
class ParquetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ParquetColumn {
  std::string name;
  std::string type;  // Arrow's spelling, e.g. "list<element: struct<role: string, content: string>>"
  std::string kind;  // "string", "binary", "number", "bool", "list", "object", "null" or "other"
};

class ParquetRows {
 public:
  explicit ParquetRows(const std::string& path);
  ~ParquetRows();
  ParquetRows(const ParquetRows&) = delete;
  ParquetRows& operator=(const ParquetRows&) = delete;

  const std::vector<ParquetColumn>& columns() const;  // the file's top-level columns
  int64_t num_rows() const;
  int num_row_groups() const;

  // Reads only these columns (all of them until called; none named: all again), from the
  // first row group. A name the file lacks, or a column holding a type listed above as
  // refused, is a ParquetError (and the selection stays as it was).
  void select(const std::vector<std::string>& names);
  // The next batch of rows, all from one row group (replacing `rows`); false when every
  // row group has been read. A damaged page is a ParquetError naming its row group.
  bool next(std::vector<nlohmann::json>& rows);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rl::data
