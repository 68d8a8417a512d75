// Prometheus text exposition (format 0.0.4): the one writer of the engine server's
// /metrics (runtime/engine/server_metrics.*) and the router's (runtime/router/metrics.*).
// Numbers are written in the shortest form that reads back to the same double (what
// Python's prometheus_client writes: le="0.1", not "0.10000000000000001"), +Inf / -Inf /
// NaN as the format spells them; label values are escaped.
//
//   std::string out;
//   metrics::prom_family(out, "x_total", "counter", "Things done.");
//   metrics::prom_sample(out, "x_total", "worker=\"" + metrics::prom_label_value(url) + "\"", 3);
//   metrics::PromHistogram h({0.1, 1, 10});  h.observe(0.5);  h.render(out, "x_seconds", labels);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rl::metrics {

// Escapes a label value: backslash, double quote, newline.
std::string prom_label_value(std::string_view v);

// A sample value or bucket bound: the shortest round-trip decimal; +Inf, -Inf, NaN.
std::string prom_number(double v);

// "# HELP name help\n# TYPE name type\n".
void prom_family(std::string& out, std::string_view name, std::string_view type, std::string_view help);

// "name{labels} value\n" ("name value\n" without labels).
void prom_sample(std::string& out, std::string_view name, std::string_view labels, double v);
void prom_sample(std::string& out, std::string_view name, std::string_view labels, uint64_t v);

// A histogram with fixed upper bounds (ascending); not thread-safe (its owner locks).
class PromHistogram {
 public:
  explicit PromHistogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  // NaN, negative or infinite values mean "unknown" and are not counted.
  void observe(double v);
  // name_bucket{labels,le="..."} (cumulative, +Inf last), name_sum{labels}, name_count{labels}.
  void render(std::string& out, std::string_view name, std::string_view labels) const;
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace rl::metrics
