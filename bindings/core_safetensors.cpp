// _core.safetensors: a saved weight directory cut into request bodies for an
// engine's /update_weights_from_safetensors (rl.weight_sync's "http" method).
//
//   encoder(dir, bucket_bytes) -> enc   the directory mapped and cut into buckets once
//                                       (each at most bucket_bytes of tensor data, a
//                                       bigger tensor in row slices: model/weight_buckets.hpp)
//   enc:count() -> n, bytes             bodies, and the tensors' bytes in all
//   enc:start(i) -> op                  body i (1-based) encoded on a thread of its own,
//                                       so the next bucket is made while the last one is
//                                       sent; the op's event is ("done", body, tensors):
//                                       body an rl.http.Body (bindings/http_body.hpp),
//                                       tensors how many tensors or slices it holds;
//                                       or ("error", why)
//   enc:close()                         unmaps the files now, not at the next collection
//                                       (a body being made keeps them until it is done)
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/buffer_pool.hpp"
#include "bindings/core_module.hpp"
#include "bindings/host_context.hpp"
#include "bindings/http_body.hpp"
#include "bindings/trampoline.hpp"
#include "model/weight_buckets.hpp"

namespace rl::lua {
namespace {

const char kEncoderMt = 0;  // registry: metatable of encoder userdata

struct Plan {
  model::TensorSet set;   // mapped: its owner keeps the files' mappings
  std::vector<model::Bucket> buckets;
  size_t bytes = 0;
};

struct EncoderBox {
  std::shared_ptr<const Plan> plan;
  std::shared_ptr<std::atomic<bool>> alive = std::make_shared<std::atomic<bool>>(true);
  struct Job {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Job> jobs;

  void join_finished() {
    for (auto it = jobs.begin(); it != jobs.end();) {
      if (!it->done->load()) {
        ++it;
        continue;
      }
      it->thread.join();
      it = jobs.erase(it);
    }
  }
  ~EncoderBox() {   // no event after this; a running encode finishes first
    alive->store(false);
    for (Job& j : jobs) j.thread.join();
  }
};

EncoderBox& check_encoder(lua_State* L) {
  return *static_cast<EncoderBox*>(check_udata(L, 1, &kEncoderMt, "enc", "rl.safetensors encoder"));
}

int l_encoder(lua_State* L) {
  const std::string dir(arg::string(L, 1, "dir"));
  const int64_t bucket = arg::integer(L, 2, "bucket_bytes");
  if (bucket < 1) throw ArgError(2, "bucket_bytes", "must be >= 1");
  auto plan = std::make_shared<Plan>();
  plan->set = model::read_safetensors_dir(dir);
  plan->buckets = model::plan_buckets(plan->set, static_cast<size_t>(bucket));
  for (const auto& t : plan->set.tensors) plan->bytes += t.nbytes;
  void* mem = lua_newuserdata(L, sizeof(EncoderBox));
  auto* box = new (mem) EncoderBox{};
  registry_get(L, &kEncoderMt);
  lua_setmetatable(L, -2);  // from here __gc destroys it
  box->plan = std::move(plan);
  return 1;
}

EncoderBox& open_encoder(lua_State* L) {
  EncoderBox& box = check_encoder(L);
  if (!box.plan) throw ArgError(1, "enc", "this encoder is closed");
  return box;
}

int l_close(lua_State* L) {
  check_encoder(L).plan.reset();   // a body being made holds the mapping until it is done
  return 0;
}

int l_count(lua_State* L) {
  const EncoderBox& box = open_encoder(L);
  lua_pushnumber(L, static_cast<lua_Number>(box.plan->buckets.size()));
  lua_pushnumber(L, static_cast<lua_Number>(box.plan->bytes));
  return 2;
}

int l_start(lua_State* L) {
  EncoderBox& box = open_encoder(L);
  const int64_t i = arg::integer(L, 2, "i");
  const size_t n = box.plan->buckets.size();
  if (i < 1 || static_cast<size_t>(i) > n) throw ArgError(2, "i", "must be in [1, " + std::to_string(n) + "]");
  box.join_finished();
  HostContext* c = &HostContext::get(L);
  const uint64_t op = c->new_op();
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([c, alive = box.alive, plan = box.plan, done, op, b = size_t(i - 1)] {
    SharedBytes body;
    std::string err;
    try {
      // Into a kept buffer, given back when every request sending it is done: the next
      // sync's bodies reuse the same memory (base/buffer_pool.hpp).
      const size_t room = model::bucket_data_bytes(plan->set, plan->buckets[b]) + (size_t{1} << 16);
      body = share_pooled(model::encode_bucket(plan->set, plan->buckets[b], large_buffers().take(room)));
    } catch (const std::exception& e) {
      err = e.what();
    }
    const size_t tensors = plan->buckets[b].size();
    c->loop().post([c, alive, op, body = std::move(body), err = std::move(err), tensors] {
      if (!alive->load()) return;
      c->deliver(op, [&](lua_State* S) {
        if (!body) {
          lua_pushliteral(S, "error");
          lua_pushlstring(S, err.data(), err.size());
          return 2;
        }
        lua_pushliteral(S, "done");
        push_http_body(S, body);
        lua_pushnumber(S, static_cast<lua_Number>(tensors));
        return 3;
      }, true);
    });
    done->store(true);
  });
  box.jobs.push_back({std::move(t), std::move(done)});
  lua_pushnumber(L, static_cast<lua_Number>(op));
  return 1;
}

}  // namespace

void open_safetensors(lua_State* L, int t) {
  static const Reg methods[] = {{"count", entry<l_count>}, {"start", entry<l_start>}, {"close", entry<l_close>}};
  make_metatable(L, &kEncoderMt, "rl.safetensors.Encoder:", methods, std::size(methods),
                 entry<destroy_udata<EncoderBox>>);
  static const Reg regs[] = {{"encoder", entry<l_encoder>}};
  register_functions(L, t, "rl.safetensors.", regs);
}

}  // namespace rl::lua
