// canopy-bench schedule: the sandpile scheduler alone on a random scheduling matrix, and the CPU
// twin of HybridKey's radix sort on random compact keys over as many top-leaves, to track their
// speed.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "scheduler/schedule.hpp"

namespace canopy {
namespace bench {

void add_schedule_options(CLI::App& app, ScheduleConfig& c) {
  app.add_option("--queries", c.queries, "rows of the matrix")->capture_default_str();
  app.add_option("--top-leaves", c.top_leaves, "columns (top-tree leaves)")->capture_default_str();
  app.add_option("--density", c.density, "probability that a bit is set")->capture_default_str();
  app.add_option("--repeat", c.repeat, "timed runs (the median is reported)")->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the random matrix")->capture_default_str();
  app.add_option("--json", c.json, "write {\"median_ms\": ...} and the parameters to this file");
}

int run_schedule(const ScheduleConfig& c) {
  if (c.queries < 1) throw Error("--queries " + std::to_string(c.queries) + " must be at least 1");
  if (c.top_leaves < 1) throw Error("--top-leaves " + std::to_string(c.top_leaves) + " must be at least 1");
  if (!(c.density >= 0.0 && c.density <= 1.0)) throw Error("--density must lie in [0, 1]");
  if (c.repeat < 1) throw Error("--repeat " + std::to_string(c.repeat) + " must be at least 1");

  const index_t w = words_per_row(c.top_leaves);
  std::vector<std::uint64_t> words(static_cast<std::size_t>(c.queries * w), 0);
  constexpr index_t kRowsPerSeed = 4096;  // blocks of rows with their own generator: reproducible in parallel
  tbb::parallel_for(index_t{0}, (c.queries + kRowsPerSeed - 1) / kRowsPerSeed, [&](index_t b) {
    std::mt19937_64 rng(c.seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(b));
    std::bernoulli_distribution bit(c.density);
    for (index_t r = b * kRowsPerSeed; r < std::min(c.queries, (b + 1) * kRowsPerSeed); ++r)
      for (index_t col = 0; col < c.top_leaves; ++col)
        if (bit(rng)) words[r * w + col / 64] |= std::uint64_t{1} << (col % 64);
  });
  const SchedulingMatrixView m{words.data(), c.queries, c.top_leaves, w};

  sandpile(m);  // warm-up: first-touch of the scheduler's buffers and the TBB thread pool
  std::vector<double> ms;
  index_t buckets = 0;
  for (int r = 0; r < c.repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const Schedule s = sandpile(m);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    buckets = s.buckets();
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  std::printf("sandpile: %lld queries x %lld top-leaves, density %.3g, %d threads\n",
              static_cast<long long>(c.queries), static_cast<long long>(c.top_leaves), c.density,
              tbb::this_task_arena::max_concurrency());
  std::printf("median %.2f ms (min %.2f, max %.2f) over %d runs; %lld buckets\n", med, ms.front(), ms.back(),
              c.repeat, static_cast<long long>(buckets));

  // Compact keys a (L + 1) + b with a <= b, as HybridKey's unguided inspector forms them.
  const std::uint64_t l1 = static_cast<std::uint64_t>(c.top_leaves) + 1;
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(c.queries));
  std::mt19937_64 rng(c.seed);
  for (std::uint64_t& k : keys) {
    const std::uint64_t a = rng() % l1, b = a + rng() % (l1 - a);
    k = a * l1 + b;
  }
  sort_by_key(keys.data(), c.queries);  // warm-up
  std::vector<double> key_ms;
  for (int r = 0; r < c.repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const Schedule s = sort_by_key(keys.data(), c.queries);
    key_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    buckets = s.buckets();
  }
  std::sort(key_ms.begin(), key_ms.end());
  const double key_med = key_ms[key_ms.size() / 2];
  std::printf("key sort (HybridKey's CPU twin): median %.2f ms over %d runs; %lld buckets\n", key_med, c.repeat,
              static_cast<long long>(buckets));
  if (!c.json.empty()) {
    nlohmann::json j{{"median_ms", med},       {"min_ms", ms.front()},
                     {"max_ms", ms.back()},    {"queries", c.queries},
                     {"top_leaves", c.top_leaves}, {"density", c.density},
                     {"repeat", c.repeat},     {"threads", tbb::this_task_arena::max_concurrency()},
                     {"key_sort_median_ms", key_med}};
    write_json(c.json, j);
  }
  return 0;
}

}  // namespace bench
}  // namespace canopy
