// PdBridge's rooms and clocks, shared by pd_bridge.cpp (options, attach),
// pd_prefill.cpp (bootstrap, push) and pd_decode.cpp (registration, receipt).
// Internal to runtime/engine.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/pd_bridge.hpp"

namespace rl::engine {

inline double pd_mono_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
inline double pd_unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct PdBridge::PRoom {
  std::shared_ptr<pd::Export> exp;
  bool registered = false, pushing = false;
  int64_t from = 0;
  std::string decode_url, backend;
  bool checksum = false;
  double t_created = 0, t_ready = 0;
  uint64_t timer = 0;
};

struct PdBridge::DRoom {
  std::string rid, host;
  int port = 0;
  std::string backend;
  std::string state = "prealloc";  // prealloc -> bootstrap -> transfer
  int64_t from = 0;
  double t_reserved = 0, t_registered = 0;
  uint64_t timer = 0, request = 0;
};

}  // namespace rl::engine
