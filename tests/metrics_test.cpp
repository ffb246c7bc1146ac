// Prometheus exposition of the server's metrics (src/serve/metrics.h): the exact text of each metric type,
// escaping, cumulative buckets, quantile estimates, and counts that stay exact under concurrent updates.
#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "core/error.h"

using namespace zaya::serve;

TEST(Metrics, RendersTheTextFormat) {
  Metrics m;
  Counter& req = m.counter("zaya_requests_total", "Requests by HTTP status.", "status");
  Gauge& running = m.gauge("zaya_running_sequences", "Sequences in the running batch.");
  Histogram& ttft = m.histogram("zaya_ttft_seconds", "Time to first token.", {0.1, 0.5, 1});
  req.add(1, "200");
  req.add(2, "200");
  req.add(1, "400");
  running.set(3);
  for (double v : {0.05, 0.1, 0.3, 2.0}) ttft.observe(v);
  EXPECT_EQ(m.render(),
            "# HELP zaya_requests_total Requests by HTTP status.\n"
            "# TYPE zaya_requests_total counter\n"
            "zaya_requests_total{status=\"200\"} 3\n"
            "zaya_requests_total{status=\"400\"} 1\n"
            "# HELP zaya_running_sequences Sequences in the running batch.\n"
            "# TYPE zaya_running_sequences gauge\n"
            "zaya_running_sequences 3\n"
            "# HELP zaya_ttft_seconds Time to first token.\n"
            "# TYPE zaya_ttft_seconds histogram\n"
            "zaya_ttft_seconds_bucket{le=\"0.1\"} 2\n"  // 0.1 falls in le="0.1": bounds are inclusive
            "zaya_ttft_seconds_bucket{le=\"0.5\"} 3\n"
            "zaya_ttft_seconds_bucket{le=\"1\"} 3\n"
            "zaya_ttft_seconds_bucket{le=\"+Inf\"} 4\n"
            "zaya_ttft_seconds_sum 2.45\n"
            "zaya_ttft_seconds_count 4\n");
}

TEST(Metrics, EscapingNumbersAndErrors) {
  Metrics m;
  m.counter("c_total", "a \\ back\nslash", "route").add(1, "a\"b\\c\nd");
  const std::string t = m.render();
  EXPECT_NE(t.find("# HELP c_total a \\\\ back\\nslash\n"), std::string::npos) << t;
  EXPECT_NE(t.find("c_total{route=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << t;
  m.gauge("unset_gauge", "never set");
  EXPECT_NE(m.render().find("unset_gauge 0\n"), std::string::npos);
  EXPECT_EQ(prometheus_number(0.25), "0.25");
  EXPECT_EQ(prometheus_number(1e-7), "1e-07");
  EXPECT_EQ(prometheus_number(INFINITY), "+Inf");
  EXPECT_EQ(prometheus_number(NAN), "NaN");
  EXPECT_EQ(prometheus_number(-3), "-3");
  EXPECT_THROW(m.counter("bad name", "x"), zaya::Error);
  EXPECT_THROW(m.counter("c_total", "again"), zaya::Error);
  EXPECT_THROW(m.histogram("h", "x", {1, 0.5}), zaya::Error);
  EXPECT_THROW(m.counter("d_total", "x", "le"), zaya::Error);
  EXPECT_THROW(m.counter("e_total", "x").add(-1), zaya::Error);
}

TEST(Metrics, QuantilesFromBuckets) {
  Histogram h({1, 2, 4, 8});
  EXPECT_TRUE(std::isnan(h.quantile(0.5)));
  for (int i = 0; i < 100; i++) h.observe(i < 50 ? 1.5 : 3.0);  // half in (1,2], half in (2,4]
  EXPECT_DOUBLE_EQ(h.quantile(0.5), 2.0);
  EXPECT_DOUBLE_EQ(h.quantile(0.75), 3.0);  // half way through (2, 4]
  EXPECT_DOUBLE_EQ(h.quantile(1.0), 4.0);
  h.observe(100);
  EXPECT_DOUBLE_EQ(h.quantile(1.0), 8.0);  // in +Inf: the largest finite bound
}

TEST(Metrics, ConcurrentUpdatesAreExact) {
  Metrics m;
  Counter& c = m.counter("n_total", "n", "k");
  Histogram& h = m.histogram("h_seconds", "h", {0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; t++)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; i++) {
        c.add(1, t % 2 ? "odd" : "even");
        h.observe(0.25);
      }
      (void)m.render();
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(c.value("odd"), 40000);
  EXPECT_EQ(c.value("even"), 40000);
  EXPECT_EQ(h.count(), 80000u);
  EXPECT_DOUBLE_EQ(h.sum(), 20000.0);
}
