// Per-sample reconstruction of trace carriers into timeline rows (the rules of
// slime's trace_timeline_viewer, re-implemented from its documented behaviour):
//   1. events without a numeric ts are skipped; each keeps its file order and an
//      inferred parent (the innermost span open at that point of the file);
//   2. span_start + span_end with one span_id -> closed span; an end without its
//      start -> unmatched end; anything else -> instant event;
//   3. a start without an end -> open span, drawn up to the earliest of the row's
//      last timestamp, the next later-starting sibling, the nearest closed
//      ancestor's end (recorded as clipped_by);
//   4. lane = depth in the span tree; events sit one lane below their span;
//   5. closed spans with flat pd_prefill_* / pd_decode_* durations get synthetic
//      "<name> [P]" / "<name> [D]" lanes after the real ones.
#include "trace/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "base/errors.hpp"

namespace rl::trace {
namespace {

using pickle::Value;
using Kind = Value::Kind;

const char* const kPrefillKeys[] = {"pd_prefill_bootstrap_queue_duration", "pd_prefill_bootstrap_duration",
                                    "pd_prefill_alloc_wait_duration", "pd_prefill_forward_duration",
                                    "pd_prefill_transfer_queue_duration"};
const char* const kDecodeKeys[] = {"pd_decode_prealloc_duration", "pd_decode_bootstrap_duration",
                                   "pd_decode_alloc_wait_duration", "pd_decode_transfer_duration",
                                   "pd_decode_forward_duration"};

bool is_number(const Value* v) { return v && (v->is(Kind::integer) || v->is(Kind::real) || v->is(Kind::big_integer)); }
bool is_string(const Value* v) { return v && v->is(Kind::string); }
const Value* dict_get(const Value* d, std::string_view k) { return d && d->is(Kind::dict) ? d->get(k) : nullptr; }
std::string_view sv(const Value* v) { return is_string(v) ? std::string_view(v->as_string()) : std::string_view(); }

// Python's str() for the scalar kinds a label / status / source can hold.
std::string py_str(const Value& v) {
  char buf[64];
  switch (v.kind()) {
    case Kind::none: return "None";
    case Kind::boolean: return v.as_bool() ? "True" : "False";
    case Kind::integer: return std::to_string(v.as_int());
    case Kind::real: snprintf(buf, sizeof buf, "%.17g", v.as_float()); return buf;
    case Kind::string: return v.as_string();
    case Kind::bytes: return v.as_bytes().data;
    default: return std::string("<") + v.type_name() + ">";
  }
}

// Cuts UTF-8 text to at most `max` bytes on a character boundary.
std::string cut_utf8(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

struct Event {
  int type = 2;  // 0 span_start, 1 span_end, 2 instant event
  std::string_view name, span_id, parent, inferred;
  double ts = 0;
  int64_t attempt = 0;
  const Value* attrs = nullptr;
};

std::vector<Event> normalise(const Value& events, int64_t carrier_attempt) {
  std::vector<Event> out;
  if (!events.is(Kind::list) && !events.is(Kind::tuple)) return out;
  std::vector<std::string_view> stack;
  out.reserve(events.items().size());
  for (const Value& e : events.items()) {
    if (!e.is(Kind::dict)) continue;
    // One pass over the record's keys (events have ~10; a lookup per field costs more).
    const Value *ts = nullptr, *type = nullptr, *name = nullptr, *span_id = nullptr, *parent = nullptr,
                *attempt = nullptr, *attrs = nullptr;
    for (const auto& [k, v] : e.as_dict().items) {
      if (!k.is(Kind::string)) continue;
      const std::string& key = k.as_string();
      switch (key.size()) {
        case 2: if (key == "ts") ts = &v; break;
        case 4: if (key == "type") type = &v; else if (key == "name") name = &v; break;
        case 5: if (key == "attrs") attrs = &v; break;
        case 7: if (key == "span_id") span_id = &v; else if (key == "attempt") attempt = &v; break;
        case 14: if (key == "parent_span_id") parent = &v; break;
        default: break;
      }
    }
    if (!is_number(ts)) continue;
    Event ev;
    ev.ts = ts->to_number();
    if (!std::isfinite(ev.ts)) continue;
    std::string_view t = sv(type);
    ev.type = t == "span_start" ? 0 : t == "span_end" ? 1 : 2;
    ev.name = sv(name);
    ev.span_id = sv(span_id);
    ev.parent = sv(parent);
    ev.attempt = attempt && attempt->is(Kind::integer) ? attempt->as_int() : carrier_attempt;
    ev.attrs = attrs && attrs->is(Kind::dict) ? attrs : nullptr;
    ev.inferred = stack.empty() ? std::string_view() : stack.back();
    if (ev.type == 0 && !ev.span_id.empty()) {
      stack.push_back(ev.span_id);
    } else if (ev.type == 1) {
      auto it = std::find(stack.rbegin(), stack.rend(), ev.span_id);
      if (it != stack.rend()) stack.erase(std::next(it).base());
    }
    out.push_back(ev);
  }
  return out;
}

void add_pd_lanes(TimelineRow& row) {
  int next_lane = 0;
  for (const auto& it : row.items) next_lane = std::max(next_lane, it.lane);
  const size_t real = row.items.size();
  for (size_t i = 0; i < real; ++i) {
    if (row.items[i].kind != ItemKind::closed_span || row.items[i].name.rfind("sglang_pd_", 0) == 0) continue;
    for (int role = 0; role < 2; ++role) {
      const TimelineItem& span = row.items[i];  // re-read: push_back may move it
      TimelineItem v;
      for (const char* key : role == 0 ? kPrefillKeys : kDecodeKeys) {
        const Value* x = dict_get(span.end_attrs, key);
        if (is_number(x) && x->to_number() > 0) v.pd_values.emplace_back(key, x->to_number());
      }
      if (v.pd_values.empty()) continue;
      v.kind = ItemKind::closed_span;
      v.name = span.name + (role == 0 ? " [P]" : " [D]");
      v.span_id = span.span_id + (role == 0 ? ":pd:prefill" : ":pd:decode");
      v.parent_span_id = span.span_id;
      v.parent_span_name = span.name;
      v.start = span.start, v.end = span.end, v.display_end = span.display_end;
      v.attempt = span.attempt;
      v.pd_role = role == 0 ? "prefill" : "decode";
      v.pd_parent_duration = span.end - span.start;
      v.lane = v.depth = ++next_lane;
      row.items.push_back(std::move(v));
      row.has_pd = true;
    }
  }
}

void build_items(TimelineRow& row, const std::vector<Event>& evs) {
  double row_end = -INFINITY;
  for (const Event& e : evs) row_end = std::max(row_end, e.ts);
  std::unordered_map<std::string_view, size_t> open, by_id;  // by_id: keys point into items
  auto& items = row.items;
  items.reserve(evs.size());
  for (const Event& e : evs) {
    TimelineItem it;
    it.name = std::string(e.name);
    it.start = it.end = it.display_end = e.ts;
    it.attempt = e.attempt;
    it.parent_span_id = std::string(e.parent.empty() ? e.inferred : e.parent);
    if (e.type == 1) {
      auto o = open.find(e.span_id);
      if (o != open.end()) {
        TimelineItem& s = items[o->second];
        s.kind = ItemKind::closed_span;
        s.end = s.display_end = e.ts;
        s.end_attrs = e.attrs;
        open.erase(o);
        continue;
      }
      it.kind = ItemKind::orphan_end;
      it.span_id = std::string(e.span_id);
      it.start_attrs = e.attrs;
    } else if (e.type == 0) {
      it.kind = ItemKind::open_span;
      it.span_id = std::string(e.span_id);
      it.start_attrs = e.attrs;
      open[e.span_id] = items.size();
    } else {
      it.kind = ItemKind::point_event;
      it.start_attrs = e.attrs;
    }
    items.push_back(std::move(it));
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].is_span() && !items[i].span_id.empty()) by_id[items[i].span_id] = i;
  auto parent_of = [&](const TimelineItem& it) -> const TimelineItem* {
    if (it.parent_span_id.empty()) return nullptr;
    auto p = by_id.find(it.parent_span_id);
    return p == by_id.end() ? nullptr : &items[p->second];
  };
  // depth: length of the parent chain among this sample's spans (cycle-safe).
  std::vector<int> depth(items.size(), -1);
  auto depth_of = [&](size_t i) {
    int d = 0;
    const TimelineItem* p = parent_of(items[i]);
    while (p && d <= static_cast<int>(items.size())) { ++d; p = parent_of(*p); }
    return std::min(d, static_cast<int>(items.size()));
  };
  for (size_t i = 0; i < items.size(); ++i) {
    TimelineItem& it = items[i];
    const TimelineItem* p = parent_of(it);
    if (p) it.parent_span_name = p->name;
    if (it.is_span()) {
      it.lane = it.depth = depth_of(i);
    } else {
      it.lane = it.depth = p ? depth_of(static_cast<size_t>(p - items.data())) + 1 : 0;
    }
  }
  // Open spans end at the earliest of: the row's end, the next sibling, the closed ancestor.
  for (auto& it : items) {
    if (it.kind != ItemKind::open_span) continue;
    double best = row_end;
    const char* why = "row_end";
    for (const auto& s : items) {
      if (s.is_span() && &s != &it && s.parent_span_id == it.parent_span_id && s.start > it.start && s.start < best) {
        best = s.start, why = "next_sibling_start";
      }
    }
    const TimelineItem* a = parent_of(it);
    for (size_t guard = 0; a && a->kind != ItemKind::closed_span && guard < items.size(); ++guard) a = parent_of(*a);
    if (a && a->kind == ItemKind::closed_span && a->end > it.start && a->end < best) best = a->end, why = "ancestor_end";
    if (best <= it.start) best = it.start, why = "self";
    it.display_end = best;
    it.clipped_by = why;
  }
  add_pd_lanes(row);
  std::stable_sort(items.begin(), items.end(), [](const TimelineItem& a, const TimelineItem& b) {
    if (a.lane != b.lane) return a.lane < b.lane;
    if (a.start != b.start) return a.start < b.start;
    if (a.display_end != b.display_end) return a.display_end < b.display_end;
    return a.name < b.name;
  });
}

void add_response_length(TimelineRow& row, const Value* attrs) {
  const Value* v = dict_get(attrs, "response_length");
  if (v && v->is(Kind::integer)) {
    row.total_response_length += v->as_int();
    row.max_response_length = std::max(row.max_response_length, v->as_int());
  }
}

void fill_row_fields(TimelineRow& row, const Value& s) {
  const Value* idx = s.get("index");
  row.sample_index = idx && idx->is(Kind::integer) ? idx->as_int() : row.row_id;
  const Value* g = s.get("group_index");
  row.group_index = g && g->is(Kind::integer) ? g : nullptr;
  const Value* meta = s.get("metadata");
  const Value* src = s.get("source");
  if (!src || src->is_none()) src = dict_get(meta, "source");
  if (!src || src->is_none()) src = dict_get(meta, "source_name");
  if ((!src || src->is_none()) && meta && meta->is(Kind::dict)) {
    for (const auto& [k, v] : meta->as_dict().items) {
      if (k.is(Kind::string) && k.as_string().find("source") != std::string::npos && !v.is_none()) { src = &v; break; }
    }
  }
  if (src && !src->is_none()) row.source = cut_utf8(py_str(*src), 64), row.has_source = true;
  const Value* st = s.get("status");
  if (st && !st->is_none()) row.status = cut_utf8(py_str(*st), 64), row.has_status = true;
  const Value* lb = s.get("label");
  if (lb && !lb->is_none()) {
    std::string text = py_str(*lb);
    row.label = text.size() > 256 ? cut_utf8(text, 256) + "...<truncated:" + std::to_string(text.size()) + ">" : text;
    row.has_label = true;
  }
  const Value* r = s.get("reward");
  if (r && (is_number(r) || r->is(Kind::dict))) row.reward = r;
}

}  // namespace

Timeline build_timeline(Value dump, const std::string& where) {
  Timeline t;
  t.dump = std::move(dump);
  const Value* samples = &t.dump;
  if (t.dump.is(Kind::dict)) {
    samples = t.dump.get("samples");
    if (!samples)
      throw Error(where + ": not a debug rollout dump: a dict without a 'samples' key",
                  "expected {'rollout_id': ..., 'samples': [...]} as --save-debug-rollout-data / rl.dump.save write");
  }
  if (!samples->is(Kind::list) && !samples->is(Kind::tuple))
    throw Error(where + ": not a debug rollout dump: 'samples' is a " + samples->type_name() + ", not a list",
                "expected {'rollout_id': ..., 'samples': [...]} as --save-debug-rollout-data / rl.dump.save write");
  const auto& list = samples->items();
  t.sample_count = static_cast<int64_t>(list.size());
  t.global_start = INFINITY, t.global_end = -INFINITY;
  for (size_t i = 0; i < list.size(); ++i) {
    const Value& s = list[i];
    if (!s.is(Kind::dict)) continue;
    const Value* carrier = s.get("trace");
    if (!carrier || !carrier->is(Kind::dict)) continue;
    ++t.traced_samples;
    const Value* events = carrier->get("events");
    const Value* at = carrier->get("attempt");
    const int64_t attempt = at && at->is(Kind::integer) ? at->as_int() : 0;
    if (!events) continue;
    std::vector<Event> evs = normalise(*events, attempt);
    if (evs.empty()) continue;
    TimelineRow row;
    row.row_id = static_cast<int64_t>(i);
    row.attempt = attempt;
    row.trace_id = std::string(sv(carrier->get("trace_id")));
    fill_row_fields(row, s);
    build_items(row, evs);
    row.start = INFINITY, row.end = -INFINITY;
    int max_lane = 0;
    for (const auto& it : row.items) {
      row.start = std::min(row.start, it.start);
      row.end = std::max({row.end, it.display_end, it.end});
      max_lane = std::max(max_lane, it.lane);
      switch (it.kind) {
        case ItemKind::closed_span: ++row.closed; break;
        case ItemKind::open_span: ++row.open; break;
        case ItemKind::point_event: ++row.points; break;
        case ItemKind::orphan_end: ++row.orphans; break;
      }
      add_response_length(row, it.start_attrs);
      add_response_length(row, it.end_attrs);
    }
    row.lane_count = max_lane + 1;
    t.global_start = std::min(t.global_start, row.start);
    t.global_end = std::max(t.global_end, row.end);
    t.pd_rows += row.has_pd;
    t.rows.push_back(std::move(row));
  }
  if (t.rows.empty()) t.global_start = t.global_end = 0;
  return t;
}

}  // namespace rl::trace
