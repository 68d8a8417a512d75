#include "data/parquet_rows.hpp"

#include <arrow/api.h>
#include <arrow/io/file.h>
#include <arrow/util/decimal.h>
#include <arrow/util/float16.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>

#include <cstdio>
#include <ctime>
#include <optional>
#include <string_view>

namespace rl::data {
namespace {

using nlohmann::json;

// Arrow's and Thrift's messages on one line: "a\nb\n" -> "a; b".
std::string one_line(std::string_view m) {
  std::string out;
  for (char c : m) {
    if (c == '\n') {
      if (!out.empty() && out.back() != ' ') out += "; ";
    } else {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

void check(const arrow::Status& st, const char* what) {
  if (st.ok()) return;
  std::string msg = std::string(what) + ": " + one_line(st.message());
  if (st.detail()) msg += " (" + one_line(st.detail()->ToString()) + ")";  // e.g. the errno of a failed open
  throw ParquetError(msg);
}
template <class T>
T take(arrow::Result<T> r, const char* what) {
  check(r.status(), what);
  return std::move(r).ValueUnsafe();
}

bool is_string_key(arrow::Type::type id) {
  return id == arrow::Type::STRING || id == arrow::Type::LARGE_STRING || id == arrow::Type::STRING_VIEW;
}

// The first part of `type` that no JSON-like value stands for, or nothing.
std::optional<std::string> refused_part(const arrow::DataType& type) {
  using T = arrow::Type;
  switch (type.id()) {
    case T::NA: case T::BOOL: case T::INT8: case T::INT16: case T::INT32: case T::INT64:
    case T::UINT8: case T::UINT16: case T::UINT32: case T::UINT64:
    case T::HALF_FLOAT: case T::FLOAT: case T::DOUBLE:
    case T::STRING: case T::LARGE_STRING: case T::STRING_VIEW:
    case T::BINARY: case T::LARGE_BINARY: case T::BINARY_VIEW: case T::FIXED_SIZE_BINARY:
    case T::DECIMAL32: case T::DECIMAL64: case T::DECIMAL128: case T::DECIMAL256:
    case T::DATE32: case T::DATE64: case T::TIMESTAMP:
      return std::nullopt;
    case T::LIST: case T::LARGE_LIST: case T::FIXED_SIZE_LIST: case T::LIST_VIEW: case T::LARGE_LIST_VIEW:
    case T::STRUCT: case T::MAP:
      for (const auto& f : type.fields())
        if (auto bad = refused_part(*f->type())) return bad;
      return std::nullopt;
    case T::DICTIONARY:
      return refused_part(*static_cast<const arrow::DictionaryType&>(type).value_type());
    default:
      return type.ToString();
  }
}

std::string kind_of(const arrow::DataType& type) {
  using T = arrow::Type;
  switch (type.id()) {
    case T::NA: return "null";
    case T::BOOL: return "bool";
    case T::STRING: case T::LARGE_STRING: case T::STRING_VIEW:
    case T::DATE32: case T::DATE64: case T::TIMESTAMP:  // as ISO 8601 text
      return "string";
    case T::BINARY: case T::LARGE_BINARY: case T::BINARY_VIEW: case T::FIXED_SIZE_BINARY: return "binary";
    case T::LIST: case T::LARGE_LIST: case T::FIXED_SIZE_LIST: case T::LIST_VIEW: case T::LARGE_LIST_VIEW:
      return "list";
    case T::STRUCT: case T::MAP: return "object";
    case T::DICTIONARY: return kind_of(*static_cast<const arrow::DictionaryType&>(type).value_type());
    default:
      return arrow::is_integer(type.id()) || arrow::is_floating(type.id()) || arrow::is_decimal(type.id()) ? "number"
                                                                                                           : "other";
  }
}

// Seconds since the epoch (and the fraction's digits) as ISO 8601 UTC text.
std::string iso_time(int64_t secs, int64_t frac, int digits, bool date_only) {
  std::time_t t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, date_only ? "%Y-%m-%d" : "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = buf;
  if (!date_only && frac != 0) {
    std::snprintf(buf, sizeof buf, ".%0*lld", digits, static_cast<long long>(frac));
    out += buf;
  }
  if (!date_only) out += 'Z';
  return out;
}

// Splits a count of `per_sec` units into whole seconds and a non-negative remainder.
std::string iso_from_units(int64_t v, int64_t per_sec, int digits, bool date_only) {
  int64_t s = v / per_sec, r = v % per_sec;
  if (r < 0) { s -= 1; r += per_sec; }
  return iso_time(s, r, digits, date_only);
}

template <class ListArray>
json list_value(const ListArray& a, int64_t i);
json map_value(const arrow::MapArray& a, int64_t i);

json value_at(const arrow::Array& a, int64_t i) {
  using T = arrow::Type;
  if (a.IsNull(i)) return nullptr;
  switch (a.type_id()) {
    case T::NA: return nullptr;
    case T::BOOL: return static_cast<const arrow::BooleanArray&>(a).Value(i);
    case T::INT8: return static_cast<const arrow::Int8Array&>(a).Value(i);
    case T::INT16: return static_cast<const arrow::Int16Array&>(a).Value(i);
    case T::INT32: return static_cast<const arrow::Int32Array&>(a).Value(i);
    case T::INT64: return static_cast<const arrow::Int64Array&>(a).Value(i);
    case T::UINT8: return static_cast<const arrow::UInt8Array&>(a).Value(i);
    case T::UINT16: return static_cast<const arrow::UInt16Array&>(a).Value(i);
    case T::UINT32: return static_cast<const arrow::UInt32Array&>(a).Value(i);
    case T::UINT64: return static_cast<const arrow::UInt64Array&>(a).Value(i);
    case T::HALF_FLOAT:
      return arrow::util::Float16::FromBits(static_cast<const arrow::HalfFloatArray&>(a).Value(i)).ToDouble();
    case T::FLOAT: return static_cast<const arrow::FloatArray&>(a).Value(i);
    case T::DOUBLE: return static_cast<const arrow::DoubleArray&>(a).Value(i);
    case T::STRING: return std::string(static_cast<const arrow::StringArray&>(a).GetView(i));
    case T::LARGE_STRING: return std::string(static_cast<const arrow::LargeStringArray&>(a).GetView(i));
    case T::STRING_VIEW: return std::string(static_cast<const arrow::StringViewArray&>(a).GetView(i));
    case T::BINARY: return std::string(static_cast<const arrow::BinaryArray&>(a).GetView(i));
    case T::LARGE_BINARY: return std::string(static_cast<const arrow::LargeBinaryArray&>(a).GetView(i));
    case T::BINARY_VIEW: return std::string(static_cast<const arrow::BinaryViewArray&>(a).GetView(i));
    case T::FIXED_SIZE_BINARY: return std::string(static_cast<const arrow::FixedSizeBinaryArray&>(a).GetView(i));
    case T::DECIMAL32: {
      const auto& d = static_cast<const arrow::Decimal32Array&>(a);
      return arrow::Decimal32(d.GetValue(i)).ToDouble(static_cast<const arrow::Decimal32Type&>(*a.type()).scale());
    }
    case T::DECIMAL64: {
      const auto& d = static_cast<const arrow::Decimal64Array&>(a);
      return arrow::Decimal64(d.GetValue(i)).ToDouble(static_cast<const arrow::Decimal64Type&>(*a.type()).scale());
    }
    case T::DECIMAL128: {
      const auto& d = static_cast<const arrow::Decimal128Array&>(a);
      return arrow::Decimal128(d.GetValue(i)).ToDouble(static_cast<const arrow::Decimal128Type&>(*a.type()).scale());
    }
    case T::DECIMAL256: {
      const auto& d = static_cast<const arrow::Decimal256Array&>(a);
      return arrow::Decimal256(d.GetValue(i)).ToDouble(static_cast<const arrow::Decimal256Type&>(*a.type()).scale());
    }
    case T::DATE32:
      return iso_from_units(static_cast<const arrow::Date32Array&>(a).Value(i) * int64_t{86400}, 1, 0, true);
    case T::DATE64: return iso_from_units(static_cast<const arrow::Date64Array&>(a).Value(i), 1000, 3, true);
    case T::TIMESTAMP: {
      const auto v = static_cast<const arrow::TimestampArray&>(a).Value(i);
      switch (static_cast<const arrow::TimestampType&>(*a.type()).unit()) {
        case arrow::TimeUnit::SECOND: return iso_from_units(v, 1, 0, false);
        case arrow::TimeUnit::MILLI: return iso_from_units(v, 1000, 3, false);
        case arrow::TimeUnit::MICRO: return iso_from_units(v, 1000000, 6, false);
        case arrow::TimeUnit::NANO: return iso_from_units(v, 1000000000, 9, false);
      }
      return nullptr;
    }
    case T::LIST: return list_value(static_cast<const arrow::ListArray&>(a), i);
    case T::LARGE_LIST: return list_value(static_cast<const arrow::LargeListArray&>(a), i);
    case T::LIST_VIEW: return list_value(static_cast<const arrow::ListViewArray&>(a), i);
    case T::LARGE_LIST_VIEW: return list_value(static_cast<const arrow::LargeListViewArray&>(a), i);
    case T::FIXED_SIZE_LIST: return list_value(static_cast<const arrow::FixedSizeListArray&>(a), i);
    case T::MAP: return map_value(static_cast<const arrow::MapArray&>(a), i);
    case T::STRUCT: {
      const auto& s = static_cast<const arrow::StructArray&>(a);
      json obj = json::object();
      for (int f = 0; f < s.num_fields(); ++f) obj[s.type()->field(f)->name()] = value_at(*s.field(f), i);
      return obj;
    }
    case T::DICTIONARY: {
      const auto& d = static_cast<const arrow::DictionaryArray&>(a);
      return value_at(*d.dictionary(), d.GetValueIndex(i));
    }
    default:  // select() refuses these columns before any row is read
      throw ParquetError("unsupported type " + a.type()->ToString());
  }
}

template <class ListArray>
json list_value(const ListArray& a, int64_t i) {
  json arr = json::array();
  const auto& values = *a.values();
  const int64_t start = a.value_offset(i), n = a.value_length(i);
  for (int64_t k = 0; k < n; ++k) arr.push_back(value_at(values, start + k));
  return arr;
}

// String keys make an object (as JSON would hold it); other keys a list of {key, value}.
json map_value(const arrow::MapArray& a, int64_t i) {
  const int64_t start = a.value_offset(i), n = a.value_length(i);
  const auto& keys = *a.keys();
  const auto& items = *a.items();
  if (is_string_key(keys.type_id())) {
    json obj = json::object();
    for (int64_t k = 0; k < n; ++k) obj[value_at(keys, start + k).get<std::string>()] = value_at(items, start + k);
    return obj;
  }
  json arr = json::array();
  for (int64_t k = 0; k < n; ++k)
    arr.push_back(json{{"key", value_at(keys, start + k)}, {"value", value_at(items, start + k)}});
  return arr;
}

void leaves_of(const parquet::arrow::SchemaField& f, std::vector<int>& out) {
  if (f.is_leaf()) out.push_back(f.column_index);
  for (const auto& c : f.children) leaves_of(c, out);
}

}  // namespace

constexpr int64_t kBatchRows = 4096;  // rows turned into values at a time (fewer at a row group's end)

struct ParquetRows::Impl {
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::vector<ParquetColumn> columns;
  std::vector<int> leaves;  // selected leaf columns (empty: every column)
  int next_group = 0;       // the row group after the one being read
  int group = -1;           // the row group being read
  std::unique_ptr<arrow::RecordBatchReader> batches;  // its batches, while there are more
};

ParquetRows::ParquetRows(const std::string& path) : impl_(std::make_unique<Impl>()) {
  try {
    auto file = take(arrow::io::ReadableFile::Open(path), "cannot open");
    parquet::ArrowReaderProperties props(/*use_threads=*/false);
    props.set_pre_buffer(false);  // no background IO threads: one row group is read at a time
    props.set_batch_size(kBatchRows);
    parquet::arrow::FileReaderBuilder builder;
    parquet::ReaderProperties file_props = parquet::default_reader_properties();
    file_props.set_page_checksum_verification(true);  // where the writer stored page CRCs
    check(builder.Open(file, file_props), "not a readable Parquet file");
    builder.properties(props);
    impl_->reader = take(builder.Build(), "not a readable Parquet file");
    std::shared_ptr<arrow::Schema> schema;
    check(impl_->reader->GetSchema(&schema), "cannot read the Parquet schema");
    for (const auto& f : schema->fields()) impl_->columns.push_back({f->name(), f->type()->ToString(), kind_of(*f->type())});
  } catch (const ParquetError&) {
    throw;
  } catch (const std::exception& e) {  // parquet::ParquetException from the footer's decoding
    throw ParquetError("not a readable Parquet file: " + one_line(e.what()));
  }
}

ParquetRows::~ParquetRows() = default;

const std::vector<ParquetColumn>& ParquetRows::columns() const { return impl_->columns; }
int64_t ParquetRows::num_rows() const { return impl_->reader->parquet_reader()->metadata()->num_rows(); }
int ParquetRows::num_row_groups() const { return impl_->reader->num_row_groups(); }

void ParquetRows::select(const std::vector<std::string>& names) {
  std::shared_ptr<arrow::Schema> schema;
  check(impl_->reader->GetSchema(&schema), "cannot read the Parquet schema");
  const auto& fields = impl_->reader->manifest().schema_fields;
  std::vector<int> leaves;
  for (const auto& name : names) {
    const int idx = schema->GetFieldIndex(name);
    if (idx < 0 && !schema->GetAllFieldIndices(name).empty())
      throw ParquetError("column '" + name + "' appears more than once");
    if (idx < 0) {
      std::string have;
      for (const auto& c : impl_->columns) have += (have.empty() ? "" : ", ") + c.name;
      throw ParquetError("no column '" + name + "' (columns: " + have + ")");
    }
    if (auto bad = refused_part(*schema->field(idx)->type()))
      throw ParquetError("column '" + name + "' has type " + schema->field(idx)->type()->ToString() + ", and " +
                         *bad + " has no JSON-like value");
    leaves_of(fields.at(static_cast<size_t>(idx)), leaves);
  }
  impl_->leaves = std::move(leaves);
  impl_->batches.reset();  // reading starts again, from the first row group
  impl_->next_group = 0;
}

bool ParquetRows::next(std::vector<nlohmann::json>& rows) {
  rows.clear();
  Impl& m = *impl_;
  std::shared_ptr<arrow::RecordBatch> batch;
  while (!batch) {
    if (!m.batches) {  // the next row group, only the selected columns
      if (m.next_group >= num_row_groups()) return false;
      m.group = m.next_group++;
    }
    const std::string where = "row group " + std::to_string(m.group) + " of " + std::to_string(num_row_groups());
    try {
      if (!m.batches) {
        m.batches = m.leaves.empty() ? take(m.reader->GetRecordBatchReader({m.group}), where.c_str())
                                     : take(m.reader->GetRecordBatchReader({m.group}, m.leaves), where.c_str());
      }
      check(m.batches->ReadNext(&batch), where.c_str());
    } catch (const ParquetError&) {
      m.batches.reset();
      throw;
    } catch (const std::exception& e) {  // parquet::ParquetException from a damaged page
      m.batches.reset();
      throw ParquetError(where + ": " + one_line(e.what()));
    }
    if (!batch) m.batches.reset();  // this row group is done
  }
  for (const auto& f : batch->schema()->fields())  // every column, when none was selected
    if (refused_part(*f->type()))
      throw ParquetError("column '" + f->name() + "' has type " + f->type()->ToString() + ", which has no JSON-like value");
  rows.assign(static_cast<size_t>(batch->num_rows()), json::object());
  for (int c = 0; c < batch->num_columns(); ++c) {
    const std::string& name = batch->schema()->field(c)->name();
    const arrow::Array& col = *batch->column(c);
    for (int64_t i = 0; i < col.length(); ++i) rows[static_cast<size_t>(i)][name] = value_at(col, i);
  }
  return true;
}

}  // namespace rl::data
