// rl.dist's native half (in librlhost_torch.so): c10d process-group handles.
// Rendezvous and collectives run on the handle's helper thread and complete an
// op (the calling task waits; the loop, servers and other tasks keep going);
// one such job at a time per handle. lua/rl/dist.lua wraps it.
//
//   _dist.env() -> opts_json | nil        torchrun's variables (bad ones raise)
//   _dist.group_new(opts_json) -> handle  rank 0 starts the store now (port known)
//   handle:connect() -> op ("done", "")   every rank joined
//   handle:barrier() -> op
//   handle:broadcast(bytes|nil, root) -> op ("done", bytes)
//   handle:scatter(list|nil, root) -> op ("done", bytes)
//   handle:set_default()                  the trainer all-reduces over it
//   handle:rank(), handle:world_size(), handle:port(), handle:close()
//   _dist.store_new(name, timeout_s) -> store   a client of the job's store (MASTER_ADDR:MASTER_PORT)
//   store:set(key, value) -> op ("done", "")    store:get(key) -> op ("done", JSON {v = value} or {})
//   store:add(key, delta) -> op ("done", the sum)   store:close()
//   _dist.local_address(towards, ifname?) -> address   where the job's other hosts reach this one
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/live_objects.hpp"
#include "bindings/host_context.hpp"
#include "bindings/torch_module.hpp"
#include "bindings/trampoline.hpp"
#include "dist/dist.hpp"
#include "net/host_address.hpp"

namespace rl::lua {
namespace {

using nlohmann::json;
const char kGroupMt = 0;

struct GroupBox : LiveObject {
  dist::GroupOptions opts;
  std::shared_ptr<dist::ProcessGroup> group;  // set at new (rank 0) or by connect
  bool is_default = false;
  OpThread worker;

  void close() {
    worker.stop();
    if (is_default && dist::default_group() == group) dist::set_default_group(nullptr);
    group.reset();
  }
  ~GroupBox() { close(); }
};

GroupBox& check_box(lua_State* L, int idx) {
  return *static_cast<GroupBox*>(check_udata(L, idx, &kGroupMt, "group", "rl.dist group handle"));
}

json opts_json(const dist::GroupOptions& o) {
  return {{"rank", o.rank},           {"world_size", o.world_size}, {"master_addr", o.master_addr},
          {"master_port", o.master_port}, {"timeout", o.timeout_s},  {"backend", o.backend},
          {"local_rank", o.device_index}};
}

int l_env(lua_State* L) {
  auto o = dist::options_from_env();
  if (!o) {
    lua_pushnil(L);
    return 1;
  }
  const std::string s = opts_json(*o).dump();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

int l_group_new(lua_State* L) {
  const std::string text(arg::string(L, 1, "opts"));
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ArgError(1, "opts", "a JSON object expected");
  dist::GroupOptions o;
  o.rank = j.value("rank", 0);
  o.world_size = j.value("world_size", 1);
  o.master_addr = j.value("master_addr", std::string("127.0.0.1"));
  o.master_port = j.value("master_port", 0);
  o.timeout_s = j.value("timeout", 300.0);
  o.backend = j.value("backend", std::string("gloo"));
  o.device_index = j.value("local_rank", 0);
  o.name = j.value("name", std::string("default"));
  std::shared_ptr<dist::ProcessGroup> g;
  if (o.rank == 0) g = std::make_shared<dist::ProcessGroup>(o);  // the store server: immediate
  void* mem = lua_newuserdata(L, sizeof(GroupBox));
  auto* box = new (mem) GroupBox();
  box->opts = o;
  if (g) box->opts.master_port = g->port();
  box->group = std::move(g);
  registry_get(L, &kGroupMt);
  lua_setmetatable(L, -2);
  return 1;
}

// Runs fn on the handle's helper thread; its text completes the op.
int start_job(lua_State* L, GroupBox& box, std::function<std::string()> fn) {
  if (box.worker.is_busy()) throw ArgError(1, "group", "the group is busy with another collective");
  return box.worker.start(L, std::move(fn));
}

std::shared_ptr<dist::ProcessGroup> connected(GroupBox& box) {
  if (!box.group) throw ArgError(1, "group", "not connected yet (call connect first)");
  return box.group;
}

int l_connect(lua_State* L) {
  GroupBox& box = check_box(L, 1);
  GroupBox* b = &box;  // the job is joined before the box goes away
  auto opts = box.opts;
  return start_job(L, box, [b, opts] {
    auto g = b->group ? b->group : std::make_shared<dist::ProcessGroup>(opts);
    g->connect();
    b->group = g;
    return std::string();
  });
}

int l_barrier(lua_State* L) {
  GroupBox& box = check_box(L, 1);
  auto g = connected(box);
  return start_job(L, box, [g] {
    g->barrier();
    return std::string();
  });
}

int l_broadcast(lua_State* L) {
  GroupBox& box = check_box(L, 1);
  auto g = connected(box);
  std::string blob(arg::opt_string(L, 2, "bytes").value_or(""));
  const int root = static_cast<int>(arg::opt_integer(L, 3, "root").value_or(0));
  return start_job(L, box, [g, blob = std::move(blob), root] { return g->broadcast_bytes(blob, root); });
}

int l_scatter(lua_State* L) {
  GroupBox& box = check_box(L, 1);
  auto g = connected(box);
  const int root = static_cast<int>(arg::opt_integer(L, 3, "root").value_or(0));
  std::vector<std::string> blobs;
  if (g->rank() == root) {
    arg::table(L, 2, "list");
    const size_t n = lua_objlen(L, 2);
    for (size_t i = 1; i <= n; ++i) {
      lua_rawgeti(L, 2, static_cast<int>(i));
      size_t len = 0;
      const char* s = lua_tolstring(L, -1, &len);
      if (!s) {
        lua_pop(L, 1);
        throw ArgError(2, "list", "entry " + std::to_string(i) + " is not a string");
      }
      blobs.emplace_back(s, len);
      lua_pop(L, 1);
    }
  }
  return start_job(L, box, [g, blobs = std::move(blobs), root] { return g->scatter_bytes(blobs, root); });
}

int l_set_default(lua_State* L) {
  GroupBox& box = check_box(L, 1);
  dist::set_default_group(connected(box));
  box.is_default = true;
  return 0;
}

int l_rank(lua_State* L) {
  lua_pushinteger(L, check_box(L, 1).opts.rank);
  return 1;
}

int l_world_size(lua_State* L) {
  lua_pushinteger(L, check_box(L, 1).opts.world_size);
  return 1;
}

int l_port(lua_State* L) {
  lua_pushinteger(L, check_box(L, 1).opts.master_port);
  return 1;
}

int l_close(lua_State* L) {
  check_box(L, 1).close();
  return 0;
}

// ---- the job's store ------------------------------------------------------------------

const char kStoreMt = 0;

struct StoreBox : LiveObject {
  std::shared_ptr<dist::KeyValueStore> store;
  OpThread worker;
  void close() {
    worker.stop();
    store.reset();
  }
  ~StoreBox() { close(); }
};

StoreBox& check_store(lua_State* L, int idx) {
  return *static_cast<StoreBox*>(check_udata(L, idx, &kStoreMt, "store", "rl.dist store handle"));
}

int store_job(lua_State* L, StoreBox& box, std::function<std::string()> fn) {
  if (!box.store) throw ArgError(1, "store", "closed");
  if (box.worker.is_busy()) throw ArgError(1, "store", "busy with another call (one at a time)");
  return box.worker.start(L, std::move(fn));
}

int l_store_new(lua_State* L) {
  const std::string name(arg::string(L, 1, "name"));
  const double timeout = arg::opt_number(L, 2, "timeout").value_or(30.0);
  auto o = dist::options_from_env();
  if (!o) throw ArgError(1, "name", "the job's store needs WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a distributed job)");
  auto store = std::make_shared<dist::KeyValueStore>(*o, name, timeout);
  void* mem = lua_newuserdata(L, sizeof(StoreBox));
  auto* box = new (mem) StoreBox();
  box->store = std::move(store);
  registry_get(L, &kStoreMt);
  lua_setmetatable(L, -2);
  return 1;
}

int l_store_set(lua_State* L) {
  StoreBox& box = check_store(L, 1);
  auto st = box.store;
  std::string key(arg::string(L, 2, "key")), value(arg::string(L, 3, "value"));
  return store_job(L, box, [st, key = std::move(key), value = std::move(value)] {
    st->set(key, value);
    return std::string();
  });
}

int l_store_get(lua_State* L) {
  StoreBox& box = check_store(L, 1);
  auto st = box.store;
  std::string key(arg::string(L, 2, "key"));
  return store_job(L, box, [st, key = std::move(key)] {
    auto v = st->get(key);
    json j = json::object();
    if (v) j["v"] = *v;
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  });
}

int l_store_add(lua_State* L) {
  StoreBox& box = check_store(L, 1);
  auto st = box.store;
  std::string key(arg::string(L, 2, "key"));
  const int64_t delta = arg::integer(L, 3, "delta");
  return store_job(L, box, [st, key = std::move(key), delta] { return std::to_string(st->add(key, delta)); });
}

int l_store_close(lua_State* L) {
  check_store(L, 1).close();
  return 0;
}

int l_local_address(lua_State* L) {
  const std::string towards(arg::string(L, 1, "towards"));
  const std::string ifname(arg::opt_string(L, 2, "ifname").value_or(""));
  try {
    const std::string a = net::local_address(towards, ifname);
    lua_pushlstring(L, a.data(), a.size());
    return 1;
  } catch (const std::exception& e) {
    return fail(L, e.what());
  }
}

}  // namespace

std::shared_ptr<dist::ProcessGroup> group_from(lua_State* L, int idx) {
  GroupBox& box = check_box(L, idx);
  if (!box.group) throw ArgError(idx, "group", "the group has no store yet (connect it first)");
  return box.group;
}

void open_dist(lua_State* L, int t) {
  static const Reg methods[] = {
      {"connect", entry<l_connect>}, {"barrier", entry<l_barrier>},       {"broadcast", entry<l_broadcast>},
      {"scatter", entry<l_scatter>}, {"set_default", entry<l_set_default>}, {"rank", entry<l_rank>},
      {"world_size", entry<l_world_size>}, {"port", entry<l_port>},      {"close", entry<l_close>},
  };
  make_metatable(L, &kGroupMt, "rl.dist.Group:", methods, std::size(methods), entry<destroy_udata<GroupBox>>);
  static const Reg store_methods[] = {
      {"set", entry<l_store_set>}, {"get", entry<l_store_get>}, {"add", entry<l_store_add>},
      {"close", entry<l_store_close>}};
  make_metatable(L, &kStoreMt, "rl.dist.Store:", store_methods, std::size(store_methods),
                 entry<destroy_udata<StoreBox>>);
  static const Reg regs[] = {{"env", entry<l_env>},
                             {"group_new", entry<l_group_new>},
                             {"store_new", entry<l_store_new>},
                             {"local_address", entry<l_local_address>}};
  register_functions(L, t, "rl.dist.", regs);
}

}  // namespace rl::lua
