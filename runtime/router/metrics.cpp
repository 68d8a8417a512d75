#include "router/metrics.hpp"

#include <initializer_list>
#include <unordered_map>

namespace rl::router {

namespace {

const std::vector<double> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                      1,     2.5,    5,     10,   30,    60,   120, 300};

std::string escape_label(std::string_view v) { return metrics::prom_label_value(v); }

void family(std::string& out, const char* name, const char* type, const char* help) {
  metrics::prom_family(out, name, type, help);
}

// name{k1="v1",...} n: one sample of a counter or gauge with escaped label values.
void sample(std::string& out, const char* name, std::initializer_list<std::pair<const char*, std::string_view>> labels,
            uint64_t n) {
  std::string l;
  for (auto& [k, v] : labels) {
    if (!l.empty()) l += ',';
    l.append(k).append("=\"").append(escape_label(v)).append("\"");
  }
  metrics::prom_sample(out, name, l, n);
}

}  // namespace

void RouterMetrics::record_request(const std::string& worker, const std::string& endpoint, int status,
                                   double seconds) {
  requests_[{worker, endpoint, status}]++;
  record_duration(endpoint, seconds);
}

void RouterMetrics::record_duration(const std::string& endpoint, double seconds) {
  durations_.try_emplace(endpoint, kBuckets).first->second.observe(seconds);
}

uint64_t RouterMetrics::requests(const std::string& worker) const {
  uint64_t n = 0;
  for (auto& [k, v] : requests_)
    if (std::get<0>(k) == worker) n += v;
  return n;
}

std::string RouterMetrics::render(const WorkerRegistry& workers) const {
  std::string out;
  out.reserve(4096);
  family(out, "rlhost_router_requests_total", "counter", "Requests answered, by worker, endpoint and HTTP status.");
  for (auto& [k, v] : requests_) {
    auto& [w, ep, status] = k;
    sample(out, "rlhost_router_requests_total", {{"worker", w}, {"endpoint", ep}, {"status", std::to_string(status)}}, v);
  }
  family(out, "rlhost_router_request_duration_seconds", "histogram",
         "Time from request received to response end at the router, retries included.");
  for (auto& [ep, h] : durations_)
    h.render(out, "rlhost_router_request_duration_seconds", "endpoint=\"" + escape_label(ep) + "\"");
  family(out, "rlhost_router_retries_total", "counter", "Attempts that failed on a worker and were retried elsewhere.");
  for (auto& [w, v] : retries_) sample(out, "rlhost_router_retries_total", {{"worker", w}}, v);
  family(out, "rlhost_router_upstream_errors_total", "counter",
         "Failed attempts by worker and kind (connect, timeout, http_5xx).");
  for (auto& [k, v] : errors_)
    sample(out, "rlhost_router_upstream_errors_total", {{"worker", k.first}, {"kind", k.second}}, v);
  family(out, "rlhost_router_rejected_total", "counter", "Requests answered by the router itself with an error.");
  for (auto& [r, v] : rejected_) sample(out, "rlhost_router_rejected_total", {{"reason", r}}, v);
  family(out, "rlhost_router_in_flight", "gauge", "Requests in flight to each worker through this router.");
  for (auto& w : workers.all())
    sample(out, "rlhost_router_in_flight", {{"worker", w->url}}, static_cast<uint64_t>(w->in_flight));
  family(out, "rlhost_router_worker_healthy", "gauge", "1 when the worker's health probes pass, else 0.");
  for (auto& w : workers.all()) sample(out, "rlhost_router_worker_healthy", {{"worker", w->url}}, w->healthy ? 1 : 0);
  family(out, "rlhost_router_worker_circuit_state", "gauge", "Circuit breaker: 0 closed, 1 open, 2 half-open.");
  for (auto& w : workers.all())
    sample(out, "rlhost_router_worker_circuit_state", {{"worker", w->url}}, static_cast<uint64_t>(w->circuit));
  // The pools (regular, and in PD mode prefill and decode).
  uint64_t total[3] = {0, 0, 0}, healthy[3] = {0, 0, 0};
  for (auto& w : workers.all()) {
    total[static_cast<int>(w->type)]++;
    healthy[static_cast<int>(w->type)] += w->healthy && !w->pending ? 1 : 0;
  }
  const WorkerType types[] = {WorkerType::regular, WorkerType::prefill, WorkerType::decode};
  family(out, "rlhost_router_workers", "gauge", "Registered workers per pool (worker_type regular, prefill, decode).");
  for (auto t : types)
    if (total[static_cast<int>(t)] || t == WorkerType::regular)
      sample(out, "rlhost_router_workers", {{"worker_type", worker_type_name(t)}}, total[static_cast<int>(t)]);
  family(out, "rlhost_router_healthy_workers", "gauge", "Workers whose health probes pass, per pool.");
  for (auto t : types)
    if (total[static_cast<int>(t)] || t == WorkerType::regular)
      sample(out, "rlhost_router_healthy_workers", {{"worker_type", worker_type_name(t)}}, healthy[static_cast<int>(t)]);
  family(out, "rlhost_router_pd_requests_total", "counter", "PD mode: requests sent to each prefill and decode worker.");
  for (auto& [k, v] : pd_requests_) sample(out, "rlhost_router_pd_requests_total", {{"role", k.first}, {"worker", k.second}}, v);
  family(out, "rlhost_router_pd_errors_total", "counter",
         "PD mode: failed sides by role, worker and kind (connect, timeout, http_5xx).");
  for (auto& [k, v] : pd_errors_)
    sample(out, "rlhost_router_pd_errors_total",
           {{"role", std::get<0>(k)}, {"worker", std::get<1>(k)}, {"kind", std::get<2>(k)}}, v);
  return out;
}

// ---- merging worker expositions ---------------------------------------------------

namespace {

struct Family {
  std::string name, help, type;
  std::vector<std::string> samples;
};

bool has_suffix(std::string_view s, std::string_view suf) {
  return s.size() > suf.size() && s.substr(s.size() - suf.size()) == suf;
}

// The family a sample named `name` belongs to, given the families seen so far.
std::string family_of(std::string_view name, const std::string& current,
                      const std::unordered_map<std::string, size_t>& index) {
  static const std::string_view kSuffixes[] = {"_bucket", "_sum", "_count", "_total", "_created", "_info"};
  if (name == current) return current;
  for (auto suf : kSuffixes)
    if (!current.empty() && has_suffix(name, suf) && name.substr(0, name.size() - suf.size()) == current) return current;
  if (index.count(std::string(name))) return std::string(name);
  for (auto suf : kSuffixes)
    if (has_suffix(name, suf)) {
      std::string base(name.substr(0, name.size() - suf.size()));
      if (index.count(base)) return base;
    }
  return std::string(name);
}

}  // namespace

std::string merge_expositions(const std::vector<std::pair<std::string, std::string>>& sources,
                              const std::vector<std::pair<std::string, std::string>>& errors) {
  std::vector<Family> fams;
  std::unordered_map<std::string, size_t> index;
  auto get = [&](const std::string& name) -> Family& {
    auto [it, fresh] = index.try_emplace(name, fams.size());
    if (fresh) fams.push_back(Family{name, "", "", {}});
    return fams[it->second];
  };
  for (auto& [worker, text] : sources) {
    const std::string label = "worker=\"" + escape_label(worker) + "\"";
    std::string current;
    size_t start = 0;
    while (start < text.size()) {
      size_t nl = text.find('\n', start);
      if (nl == std::string::npos) nl = text.size();
      std::string_view line(text.data() + start, nl - start);
      start = nl + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      if (line[0] == '#') {
        // "# HELP name text" / "# TYPE name type"; other comments are dropped.
        const bool help = line.rfind("# HELP ", 0) == 0, type = line.rfind("# TYPE ", 0) == 0;
        if (!help && !type) continue;
        std::string_view rest = line.substr(7);
        const size_t sp = rest.find(' ');
        const std::string name(rest.substr(0, sp));
        const std::string value = sp == std::string_view::npos ? "" : std::string(rest.substr(sp + 1));
        Family& f = get(name);
        if (help && f.help.empty()) f.help = value;
        if (type && f.type.empty()) f.type = value;
        current = name;
        continue;
      }
      const size_t name_end = line.find_first_of("{ \t");
      if (name_end == std::string_view::npos) continue;  // a name without a value: not a sample
      const std::string_view name = line.substr(0, name_end);
      Family& f = get(family_of(name, current, index));
      std::string s(name);
      if (line[name_end] == '{') {
        const std::string_view after = line.substr(name_end + 1);
        s += '{';
        s += label;
        if (!after.empty() && after[0] != '}') s += ',';
        s += after;
      } else {
        s += '{';
        s += label;
        s += '}';
        s += line.substr(name_end);
      }
      f.samples.push_back(std::move(s));
    }
  }
  std::string out;
  for (auto& f : fams) {
    if (f.samples.empty()) continue;  // HELP/TYPE without samples: nothing to say
    out += "# HELP " + f.name + " " + (f.help.empty() ? "(no help text from the worker)" : f.help) + "\n";
    if (!f.type.empty()) out += "# TYPE " + f.name + " " + f.type + "\n";
    for (auto& s : f.samples) out += s + "\n";
  }
  family(out, "rlhost_router_engine_metrics_up", "gauge", "1 when the worker's /metrics was fetched, else 0.");
  for (auto& [worker, text] : sources) sample(out, "rlhost_router_engine_metrics_up", {{"worker", worker}}, 1);
  for (auto& [worker, err] : errors) sample(out, "rlhost_router_engine_metrics_up", {{"worker", worker}}, 0);
  return out;
}

}  // namespace rl::router
