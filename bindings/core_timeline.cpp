// _core.timeline: the trace timeline cache builder (runtime/trace/timeline.*) for
// tools/trace_timeline.lua.
//   build(path, {pt_path, generated_at, perfetto}) -> {cache, perfetto?, sample_count,
//     traced_samples, rows, pd_rows, items} or nil, err (missing / corrupt file, not a dump)
//   mtime(path) -> seconds since the epoch (fractional), or nil when there is no such file
#include <sys/stat.h>

#include <string>

#include "base/errors.hpp"
#include "bindings/core_module.hpp"
#include "bindings/trampoline.hpp"
#include "rollout/torch_file.hpp"
#include "trace/timeline.hpp"

namespace rl::lua {
namespace {

int l_build(lua_State* L) {
  const std::string path(arg::string(L, 1, "path"));
  std::string pt_path = path;
  double generated_at = 0;
  bool perfetto = false;
  if (!lua_isnoneornil(L, 2)) {
    arg::table(L, 2, "opts");
    if (auto v = arg::field_string(L, 2, "pt_path", "opts")) pt_path = std::string(*v);
    generated_at = arg::field_number(L, 2, "generated_at", "opts").value_or(0);
    perfetto = arg::field_boolean(L, 2, "perfetto", "opts").value_or(false);
  }
  std::string err, cache, trace_json;
  int64_t samples = 0, traced = 0, rows = 0, pd_rows = 0, items = 0;
  {
    try {
      trace::Timeline t = trace::build_timeline(rollout::torch_load(path), path);
      cache = trace::timeline_cache_json(t, pt_path, generated_at);
      if (perfetto) trace_json = trace::timeline_perfetto_json(t, pt_path);
      samples = t.sample_count, traced = t.traced_samples, pd_rows = t.pd_rows;
      rows = static_cast<int64_t>(t.rows.size());
      for (const auto& r : t.rows) items += static_cast<int64_t>(r.items.size());
    } catch (const Error& e) {
      err = e.what();
    }
  }
  if (!err.empty()) return fail(L, err);
  lua_createtable(L, 0, 8);
  set_string(L, "cache", cache);
  if (perfetto) set_string(L, "perfetto", trace_json);
  set_number(L, "sample_count", static_cast<double>(samples));
  set_number(L, "traced_samples", static_cast<double>(traced));
  set_number(L, "rows", static_cast<double>(rows));
  set_number(L, "pd_rows", static_cast<double>(pd_rows));
  set_number(L, "items", static_cast<double>(items));
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
      {"mtime", entry<l_mtime>},
  };
  register_functions(L, t, "rl.timeline.", regs);
}

}  // namespace rl::lua
