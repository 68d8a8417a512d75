// The one Prometheus text writer (runtime/metrics/prometheus_text.*) and its two users:
// numbers in their shortest round-trip form (le="0.1", as Python's prometheus_client
// writes it), escaped label values, cumulative histograms, and the router's exposition
// written with it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "metrics/prometheus_text.hpp"
#include "router/metrics.hpp"
#include "router/worker_registry.hpp"

using namespace rl;

TEST_CASE("prometheus text: numbers read back to the same double, in their shortest form", "[prometheus]") {
  CHECK(metrics::prom_number(0.1) == "0.1");
  CHECK(metrics::prom_number(0.0025) == "0.0025");
  CHECK(metrics::prom_number(300) == "300");
  CHECK(metrics::prom_number(1e300) == "1e+300");
  CHECK(metrics::prom_number(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(metrics::prom_number(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(metrics::prom_number(std::nan("")) == "NaN");
  for (double v : {1.0 / 3, 0.1 + 0.2, 123456.789012345678, 5e-324}) {
    const std::string s = metrics::prom_number(v);
    CHECK(std::strtod(s.c_str(), nullptr) == v);
  }
  CHECK(metrics::prom_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
}

TEST_CASE("prometheus text: families, samples and cumulative histograms", "[prometheus]") {
  std::string out;
  metrics::prom_family(out, "x_seconds", "histogram", "A histogram.");
  metrics::PromHistogram h({0.1, 1});
  for (double v : {0.05, 0.1, 0.5, 7.0, -1.0, std::nan("")}) h.observe(v);   // the last two: unknown, not counted
  h.render(out, "x_seconds", "k=\"v\"");
  metrics::prom_sample(out, "plain_total", "", uint64_t{3});
  CHECK(out ==
        "# HELP x_seconds A histogram.\n# TYPE x_seconds histogram\n"
        "x_seconds_bucket{k=\"v\",le=\"0.1\"} 2\n"
        "x_seconds_bucket{k=\"v\",le=\"1\"} 3\n"
        "x_seconds_bucket{k=\"v\",le=\"+Inf\"} 4\n"
        "x_seconds_sum{k=\"v\"} 7.65\n"
        "x_seconds_count{k=\"v\"} 4\n"
        "plain_total 3\n");
  CHECK(h.count() == 4);
}

TEST_CASE("prometheus text: the router's exposition goes through the same writer", "[prometheus]") {
  router::RouterMetrics m;
  m.record_request("http://w\"1", "/generate", 200, 0.05);
  m.record_retry("http://w\"1");
  router::WorkerRegistry workers;
  const std::string out = m.render(workers);
  CHECK(out.find("rlhost_router_requests_total{worker=\"http://w\\\"1\",endpoint=\"/generate\",status=\"200\"} 1\n") !=
        std::string::npos);
  CHECK(out.find("rlhost_router_request_duration_seconds_bucket{endpoint=\"/generate\",le=\"0.1\"} 1\n") !=
        std::string::npos);
  CHECK(out.find("rlhost_router_request_duration_seconds_sum{endpoint=\"/generate\"} 0.05\n") != std::string::npos);
  CHECK(out.find("rlhost_router_retries_total{worker=\"http://w\\\"1\"} 1\n") != std::string::npos);
}
