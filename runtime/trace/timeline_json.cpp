// The timeline's two file forms: the viewer cache (slime's schema, version 1)
// and a Chrome trace (Perfetto / chrome://tracing). Hand-written JSON: the cache
// of a 10,000-sample dump is tens of MB, so it is appended to one string.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "trace/timeline.hpp"

namespace rl::trace {
namespace {

using pickle::Value;
using Kind = Value::Kind;

class Json {
 public:
  std::string out;

  void raw(std::string_view s) { out.append(s); }
  void null() { out.append("null"); }
  void boolean(bool b) { out.append(b ? "true" : "false"); }
  void integer(int64_t v) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
  }
  // Shortest round-trip text (Python's repr); NaN / infinities are not JSON: null.
  void number(double v) {
    if (!std::isfinite(v)) return null();
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
  }
  // Times rounded to 6 decimals (microseconds), as the cache writes them.
  void time(double v) { number(std::isfinite(v) ? std::round(v * 1e6) / 1e6 : v); }

  // ASCII-only JSON string: non-ASCII as \uXXXX (surrogate pairs), '<' as \u003c so
  // the text can be inlined in an HTML <script>; invalid UTF-8 bytes become U+FFFD.
  void string(std::string_view s) {
    out.push_back('"');
    for (size_t i = 0; i < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\' && c != '<') {
        size_t j = i + 1;
        while (j < s.size()) {
          unsigned char d = static_cast<unsigned char>(s[j]);
          if (d < 0x20 || d >= 0x80 || d == '"' || d == '\\' || d == '<') break;
          ++j;
        }
        out.append(s.data() + i, j - i);
        i = j;
        continue;
      }
      if (c < 0x80) {
        switch (c) {
          case '"': out.append("\\\""); break;
          case '\\': out.append("\\\\"); break;
          case '\n': out.append("\\n"); break;
          case '\r': out.append("\\r"); break;
          case '\t': out.append("\\t"); break;
          default: escape(c);
        }
        ++i;
        continue;
      }
      uint32_t cp = 0xFFFD;
      size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
      if (n && i + n <= s.size()) {
        uint32_t v = c & (0xFF >> (n + 1));
        bool ok = true;
        for (size_t k = 1; k < n; ++k) {
          unsigned char d = static_cast<unsigned char>(s[i + k]);
          if ((d & 0xC0) != 0x80) { ok = false; break; }
          v = (v << 6) | (d & 0x3F);
        }
        if (ok && v <= 0x10FFFF) { cp = v; i += n; } else { ++i; }
      } else {
        ++i;
      }
      if (cp >= 0x10000) {
        cp -= 0x10000;
        escape(0xD800 + (cp >> 10));
        escape(0xDC00 + (cp & 0x3FF));
      } else {
        escape(cp);
      }
    }
    out.push_back('"');
  }
  void key(std::string_view k) { string(k); out.push_back(':'); }
  void opt_string(bool has, std::string_view s) { has ? string(s) : null(); }

  // Any loaded Python value: the JSON types as such, others as their text.
  void value(const Value& v, int depth = 0) {
    if (depth > 64) return string("<too deep>");
    switch (v.kind()) {
      case Kind::none: return null();
      case Kind::boolean: return boolean(v.as_bool());
      case Kind::integer: return integer(v.as_int());
      case Kind::big_integer: return number(v.to_number());
      case Kind::real: return number(v.as_float());
      case Kind::string: return string(v.as_string());
      case Kind::bytes: return string(v.as_bytes().data);
      case Kind::global: return string(v.as_global().module + "." + v.as_global().name);
      case Kind::tensor: {
        const auto& t = v.as_tensor();
        std::string s = std::string("tensor(dtype=") + pickle::dtype_name(t.dtype) + ", shape=[";
        for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
        return string(s + "])");
      }
      case Kind::list:
      case Kind::tuple: {
        out.push_back('[');
        bool first = true;
        for (const Value& x : v.items()) {
          if (!first) out.push_back(',');
          first = false;
          value(x, depth + 1);
        }
        out.push_back(']');
        return;
      }
      case Kind::dict: {
        out.push_back('{');
        bool first = true;
        for (const auto& [k, x] : v.as_dict().items) {
          if (!first) out.push_back(',');
          first = false;
          if (k.is(Kind::string)) string(k.as_string());
          else if (k.is(Kind::integer)) string(std::to_string(k.as_int()));
          else string(k.type_name());
          out.push_back(':');
          value(x, depth + 1);
        }
        out.push_back('}');
        return;
      }
    }
  }
  void attrs(const Value* d) { d ? value(*d) : raw("{}"); }

 private:
  void escape(uint32_t u) {
    char buf[8];
    snprintf(buf, sizeof buf, "\\u%04x", u);
    out.append(buf, 6);
  }
};

const char* state_name(ItemKind k) {
  switch (k) {
    case ItemKind::closed_span: return "closed_span";
    case ItemKind::open_span: return "open_span";
    case ItemKind::point_event: return "point_event";
    case ItemKind::orphan_end: return "orphan_end";
  }
  return "point_event";
}

void opt_id(Json& j, const std::string& s) { s.empty() ? j.null() : j.string(s); }

// Span end attrs: the recorded ones, plus clipped_by for open spans, or the
// synthetic PD lane's pd_* values and timeline_pd_* fields.
void end_attrs(Json& j, const TimelineItem& it) {
  if (!it.pd_role.empty()) {
    j.raw("{");
    for (const auto& [k, v] : it.pd_values) { j.key(k); j.number(v); j.raw(","); }
    j.key("timeline_pd_virtual_role"); j.string(it.pd_role);
    j.raw(","); j.key("timeline_pd_parent_name"); j.string(it.parent_span_name);
    j.raw(","); j.key("timeline_pd_parent_duration"); j.time(it.pd_parent_duration);
    j.raw("}");
    return;
  }
  if (it.kind == ItemKind::open_span) {
    j.raw("{"); j.key("clipped_by"); j.string(it.clipped_by); j.raw("}");
    return;
  }
  j.attrs(it.end_attrs);
}

void item_json(Json& j, const TimelineItem& it) {
  const bool span = it.is_span();
  j.raw(span ? "{\"type\":\"span\"" : it.kind == ItemKind::orphan_end ? "{\"type\":\"orphan_end\"" : "{\"type\":\"event\"");
  j.raw(",\"state\":\""); j.raw(state_name(it.kind)); j.raw("\",\"name\":"); j.string(it.name);
  if (span) {
    j.raw(",\"start_ts\":"); j.time(it.start);
    j.raw(",\"end_ts\":"); it.kind == ItemKind::closed_span ? j.time(it.end) : j.null();
    j.raw(",\"display_end_ts\":"); j.time(it.display_end);
  } else {
    j.raw(",\"ts\":"); j.time(it.start);
  }
  j.raw(",\"attempt\":"); j.integer(it.attempt);
  j.raw(",\"span_id\":"); it.kind == ItemKind::point_event ? j.null() : opt_id(j, it.span_id);
  j.raw(",\"parent_span_id\":"); opt_id(j, it.parent_span_id);
  j.raw(",\"parent_span_name\":"); opt_id(j, it.parent_span_name);
  j.raw(",\"lane\":"); j.integer(it.lane);
  j.raw(",\"depth\":"); j.integer(it.depth);
  j.raw(",\"attrs\":");
  if (span) {
    j.raw("{\"start_attrs\":"); j.attrs(it.start_attrs);
    j.raw(",\"end_attrs\":"); end_attrs(j, it);
    j.raw("}");
  } else {
    j.attrs(it.start_attrs);
  }
  j.raw("}");
}

void row_json(Json& j, const TimelineRow& r) {
  j.raw("{\"row_id\":"); j.integer(r.row_id);
  j.raw(",\"sample_index\":"); j.integer(r.sample_index);
  j.raw(",\"group_index\":"); r.group_index ? j.value(*r.group_index) : j.null();
  j.raw(",\"source\":"); j.opt_string(r.has_source, r.source);
  j.raw(",\"status\":"); j.opt_string(r.has_status, r.status);
  j.raw(",\"label\":"); j.opt_string(r.has_label, r.label);
  j.raw(",\"reward\":"); r.reward ? j.value(*r.reward) : j.null();
  j.raw(",\"trace_id\":"); j.string(r.trace_id);
  j.raw(",\"attempt\":"); j.integer(r.attempt);
  j.raw(",\"start\":"); j.time(r.start);
  j.raw(",\"end\":"); j.time(r.end);
  j.raw(",\"duration\":"); j.time(r.end - r.start);
  j.raw(",\"lane_count\":"); j.integer(r.lane_count);
  j.raw(",\"item_count\":"); j.integer(static_cast<int64_t>(r.items.size()));
  j.raw(",\"closed_span_count\":"); j.integer(r.closed);
  j.raw(",\"open_span_count\":"); j.integer(r.open);
  j.raw(",\"point_event_count\":"); j.integer(r.points);
  j.raw(",\"orphan_count\":"); j.integer(r.orphans);
  j.raw(",\"total_response_length\":"); j.integer(r.total_response_length);
  j.raw(",\"max_response_length\":"); j.integer(r.max_response_length);
  j.raw(",\"items\":[");
  for (size_t i = 0; i < r.items.size(); ++i) {
    if (i) j.raw(",");
    item_json(j, r.items[i]);
  }
  j.raw("]}");
}

}  // namespace

std::string timeline_cache_json(const Timeline& t, const std::string& pt_path, double generated_at) {
  Json j;
  size_t items = 0;
  for (const auto& r : t.rows) items += r.items.size();
  j.out.reserve(4096 + t.rows.size() * 1024 + items * 640);  // typical sizes: one allocation, no regrowth
  // Header fields first: a reader can take cache_version / sample_count from the first bytes.
  j.raw("{\"cache_version\":1,\"sample_count\":"); j.integer(t.sample_count);
  j.raw(",\"row_count\":"); j.integer(static_cast<int64_t>(t.rows.size()));
  j.raw(",\"pd_row_count\":"); j.integer(t.pd_rows);
  j.raw(",\"pt_path\":"); j.string(pt_path);
  j.raw(",\"generated_at\":"); j.time(generated_at);
  j.raw(",\"global_start\":"); j.time(t.global_start);
  j.raw(",\"global_end\":"); j.time(t.global_end);
  j.raw(",\"rows\":[");
  for (size_t i = 0; i < t.rows.size(); ++i) {
    if (i) j.raw(",\n");
    row_json(j, t.rows[i]);
  }
  j.raw("]}\n");
  return std::move(j.out);
}

std::string timeline_perfetto_json(const Timeline& t, const std::string& pt_path) {
  Json j;
  j.out.reserve(4096 + t.rows.size() * 2048);
  auto us = [&](double ts) { j.number(std::round((ts - t.global_start) * 1e9) / 1e3); };
  j.raw("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":"); j.string(pt_path);
  j.raw(",\"global_start\":"); j.time(t.global_start);
  j.raw("},\"traceEvents\":[\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"rollout samples\"}}");
  std::vector<const TimelineItem*> order;
  for (const auto& r : t.rows) {
    const int64_t tid = r.row_id + 1;
    std::string label = "#" + std::to_string(r.sample_index) + (r.has_source ? " " + r.source : "");
    j.raw(",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":"); j.integer(tid);
    j.raw(",\"args\":{\"name\":"); j.string(label); j.raw("}}");
    j.raw(",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":"); j.integer(tid);
    j.raw(",\"args\":{\"sort_index\":"); j.integer(r.row_id); j.raw("}}");
    // Parents before children: by start, then longest first (the nesting Perfetto expects).
    order.clear();
    for (const auto& it : r.items) if (it.pd_role.empty()) order.push_back(&it);
    std::stable_sort(order.begin(), order.end(), [](const TimelineItem* a, const TimelineItem* b) {
      if (a->start != b->start) return a->start < b->start;
      return a->display_end - a->start > b->display_end - b->start;
    });
    for (const TimelineItem* it : order) {
      const bool span = it->is_span();
      j.raw(",\n{\"ph\":"); j.raw(span ? "\"X\"" : "\"i\",\"s\":\"t\"");
      j.raw(",\"name\":"); j.string(it->kind == ItemKind::orphan_end ? it->name + " (unmatched end)" : it->name);
      j.raw(",\"cat\":\""); j.raw(state_name(it->kind)); j.raw("\",\"pid\":1,\"tid\":"); j.integer(tid);
      j.raw(",\"ts\":"); us(it->start);
      if (span) { j.raw(",\"dur\":"); j.number(std::round((it->display_end - it->start) * 1e9) / 1e3); }
      j.raw(",\"args\":{\"attempt\":"); j.integer(it->attempt);
      if (!it->span_id.empty()) { j.raw(",\"span_id\":"); j.string(it->span_id); }
      if (span) {
        j.raw(",\"start_attrs\":"); j.attrs(it->start_attrs);
        j.raw(",\"end_attrs\":"); end_attrs(j, *it);
      } else {
        j.raw(",\"attrs\":"); j.attrs(it->start_attrs);
      }
      j.raw("}}");
    }
  }
  j.raw("\n]}\n");
  return std::move(j.out);
}

}  // namespace rl::trace
