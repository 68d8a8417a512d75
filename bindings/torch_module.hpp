// The parts of librlhost_torch.so's module table, one per bindings/torch_<area>.cpp.
#pragma once

#include <lua.hpp>

#include <memory>

namespace rl::nn { class Transformer; class LoraAdapter; }
namespace rl::engine { class Engine; }
namespace rl::dist { class ProcessGroup; }

namespace rl::lua {

// Each fills the module table at `t` (an absolute index).
void open_model(lua_State* L, int t);   // torch_model.cpp: model_load, model_init, Model methods
void open_engine(lua_State* L, int t);  // torch_engine.cpp: start, Engine methods, process helpers
void open_trainer(lua_State* L, int t); // torch_trainer.cpp: trainer_new, Trainer methods
void open_dist(lua_State* L, int t);    // torch_dist.cpp: process-group handles (rl.dist)
void open_stepwise(lua_State* L, int t);  // torch_stepwise.cpp: Tinker training clients (rl.tinker)

// The object behind a handle argument (throws ArgError naming the argument).
std::shared_ptr<nn::Transformer> model_from(lua_State* L, int idx);   // an rl.model handle
std::shared_ptr<nn::LoraAdapter> lora_from(lua_State* L, int idx);    // an rl.model LoRA adapter handle
void push_lora(lua_State* L, std::shared_ptr<nn::LoraAdapter> adapter);  // a new LoRA adapter handle
std::shared_ptr<engine::Engine> engine_from(lua_State* L, int idx);   // an rl.engine thread-mode handle
std::shared_ptr<dist::ProcessGroup> group_from(lua_State* L, int idx); // an rl.dist group handle

}  // namespace rl::lua
