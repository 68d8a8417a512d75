#include "router/worker_registry.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstring>

namespace rl::router {

const char* circuit_name(Circuit c) {
  switch (c) {
    case Circuit::closed: return "closed";
    case Circuit::open: return "open";
    case Circuit::half_open: return "half_open";
  }
  return "?";
}

const char* worker_type_name(WorkerType t) {
  switch (t) {
    case WorkerType::regular: return "regular";
    case WorkerType::prefill: return "prefill";
    case WorkerType::decode: return "decode";
  }
  return "?";
}

bool parse_worker_type(std::string_view s, WorkerType& out) {
  if (s == "regular") out = WorkerType::regular;
  else if (s == "prefill") out = WorkerType::prefill;
  else if (s == "decode") out = WorkerType::decode;
  else return false;
  return true;
}

namespace {

bool link_local_host(const std::string& host) {
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  in_addr a4{};
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 16) == 0xA9FE;  // 169.254/16
  in6_addr a6{};
  if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
    if (IN6_IS_ADDR_LINKLOCAL(&a6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) return a6.s6_addr[12] == 169 && a6.s6_addr[13] == 254;
  }
  return false;
}

}  // namespace

const char* WorkerRegistry::status_name(const Worker& w) {
  return w.pending ? "pending" : w.healthy ? "healthy" : "unhealthy";
}

std::string WorkerRegistry::normalize_url(std::string_view url, std::string& error, bool allow_link_local) {
  const std::string shown(url.substr(0, 200));
  auto bad = [&](const std::string& why) {
    error = "bad worker URL '" + shown + "': " + why + " (http://host:port or https://host:port expected)";
    return std::string();
  };
  std::string u(url);
  while (!u.empty() && std::isspace(static_cast<unsigned char>(u.back()))) u.pop_back();
  while (!u.empty() && std::isspace(static_cast<unsigned char>(u.front()))) u.erase(0, 1);
  if (u.find("://") == std::string::npos) u = "http://" + u;
  while (!u.empty() && u.back() == '/') u.pop_back();
  const bool http = u.rfind("http://", 0) == 0, https = u.rfind("https://", 0) == 0;
  if (!http && !https) return bad("only http and https workers");
  const std::string rest = u.substr(http ? 7 : 8);
  for (unsigned char c : rest)
    if (c <= ' ' || c >= 0x7f || std::strchr("\"'<>\\`{}|^", c)) return bad("it holds a space, a control or a quote character");
  if (rest.empty()) return bad("no host");
  if (rest.find_first_of("/?#") != std::string::npos) return bad("a worker URL has no path, query or fragment");
  if (rest.find('@') != std::string::npos) return bad("no user@ part");
  // host[:port], the host possibly a bracketed IPv6 address
  std::string host = rest, port;
  if (rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) return bad("unclosed '['");
    host = rest.substr(0, close + 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return bad("junk after the IPv6 address");
      port = rest.substr(close + 2);
      if (port.empty()) return bad("empty port");
    }
  } else if (const size_t colon = rest.find(':'); colon != std::string::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (port.empty()) return bad("empty port");
  }
  if (host.empty()) return bad("no host");
  if (!port.empty()) {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      return bad("the port must be a number 1-65535");
  }
  if (!allow_link_local && link_local_host(host))
    return bad("link-local host (169.254.0.0/16 or fe80::/10, where cloud metadata services answer); start the "
               "router with --allow-link-local-workers if a worker really lives there");
  return u;
}

Worker* WorkerRegistry::add(std::string_view url, std::string& error, bool allow_link_local) {
  std::string u = normalize_url(url, error, allow_link_local);
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

std::vector<Worker*> WorkerRegistry::available(double now, const std::vector<uint64_t>& exclude,
                                               std::optional<WorkerType> type) {
  std::vector<Worker*> out, pending;
  out.reserve(workers_.size());
  for (auto& p : workers_) {
    Worker& w = *p;
    if (type && w.type != *type) continue;
    if (!w.healthy) continue;
    if (std::find(exclude.begin(), exclude.end(), w.id) != exclude.end()) continue;
    if (w.circuit == Circuit::open) {
      if (now - w.opened_at < breaker_.open_s) continue;
      w.circuit = Circuit::half_open;  // time is up: let one trial through
      w.trial_successes = 0;
      w.trial_in_flight = false;
    }
    if (w.circuit == Circuit::half_open && w.trial_in_flight) continue;
    (w.pending ? pending : out).push_back(&w);
  }
  // Unprobed workers only when no probed one can take it (a router's first
  // requests need not wait for the first probe).
  return out.empty() ? pending : out;
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

void WorkerRegistry::on_soft_failure(Worker& w, const std::string& error) {
  w.failures++;
  w.last_error = error;
  if (w.circuit == Circuit::half_open) w.trial_in_flight = false;  // the trial ended; no verdict
}

void WorkerRegistry::on_probe(Worker& w, bool ok, const std::string& error, int failure_threshold,
                              int success_threshold) {
  if (w.pending) {  // the first answer decides: healthy, or unhealthy at once
    w.pending = false;
    w.healthy = ok;
    if (!ok) w.last_error = error;
    return;
  }
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

std::string WorkerRegistry::why_unavailable(double now, std::optional<WorkerType> type) const {
  size_t n = 0;
  for (auto& w : workers_) n += !type || w->type == *type ? 1 : 0;
  if (n == 0 && !type) return "no workers registered (hint: POST /workers {\"url\": ...} or --worker URL)";
  const std::string role = type ? std::string(worker_type_name(*type)) + " " : "";
  if (n == 0) {
    const std::string flag = *type == WorkerType::prefill ? "--prefill URL [BOOTSTRAP_PORT]" : "--decode URL";
    return "no " + role + "workers registered (hint: " + flag + ", or POST /workers {\"url\": ..., \"worker_type\": \"" +
           worker_type_name(*type) + "\"})";
  }
  std::string s = "0 of " + std::to_string(n) + " " + role + "workers can take requests (";
  bool first = true;
  for (auto& w : workers_) {
    if (type && w->type != *type) continue;
    if (!first) s += "; ";
    first = false;
    s += w->url + ": ";
    if (!w->healthy) {
      s += "unhealthy";
    } else if (w->circuit == Circuit::open) {
      s += "circuit open for another " + std::to_string(static_cast<int>(std::max(0.0, breaker_.open_s - (now - w->opened_at)))) + " s";
    } else if (w->type == WorkerType::prefill && w->bootstrap_port == 0) {
      s += "bootstrap port not known yet (asked from its /server_info; or give it: --prefill URL PORT)";
    } else {
      s += std::string("circuit ") + circuit_name(w->circuit) + ", trial in flight";
    }
    if (!w->last_error.empty()) s += ", last error: " + w->last_error.substr(0, 160);
  }
  return s + ")";
}

}  // namespace rl::router
