// canopy-bench quality <workload>: how far each schedule is from the best possible one, in the
// paper's own terms (§3.1). Per variant: Δ over a fixed random sample of the queries (the
// sample in the order the variant runs it) against the minimum spanning tree of the sample's
// difference graph (a lower bound on the sample's optimal Δ), Δ over all queries, and the
// per-warp union of visit sets (the nodes a lockstep warp visits). Schedules are computed on
// the CPU; the GPU's are the same, bit for bit (the tests check it).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "benchmarks/bench.hpp"
#include "benchmarks/bench_common.hpp"
#include "core/checks.hpp"
#include "core/timing.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/bh_visitor.hpp"
#include "runtime/custom.hpp"
#include "runtime/knn.hpp"
#include "runtime/knn_visitor.hpp"
#include "runtime/pc_visitor.hpp"
#include "runtime/point_correlation.hpp"
#include "runtime/schedule_quality.hpp"

namespace canopy {
namespace bench {
namespace {

struct QualityRow {
  std::string name;
  int depth = 0;
  std::int64_t sample_delta = 0;
  double ratio = 0;            // sample Δ / MST weight
  double delta_per_query = 0;  // Δ over all queries / (queries - 1)
  double union_per_warp = 0;
  double schedule_ms = 0;
  // The inspector's work (guided rows): descend() and leaf() calls per query, and per warp of
  // 32 input-order queries the largest lane's count, what a SIMT warp waits for.
  double inspect_steps = -1, inspect_steps_warp = -1;
};

// A visitor that counts the inspector's descend() and leaf() calls.
template <class Inner>
struct StepCounter {
  static constexpr bool kGuided = is_guided_v<Inner>;
  using State = typename Inner::State;
  Inner inner;
  index_t* steps;
  State init(index_t q) const { return inner.init(q); }
  bool descend(State& s, node_id n) const {
    ++*steps;
    return inner.descend(s, n);
  }
  void leaf(State& s, node_id n) const {
    ++*steps;
    inner.leaf(s, n);
  }
  int first_child(const State& s, node_id n) const { return preferred_child(inner, s, n); }
  bool probe_satisfied(const State& s) const { return canopy::probe_satisfied(inner, s); }
};

// Mean inspector steps per query and mean over warps of the largest lane's steps.
template <class View, class Visitor>
std::pair<double, double> inspector_steps(const View& view, const Visitor& v, index_t n, int depth, GuidedRows rows) {
  const TopTree top = TopTree::build(view, depth);
  const index_t width = rows.width(top.size());
  const index_t warps = (n + kWarpSize - 1) / kWarpSize;
  std::vector<index_t> total(static_cast<std::size_t>(warps)), widest(static_cast<std::size_t>(warps));
  tbb::parallel_for(tbb::blocked_range<index_t>(0, warps, 64), [&](const tbb::blocked_range<index_t>& r) {
    std::vector<std::int32_t> row(static_cast<std::size_t>(width));
    for (index_t w = r.begin(); w < r.end(); ++w) {
      for (index_t q = w * kWarpSize; q < std::min(n, (w + 1) * kWarpSize); ++q) {
        index_t steps = 0;
        const StepCounter<Visitor> counter{v, &steps};
        inspect_row_guided(view, top.view(), counter, q, row.data(), width, rows.probe);
        total[w] += steps;
        widest[w] = std::max(widest[w], steps);
      }
    }
  });
  const double sum = std::accumulate(total.begin(), total.end(), 0.0);
  const double wide = std::accumulate(widest.begin(), widest.end(), 0.0);
  return {n ? sum / static_cast<double>(n) : 0.0, warps ? wide / static_cast<double>(warps) : 0.0};
}

// Runs every variant for one workload: tree view, visitor with host buffers, n queries, the
// workload's leaf-sorted order and its top-tree height.
template <class View, class Visitor>
std::vector<QualityRow> quality_rows(const QualityConfig& c, const View& view, const Visitor& v, index_t n,
                                     const std::vector<index_t>& leaf_order, double leaf_ms, nlohmann::json& j) {
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<index_t> sample = sample_indices(n, c.sample, c.sample_seed);
  const VisitSets sets = collect_visit_sets(view, v, sample);
  const double trace_ms = ms_since(t0);
  const MstBound mst = mst_bound(sets);
  std::printf("sample: %zu queries (seed %llu), %.1f visited nodes per query; traced in %.0f ms\n", sample.size(),
              static_cast<unsigned long long>(c.sample_seed),
              sample.empty() ? 0.0 : static_cast<double>(sets.nodes.size()) / static_cast<double>(sample.size()),
              trace_ms);
  std::printf(
      "MST of the sample's difference graph (Boost.Graph Prim): weight %lld (lower bound on the optimal Δ), "
      "its preorder's Δ %lld; edge weights %.0f ms, Prim %.0f ms\n\n",
      static_cast<long long>(mst.weight), static_cast<long long>(mst.preorder_delta), mst.graph_ms, mst.mst_ms);
  j["sample"] = sample.size();
  j["sample_seed"] = c.sample_seed;
  j["mst_weight"] = mst.weight;
  j["mst_preorder_delta"] = mst.preorder_delta;
  j["mst_ms"] = mst.graph_ms + mst.mst_ms;

  std::vector<QualityRow> rows;
  auto add = [&](const std::string& name, int depth, const index_t* order, double ms) {
    QualityRow r;
    r.name = name;
    r.depth = depth;
    r.schedule_ms = ms;
    const std::vector<index_t> in_sample = order ? restrict_order(order, n, sample) : [&] {
      std::vector<index_t> id(sample.size());
      for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<index_t>(i);
      return id;
    }();
    r.sample_delta = schedule_delta(sets, in_sample.data(), static_cast<index_t>(in_sample.size()));
    const ScheduleQuality q = measure_schedule(view, v, order, n);
    r.delta_per_query = n > 1 ? static_cast<double>(q.delta) / static_cast<double>(n - 1) : 0.0;
    r.union_per_warp = q.union_per_warp();
    r.ratio = mst.weight > 0 ? static_cast<double>(r.sample_delta) / static_cast<double>(mst.weight) : 1.0;
    rows.push_back(r);
  };
  add("input order", 0, nullptr, 0.0);
  add("leaf-sorted", 0, leaf_order.data(), leaf_ms);
  // Guided rows: every probe asked for (the unguided inspector has none).
  std::vector<GuidedProbe> probes;
  if (is_guided_v<Visitor>) {
    std::stringstream ss(c.probes);
    std::string p;
    while (std::getline(ss, p, ',')) {
      const std::optional<GuidedProbe> g = parse_probe(p);
      probes.push_back(g ? *g : GuidedProbe::Full);
    }
  } else {
    probes.push_back(GuidedProbe::Full);
  }
  const CustomWorkload<View, Visitor> w{v, "canopy-bench quality"};
  // The compact-key schedule (HybridKey) at depth d, the CPU twin of the GPU's.
  auto add_key = [&](int d, const char* name) {
    TraversalOptions o;
    o.schedule = ScheduleKind::HybridKey;
    TraversalStats st;
    st.depth = d;
    CpuScratch cpu;
    CallData call;
    call.n = n;
    schedule_on_cpu(cpu, w, view, v, call, o, st, nullptr);
    add(name, d, cpu.order.data(), st.times.inspect_ms + st.times.schedule_ms);
  };
  add_key(key_depth(top_leaves_by_depth(view), n, has_home_hint_v<Visitor>), "hybrid-key (default depth)");
  for (int d : parse_depths(c.depths)) {
    if (d > view.height) {
      std::printf("(depth %d skipped: the tree has %d levels)\n", d, view.height);
      continue;
    }
    add_key(d, "hybrid-key");
    for (GuidedProbe p : probes) {
      TraversalOptions o;
      o.probe = p;
      o.row_cap = c.row_cap;
      const GuidedRows g = guided_rows(o, Device::Cpu);
      o.schedule = ScheduleKind::Hybrid;
      TraversalStats st;
      st.depth = d;
      st.rows = g;
      CpuScratch cpu;
      CallData call;
      call.n = n;
      schedule_on_cpu(cpu, w, view, v, call, o, st, nullptr);
      const std::vector<index_t>& order = cpu.order;
      const PhaseTimes& times = st.times;
      std::string name = "hybrid";
      if (is_guided_v<Visitor>)
        name += std::string(" (probe ") + to_string(g.probe) + (g.cap ? ", cap " + std::to_string(g.cap) : "") + ")";
      add(name, d, order.data(), times.inspect_ms + times.schedule_ms);
      if constexpr (is_guided_v<Visitor>)
        std::tie(rows.back().inspect_steps, rows.back().inspect_steps_warp) = inspector_steps(view, v, n, d, g);
    }
  }
  QualityRow m;
  m.name = "mst-preorder (sample only)";
  m.sample_delta = mst.preorder_delta;
  m.ratio = mst.weight > 0 ? static_cast<double>(mst.preorder_delta) / static_cast<double>(mst.weight) : 1.0;
  m.delta_per_query = -1;
  m.union_per_warp = -1;
  rows.push_back(m);
  return rows;
}

void print_rows(const std::vector<QualityRow>& rows) {
  bool steps = false;
  for (const QualityRow& r : rows) steps = steps || r.inspect_steps >= 0;
  std::printf("%-28s %5s %14s %12s %14s %14s %12s%s\n", "variant", "depth", "sample Δ", "Δ / MST", "Δ/query (all)",
              "nodes/warp", "sched ms", steps ? "  insp steps  warp max" : "");
  for (const QualityRow& r : rows) {
    std::printf("%-28s %5s %14lld %12.3f ", r.name.c_str(), r.depth ? std::to_string(r.depth).c_str() : "-",
                static_cast<long long>(r.sample_delta), r.ratio);
    if (r.delta_per_query < 0)
      std::printf("%14s %14s %12s", "-", "-", "-");
    else
      std::printf("%14.1f %14.1f %12.1f", r.delta_per_query, r.union_per_warp, r.schedule_ms);
    if (r.inspect_steps >= 0) std::printf(" %11.1f %9.1f", r.inspect_steps, r.inspect_steps_warp);
    std::printf("\n");
  }
  if (steps)
    std::printf(
        "insp steps: the guided inspector's descend() and leaf() calls per query; warp max: per warp of 32 "
        "input-order queries, the busiest lane's\n");
}

nlohmann::json rows_json(const std::vector<QualityRow>& rows) {
  nlohmann::json a = nlohmann::json::array();
  for (const QualityRow& r : rows) {
    nlohmann::json o;
    o["variant"] = r.name;
    o["depth"] = r.depth;
    o["sample_delta"] = r.sample_delta;
    o["delta_over_mst"] = r.ratio;
    if (r.delta_per_query >= 0) {
      o["delta_per_query"] = r.delta_per_query;
      o["nodes_per_warp"] = r.union_per_warp;
      o["schedule_ms"] = r.schedule_ms;
    }
    if (r.inspect_steps >= 0) {
      o["inspect_steps_per_query"] = r.inspect_steps;
      o["inspect_steps_warp_max"] = r.inspect_steps_warp;
    }
    a.push_back(o);
  }
  return a;
}

// The workload's own leaf-sorted schedule, through its public API on the CPU.
template <class Api, class Options>
std::vector<index_t> leaf_sorted(Api&& run, Options opt, double* ms) {
  opt.device = Device::Cpu;
  opt.executor = ExecutorKind::Independent;
  opt.schedule = ScheduleKind::LeafSort;
  opt.keep_schedule = true;
  auto r = run(opt);
  *ms = r.times.schedule_ms;
  return std::move(r.schedule.order);
}

}  // namespace

void add_quality_options(CLI::App& app, QualityConfig& c) {
  app.add_option("workload", c.workload, "pc, nn, knn, bt, vp or bh")->required();
  add_input_options(
      app, c.input,
      {"CSV or CSV.gz with a header row (normalised to [0,1]; bh: as is)", "generated points: uniform:N:D or plummer:N",
       "nn family, pc: CSV(.gz) of queries (default: pc the points themselves, nn family a seeded "
       "random half of the points)",
       "seed of --generate, of the tree/query split and of the radius sample",
       "put the queries in a random order (seed)"});
  app.add_option("--radius", c.radius, "pc: radius R, or auto:K for a mean count of about K")->capture_default_str();
  app.add_option("--k", c.k, "neighbours per query (default 1 for nn, bt, vp; 8 for knn)");
  app.add_option("--theta", c.theta, "bh: opening angle")->capture_default_str();
  app.add_option("--softening", c.softening, "bh: softening length epsilon")->capture_default_str();
  app.add_option("--depths", c.depths, "top-tree depths of the hybrid variants")->capture_default_str();
  app.add_option("--probes", c.probes,
                 "nn family: guided inspector probes to compare, a comma list of full, lean, none")
      ->capture_default_str();
  app.add_option("--row-cap", c.row_cap, "nn family: most top-leaves per guided row (0: all; 32 with probe none)")
      ->capture_default_str();
  app.add_option("--leaf-size", c.leaf_size, "most points (bodies) per leaf")->capture_default_str();
  app.add_option("--sample", c.sample, "queries in the sample whose MST bounds the optimum")->capture_default_str();
  app.add_option("--sample-seed", c.sample_seed, "seed of the sample (the same sample serves every variant)")
      ->capture_default_str();
  app.add_option("--json", c.json, "write the results as JSON to this file");
}

int run_quality(const QualityConfig& config) {
  QualityConfig c = config;
  const std::string& w = c.workload;
  if (w != "pc" && w != "nn" && w != "knn" && w != "bt" && w != "vp" && w != "bh")
    throw Error("quality: unknown workload '" + w + "' (pc, nn, knn, bt, vp or bh)");
  if (c.sample < 2) throw Error("--sample " + std::to_string(c.sample) + " must be at least 2");
  const bool bh = w == "bh", pc = w == "pc";
  if (c.input.generate.empty()) c.input.generate = bh ? "plummer:100000" : "uniform:100000:7";
  if (bh && !c.input.queries.empty()) throw Error("--queries: bh computes the force on its own bodies");
  const Inputs in = load_inputs(c.input, !bh, !bh && !pc);
  std::printf("canopy-bench quality %s: %s\n", w.c_str(), in.source.c_str());
  nlohmann::json j;
  j["workload"] = w;
  j["source"] = in.source;
  std::vector<QualityRow> rows;
  const index_t nq = in.queries.size();
  if (pc) {
    KdTreeOptions o;
    o.leaf_size = c.leaf_size;
    const KdTree tree = KdTree::build(in.points.data(), in.points.size(), in.points.dims, o);
    const float radius = parse_radius(c.radius, tree, in.queries, c.input.seed);
    std::printf("points %lld, queries %lld, dims %d, radius %.6g, kd-tree of %d levels\n",
                static_cast<long long>(in.points.size()), static_cast<long long>(nq), in.points.dims, radius,
                tree.height());
    j["radius"] = radius;
    PointCorrelation api(tree, Device::Cpu);
    PcOptions po;
    po.radius = radius;
    double leaf_ms = 0;
    const std::vector<index_t> leaf =
        leaf_sorted([&](const PcOptions& o2) { return api.run(in.queries.data(), nq, o2); }, po, &leaf_ms);
    std::vector<index_t> counts(static_cast<std::size_t>(nq));
    dispatch_dims(tree.dims(), [&](auto md) {
      PointCorrelationVisitor<decltype(md)::value> v;
      v.tree = tree.view();
      v.queries = in.queries.data();
      v.counts = counts.data();
      v.radius2 = radius * radius;
      rows = quality_rows(c, tree.view(), v, nq, leaf, leaf_ms, j);
    });
  } else if (bh) {
    const index_t n = in.points.size();
    if (in.points.dims != 3)
      throw Error("bh: the bodies need 3 coordinates, " + in.source + " has " + std::to_string(in.points.dims));
    const std::vector<float> mass(static_cast<std::size_t>(n), 1.0f / static_cast<float>(n));
    OctreeOptions o;
    o.leaf_size = c.leaf_size;
    const Octree tree = Octree::build(in.points.data(), mass.data(), n, o);
    std::printf("bodies %lld, octree of %d levels, theta %.3g\n", static_cast<long long>(n), tree.height(), c.theta);
    BarnesHut api(tree, Device::Cpu);
    BhOptions bo;
    bo.theta = c.theta;
    bo.softening = c.softening;
    double leaf_ms = 0;
    const std::vector<index_t> leaf = leaf_sorted([&](const BhOptions& o2) { return api.run(o2); }, bo, &leaf_ms);
    // The visitor reads bodies in their original order, as BarnesHut does.
    std::vector<float> xyz(static_cast<std::size_t>(n) * 3), m(static_cast<std::size_t>(n)),
        forces(static_cast<std::size_t>(n) * 3);
    for (index_t i = 0; i < n; ++i) {
      const index_t id = tree.body_ids()[i];
      std::copy_n(&tree.bodies()[i * 4], 3, &xyz[id * 3]);
      m[id] = tree.bodies()[i * 4 + 3];
    }
    BarnesHutVisitor v;
    v.tree = tree.view();
    v.bodies_xyz = xyz.data();
    v.masses = m.data();
    v.forces = forces.data();
    v.theta2 = c.theta * c.theta;
    v.eps2 = c.softening * c.softening;
    rows = quality_rows(c, tree.view(), v, n, leaf, leaf_ms, j);
  } else {
    const int k = c.k > 0 ? c.k : (w == "knn" ? 8 : 1);
    auto go = [&](const auto& tree) {
      std::printf("tree points %lld, queries %lld, dims %d, k = %d, tree of %d levels\n",
                  static_cast<long long>(in.points.size()), static_cast<long long>(nq), in.points.dims, k,
                  tree.height());
      NearestNeighbors api(tree, Device::Cpu);
      KnnOptions ko;
      ko.k = k;
      double leaf_ms = 0;
      const std::vector<index_t> leaf =
          leaf_sorted([&](const KnnOptions& o2) { return api.run(in.queries.data(), nq, o2); }, ko, &leaf_ms);
      std::vector<float> dist(static_cast<std::size_t>(nq) * k);
      std::vector<index_t> index(static_cast<std::size_t>(nq) * k);
      dispatch_dims(tree.dims(), [&](auto md) {
        const auto v =
            make_knn_visitor<decltype(md)::value>(tree.view(), in.queries.data(), k, dist.data(), index.data());
        rows = quality_rows(c, tree.view(), v, nq, leaf, leaf_ms, j);
      });
    };
    if (w == "bt") {
      BallTreeOptions o;
      o.leaf_size = c.leaf_size;
      go(BallTree::build(in.points.data(), in.points.size(), in.points.dims, o));
    } else if (w == "vp") {
      VpTreeOptions o;
      o.leaf_size = c.leaf_size;
      go(VpTree::build(in.points.data(), in.points.size(), in.points.dims, o));
    } else {
      KdTreeOptions o;
      o.leaf_size = c.leaf_size;
      go(KdTree::build(in.points.data(), in.points.size(), in.points.dims, o));
    }
    j["k"] = k;
  }
  print_rows(rows);
  j["variants"] = rows_json(rows);
  if (!c.json.empty()) write_json(c.json, j);
  return 0;
}

}  // namespace bench
}  // namespace canopy
