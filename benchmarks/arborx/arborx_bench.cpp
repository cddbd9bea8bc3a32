// ArborX on canopy-bench's inputs, for the side-by-side table of scripts/compare-arborx.sh.
// Built only by that script, against ArborX and Kokkos fetched and built there (never part
// of Canopy's own build).
//
//   arborx-bench --points N --queries Q --dims D [--k 8,30] [--radius R] [--repeat 3]
//                [--seed 1] [--check 100] [--json out.json]
//
// The points and queries are canopy-bench's `--generate uniform:N:D --queries uniform:Q:D`:
// the same generator, seeds and normalisation, so both libraries answer the same queries.
// Each run times, fenced, the BVH's construction from points already on the device and the
// query (kNN lists, radius counts by a callback, radius lists as offsets and indices), the
// results left on the device. Sampled queries are checked against brute force on the host.
#include <ArborX.hpp>
#include <ArborX_Version.hpp>
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;

struct Args {
  long long points = 1000000, queries = 1000000;
  int dims = 3, repeat = 3, check = 100;
  std::uint64_t seed = 1;
  std::vector<int> ks{8, 30};
  double radius = 0;  // 0: no radius search
  std::string json;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "arborx-bench: %s\nusage: arborx-bench --points N --queries Q --dims 2|3|7 [--k 8,30] [--radius R]"
               " [--repeat 3] [--seed 1] [--check 100] [--json FILE]\n",
               why.c_str());
  std::exit(2);
}

long long number(const std::string& flag, const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (*text == '\0' || *end != '\0') usage(flag + " '" + text + "' is not an integer");
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f.rfind("--kokkos", 0) == 0) continue;
    if (i + 1 >= argc) usage(f + " needs a value");
    const char* v = argv[++i];
    if (f == "--points") a.points = number(f, v);
    else if (f == "--queries") a.queries = number(f, v);
    else if (f == "--dims") a.dims = static_cast<int>(number(f, v));
    else if (f == "--repeat") a.repeat = static_cast<int>(number(f, v));
    else if (f == "--check") a.check = static_cast<int>(number(f, v));
    else if (f == "--seed") a.seed = static_cast<std::uint64_t>(number(f, v));
    else if (f == "--json") a.json = v;
    else if (f == "--radius") {
      char* end = nullptr;
      a.radius = std::strtod(v, &end);
      if (*end != '\0' || !(a.radius >= 0)) usage("--radius '" + std::string(v) + "' is not a radius");
    } else if (f == "--k") {
      a.ks.clear();
      std::stringstream ss(v);
      for (std::string item; std::getline(ss, item, ',');) a.ks.push_back(static_cast<int>(number(f, item.c_str())));
    } else {
      usage("unknown option " + f);
    }
  }
  if (a.points < 1 || a.queries < 1 || a.repeat < 1 || a.check < 0) usage("sizes, --repeat must be positive");
  for (int k : a.ks)
    if (k < 1 || k > a.points) usage("--k " + std::to_string(k) + " must be in [1, points]");
  return a;
}

// canopy::generate_uniform and canopy::normalize (io/dataset.cpp), step for step: the
// same draws from the same standard library, rescaled by the points' ranges in double.
std::vector<float> uniform(long long n, int dims, std::uint64_t seed) {
  std::vector<float> x(static_cast<std::size_t>(n) * dims);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& v : x) v = u(rng);
  return x;
}

void normalize(std::vector<float>& x, int dims, const std::vector<float>& lo, const std::vector<float>& hi);

// Points and queries into the points' bounding box's unit cube.
void normalize_to_points(std::vector<float>& px, std::vector<float>& qx, int dims) {
  std::vector<float> lo(px.begin(), px.begin() + dims), hi = lo;
  for (std::size_t i = 0; i < px.size(); ++i) {
    lo[i % dims] = std::min(lo[i % dims], px[i]);
    hi[i % dims] = std::max(hi[i % dims], px[i]);
  }
  normalize(px, dims, lo, hi);
  normalize(qx, dims, lo, hi);
}

void normalize(std::vector<float>& x, int dims, const std::vector<float>& lo, const std::vector<float>& hi) {
  const std::size_t n = x.size() / dims;
  for (int d = 0; d < dims; ++d) {
    const double l = lo[d], range = static_cast<double>(hi[d]) - l;
    for (std::size_t i = 0; i < n; ++i) {
      float& v = x[i * dims + d];
      v = range > 0 ? static_cast<float>((v - l) / range) : 0.0f;
    }
  }
}

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double dist2(const float* a, const float* b, int dims) {
  double s = 0;
  for (int d = 0; d < dims; ++d) {
    const double t = static_cast<double>(a[d]) - b[d];
    s += t * t;
  }
  return s;
}

struct Timing {
  std::vector<double> build, query;
  std::string json(const char* name, const std::string& extra) const {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "{\"query\": \"%s\", %s\"build_ms\": %.3f, \"build_first_ms\": %.3f, \"query_ms\": %.3f, "
                  "\"query_first_ms\": %.3f, \"total_ms\": %.3f}",
                  name, extra.c_str(), median(build), build.front(), median(query), query.front(),
                  median(build) + median(query));
    return buf;
  }
};

struct IndexOut {
  template <typename Predicate, typename Value, typename Out>
  KOKKOS_FUNCTION void operator()(Predicate const&, Value const& value, Out const& out) const {
    out(value.index);
  }
};

struct Counter {
  Kokkos::View<int*, MemSpace> counts;
  template <typename Query, typename Value>
  KOKKOS_FUNCTION void operator()(Query const& query, Value const&) const {
    Kokkos::atomic_inc(&counts(ArborX::getData(query)));
  }
};

// Brute force once per sampled query, spread over the host's cores: the k-th smallest squared
// distance for each k, and the points surely and possibly within the radius (r2 its square).
struct Truth {
  std::vector<double> kth;
  long long sure = 0, maybe = 0;
};

template <int D>
std::vector<Truth> brute_force(const Args& a, const std::vector<float>& px, const std::vector<float>& qx,
                               const std::vector<long long>& sample, double r2) {
  const double band = 1e-5 * r2;
  std::vector<Truth> truth(sample.size());
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      std::vector<double> all(static_cast<std::size_t>(a.points));
      for (std::size_t s = w; s < sample.size(); s += workers) {
        const float* q = &qx[sample[s] * D];
        for (long long i = 0; i < a.points; ++i) all[i] = dist2(q, &px[i * D], D);
        Truth& t = truth[s];
        for (int k : a.ks) {
          std::nth_element(all.begin(), all.begin() + (k - 1), all.end());
          t.kth.push_back(all[k - 1]);
        }
        for (double d2 : all) {
          t.sure += d2 <= r2 - band;
          t.maybe += d2 <= r2 + band;
        }
      }
    });
  for (auto& th : pool) th.join();
  return truth;
}

// The results as JSON, for scripts/compare_arborx_table.py.
void write_json(const Args& a, int dims, double upload_ms, const std::vector<std::string>& rows) {
  FILE* f = std::fopen(a.json.c_str(), "w");
  if (!f) throw std::runtime_error("cannot write " + a.json);
  std::fprintf(f, "{\"library\": \"ArborX %s\", \"kokkos\": \"%d.%d.%d\", \"n_points\": %lld, \"n_queries\": %lld, "
                  "\"dims\": %d, \"repeat\": %d, \"upload_ms\": %.3f, \"rows\": [",
               ArborX::version().c_str(), KOKKOS_VERSION_MAJOR, KOKKOS_VERSION_MINOR, KOKKOS_VERSION_PATCH, a.points,
               a.queries, dims, a.repeat, upload_ms);
  for (std::size_t i = 0; i < rows.size(); ++i) std::fprintf(f, "%s%s", i ? ", " : "", rows[i].c_str());
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

template <int D>
int run(const Args& a) {
  using Point = ArborX::Point<D>;
  std::vector<float> px = uniform(a.points, D, a.seed), qx = uniform(a.queries, D, a.seed + 1);
  normalize_to_points(px, qx, D);

  auto on_host = [](const std::vector<float>& x, const char* label) {
    const std::size_t n = x.size() / D;
    Kokkos::View<Point*, Kokkos::HostSpace> h(std::string(label), n);
    for (std::size_t i = 0; i < n; ++i)
      for (int d = 0; d < D; ++d) h(i)[d] = x[i * D + d];
    return h;
  };
  ExecSpace space;
  const auto host_points = on_host(px, "points");
  // The points' upload is timed: canopy-bench's build time starts from host points.
  space.fence();
  const auto tu = std::chrono::steady_clock::now();
  const auto points = Kokkos::create_mirror_view_and_copy(MemSpace{}, host_points);
  space.fence();
  const double upload_ms = ms_between(tu, std::chrono::steady_clock::now());
  const auto queries = Kokkos::create_mirror_view_and_copy(MemSpace{}, on_host(qx, "queries"));
  const long long nq = a.queries;
  // Evenly spread sample, as canopy-bench's --check.
  std::vector<long long> sample;
  for (int s = 0; s < a.check && s < nq; ++s) sample.push_back(static_cast<long long>(s * (double(nq) / a.check)));

  const double rf = static_cast<float>(a.radius), r2 = rf * rf;
  const std::vector<Truth> truth = brute_force<D>(a, px, qx, sample, r2);

  std::printf("points uploaded in %.3f ms\n", upload_ms);
  std::vector<std::string> rows;
  auto build = [&](Timing& t) {
    space.fence();
    const auto t0 = std::chrono::steady_clock::now();
    ArborX::BoundingVolumeHierarchy bvh(space, ArborX::Experimental::attach_indices(points));
    space.fence();
    t.build.push_back(ms_between(t0, std::chrono::steady_clock::now()));
    return bvh;
  };

  for (std::size_t ki = 0; ki < a.ks.size(); ++ki) {
    const int k = a.ks[ki];
    Timing t;
    Kokkos::View<int*, MemSpace> indices("indices", 0), offsets("offsets", 0);
    for (int r = 0; r < a.repeat; ++r) {
      auto bvh = build(t);
      const auto t0 = std::chrono::steady_clock::now();
      ArborX::query(bvh, space, ArborX::Experimental::make_nearest(queries, k), IndexOut{}, indices, offsets);
      space.fence();
      t.query.push_back(ms_between(t0, std::chrono::steady_clock::now()));
    }
    auto hi_idx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, indices);
    auto hi_off = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, offsets);
    // A query's answer is right when it holds k distinct points and its farthest is no
    // farther than brute force's k-th (float32 rounding may order near-ties differently).
    long long bad = 0;
    for (std::size_t s = 0; s < sample.size(); ++s) {
      const long long q = sample[s];
      const double kth = truth[s].kth[ki];
      std::vector<int> got(&hi_idx(hi_off(q)), &hi_idx(hi_off(q)) + (hi_off(q + 1) - hi_off(q)));
      std::sort(got.begin(), got.end());
      bool ok = static_cast<int>(got.size()) == k && std::adjacent_find(got.begin(), got.end()) == got.end();
      for (int i : got) ok = ok && dist2(&qx[q * D], &px[i * D], D) <= kth * (1 + 1e-6) + 1e-30;
      bad += !ok;
    }
    std::printf("ArborX kNN k = %d: build %.3f ms, query %.3f ms (median of %d); brute force: %zu sampled queries, %lld wrong\n",
                k, median(t.build), median(t.query), a.repeat, sample.size(), bad);
    rows.push_back(t.json("knn", "\"k\": " + std::to_string(k) + ", \"checked\": " + std::to_string(sample.size()) +
                                     ", \"wrong\": " + std::to_string(bad) + ", "));
    if (bad) return 1;
  }

  if (a.radius > 0) {
    const float r = static_cast<float>(a.radius);
    Timing tc, tl;
    Kokkos::View<int*, MemSpace> counts("counts", nq), indices("indices", 0), offsets("offsets", 0);
    for (int rep = 0; rep < a.repeat; ++rep) {
      auto bvh = build(tc);
      Kokkos::deep_copy(space, counts, 0);
      auto t0 = std::chrono::steady_clock::now();
      bvh.query(space, ArborX::Experimental::attach_indices<int>(ArborX::Experimental::make_intersects(queries, r)),
                Counter{counts});
      space.fence();
      tc.query.push_back(ms_between(t0, std::chrono::steady_clock::now()));
      auto bvh2 = build(tl);
      t0 = std::chrono::steady_clock::now();
      ArborX::query(bvh2, space, ArborX::Experimental::make_intersects(queries, r), IndexOut{}, indices, offsets);
      space.fence();
      tl.query.push_back(ms_between(t0, std::chrono::steady_clock::now()));
    }
    auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, counts);
    auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace{}, offsets);
    long long total = 0, bad = 0;
    for (long long q = 0; q < nq; ++q) {
      total += hc(q);
      bad += hc(q) != ho(q + 1) - ho(q);  // the counts and the lists must agree
    }
    // Points within float32 rounding of the radius may fall either way.
    for (std::size_t s = 0; s < sample.size(); ++s)
      bad += hc(sample[s]) < truth[s].sure || hc(sample[s]) > truth[s].maybe;
    std::printf("ArborX radius %.9g: counts build %.3f + query %.3f ms, lists build %.3f + query %.3f ms; %lld pairs "
                "(mean %.2f); %zu sampled queries, %lld wrong\n",
                a.radius, median(tc.build), median(tc.query), median(tl.build), median(tl.query), total,
                double(total) / nq, sample.size(), bad);
    char extra[160];
    std::snprintf(extra, sizeof extra, "\"radius\": %.9g, \"pairs\": %lld, \"checked\": %zu, \"wrong\": %lld, ", a.radius,
                  total, sample.size(), bad);
    rows.push_back(tc.json("radius_counts", extra));
    rows.push_back(tl.json("radius_lists", extra));
    if (bad) return 1;
  }

  if (!a.json.empty()) write_json(a, D, upload_ms, rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  Kokkos::ScopeGuard guard(argc, argv);
  std::printf("ArborX %s (%s), Kokkos %d.%d.%d on %s; points %lld, queries %lld, dims %d\n", ArborX::version().c_str(),
              ArborX::gitCommitHash().c_str(), KOKKOS_VERSION_MAJOR, KOKKOS_VERSION_MINOR, KOKKOS_VERSION_PATCH,
              ExecSpace::name(), a.points, a.queries, a.dims);
  switch (a.dims) {
    case 2: return run<2>(a);
    case 3: return run<3>(a);
    case 7: return run<7>(a);
    default: usage("--dims " + std::to_string(a.dims) + ": built for 2, 3 and 7");
  }
}
