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

// Item and row fields point into the loaded dump (Timeline::dump keeps it alive);
// nullptr stands for None. The cache writer applies slime's conversions to them.
struct TimelineItem {
  ItemKind kind = ItemKind::point_event;
  const pickle::Value* name = nullptr;
  const pickle::Value* span_id = nullptr;         // spans and unmatched ends
  const pickle::Value* parent_span_id = nullptr;  // explicit, else inferred from the open stack
  const pickle::Value* parent_span_name = nullptr;
  bool has_parent_name = false;                    // parent_span_name is the parent's (maybe None) name
  double start = 0, end = 0, display_end = 0;      // rounded to 6 decimals; point/orphan: all = ts
  double raw_start = 0, raw_end = 0;               // as recorded (PD lane durations use these)
  int64_t attempt = 0;
  int lane = 0, depth = 0;
  const pickle::Value* start_attrs = nullptr;     // span start attrs; point/orphan attrs (nullptr: {})
  const pickle::Value* end_attrs = nullptr;       // closed span end attrs
  const char* clipped_by = nullptr;                // open spans: what ended the bar
  // Synthetic PD lane ("<name> [P]" / "[D]"): its name and span id as text, the role
  // and the pd_* values copied from the parent's end attrs.
  std::string pd_name, pd_span_id;
  const char* pd_role = nullptr;
  std::vector<std::pair<const char*, const pickle::Value*>> pd_values;
  double pd_parent_duration = 0;
  bool is_span() const { return kind == ItemKind::closed_span || kind == ItemKind::open_span; }
  bool is_pd() const { return pd_role != nullptr; }
};

struct TimelineRow {
  int64_t row_id = 0;                          // position in the dump's sample list
  const pickle::Value* index = nullptr;       // sample["index"] when the key is there
  bool has_index = false;
  const pickle::Value* group_index = nullptr;
  const pickle::Value* source = nullptr;      // sample.source, metadata.source, .source_name, *source*
  const pickle::Value* status = nullptr;
  const pickle::Value* label = nullptr;
  const pickle::Value* reward = nullptr;
  const pickle::Value* trace_id = nullptr;
  int64_t attempt = 0;
  double start = 0, end = 0, duration = 0;
  int lane_count = 1;
  int64_t closed = 0, open = 0, points = 0, orphans = 0;
  int64_t total_response_length = 0, max_response_length = 0;
  bool has_pd = false;
  std::vector<TimelineItem> items;
};

struct Timeline {
  pickle::Value dump;              // keeps the values the rows point into alive
  int64_t dump_samples = 0;         // samples in the dump
  int64_t traced_samples = 0;       // samples with a trace dict
  std::vector<TimelineRow> rows;    // slime's sample_count is rows.size()
  double global_start = 0, global_end = 0;  // rounded; 0 without rows (written as null)
  int64_t pd_rows = 0;              // rows with synthetic [P]/[D] lanes
};

// Rebuilds every sample's timeline. `dump` is what torch.load returns for a
// debug rollout dump ({"samples": [...]}, or a bare list of samples). Throws
// rl::Error naming `where` when it is not a dump.
Timeline build_timeline(pickle::Value dump, const std::string& where);

// slime's cache JSON (CACHE_VERSION 1) for the viewer: the values json.dump writes
// for slime's cache of the same dump, plus two top-level keys (dump_sample_count,
// pd_row_count). Text is ASCII; '<' is written as \u003c so the JSON can sit inside
// an HTML <script> element, and rows are separated by ",\n".
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
