#include "distributed/mpi_detail.hpp"
#include "distributed/partition_detail.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/checks.hpp"
#include "core/device.hpp"
#include "core/rounding.hpp"
#include "layouts/geometry.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "inspector/inspector.hpp"
#include "runtime/pc_visitor.hpp"
#include "scheduler/spatial_order.hpp"

namespace canopy {
namespace distributed {

using namespace detail;  // NOLINT: this file is the layer the helpers serve

// ---- the distributed tree ------------------------------------------------------------------------

PartitionedKdTree::PartitionedKdTree(MPI_Comm comm, const float* points, index_t n, int dims, int depth,
                                     const KdTreeOptions& options, std::uint64_t memory_budget)
    : comm_(comm), n_(n), dims_(dims) {
  const Place place = place_in(comm);
  ranks_ = place.ranks;
  TopCut cut = cut_top_tree(points, n, dims, depth, ranks_, "partitioned tree");
  top_ = std::move(cut.top);
  leaf_node_ = std::move(cut.leaf_node);
  owner_ = std::move(cut.owner);
  boxes_ = std::move(cut.boxes);
  ids_ = std::move(cut.ids[static_cast<std::size_t>(place.rank)]);
  // Built under run_share: a rank over its budget or out of memory fails every rank.
  const index_t count = static_cast<index_t>(ids_.size());
  run_share(comm, "local points", Share{0, count}, [&] {
    const auto over = [&](std::uint64_t need, const char* what) {
      if (memory_budget > 0 && need > memory_budget)
        throw Error("partitioned tree: this rank's " + std::to_string(count) + " of " + std::to_string(n) + " points " +
                    what + " " + std::to_string(need) + " bytes, over the memory budget of " +
                    std::to_string(memory_budget) + " bytes per rank (more ranks spread the points thinner)");
    };
    // Before the build, the points and their ids alone (what the tree holds at the least).
    over(static_cast<std::uint64_t>(count) * (sizeof(float) * padded_dims(dims) + sizeof(index_t)), "need at least");
    points_.resize(static_cast<std::size_t>(count) * static_cast<std::size_t>(dims));
    tbb::parallel_for(index_t{0}, count, [&](index_t i) {
      const index_t id = ids_[static_cast<std::size_t>(i)];
      std::copy(points + id * dims, points + (id + 1) * dims, points_.begin() + i * dims);
    });
    local_ = std::make_unique<KdTree>(KdTree::build(points_.data(), count, dims, options));
    over(local_->bytes(), "take a tree of");
  });
}

int PartitionedKdTree::owner_of(const float* q) const {
  const node_id leaf = top_->view().find_leaf(q);
  const auto at = std::lower_bound(leaf_node_.begin(), leaf_node_.end(), leaf);
  return owner_[static_cast<std::size_t>(at - leaf_node_.begin())];
}

namespace {

// The squared distance from q to a box, in double: at most the exact squared distance to any
// point inside it.
double box_distance2(const float* q, const float* lo, const float* hi, int dims) {
  double d2 = 0;
  for (int d = 0; d < dims; ++d) {
    const double below = static_cast<double>(lo[d]) - q[d], above = static_cast<double>(q[d]) - hi[d];
    const double gap = std::max(0.0, std::max(below, above));
    d2 += gap * gap;
  }
  return d2;
}

// hit[r] = 1 for the ranks whose boxes come within sqrt(reach2) of q (the float distances the
// traversals compute may round below the exact one: a relative margin keeps every such point).
void ranks_within(const PartitionedKdTree& t, const float* q, double reach2, std::uint8_t* hit) {
  const int dims = t.dims();
  const double limit = reach2 * (1 + 1e-5) + 1e-30;
  std::fill(hit, hit + t.ranks(), std::uint8_t{0});
  for (std::size_t i = 0; i < t.leaf_owner().size(); ++i) {
    const float* lo = t.leaf_boxes().data() + i * 2 * dims;
    if (!hit[t.leaf_owner()[i]] && box_distance2(q, lo, lo + dims, dims) <= limit) hit[t.leaf_owner()[i]] = 1;
  }
}

// The inspector as the router: each query's traversal through the top-tree with the
// point-correlation visitor (the descend test its traversals make, radius2 computed as
// PointCorrelation computes it) reaches the top leaves that may hold points within the radius;
// to[i * ranks + r] = 1 for the owners of those leaves. A point within the radius lies in a top
// leaf whose box passes the same float test, so no rank that holds one is missed.
void route_radius(const PartitionedKdTree& t, const float* queries, index_t count, float radius2, std::uint8_t* to) {
  const KdTreeView top = t.top().view();
  const std::vector<node_id>& leaves = t.top_leaf_nodes();
  TopTreeView columns;
  columns.leaves = leaves.data();
  columns.n_leaves = static_cast<index_t>(leaves.size());
  columns.depth = top.height;  // every leaf of the top-tree is a column
  columns.first_leaf = leaves.front();
  columns.last_leaf = leaves.back();
  const index_t words = (columns.n_leaves + 63) / 64;
  const int ranks = t.ranks();
  dispatch_dims(t.dims(), [&](auto width) {
    PointCorrelationVisitor<decltype(width)::value> v;
    v.tree = top;
    v.queries = queries;
    v.radius2 = radius2;
    tbb::parallel_for(tbb::blocked_range<index_t>(0, count), [&](const tbb::blocked_range<index_t>& range) {
      std::vector<std::uint64_t> row(static_cast<std::size_t>(words));
      for (index_t i = range.begin(); i < range.end(); ++i) {
        inspect_row(top, columns, v, i, row.data(), words);
        for (index_t w = 0; w < words; ++w)
          for (std::uint64_t bits = row[static_cast<std::size_t>(w)]; bits; bits &= bits - 1) {
            const index_t c = w * 64 + __builtin_ctzll(bits);
            to[i * ranks + t.leaf_owner()[static_cast<std::size_t>(c)]] = 1;
          }
      }
    });
  });
}

template <class T>
char* put(char* b, const T* v, std::size_t count) {
  std::memcpy(b, v, count * sizeof(T));
  return b + count * sizeof(T);
}
template <class T>
const char* get(const char* p, T* v, std::size_t count) {
  std::memcpy(v, p, count * sizeof(T));
  return p + count * sizeof(T);
}

// Fixed-size records for each rank, built in parallel: item i (0..items-1) goes to the ranks r
// with to[i * ranks + r], in item order within each rank's message; write(i, at) writes its
// `record` bytes at `at`.
template <class Write>
std::vector<std::vector<char>> pack(const std::vector<std::uint8_t>& to, int ranks, index_t items, std::size_t record,
                                    Write&& write) {
  const index_t block = 4096, blocks = (items + block - 1) / block;
  // Per block and rank: how many records, then where they start.
  std::vector<index_t> at(static_cast<std::size_t>(blocks * ranks));
  tbb::parallel_for(index_t{0}, blocks, [&](index_t b) {
    for (index_t i = b * block; i < std::min(items, (b + 1) * block); ++i)
      for (int r = 0; r < ranks; ++r) at[static_cast<std::size_t>(b * ranks + r)] += to[static_cast<std::size_t>(i * ranks + r)];
  });
  std::vector<std::vector<char>> out(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    index_t sum = 0;
    for (index_t b = 0; b < blocks; ++b) {
      const index_t c = at[static_cast<std::size_t>(b * ranks + r)];
      at[static_cast<std::size_t>(b * ranks + r)] = sum;
      sum += c;
    }
    out[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(sum) * record);
  }
  tbb::parallel_for(index_t{0}, blocks, [&](index_t b) {
    std::vector<index_t> next(at.begin() + b * ranks, at.begin() + (b + 1) * ranks);
    for (index_t i = b * block; i < std::min(items, (b + 1) * block); ++i)
      for (int r = 0; r < ranks; ++r)
        if (to[static_cast<std::size_t>(i * ranks + r)])
          write(i, out[static_cast<std::size_t>(r)].data() + static_cast<std::size_t>(next[static_cast<std::size_t>(r)]++) * record);
  });
  return out;
}

// Queries of this rank's share sent where `to` says: (id, coordinates) records.
std::vector<std::vector<char>> pack_queries(const std::vector<std::uint8_t>& to, int ranks, Share s,
                                            const float* queries, int dims) {
  return pack(to, ranks, s.count, sizeof(index_t) + sizeof(float) * static_cast<std::size_t>(dims),
              [&](index_t i, char* at) {
                const index_t id = s.begin + i;
                put(put(at, &id, 1), queries + id * dims, static_cast<std::size_t>(dims));
              });
}

// Received queries: their ids and coordinates, in arrival order (sender by sender); first[r] is
// the first of those sender r sent.
struct Inbox {
  std::vector<index_t> id;
  std::vector<float> coords;
  std::vector<index_t> first;  // [ranks + 1]
};
Inbox unpack_queries(const std::vector<std::vector<char>>& from, int dims) {
  Inbox in;
  const std::size_t rec = sizeof(index_t) + sizeof(float) * static_cast<std::size_t>(dims);
  in.first.push_back(0);
  for (const std::vector<char>& b : from) in.first.push_back(in.first.back() + static_cast<index_t>(b.size() / rec));
  in.id.resize(static_cast<std::size_t>(in.first.back()));
  in.coords.resize(in.id.size() * static_cast<std::size_t>(dims));
  for (std::size_t r = 0; r < from.size(); ++r)
    tbb::parallel_for(in.first[r], in.first[r + 1], [&](index_t j) {
      const char* p = from[r].data() + static_cast<std::size_t>(j - in.first[r]) * rec;
      get(get(p, &in.id[static_cast<std::size_t>(j)], 1), in.coords.data() + j * dims, static_cast<std::size_t>(dims));
    });
  return in;
}

// Replies to the senders of an inbox, one `record`-byte record per received query, in the order
// each sender sent them: write(j, at) writes received query j's.
template <class Write>
std::vector<std::vector<char>> pack_replies(const Inbox& in, std::size_t record, Write&& write) {
  std::vector<std::vector<char>> reply(in.first.size() - 1);
  for (std::size_t r = 0; r + 1 < in.first.size(); ++r) {
    reply[r].resize(static_cast<std::size_t>(in.first[r + 1] - in.first[r]) * record);
    tbb::parallel_for(in.first[r], in.first[r + 1], [&](index_t j) {
      write(j, reply[r].data() + static_cast<std::size_t>(j - in.first[r]) * record);
    });
  }
  return reply;
}

// Runs each record of each sender's message through f(record), in parallel within a message
// (a message names each query once) and message after message.
template <class F>
void for_each_record(const std::vector<std::vector<char>>& from, std::size_t record, F&& f) {
  for (const std::vector<char>& b : from)
    tbb::parallel_for(std::size_t{0}, b.size() / record, [&](std::size_t j) { f(b.data() + j * record); });
}

}  // namespace

PcResult point_correlation(MPI_Comm comm, const PartitionedKdTree& tree, PointCorrelation& local, const float* queries,
                           index_t n, const PcOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int dims = tree.dims(), ranks = tree.ranks();
  std::vector<std::vector<char>> out(static_cast<std::size_t>(ranks));
  run_share(comm, "queries", s, [&] {
    if (!(std::isfinite(options.radius) && options.radius >= 0))
      throw Error("radius " + std::to_string(options.radius) + " must be finite and >= 0");
    check_queries(queries + s.begin * dims, s.count, dims);  // numbered within the share, as run_share says
    std::vector<std::uint8_t> to(static_cast<std::size_t>(s.count * ranks));
    route_radius(tree, queries + s.begin * dims, s.count, options.radius * options.radius, to.data());
    out = pack_queries(to, ranks, s, queries, dims);
  });
  const Inbox in = unpack_queries(exchange(comm, out, stats), dims);
  PcResult part;
  run_share(comm, "routed queries", Share{0, static_cast<index_t>(in.id.size())}, [&] {
    const Clock::time_point t = Clock::now();
    part = local.run(in.coords.data(), static_cast<index_t>(in.id.size()), options);
    if (stats) {
      stats->local_ms = ms_since(t);
      stats->local_items = static_cast<index_t>(in.id.size());
    }
  });
  const std::size_t rec = 2 * sizeof(index_t);
  const auto reply = pack_replies(in, rec, [&](index_t j, char* at) {
    put(put(at, &in.id[static_cast<std::size_t>(j)], 1), &part.counts[static_cast<std::size_t>(j)], 1);
  });
  std::vector<index_t> mine(static_cast<std::size_t>(s.count), 0);
  for_each_record(exchange(comm, reply, stats), rec, [&](const char* p) {
    index_t id, c;
    get(get(p, &id, 1), &c, 1);
    mine[static_cast<std::size_t>(id - s.begin)] += c;  // each point is counted by its owner only
  });
  PcResult result;
  static_cast<TraversalStats&>(result) = static_cast<const TraversalStats&>(part);
  result.counts = gathered(comm, gather, std::move(mine), n, 1, stats);
  finish_stats(comm, stats, start);
  return result;
}

namespace {

// The k best candidates of each query of a share so far, ascending by (squared distance,
// original index): the single-process kNN's order. Distances travel squared because two
// different squared distances can round to one distance, and the order must not change.
struct Candidates {
  int k;
  std::vector<float> d2;        // [queries][k]
  std::vector<index_t> id;      // [queries][k]
  std::vector<int> found;       // [queries]
  Candidates(index_t queries, int k_)
      : k(k_), d2(static_cast<std::size_t>(queries * k_)), id(d2.size()), found(static_cast<std::size_t>(queries)) {}
  // Merges a sorted list of (d2, id) pairs (id < 0: none) into query i's.
  void merge(index_t i, const char* p) {
    float* d = d2.data() + i * k;
    index_t* x = id.data() + i * k;
    thread_local std::vector<std::pair<float, index_t>> both;
    both.clear();
    for (int j = 0; j < found[static_cast<std::size_t>(i)]; ++j) both.emplace_back(d[j], x[j]);
    for (int j = 0; j < k; ++j) {
      float dj;
      index_t xj;
      p = get(get(p, &dj, 1), &xj, 1);
      if (xj >= 0) both.emplace_back(dj, xj);
    }
    std::sort(both.begin(), both.end());
    const int keep = static_cast<int>(std::min<std::size_t>(both.size(), static_cast<std::size_t>(k)));
    for (int j = 0; j < keep; ++j) {
      d[j] = both[static_cast<std::size_t>(j)].first;
      x[j] = both[static_cast<std::size_t>(j)].second;
    }
    found[static_cast<std::size_t>(i)] = keep;
  }
};

// The squared distance the kNN visitor computes between a query and a point (both `dims` floats).
float distance2(const float* q, const float* p, int dims) {
  return dispatch_dims(dims, [&](auto width) {
    constexpr int W = decltype(width)::value;
    float a[W], b[W];
    load_query(q, dims, a);
    load_query(p, dims, b);
    return point_distance2<W>(a, b);
  });
}

// Runs the local search on received queries and packs each answer for its sender: id, then k
// (squared distance, original index) pairs, padded with (inf, -1).
std::vector<std::vector<char>> answer_knn(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local,
                                          const Inbox& in, const KnnOptions& options, DistributedStats* stats) {
  const int k = options.k, dims = tree.dims();
  const int k_local = static_cast<int>(std::min<index_t>(k, local.size()));
  KnnResult part;
  run_share(comm, "routed queries", Share{0, static_cast<index_t>(in.id.size())}, [&] {
    KnnOptions o = options;
    o.k = k_local;
    const Clock::time_point t = Clock::now();
    part = local.run(in.coords.data(), static_cast<index_t>(in.id.size()), o);
    if (stats) stats->local_ms += ms_since(t);
  });
  const float inf = std::numeric_limits<float>::infinity();
  const index_t none = -1;
  return pack_replies(in, sizeof(index_t) + static_cast<std::size_t>(k) * (sizeof(float) + sizeof(index_t)),
                      [&](index_t j, char* at) {
                        at = put(at, &in.id[static_cast<std::size_t>(j)], 1);
                        for (int c = 0; c < k; ++c) {
                          if (c < k_local) {
                            const index_t li = part.indices[static_cast<std::size_t>(j * k_local + c)];
                            const float d2 = distance2(in.coords.data() + j * dims, tree.local_points().data() + li * dims, dims);
                            const index_t id = tree.local_ids()[static_cast<std::size_t>(li)];
                            at = put(put(at, &d2, 1), &id, 1);
                          } else {
                            at = put(put(at, &inf, 1), &none, 1);
                          }
                        }
                      });
}

void merge_knn(const std::vector<std::vector<char>>& from, const Share& s, int k, Candidates& cand) {
  for_each_record(from, sizeof(index_t) + static_cast<std::size_t>(k) * (sizeof(float) + sizeof(index_t)),
                  [&](const char* p) {
                    index_t id;
                    p = get(p, &id, 1);
                    cand.merge(id - s.begin, p);
                  });
}

}  // namespace

KnnResult nearest_neighbors(MPI_Comm comm, const PartitionedKdTree& tree, NearestNeighbors& local, const float* queries,
                            index_t n, const KnnOptions& options, DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  const Share s = my_share(comm, n, stats);
  const int dims = tree.dims(), ranks = tree.ranks(), k = options.k;
  // Round 1: each query to the rank that owns its top leaf.
  std::vector<std::vector<char>> out;
  std::vector<int> first(static_cast<std::size_t>(s.count));
  run_share(comm, "queries", s, [&] {
    if (k < 1 || k > tree.global_size())
      throw Error("k = " + std::to_string(k) + " is outside 1.." + std::to_string(tree.global_size()) + " (the tree's points)");
    check_queries(queries + s.begin * dims, s.count, dims);  // numbered within the share, as run_share says
    std::vector<std::uint8_t> to(static_cast<std::size_t>(s.count * ranks));
    tbb::parallel_for(index_t{0}, s.count, [&](index_t i) {
      const int r = tree.owner_of(queries + (s.begin + i) * dims);
      first[static_cast<std::size_t>(i)] = r;
      to[static_cast<std::size_t>(i * ranks + r)] = 1;
    });
    out = pack_queries(to, ranks, s, queries, dims);
  });
  Candidates cand(s.count, k);
  merge_knn(exchange(comm, answer_knn(comm, tree, local, unpack_queries(exchange(comm, out, stats), dims), options, stats), stats),
            s, k, cand);
  // Round 2: the k-th squared distance found bounds the other ranks (all of them while fewer
  // than k are known).
  std::vector<std::uint8_t> to(static_cast<std::size_t>(s.count * ranks));
  tbb::parallel_for(index_t{0}, s.count, [&](index_t i) {
    const double bound2 = cand.found[static_cast<std::size_t>(i)] == k ? static_cast<double>(cand.d2[static_cast<std::size_t>(i * k + k - 1)])
                                                                        : std::numeric_limits<double>::infinity();
    std::uint8_t* hit = to.data() + i * ranks;
    ranks_within(tree, queries + (s.begin + i) * dims, bound2, hit);
    hit[first[static_cast<std::size_t>(i)]] = 0;
  });
  merge_knn(exchange(comm, answer_knn(comm, tree, local, unpack_queries(exchange(comm, pack_queries(to, ranks, s, queries, dims), stats), dims),
                                      options, stats),
                     stats),
            s, k, cand);
  std::vector<float> dist(cand.d2.size());
  tbb::parallel_for(std::size_t{0}, dist.size(), [&](std::size_t j) { dist[j] = sqrt_rn(cand.d2[j]); });
  KnnResult result;
  result.k = k;
  result.indices = gathered(comm, gather, std::move(cand.id), n, k, stats);
  result.distances = gathered(comm, gather, std::move(dist), n, k, stats);
  finish_stats(comm, stats, start);
  return result;
}

}  // namespace distributed
}  // namespace canopy
