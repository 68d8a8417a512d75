// Per-sample reconstruction of trace carriers into timeline rows, with the rules of
// slime's trace_timeline_viewer (cache version 1), re-implemented from its observed
// behaviour so the cache holds the same values:
//   1. events without a float()-able ts are skipped; each keeps its file order and an
//      inferred parent (the innermost span_start still open at that point of the file);
//   2. span_start with a (truthy) span_id opens a span (a later start with the same id
//      replaces it); span_end pops it -> closed span; an end with nothing open ->
//      unmatched end; anything else (a start without an id too) -> instant event;
//      every item's parent is its explicit parent_span_id, else the inferred one;
//   3. spans left open are drawn up to the earliest of the row's last timestamp, the next
//      later-starting sibling, the nearest closed ancestor's end (clipped_by says which);
//   4. span depth = length of its parent chain (memoised, cycle-safe as slime's); lane =
//      depth; instant events and unmatched ends sit one lane below their parent span;
//   5. closed spans with pd_prefill_* / pd_decode_* durations > 0 in their end attrs get
//      synthetic "<name> [P]" / "[D]" lanes after the real ones;
//   6. times are rounded as Python's round(x, 6); items are sorted (stably) by lane,
//      start, display end, name.
// Timestamps that are NaN or infinite are skipped: slime would write NaN / Infinity,
// which is not JSON (docs/observability.md lists this one difference).
#include "trace/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include "base/errors.hpp"
#include "trace/py_float.hpp"
#include "trace/py_ops.hpp"

namespace rl::trace {
namespace {

using Kind = Value::Kind;

const char* const kPrefillKeys[] = {"pd_prefill_bootstrap_queue_duration", "pd_prefill_bootstrap_duration",
                                    "pd_prefill_alloc_wait_duration", "pd_prefill_forward_duration",
                                    "pd_prefill_transfer_queue_duration"};
const char* const kDecodeKeys[] = {"pd_decode_prealloc_duration", "pd_decode_bootstrap_duration",
                                   "pd_decode_alloc_wait_duration", "pd_decode_transfer_duration",
                                   "pd_decode_forward_duration"};

const Value* dict_get(const Value* d, std::string_view k) { return d && d->is(Kind::dict) ? d->get(k) : nullptr; }
bool is_none(const Value* v) { return !v || v->is_none(); }

struct Event {
  int type = 2;  // 0 span_start, 1 span_end, 2 anything else
  double ts = 0;
  int64_t attempt = 0;
  const Value *name = nullptr, *span_id = nullptr, *parent = nullptr, *inferred = nullptr;
  const Value* attrs = nullptr;  // nullptr: falsy attrs, written as {}
  const Value* parent_or_inferred() const { return py_truthy(parent) ? parent : inferred; }
};

// A span being rebuilt: its start event, its end event once paired.
struct Span {
  const Event* start = nullptr;
  const Event* end = nullptr;
  const Value* parent = nullptr;
  double display_end = 0;
  const char* clipped_by = nullptr;
  int depth = 0;
};

using KeyMap = std::unordered_map<const Value*, size_t, PyHash, PyEq>;

// Buffers reused from one sample to the next (maps keep their buckets).
struct Scratch {
  std::vector<Event> events;
  std::vector<const Value*> stack;
  std::vector<Span> spans;
  std::vector<std::pair<const Value*, size_t>> open_order;  // open starts in dict insertion order
  std::vector<bool> open_alive;
  KeyMap open_pos, by_id, depth_of, groups;
  std::vector<size_t> closed, all, points, orphans;
  std::vector<const Value*> walk;  // one depth walk (also its cycle check)
  std::vector<std::vector<double>> group_starts;
};

int64_t attempt_of(const Value* v) {
  int64_t out = 0;
  return py_truthy(v) && py_int(v, &out) ? out : 0;  // int(v or 0)
}

void normalise(const Value& events, const Value* carrier_attempt, Scratch& s) {
  s.events.clear();
  s.stack.clear();
  if (!events.is(Kind::list) && !events.is(Kind::tuple)) return;  // a dict or text iterates to no dicts
  s.events.reserve(events.items().size());
  for (const Value& e : events.items()) {
    if (!e.is(Kind::dict)) continue;
    // One pass over the record's keys (events have ~10; a lookup per field costs more).
    const Value *ts = nullptr, *type = nullptr, *name = nullptr, *span_id = nullptr, *parent = nullptr,
                *attrs = nullptr, *attempt = nullptr;
    bool has_attempt = false;
    for (const auto& [k, v] : e.as_dict().items) {
      if (!k.is(Kind::string)) continue;
      const std::string& key = k.as_string();
      switch (key.size()) {
        case 2: if (key == "ts") ts = &v; break;
        case 4: if (key == "type") type = &v; else if (key == "name") name = &v; break;
        case 5: if (key == "attrs") attrs = &v; break;
        case 7: if (key == "span_id") span_id = &v; else if (key == "attempt") attempt = &v, has_attempt = true; break;
        case 14: if (key == "parent_span_id") parent = &v; break;
        default: break;
      }
    }
    Event ev;
    if (is_none(ts) || !py_float(ts, &ev.ts) || !std::isfinite(ev.ts)) continue;
    if (type && type->is(Kind::string)) {
      const std::string& t = type->as_string();
      ev.type = t == "span_start" ? 0 : t == "span_end" ? 1 : 2;
    }
    ev.name = is_none(name) ? nullptr : name;
    ev.span_id = is_none(span_id) ? nullptr : span_id;
    ev.parent = is_none(parent) ? nullptr : parent;
    ev.attrs = py_truthy(attrs) ? attrs : nullptr;
    ev.attempt = attempt_of(has_attempt ? attempt : carrier_attempt);
    ev.inferred = s.stack.empty() ? nullptr : s.stack.back();
    const bool has_id = py_truthy(ev.span_id);
    if (ev.type == 0 && has_id) {
      s.stack.push_back(ev.span_id);
    } else if (ev.type == 1 && has_id) {
      for (size_t i = s.stack.size(); i-- > 0;) {
        if (py_eq(s.stack[i], ev.span_id)) {
          s.stack.erase(s.stack.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
    s.events.push_back(ev);
  }
}

// Pairs starts and ends: s.closed (in end order) and s.all (closed, then the starts
// left open in insertion order); s.points and s.orphans (event indices).
void pair_spans(Scratch& s) {
  s.spans.clear(), s.open_order.clear(), s.open_alive.clear(), s.open_pos.clear();
  s.closed.clear(), s.all.clear(), s.points.clear(), s.orphans.clear();
  for (size_t i = 0; i < s.events.size(); ++i) {
    const Event& e = s.events[i];
    const bool has_id = py_truthy(e.span_id);
    if (e.type == 0 && has_id) {
      Span sp;
      sp.start = &e;
      sp.parent = e.parent_or_inferred();
      s.spans.push_back(sp);
      auto [it, fresh] = s.open_pos.try_emplace(e.span_id, s.open_order.size());
      if (fresh) {
        s.open_order.emplace_back(e.span_id, s.spans.size() - 1);
        s.open_alive.push_back(true);
      } else {
        s.open_order[it->second].second = s.spans.size() - 1;  // same id again: replaces, keeps its place
      }
    } else if (e.type == 1) {
      auto it = has_id ? s.open_pos.find(e.span_id) : s.open_pos.end();
      if (it == s.open_pos.end()) {
        s.orphans.push_back(i);
        continue;
      }
      const size_t span = s.open_order[it->second].second;
      s.open_alive[it->second] = false;
      s.open_pos.erase(it);
      s.spans[span].end = &e;
      s.closed.push_back(span);
    } else {
      s.points.push_back(i);
    }
  }
  s.all = s.closed;
  for (size_t k = 0; k < s.open_order.size(); ++k)
    if (s.open_alive[k]) s.all.push_back(s.open_order[k].second);
}

// slime's memoised depth walk: a parent outside the sample ends the chain; meeting an
// id already on the walk (a cycle) counts it as depth 0 there.
void compute_depths(Scratch& s) {
  s.by_id.clear(), s.depth_of.clear();
  for (size_t k : s.all) s.by_id[s.spans[k].start->span_id] = k;  // the last span with an id wins
  for (size_t k : s.all) {
    const Value* id = s.spans[k].start->span_id;
    s.walk.clear();
    int base = -1;
    for (;;) {
      auto cached = s.depth_of.find(id);
      if (cached != s.depth_of.end()) { base = static_cast<int>(cached->second); break; }
      if (std::any_of(s.walk.begin(), s.walk.end(), [&](const Value* x) { return py_eq(x, id); })) {
        s.depth_of[id] = 0;
        base = 0;
        break;
      }
      s.walk.push_back(id);
      const Value* parent = s.spans[s.by_id.find(id)->second].parent;
      if (!py_truthy(parent) || !s.by_id.count(parent)) break;  // base stays -1: the last one is depth 0
      id = parent;
    }
    for (size_t i = s.walk.size(); i-- > 0;) s.depth_of[s.walk[i]] = static_cast<size_t>(++base);
  }
  for (size_t k : s.all) s.spans[k].depth = static_cast<int>(s.depth_of.find(s.spans[k].start->span_id)->second);
}

void clip_open_spans(Scratch& s, size_t first_open, double row_end) {
  if (first_open >= s.all.size()) return;
  s.groups.clear();
  s.group_starts.clear();
  for (size_t k : s.all) {
    auto [it, fresh] = s.groups.try_emplace(s.spans[k].parent, s.group_starts.size());
    if (fresh) s.group_starts.emplace_back();
    s.group_starts[it->second].push_back(s.spans[k].start->ts);
  }
  for (size_t j = first_open; j < s.all.size(); ++j) {
    Span& sp = s.spans[s.all[j]];
    const double start = sp.start->ts;
    double best = row_end;
    const char* why = "row_end";
    double sibling = INFINITY;  // the first sibling starting later (itself never qualifies)
    for (double t : s.group_starts[s.groups.find(sp.parent)->second])
      if (t > start && t < sibling) sibling = t;
    if (sibling < best) best = sibling, why = "next_sibling_start";
    // nearest ancestor with an end (the walk stops at a parent outside the sample)
    const Value* cur = sp.parent;
    for (size_t guard = 0; py_truthy(cur) && guard <= s.all.size(); ++guard) {
      auto p = s.by_id.find(cur);
      if (p == s.by_id.end()) break;
      const Span& anc = s.spans[p->second];
      if (anc.end) {
        if (anc.end->ts > start && anc.end->ts < best) best = anc.end->ts, why = "ancestor_end";
        break;
      }
      cur = anc.parent;
    }
    if (best <= start) best = start, why = "self";
    sp.display_end = best;
    sp.clipped_by = why;
  }
}

void add_pd_lanes(TimelineRow& row, const Scratch& s) {
  int next_lane = -1;
  for (const auto& it : row.items) next_lane = std::max(next_lane, it.lane);
  for (size_t k : s.closed) {
    const Span& sp = s.spans[k];
    const Value* name = sp.start->name;
    if (name && name->is(Kind::string) && name->as_string().rfind("sglang_pd_", 0) == 0) continue;
    const Value* attrs = sp.end->attrs;
    if (!attrs || !attrs->is(Kind::dict)) continue;
    for (int role = 0; role < 2; ++role) {
      TimelineItem v;
      for (const char* key : role == 0 ? kPrefillKeys : kDecodeKeys) {
        const Value* x = attrs->get(key);
        if (py_positive_number(x)) v.pd_values.emplace_back(key, x);
      }
      if (v.pd_values.empty()) continue;
      v.kind = ItemKind::closed_span;
      py_str(name, v.pd_name);
      v.pd_name += role == 0 ? " [P]" : " [D]";
      py_str(sp.start->span_id, v.pd_span_id);
      v.pd_span_id += role == 0 ? ":pd:prefill" : ":pd:decode";
      v.span_id = sp.start->span_id;  // the parent's id (the item writes pd_span_id)
      v.parent_span_id = sp.start->span_id;
      v.parent_span_name = name;
      v.has_parent_name = true;
      v.raw_start = sp.start->ts, v.raw_end = sp.end->ts;
      v.start = py_round6(sp.start->ts);
      v.end = v.display_end = py_round6(sp.end->ts);
      v.attempt = sp.start->attempt;
      v.pd_role = role == 0 ? "prefill" : "decode";
      const double d = sp.end->ts - sp.start->ts;
      v.pd_parent_duration = py_round6(d > 0.0 ? d : 0.0);
      v.lane = v.depth = ++next_lane;
      row.items.push_back(std::move(v));
      row.has_pd = true;
    }
  }
}

// Item order: lane, start, display end, then name as Python orders them; stable.
bool item_less(const TimelineItem& a, const TimelineItem& b) {
  if (a.lane != b.lane) return a.lane < b.lane;
  if (a.start != b.start) return a.start < b.start;
  if (a.display_end != b.display_end) return a.display_end < b.display_end;
  if (a.is_pd() || b.is_pd()) {
    if (a.is_pd() && b.is_pd()) return a.pd_name < b.pd_name;
    const TimelineItem& real = a.is_pd() ? b : a;
    if (!real.name || !real.name->is(Kind::string)) return false;  // Python raises comparing str with others
    return a.is_pd() ? a.pd_name < real.name->as_string() : real.name->as_string() < b.pd_name;
  }
  return py_less(a.name, b.name);
}

void build_items(TimelineRow& row, Scratch& s) {
  double row_end = -INFINITY;
  for (const Event& e : s.events) row_end = std::max(row_end, e.ts);
  pair_spans(s);
  compute_depths(s);
  clip_open_spans(s, s.closed.size(), row_end);
  auto& items = row.items;
  items.reserve(s.events.size() + 2);
  auto parent_name = [&](TimelineItem& it) {
    if (!py_truthy(it.parent_span_id)) return;
    auto p = s.by_id.find(it.parent_span_id);
    if (p == s.by_id.end()) return;
    it.parent_span_name = s.spans[p->second].start->name;
    it.has_parent_name = true;
  };
  for (size_t j = 0; j < s.all.size(); ++j) {
    const Span& sp = s.spans[s.all[j]];
    TimelineItem it;
    it.kind = sp.end ? ItemKind::closed_span : ItemKind::open_span;
    it.name = sp.start->name;
    it.span_id = sp.start->span_id;
    it.parent_span_id = sp.parent;
    it.raw_start = sp.start->ts;
    it.raw_end = sp.end ? sp.end->ts : sp.display_end;
    it.start = py_round6(sp.start->ts);
    it.end = it.display_end = py_round6(sp.end ? sp.end->ts : sp.display_end);
    it.attempt = sp.start->attempt;
    it.lane = it.depth = sp.depth;
    it.start_attrs = sp.start->attrs;
    it.end_attrs = sp.end ? sp.end->attrs : nullptr;
    it.clipped_by = sp.clipped_by;
    parent_name(it);
    items.push_back(std::move(it));
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i : pass == 0 ? s.points : s.orphans) {
      const Event& e = s.events[i];
      TimelineItem it;
      it.kind = pass == 0 ? ItemKind::point_event : ItemKind::orphan_end;
      it.name = e.name;
      it.span_id = pass == 0 ? nullptr : e.span_id;
      it.parent_span_id = e.parent_or_inferred();
      it.raw_start = it.raw_end = e.ts;
      it.start = it.end = it.display_end = py_round6(e.ts);
      it.attempt = e.attempt;
      it.start_attrs = e.attrs;
      auto p = py_truthy(it.parent_span_id) ? s.by_id.find(it.parent_span_id) : s.by_id.end();
      it.lane = it.depth = p == s.by_id.end() ? 0 : s.spans[p->second].depth + 1;
      parent_name(it);
      items.push_back(std::move(it));
    }
  }
  add_pd_lanes(row, s);
  std::stable_sort(items.begin(), items.end(), item_less);
}

// int(x) of a response_length that is a number (bool, int, float); false otherwise.
bool response_length(const Value* payload, int64_t* out) {
  const Value* v = dict_get(payload, "response_length");
  if (!v) return false;
  const Kind k = v->kind();
  if (k != Kind::integer && k != Kind::boolean && k != Kind::real && k != Kind::big_integer) return false;
  if (k == Kind::big_integer) return *out = static_cast<int64_t>(v->to_number()), true;
  return py_int(v, out);
}

void add_lengths(TimelineRow& row, const TimelineItem& it, bool& any) {
  const Value* payloads[3] = {nullptr, nullptr, nullptr};
  if (it.is_span()) {
    payloads[0] = it.start_attrs;
    payloads[1] = it.kind == ItemKind::closed_span && !it.is_pd() ? it.end_attrs : nullptr;
  } else {
    payloads[0] = it.start_attrs;
    payloads[1] = dict_get(it.start_attrs, "start_attrs");
    payloads[2] = dict_get(it.start_attrs, "end_attrs");
  }
  for (const Value* p : payloads) {
    int64_t n = 0;
    if (!response_length(p, &n)) continue;
    row.total_response_length += n;
    row.max_response_length = any ? std::max(row.max_response_length, n) : n;
    any = true;
  }
}

// sample.source, metadata.source, metadata.source_name, then the first metadata key
// whose str().lower() holds "source"; None and "" count as missing.
const Value* infer_source(const Value& sample) {
  auto usable = [](const Value* v) { return !is_none(v) && !(v->is(Kind::string) && v->as_string().empty()); };
  if (const Value* v = sample.get("source"); usable(v)) return v;
  const Value* meta = sample.get("metadata");
  if (!meta || !meta->is(Kind::dict)) return nullptr;
  if (const Value* v = meta->get("source"); usable(v)) return v;
  if (const Value* v = meta->get("source_name"); usable(v)) return v;
  std::string key;
  for (const auto& [k, v] : meta->as_dict().items) {
    key.clear();
    py_str(&k, key);
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (key.find("source") != std::string::npos && usable(&v)) return &v;
  }
  return nullptr;
}

void fill_row_fields(TimelineRow& row, const Value& s, const Value& carrier) {
  for (const auto& [k, v] : s.as_dict().items)
    if (k.is(Kind::string) && k.as_string() == "index") row.index = &v, row.has_index = true;
  row.group_index = s.get("group_index");
  row.source = infer_source(s);
  row.status = s.get("status");
  row.label = s.get("label");
  row.reward = s.get("reward");
  row.trace_id = carrier.get("trace_id");
  row.attempt = attempt_of(carrier.get("attempt"));
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
  t.dump_samples = static_cast<int64_t>(list.size());
  bool any_row = false;
  Scratch scratch;
  for (size_t i = 0; i < list.size(); ++i) {
    const Value& s = list[i];
    if (!s.is(Kind::dict)) continue;
    const Value* carrier = s.get("trace");
    if (!carrier || !carrier->is(Kind::dict)) continue;
    ++t.traced_samples;
    const Value* events = carrier->get("events");
    if (!events) continue;
    // an event's attempt defaults to the carrier's (trace.get("attempt", 0))
    static const Value kZero(int64_t{0});
    const Value* carrier_attempt = carrier->get("attempt");
    normalise(*events, carrier_attempt ? carrier_attempt : &kZero, scratch);
    if (scratch.events.empty()) continue;
    TimelineRow row;
    row.row_id = static_cast<int64_t>(i);
    fill_row_fields(row, s, *carrier);
    build_items(row, scratch);
    row.start = INFINITY, row.end = -INFINITY;
    int max_lane = 0;
    bool any_length = false;
    for (const auto& it : row.items) {
      row.start = std::min(row.start, it.start);
      row.end = std::max(row.end, it.display_end);
      max_lane = std::max(max_lane, it.lane);
      switch (it.kind) {
        case ItemKind::closed_span: ++row.closed; break;
        case ItemKind::open_span: ++row.open; break;
        case ItemKind::point_event: ++row.points; break;
        case ItemKind::orphan_end: ++row.orphans; break;
      }
      add_lengths(row, it, any_length);
    }
    const double d = row.end - row.start;
    row.duration = py_round6(d > 0.0 ? d : 0.0);
    row.lane_count = max_lane + 1;
    t.global_start = any_row ? std::min(t.global_start, row.start) : row.start;
    t.global_end = any_row ? std::max(t.global_end, row.end) : row.end;
    any_row = true;
    t.pd_rows += row.has_pd;
    t.rows.push_back(std::move(row));
  }
  t.global_start = py_round6(t.global_start), t.global_end = py_round6(t.global_end);
  return t;
}

}  // namespace rl::trace
