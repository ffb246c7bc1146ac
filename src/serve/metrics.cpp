// Prometheus text exposition (metrics.h): # HELP / # TYPE lines, then one sample per label value; a
// histogram as cumulative _bucket{le=...} samples, _sum and _count.
#include "serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace zaya::serve {

namespace {

bool valid_name(const std::string& n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  });
}

// Label values: backslash, double quote and newline escaped.
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// HELP text: backslash and newline escaped.
std::string escape_help(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string sample_name(const std::string& name, const std::string& label, const std::string& value) {
  if (label.empty()) return name;
  return name + "{" + label + "=\"" + escape_label(value) + "\"}";
}

}  // namespace

std::string prometheus_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) < 1e15) return str_cat(static_cast<long long>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // The shortest representation that reads back to the same double.
  for (int prec = 1; prec <= 17; prec++) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*g", prec, v);
    if (std::strtod(b, nullptr) == v) return b;
  }
  return buf;
}

void Counter::add(double v, const std::string& label_value) {
  ZAYA_CHECK(v >= 0, "a counter only increases (add ", v, ")");
  std::lock_guard<std::mutex> lock(mu_);
  values_[label_value] += v;
}

double Counter::value(const std::string& label_value) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(label_value);
  return it == values_.end() ? 0 : it->second;
}

void Gauge::set(double v, const std::string& label_value) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[label_value] = v;
}

void Gauge::add(double v, const std::string& label_value) {
  std::lock_guard<std::mutex> lock(mu_);
  values_[label_value] += v;
}

double Gauge::value(const std::string& label_value) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = values_.find(label_value);
  return it == values_.end() ? 0 : it->second;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  ZAYA_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()) &&
                 std::adjacent_find(bounds_.begin(), bounds_.end()) == bounds_.end(),
             "histogram bounds must be strictly ascending");
}

void Histogram::observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t b = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());  // le
  counts_[b]++;
  sum_ += v;
  count_++;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

double Histogram::sum() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sum_;
}

double Histogram::quantile(double q) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (count_ == 0) return NAN;
  const double rank = q * double(count_);
  uint64_t below = 0;
  for (size_t b = 0; b < counts_.size(); b++) {
    if (double(below + counts_[b]) >= rank && counts_[b] > 0) {
      if (b == bounds_.size()) return bounds_.empty() ? NAN : bounds_.back();  // in +Inf: the last bound
      const double lo = b == 0 ? std::min(0.0, bounds_[0]) : bounds_[b - 1], hi = bounds_[b];
      return lo + (hi - lo) * (rank - double(below)) / double(counts_[b]);
    }
    below += counts_[b];
  }
  return bounds_.empty() ? NAN : bounds_.back();
}

Metrics::Entry& Metrics::add(const std::string& name, const std::string& help, const std::string& type,
                             const std::string& label) {
  ZAYA_CHECK(valid_name(name), "metric name '", name, "' is not a valid Prometheus name");
  ZAYA_CHECK(label.empty() || (valid_name(label) && label != "le"), "label name '", label, "' is not valid");
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : entries_) ZAYA_CHECK(e->name != name, "metric '", name, "' registered twice");
  entries_.push_back(std::make_unique<Entry>());
  Entry& e = *entries_.back();
  e.name = name;
  e.help = help;
  e.type = type;
  e.label = label;
  return e;
}

Counter& Metrics::counter(const std::string& name, const std::string& help, const std::string& label) {
  Entry& e = add(name, help, "counter", label);
  e.counter = std::make_unique<Counter>();
  return *e.counter;
}

Gauge& Metrics::gauge(const std::string& name, const std::string& help, const std::string& label) {
  Entry& e = add(name, help, "gauge", label);
  e.gauge = std::make_unique<Gauge>();
  return *e.gauge;
}

Histogram& Metrics::histogram(const std::string& name, const std::string& help, std::vector<double> bounds) {
  auto h = std::make_unique<Histogram>(std::move(bounds));
  Entry& e = add(name, help, "histogram", "");
  e.histogram = std::move(h);
  return *e.histogram;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& ep : entries_) {
    const Entry& e = *ep;
    out += "# HELP " + e.name + " " + escape_help(e.help) + "\n# TYPE " + e.name + " " + e.type + "\n";
    auto values = [&](const std::map<std::string, double>& vals) {
      if (vals.empty() && e.label.empty()) out += e.name + " 0\n";
      for (const auto& [lv, v] : vals)
        out += sample_name(e.name, e.label, lv) + " " + prometheus_number(v) + "\n";
    };
    if (e.counter) {
      std::lock_guard<std::mutex> l(e.counter->mu_);
      values(e.counter->values_);
    } else if (e.gauge) {
      std::lock_guard<std::mutex> l(e.gauge->mu_);
      values(e.gauge->values_);
    } else {
      const Histogram& h = *e.histogram;
      std::lock_guard<std::mutex> l(h.mu_);
      uint64_t cum = 0;
      for (size_t b = 0; b <= h.bounds_.size(); b++) {
        cum += h.counts_[b];
        const std::string le = b < h.bounds_.size() ? prometheus_number(h.bounds_[b]) : "+Inf";
        out += e.name + "_bucket{le=\"" + le + "\"} " + str_cat(cum) + "\n";
      }
      out += e.name + "_sum " + prometheus_number(h.sum_) + "\n";
      out += e.name + "_count " + str_cat(h.count_) + "\n";
    }
  }
  return out;
}

}  // namespace zaya::serve
