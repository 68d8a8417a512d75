// The timeline's two file forms: the viewer cache (slime's schema, version 1, with
// the values json.dump writes for slime's cache) and a Chrome trace (Perfetto /
// chrome://tracing). Hand-written JSON: the cache of a 10,000-sample dump is tens of
// MB, so it is appended to one string.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "trace/py_float.hpp"
#include "trace/py_ops.hpp"
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
  // A float as json.dump writes it (Python's repr: 0.0, 1e-07, 1e+16). NaN and the
  // infinities are not JSON (json.dump would write NaN / Infinity): null.
  void number(double v) {
    if (!std::isfinite(v)) return null();
    py_float_repr(v, out);
  }

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

  // A loaded Python value as slime writes it. safe: after its _json_safe (dict keys
  // as str(k), values other than JSON types as str(v)); raw: json.dump of the value
  // itself (keys as json.dump converts them: true / null / 1.5). nullptr: None.
  void value(const Value* v, bool safe = true, int depth = 0) {
    if (!v) return null();
    if (depth > 64) return string("<too deep>");
    switch (v->kind()) {
      case Kind::none: return null();
      case Kind::boolean: return boolean(v->as_bool());
      case Kind::integer: return integer(v->as_int());
      case Kind::big_integer: py_repr(v, out); return;
      case Kind::real: return number(v->as_float());
      case Kind::string: return string(v->as_string());
      case Kind::list:
      case Kind::tuple: {
        out.push_back('[');
        bool first = true;
        for (const Value& x : v->items()) {
          if (!first) out.push_back(',');
          first = false;
          value(&x, safe, depth + 1);
        }
        out.push_back(']');
        return;
      }
      case Kind::dict: {
        out.push_back('{');
        bool first = true;
        for (const auto& [k, x] : v->as_dict().items) {
          if (!first) out.push_back(',');
          first = false;
          if (k.is(Kind::string)) {
            string(k.as_string());
          } else if (!safe && (k.is_none() || k.is(Kind::boolean))) {
            string(k.is_none() ? "null" : k.as_bool() ? "true" : "false");
          } else {
            scratch_.clear();
            py_str(&k, scratch_);
            string(scratch_);
          }
          out.push_back(':');
          value(&x, safe, depth + 1);
        }
        out.push_back('}');
        return;
      }
      default: {  // bytes, tensors, classes: str(v)
        std::string text;
        py_str(v, text);
        return string(text);
      }
    }
  }
  // slime's _compact_text: the safe value; text longer than `max` code points is cut
  // to `max` and marked "...<truncated:N>".
  void compact_text(const Value* v, size_t max) {
    if (v && !v->is(Kind::string) && !v->is(Kind::bytes) && !v->is(Kind::tensor) && !v->is(Kind::global))
      return value(v);
    if (!v) return null();
    std::string text;
    py_str(v, text);
    const size_t n = utf8_length(text);
    if (n <= max) return string(text);
    std::string cut(utf8_prefix(text, max));
    cut += "...<truncated:" + std::to_string(n) + ">";
    string(cut);
  }
  void attrs(const Value* d) { d ? value(d) : raw("{}"); }

 private:
  std::string scratch_;
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

// Span end attrs: the recorded ones, {"clipped_by": ...} for open spans, or the
// synthetic PD lane's pd_* values and timeline_pd_* fields.
void end_attrs(Json& j, const TimelineItem& it) {
  if (it.is_pd()) {
    j.raw("{");
    for (const auto& [k, v] : it.pd_values) { j.key(k); j.value(v); j.raw(","); }
    j.key("timeline_pd_virtual_role"); j.string(it.pd_role);
    j.raw(","); j.key("timeline_pd_parent_name"); j.value(it.parent_span_name);
    j.raw(","); j.key("timeline_pd_parent_duration"); j.number(it.pd_parent_duration);
    j.raw("}");
    return;
  }
  if (it.kind == ItemKind::open_span) {
    j.raw("{"); j.key("clipped_by"); j.string(it.clipped_by ? it.clipped_by : "row_end"); j.raw("}");
    return;
  }
  j.attrs(it.end_attrs);
}

void item_json(Json& j, const TimelineItem& it) {
  const bool span = it.is_span();
  j.raw(span ? "{\"type\":\"span\"" : it.kind == ItemKind::orphan_end ? "{\"type\":\"orphan_end\"" : "{\"type\":\"event\"");
  j.raw(",\"state\":\""); j.raw(state_name(it.kind)); j.raw("\",\"name\":");
  it.is_pd() ? j.string(it.pd_name) : j.value(it.name);
  if (span) {
    j.raw(",\"start_ts\":"); j.number(it.start);
    j.raw(",\"end_ts\":"); it.kind == ItemKind::closed_span ? j.number(it.end) : j.null();
    j.raw(",\"display_end_ts\":"); j.number(it.display_end);
  } else {
    j.raw(",\"ts\":"); j.number(it.start);
  }
  j.raw(",\"attempt\":"); j.integer(it.attempt);
  j.raw(",\"span_id\":");
  if (it.is_pd()) j.string(it.pd_span_id);
  else it.kind == ItemKind::point_event ? j.null() : j.value(it.span_id);
  j.raw(",\"parent_span_id\":"); j.value(it.parent_span_id);
  j.raw(",\"parent_span_name\":"); it.has_parent_name ? j.value(it.parent_span_name) : j.null();
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
  j.raw(",\"sample_index\":"); r.has_index ? j.value(r.index, false) : j.integer(r.row_id);
  j.raw(",\"group_index\":"); j.value(r.group_index, false);
  j.raw(",\"source\":"); j.compact_text(r.source, 64);
  j.raw(",\"status\":"); j.compact_text(r.status, 64);
  j.raw(",\"label\":"); j.compact_text(r.label, 256);
  j.raw(",\"reward\":"); j.value(r.reward, r.reward && r.reward->is(pickle::Value::Kind::dict));
  j.raw(",\"trace_id\":"); j.value(r.trace_id);
  j.raw(",\"attempt\":"); j.integer(r.attempt);
  j.raw(",\"start\":"); j.number(r.start);
  j.raw(",\"end\":"); j.number(r.end);
  j.raw(",\"duration\":"); j.number(r.duration);
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

// Text for a label in the Chrome trace (str of the value; "" for None).
std::string display(const Value* v) {
  std::string s;
  if (v && !v->is_none()) py_str(v, s);
  return s;
}

}  // namespace

std::string timeline_cache_json(const Timeline& t, const std::string& pt_path, double generated_at) {
  Json j;
  size_t items = 0;
  for (const auto& r : t.rows) items += r.items.size();
  j.out.reserve(4096 + t.rows.size() * 1024 + items * 640);  // typical sizes: one allocation, no regrowth
  // slime's keys in slime's order, then rlhost's two (the tool reads them from the first KB).
  j.raw("{\"cache_version\":1,\"pt_path\":"); j.string(pt_path);
  j.raw(",\"generated_at\":"); j.number(generated_at);
  j.raw(",\"sample_count\":"); j.integer(static_cast<int64_t>(t.rows.size()));
  const bool any = !t.rows.empty();
  j.raw(",\"global_start\":"); any ? j.number(t.global_start) : j.null();
  j.raw(",\"global_end\":"); any ? j.number(t.global_end) : j.null();
  j.raw(",\"dump_sample_count\":"); j.integer(t.dump_samples);
  j.raw(",\"pd_row_count\":"); j.integer(t.pd_rows);
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
  j.raw(",\"global_start\":"); j.number(t.global_start);
  j.raw("},\"traceEvents\":[\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"rollout samples\"}}");
  std::vector<const TimelineItem*> order;
  for (const auto& r : t.rows) {
    const int64_t tid = r.row_id + 1;
    std::string label = "#" + (r.has_index ? display(r.index) : std::to_string(r.row_id));
    if (const std::string src = display(r.source); !src.empty()) label += " " + src;
    j.raw(",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":"); j.integer(tid);
    j.raw(",\"args\":{\"name\":"); j.string(label); j.raw("}}");
    j.raw(",\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":1,\"tid\":"); j.integer(tid);
    j.raw(",\"args\":{\"sort_index\":"); j.integer(r.row_id); j.raw("}}");
    // Parents before children: by start, then longest first (the nesting Perfetto expects).
    order.clear();
    for (const auto& it : r.items) if (!it.is_pd()) order.push_back(&it);
    std::stable_sort(order.begin(), order.end(), [](const TimelineItem* a, const TimelineItem* b) {
      if (a->start != b->start) return a->start < b->start;
      return a->display_end - a->start > b->display_end - b->start;
    });
    for (const TimelineItem* it : order) {
      const bool span = it->is_span();
      j.raw(",\n{\"ph\":"); j.raw(span ? "\"X\"" : "\"i\",\"s\":\"t\"");
      const std::string name = display(it->name);
      j.raw(",\"name\":"); j.string(it->kind == ItemKind::orphan_end ? name + " (unmatched end)" : name);
      j.raw(",\"cat\":\""); j.raw(state_name(it->kind)); j.raw("\",\"pid\":1,\"tid\":"); j.integer(tid);
      j.raw(",\"ts\":"); us(it->start);
      if (span) { j.raw(",\"dur\":"); j.number(std::round((it->display_end - it->start) * 1e9) / 1e3); }
      j.raw(",\"args\":{\"attempt\":"); j.integer(it->attempt);
      if (it->span_id) { j.raw(",\"span_id\":"); j.value(it->span_id); }
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
