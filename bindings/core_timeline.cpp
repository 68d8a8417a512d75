// _core.timeline: the trace timeline builder (runtime/trace/timeline.*) for
// tools/trace_timeline.lua. The big outputs (cache, page, Chrome trace) are written
// from C++; Lua only gets them as strings when it asks (no *_path given).
//   build(pt, {pt_path, generated_at, perfetto, cache_path, perfetto_path,
//              html_path, html_head, html_mid, html_tail, first_rows})
//     -> {sample_count (samples in the dump), traced_samples, rows, pd_rows, items
//         [, cache] [, perfetto]}; cache (slime's sample_count = rows) also without rows
//        or nil, err (missing / corrupt file, not a dump, a file that cannot be written)
//   page(cache_path, html_path, head, mid, tail [, first_rows]) -> true or nil, err
//     the page: head, the cache's first rows, mid, the other rows, tail (write_timeline_page)
//   mtime(path) -> seconds since the epoch (fractional), or nil when there is no such file
#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <string>

#include "base/errors.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "pickle/torch_file.hpp"
#include "trace/timeline.hpp"

namespace rl::lua {
namespace {

constexpr int64_t kFirstRows = 200;  // rows in the page's first part: more than a screen holds

std::optional<std::string> opt_field(lua_State* L, const char* key) {
  auto v = arg::field_string(L, 2, key, "opts");
  return v ? std::optional<std::string>(std::string(*v)) : std::nullopt;
}

int l_build(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  std::string pt_path = path;
  double generated_at = 0;
  bool perfetto = false;
  std::optional<std::string> cache_path, perfetto_path, html_path, html_head, html_mid, html_tail;
  size_t first_rows = kFirstRows;
  if (!lua_isnoneornil(L, 2)) {
    arg::table(L, 2, "opts");
    pt_path = opt_field(L, "pt_path").value_or(path);
    generated_at = arg::field_number(L, 2, "generated_at", "opts").value_or(0);
    perfetto = arg::field_boolean(L, 2, "perfetto", "opts").value_or(false);
    cache_path = opt_field(L, "cache_path");
    perfetto_path = opt_field(L, "perfetto_path");
    html_path = opt_field(L, "html_path");
    html_head = opt_field(L, "html_head");
    html_mid = opt_field(L, "html_mid");
    html_tail = opt_field(L, "html_tail");
    if (html_path && !(html_head && html_mid && html_tail))
      throw ArgError(2, "opts", "opts.html_path needs opts.html_head, opts.html_mid and opts.html_tail");
    first_rows = static_cast<size_t>(std::max<int64_t>(1, arg::field_integer(L, 2, "first_rows", "opts").value_or(kFirstRows)));
    perfetto = perfetto || perfetto_path.has_value();
  }
  std::string err, cache, trace_json;
  int64_t samples = 0, traced = 0, rows = 0, pd_rows = 0, items = 0;
  {
    try {
      trace::Timeline t = trace::build_timeline(pickle::torch_load(path), path);
      samples = t.dump_samples, traced = t.traced_samples, pd_rows = t.pd_rows;
      rows = static_cast<int64_t>(t.rows.size());
      for (const auto& r : t.rows) items += static_cast<int64_t>(r.items.size());
      cache = trace::timeline_cache_json(t, pt_path, generated_at);
      if (rows > 0) {  // no files for a dump without traces: the caller reports it
        if (perfetto) trace_json = trace::timeline_perfetto_json(t, pt_path);
        if (cache_path) trace::write_file_atomic(*cache_path, {cache});
        if (perfetto_path) trace::write_file_atomic(*perfetto_path, {trace_json});
        if (html_path) trace::write_timeline_page(*html_path, *html_head, *html_mid, *html_tail, cache, first_rows);
      }
    } catch (const Error& e) {
      err = e.what();
    }
  }
  if (!err.empty()) return fail(L, err);
  lua_createtable(L, 0, 8);
  if (!cache_path) set_string(L, "cache", cache);
  if (perfetto && !perfetto_path && rows > 0) set_string(L, "perfetto", trace_json);
  set_number(L, "sample_count", static_cast<double>(samples));
  set_number(L, "traced_samples", static_cast<double>(traced));
  set_number(L, "rows", static_cast<double>(rows));
  set_number(L, "pd_rows", static_cast<double>(pd_rows));
  set_number(L, "items", static_cast<double>(items));
  return 1;
}

int l_page(lua_State* L) {
  const std::string cache_path(arg::string(L, 1, "cache_path"));
  const std::string html_path(arg::string(L, 2, "html_path"));
  const auto head = arg::string(L, 3, "head");
  const auto mid = arg::string(L, 4, "mid");
  const auto tail = arg::string(L, 5, "tail");
  const auto first_rows = static_cast<size_t>(std::max<int64_t>(1, arg::opt_integer(L, 6, "first_rows").value_or(kFirstRows)));
  std::string err;
  {
    try {
      const std::string cache = trace::read_file(cache_path);
      trace::write_timeline_page(html_path, head, mid, tail, cache, first_rows);
    } catch (const Error& e) {
      err = e.what();
    }
  }
  if (!err.empty()) return fail(L, err);
  lua_pushboolean(L, 1);
  return 1;
}

int l_mtime(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  lua_pushnumber(L, static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9);
  return 1;
}

}  // namespace

void open_timeline(lua_State* L, int t) {
  static const Reg regs[] = {
      {"build", entry<l_build>},
      {"page", entry<l_page>},
      {"mtime", entry<l_mtime>},
  };
  register_functions(L, t, "rl.timeline.", regs);
}

}  // namespace rl::lua
