// Any tree, given as a graph: a program that already has its own quadtree over the world's cities
// (a Boost.Graph whose vertices carry the cells, examples/quadtree.hpp) hands it to Canopy with
// canopy::flatten_tree and counts the cities inside many query boxes with its own visitor
// (examples/box_count.hpp): in input order and with the hybrid schedule, on the CPU (the FSM
// lockstep warp emulator, which counts nodes per warp) and, when there is one, on the GPU
// (input order, hybrid, hybrid-device). Every run's counts must equal a brute-force count.
//
//   quadtree_cities [CITIES.csv[.gz]] [BOXES]
//
// CITIES: a CSV with a header row and lat / lon (or x / y, else the first two) numeric columns;
// default tests/data/cities_4k.csv (from the project root); the whole GeoNames set is
// ../shared/data/cities_171k.csv.gz. BOXES: the number of query boxes, default 100000.
// Exit status: 0 when every count matches, 1 for bad input (or any other error), 2 for a mismatch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "examples/box_count.hpp"
#include "examples/quadtree.hpp"
#include "examples/quadtree_cities_gpu.hpp"
#include "layouts/graph_tree_boost.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "runtime/custom.hpp"
#include "core/device.hpp"

namespace {

using box_count::index_t;

struct Row {
  std::string variant;
  std::string device;
  canopy::PhaseTimes times;
  bool scheduled = false;
  double nodes_per_warp = -1;  // < 0: not counted
  index_t mismatch = -1;       // the first query whose count differs from brute force
  index_t got = 0;
};

double mean_of(const std::vector<index_t>& v) {
  if (v.empty()) return -1;
  return static_cast<double>(std::accumulate(v.begin(), v.end(), index_t{0})) / static_cast<double>(v.size());
}

index_t first_mismatch(const std::vector<index_t>& got, const std::vector<index_t>& expect) {
  if (got.size() != expect.size()) return 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != expect[i]) return static_cast<index_t>(i);
  return -1;
}

index_t parse_count(const char* s) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v <= 0)
    throw canopy::Error(std::string("BOXES = '") + s + "' must be a positive whole number");
  return static_cast<index_t>(v);
}

int run(int argc, char** argv) {
  if (argc > 3 || (argc > 1 && (std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help"))) {
    std::fprintf(argc > 3 ? stderr : stdout, "usage: quadtree_cities [CITIES.csv[.gz]] [BOXES]\n");
    return argc > 3 ? 1 : 0;
  }
  const std::string path = argc > 1 ? argv[1] : "tests/data/cities_4k.csv";
  const index_t m = argc > 2 ? parse_count(argv[2]) : 100000;

  // The program's own structure: cities, its quadtree as a Boost.Graph.
  const box_count::Cities cities = box_count::read_cities(path);
  auto t0 = std::chrono::steady_clock::now();
  const box_count::CityQuadtree qt = box_count::build_quadtree(cities.xy);
  const double build_ms = canopy::ms_since(t0);
  // Handed to Canopy: checked to be a rooted tree, laid out depth-first, payloads copied.
  t0 = std::chrono::steady_clock::now();
  const canopy::GraphTree<box_count::QuadCell> tree = canopy::flatten_tree(qt.graph);
  const double flatten_ms = canopy::ms_since(t0);
  index_t leaves = 0, by_children[5] = {0, 0, 0, 0, 0};
  for (canopy::node_id n = 0; n < tree.size(); ++n) {
    const int c = tree.view().child_count(n);
    leaves += c == 0;
    if (c > 0 && c <= 4) ++by_children[c];
  }
  std::printf("%lld cities (x = %s, y = %s) from %s\n", static_cast<long long>(cities.size()),
              cities.x_name.c_str(), cities.y_name.c_str(), path.c_str());
  std::printf("quadtree: %lld nodes (%lld leaves), height %d, max children %d; inner nodes with 1/2/3/4 children: "
              "%lld/%lld/%lld/%lld\n",
              static_cast<long long>(tree.size()), static_cast<long long>(leaves), tree.height(), tree.max_children(),
              static_cast<long long>(by_children[1]), static_cast<long long>(by_children[2]),
              static_cast<long long>(by_children[3]), static_cast<long long>(by_children[4]));
  std::printf("  built as a Boost.Graph in %.2f ms, flattened by canopy::flatten_tree in %.2f ms\n", build_ms,
              flatten_ms);

  const std::vector<float> boxes = box_count::make_query_boxes(qt, m, 2016);
  t0 = std::chrono::steady_clock::now();
  const std::vector<index_t> expect = box_count::brute_force_box_counts(cities.xy, boxes);
  const double brute_ms = canopy::ms_since(t0);
  std::vector<index_t> sorted = expect;
  std::sort(sorted.begin(), sorted.end());
  std::printf("%lld query boxes; cities per box: mean %.1f, median %lld, max %lld (brute force: %.1f ms)\n",
              static_cast<long long>(m), mean_of(expect), static_cast<long long>(sorted[sorted.size() / 2]),
              static_cast<long long>(sorted.back()), brute_ms);

  std::vector<Row> rows;
  auto add_row = [&](const char* device, const canopy::TraversalOptions& opt, const canopy::TraversalStats& st,
                     double npw, const std::vector<index_t>& counts) {
    Row r;
    r.variant = canopy::to_string(opt.schedule);
    if (opt.schedule != canopy::ScheduleKind::InputOrder) r.variant += " (depth " + std::to_string(st.depth) + ")";
    r.device = device;
    r.times = st.times;
    r.scheduled = opt.schedule != canopy::ScheduleKind::InputOrder;
    r.nodes_per_warp = npw;
    r.mismatch = first_mismatch(counts, expect);
    if (r.mismatch >= 0 && static_cast<std::size_t>(r.mismatch) < counts.size()) r.got = counts[r.mismatch];
    rows.push_back(r);
  };

  // The CPU: TBB threads, the FSM lockstep warp emulator (which counts the nodes per warp).
  {
    std::vector<index_t> counts(static_cast<std::size_t>(m));
    const box_count::BoxCountVisitor v{tree.payload().data(), qt.cities.data(), boxes.data(), counts.data()};
    for (canopy::ScheduleKind schedule : {canopy::ScheduleKind::InputOrder, canopy::ScheduleKind::Hybrid}) {
      canopy::TraversalOptions opt;
      opt.device = canopy::Device::Cpu;
      opt.executor = canopy::ExecutorKind::FsmLockstep;
      opt.schedule = schedule;
      opt.count_nodes = true;
      std::fill(counts.begin(), counts.end(), index_t{-1});
      const canopy::TraversalStats st = canopy::traverse_cpu(tree.view(), v, m, opt);
      add_row("cpu", opt, st, st.nodes_per_warp(), counts);
    }
  }

  // The GPU, when there is one: the same visitor, compiled by nvcc.
  if (canopy::gpu_available()) {
    std::vector<canopy::TraversalOptions> opts;
    for (canopy::ScheduleKind schedule :
         {canopy::ScheduleKind::InputOrder, canopy::ScheduleKind::Hybrid, canopy::ScheduleKind::HybridDevice}) {
      canopy::TraversalOptions opt;
      opt.device = canopy::Device::Gpu;
      opt.executor = canopy::ExecutorKind::FsmLockstep;
      opt.schedule = schedule;
      opt.gpu_count_nodes = true;
      opts.push_back(opt);
    }
    const std::vector<box_count::BoxCountRun> res = box_count::count_boxes_gpu(tree, qt.cities, boxes, opts);
    for (std::size_t i = 0; i < res.size(); ++i)
      add_row("gpu", opts[i], res[i].stats, res[i].stats.gpu_nodes_per_warp(), res[i].counts);
    std::printf("GPU: %s\n", canopy::gpu_description().c_str());
  } else {
    std::printf("GPU: none (%s); the GPU runs are skipped\n", canopy::gpu_description().c_str());
  }

  std::printf("\n%-22s %-6s %11s %12s %11s %11s  %s\n", "variant (fsm-lockstep)", "device", "inspect ms", "schedule ms",
              "execute ms", "nodes/warp", "counts");
  bool all_match = true;
  for (const Row& r : rows) {
    char inspect[32] = "-", schedule[32] = "-", npw[32] = "-";
    if (r.scheduled) {
      std::snprintf(inspect, sizeof inspect, "%.2f", r.times.inspect_ms);
      std::snprintf(schedule, sizeof schedule, "%.2f", r.times.schedule_ms);
    }
    if (r.nodes_per_warp >= 0) std::snprintf(npw, sizeof npw, "%.1f", r.nodes_per_warp);
    std::printf("%-22s %-6s %11s %12s %11.2f %11s  %s\n", r.variant.c_str(), r.device.c_str(), inspect, schedule,
                r.times.execute_ms, npw, r.mismatch < 0 ? "match brute force" : "MISMATCH");
    all_match = all_match && r.mismatch < 0;
  }
  if (!all_match) {
    for (const Row& r : rows)
      if (r.mismatch >= 0)
        std::printf("%s on the %s: box %lld holds %lld cities, the run counted %lld\n", r.variant.c_str(),
                    r.device.c_str(), static_cast<long long>(r.mismatch), static_cast<long long>(expect[r.mismatch]),
                    static_cast<long long>(r.got));
    std::printf("FAILED: some counts differ from brute force\n");
    return 2;
  }
  std::printf("\nevery count matches brute force (%zu runs x %lld boxes)\n", rows.size(), static_cast<long long>(m));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const canopy::Error& e) {
    std::fprintf(stderr, "quadtree_cities: %s\n", e.what());
    return 1;
  }
}
