#include "metrics/prometheus_text.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace rl::metrics {

std::string prom_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string prom_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[40];
  for (int digits : {15, 16, 17}) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void prom_family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out.append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name).append(" ");
  out.append(type).append("\n");
}

namespace {
void sample_text(std::string& out, std::string_view name, std::string_view labels, const std::string& value) {
  out.append(name);
  if (!labels.empty()) out.append("{").append(labels).append("}");
  out.append(" ").append(value).append("\n");
}
}  // namespace

void prom_sample(std::string& out, std::string_view name, std::string_view labels, double v) {
  sample_text(out, name, labels, prom_number(v));
}

void prom_sample(std::string& out, std::string_view name, std::string_view labels, uint64_t v) {
  sample_text(out, name, labels, std::to_string(v));
}

void PromHistogram::observe(double v) {
  if (!(v >= 0) || std::isinf(v)) return;
  size_t k = 0;
  while (k < bounds_.size() && v > bounds_[k]) ++k;
  ++counts_[k];
  sum_ += v;
  ++count_;
}

void PromHistogram::render(std::string& out, std::string_view name, std::string_view labels) const {
  const std::string bucket = std::string(name) + "_bucket";
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cum = 0;
  for (size_t k = 0; k <= bounds_.size(); ++k) {
    cum += counts_[k];
    const std::string le = k < bounds_.size() ? prom_number(bounds_[k]) : "+Inf";
    prom_sample(out, bucket, std::string(labels) + sep + "le=\"" + le + "\"", cum);
  }
  prom_sample(out, std::string(name) + "_sum", labels, sum_);
  prom_sample(out, std::string(name) + "_count", labels, count_);
}

}  // namespace rl::metrics
