// Server metrics in Prometheus' text exposition format (version 0.0.4), for `GET /metrics`: counters,
// gauges and histograms, each optionally split by one label, updated from any thread.
//
//   Metrics m;
//   Counter& req = m.counter("zaya_requests_total", "Requests by HTTP status.", "status");
//   req.add(1, "200");
//   Histogram& ttft = m.histogram("zaya_time_to_first_token_seconds", "...", {0.01, 0.05, 0.1, 0.5, 1, 5});
//   ttft.observe(0.042);
//   std::string text = m.render();
//
// Names and help texts are fixed at registration; label values are escaped as the format requires.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace zaya::serve {

class Counter {
 public:
  void add(double v = 1, const std::string& label_value = "");
  double value(const std::string& label_value = "") const;

 private:
  friend class Metrics;
  mutable std::mutex mu_;
  std::map<std::string, double> values_;  // label value ("" when unlabelled) -> value
};

class Gauge {
 public:
  void set(double v, const std::string& label_value = "");
  void add(double v, const std::string& label_value = "");
  double value(const std::string& label_value = "") const;

 private:
  friend class Metrics;
  mutable std::mutex mu_;
  std::map<std::string, double> values_;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // upper bounds, ascending; +Inf is implied
  void observe(double v);
  uint64_t count() const;
  double sum() const;
  // The q-quantile estimated from the buckets (linear within a bucket), as Prometheus' histogram_quantile.
  double quantile(double q) const;

 private:
  friend class Metrics;
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), bounds_.size() + 1 with +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Counter& counter(const std::string& name, const std::string& help, const std::string& label = "");
  Gauge& gauge(const std::string& name, const std::string& help, const std::string& label = "");
  Histogram& histogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  // Every metric, in registration order.
  std::string render() const;

 private:
  struct Entry {
    std::string name, help, type, label;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_;
  Entry& add(const std::string& name, const std::string& help, const std::string& type,
             const std::string& label);
};

// Prometheus' number format: integers without a fraction, "+Inf" / "-Inf" / "NaN", else shortest round-trip.
std::string prometheus_number(double v);

}  // namespace zaya::serve
