// The trace timeline: per-sample reconstruction of slime's trace carriers (spans,
// instant events, unmatched ends, open spans, synthetic PD lanes) from a loaded
// debug dump, and its two file forms: the viewer's cache JSON (slime's
// trace_timeline_viewer schema, version 1) and a Chrome-trace JSON that Perfetto
// and chrome://tracing open. Used by tools/trace_timeline.lua through
// _core.timeline; docs/observability.md ("Trace timeline viewer") has the rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pickle/py_value.hpp"

namespace rl::trace {

enum class ItemKind : uint8_t { closed_span, open_span, point_event, orphan_end };

struct TimelineItem {
  ItemKind kind = ItemKind::point_event;
  std::string name, span_id, parent_span_id, parent_span_name;  // empty: null
  double start = 0, end = 0, display_end = 0;  // point/orphan: start == ts
  int64_t attempt = 0;
  int lane = 0, depth = 0;
  const pickle::Value* start_attrs = nullptr;  // span start attrs; point/orphan attrs
  const pickle::Value* end_attrs = nullptr;    // span end attrs (closed)
  std::string clipped_by;                       // open spans: what ended the bar
  // Synthetic PD lane ("<name> [P]" / "[D]"): role and the pd_* keys copied from the parent.
  std::string pd_role;
  std::vector<std::pair<std::string, double>> pd_values;
  double pd_parent_duration = 0;
  bool is_span() const { return kind == ItemKind::closed_span || kind == ItemKind::open_span; }
};

struct TimelineRow {
  int64_t row_id = 0, sample_index = 0;
  const pickle::Value* group_index = nullptr;  // int or None
  std::string source, status, label, trace_id;
  bool has_source = false, has_status = false, has_label = false;
  const pickle::Value* reward = nullptr;
  int64_t attempt = 0;
  double start = 0, end = 0;
  int lane_count = 1;
  int64_t closed = 0, open = 0, points = 0, orphans = 0;
  int64_t total_response_length = 0, max_response_length = 0;
  bool has_pd = false;
  std::vector<TimelineItem> items;
};

struct Timeline {
  pickle::Value dump;  // keeps the attrs the items point into alive
  int64_t sample_count = 0;         // samples in the dump
  int64_t traced_samples = 0;       // samples with a trace dict
  std::vector<TimelineRow> rows;
  double global_start = 0, global_end = 0;
  int64_t pd_rows = 0;              // rows with synthetic [P]/[D] lanes
};

// Rebuilds every sample's timeline. `dump` is what torch.load returns for a
// debug rollout dump ({"samples": [...]}, or a bare list of samples). Throws
// rl::Error naming `where` when it is not a dump.
Timeline build_timeline(pickle::Value dump, const std::string& where);

// slime's cache JSON (CACHE_VERSION 1) for the viewer. Text is ASCII; '<' is
// written as \u003c so the JSON can sit inside an HTML <script> element.
std::string timeline_cache_json(const Timeline& t, const std::string& pt_path, double generated_at);

// Chrome trace event JSON: one thread (track) per sample, spans as "X" events,
// instant events and unmatched ends as "i" events, times in µs from global_start.
std::string timeline_perfetto_json(const Timeline& t, const std::string& pt_path);

}  // namespace rl::trace

namespace rl::trace {

// Writes `parts` one after the other to `path` through `path.tmp` renamed over it, so
// a reader never sees half a file. Throws rl::Error naming the path.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts);

// Writes the viewer page: head, the cache with only its first `first_rows` rows, mid,
// a JSON array of the remaining rows, tail. The page parses and paints the first part
// while the browser is still reading the rest. `cache` is timeline_cache_json's text
// (one row per line). Throws rl::Error naming the path.
void write_timeline_page(const std::string& path, std::string_view head, std::string_view mid, std::string_view tail,
                         std::string_view cache, size_t first_rows);

// Reads a whole file; throws rl::Error naming the path.
std::string read_file(const std::string& path);

}  // namespace rl::trace
