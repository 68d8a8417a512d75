#include "router/worker_registry.hpp"

#include <algorithm>
#include <cctype>

namespace rl::router {

const char* circuit_name(Circuit c) {
  switch (c) {
    case Circuit::closed: return "closed";
    case Circuit::open: return "open";
    case Circuit::half_open: return "half_open";
  }
  return "?";
}

std::string WorkerRegistry::normalize_url(std::string_view url, std::string& error) {
  std::string u(url);
  while (!u.empty() && std::isspace(static_cast<unsigned char>(u.back()))) u.pop_back();
  while (!u.empty() && std::isspace(static_cast<unsigned char>(u.front()))) u.erase(0, 1);
  if (u.find("://") == std::string::npos) u = "http://" + u;
  while (!u.empty() && u.back() == '/') u.pop_back();
  const bool http = u.rfind("http://", 0) == 0, https = u.rfind("https://", 0) == 0;
  const size_t host_start = http ? 7 : https ? 8 : 0;
  if (!http && !https) {
    error = "bad worker URL '" + std::string(url) + "' (http://host:port expected)";
    return {};
  }
  const std::string rest = u.substr(host_start);
  if (rest.empty() || rest.find_first_of(" \t\r\n\"'<>\\") != std::string::npos) {
    error = "bad worker URL '" + std::string(url) + "' (http://host:port expected)";
    return {};
  }
  return u;
}

Worker* WorkerRegistry::add(std::string_view url, std::string& error) {
  std::string u = normalize_url(url, error);
  if (u.empty()) return nullptr;
  for (auto& w : workers_) {
    if (w->url == u) {
      error = "worker " + u + " is already registered (id " + std::to_string(w->id) + ")";
      return nullptr;
    }
  }
  auto w = std::make_unique<Worker>();
  w->id = next_id_++;
  w->url = std::move(u);
  workers_.push_back(std::move(w));
  version_++;
  return workers_.back().get();
}

Worker* WorkerRegistry::by_id(uint64_t id) {
  for (auto& w : workers_)
    if (w->id == id) return w.get();
  return nullptr;
}

Worker* WorkerRegistry::find(std::string_view key) {
  if (!key.empty() && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return by_id(std::stoull(std::string(key)));
  std::string err;
  const std::string u = normalize_url(key, err);
  for (auto& w : workers_)
    if (w->url == u) return w.get();
  return nullptr;
}

bool WorkerRegistry::remove(std::string_view key) {
  Worker* w = find(key);
  if (!w) return false;
  workers_.erase(std::find_if(workers_.begin(), workers_.end(), [w](auto& p) { return p.get() == w; }));
  version_++;
  return true;
}

std::vector<Worker*> WorkerRegistry::available(double now, const std::vector<uint64_t>& exclude) {
  std::vector<Worker*> out;
  out.reserve(workers_.size());
  for (auto& p : workers_) {
    Worker& w = *p;
    if (!w.healthy) continue;
    if (std::find(exclude.begin(), exclude.end(), w.id) != exclude.end()) continue;
    if (w.circuit == Circuit::open) {
      if (now - w.opened_at < breaker_.open_s) continue;
      w.circuit = Circuit::half_open;  // time is up: let one trial through
      w.trial_successes = 0;
      w.trial_in_flight = false;
    }
    if (w.circuit == Circuit::half_open && w.trial_in_flight) continue;
    out.push_back(&w);
  }
  return out;
}

void WorkerRegistry::on_dispatch(Worker& w) {
  w.in_flight++;
  w.requests++;
  if (w.circuit == Circuit::half_open) w.trial_in_flight = true;
}

void WorkerRegistry::on_released(Worker& w) {
  if (w.in_flight > 0) w.in_flight--;
}

void WorkerRegistry::on_success(Worker& w) {
  w.request_failures = 0;
  if (w.circuit == Circuit::half_open) {
    w.trial_in_flight = false;
    if (++w.trial_successes >= breaker_.success_threshold) w.circuit = Circuit::closed;
  }
}

void WorkerRegistry::on_failure(Worker& w, double now, const std::string& error) {
  w.failures++;
  w.last_error = error;
  w.request_failures++;
  const bool trial_failed = w.circuit == Circuit::half_open;
  if (trial_failed || (w.circuit == Circuit::closed && w.request_failures >= breaker_.failure_threshold)) {
    w.circuit = Circuit::open;
    w.opened_at = now;
    w.trial_in_flight = false;
    w.circuit_opens++;
  }
}

void WorkerRegistry::on_probe(Worker& w, bool ok, const std::string& error, int failure_threshold,
                              int success_threshold) {
  if (ok) {
    w.probe_failures = 0;
    if (!w.healthy && ++w.probe_successes >= success_threshold) {
      w.healthy = true;
      w.probe_successes = 0;
      // Back from the dead: give it a clean slate rather than an open circuit
      // left over from the failures that took it down.
      w.circuit = Circuit::closed;
      w.request_failures = 0;
    }
  } else {
    w.probe_successes = 0;
    w.last_error = error;
    if (w.healthy && ++w.probe_failures >= failure_threshold) w.healthy = false;
  }
}

std::string WorkerRegistry::why_unavailable(double now) const {
  if (workers_.empty()) return "no workers registered (hint: POST /workers {\"url\": ...} or --worker URL)";
  std::string s = "0 of " + std::to_string(workers_.size()) + " workers can take requests (";
  bool first = true;
  for (auto& w : workers_) {
    if (!first) s += "; ";
    first = false;
    s += w->url + ": ";
    if (!w->healthy) {
      s += "unhealthy";
    } else if (w->circuit == Circuit::open) {
      s += "circuit open for another " + std::to_string(static_cast<int>(std::max(0.0, breaker_.open_s - (now - w->opened_at)))) + " s";
    } else {
      s += std::string("circuit ") + circuit_name(w->circuit) + ", trial in flight";
    }
    if (!w->last_error.empty()) s += ", last error: " + w->last_error.substr(0, 160);
  }
  return s + ")";
}

}  // namespace rl::router
