// PartitionedForest: a forest split among the ranks by trees (distributed.hpp says what it
// computes). The leaves come from each rank's own predictor (ForestOutput::Leaf); the sums are
// the executors' own per-row sums (executor/forest_eval.hpp), so their arithmetic is the
// single-process arithmetic by construction.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "core/device.hpp"
#include "distributed/distributed.hpp"
#include "distributed/mpi_detail.hpp"
#include "executor/forest_eval.hpp"

namespace canopy {
namespace distributed {

using namespace detail;  // NOLINT: this file is the layer the helpers serve

namespace {

constexpr std::uint32_t kNoLeaf = 0xffffffffu;
// A chunk's leaves take at most this much host memory on each rank.
constexpr std::size_t kChunkLeafBytes = std::size_t{64} << 20;
constexpr int kCarryTag = 2101;

// Boundaries [ranks + 1] of contiguous runs of `order`, balanced by node count, none empty.
std::vector<index_t> cut_by_nodes(const Forest& f, const std::vector<index_t>& order, int ranks) {
  const index_t trees = static_cast<index_t>(order.size());
  std::vector<double> before(order.size() + 1, 0.0);  // nodes of the trees before position i
  for (std::size_t i = 0; i < order.size(); ++i)
    before[i + 1] = before[i] + static_cast<double>(f.trees()[static_cast<std::size_t>(order[i])].size());
  std::vector<index_t> b(static_cast<std::size_t>(ranks) + 1, 0);
  b[static_cast<std::size_t>(ranks)] = trees;
  for (int r = 1; r < ranks; ++r) {
    const double goal = before.back() * r / ranks;
    index_t i = static_cast<index_t>(std::lower_bound(before.begin(), before.end(), goal) - before.begin());
    i = std::max(i, b[static_cast<std::size_t>(r) - 1] + 1);
    b[static_cast<std::size_t>(r)] = std::min(i, trees - (ranks - r));
  }
  return b;
}

}  // namespace

// A rank's trees as the host adds their leaves: the model file's leaf id (pred_leaf's value) to
// the leaf's value and its index among the tree's leaves, per tree; and the sums' arrays.
struct PartitionedForest::Tables {
  explicit Tables(const Forest& sub) : common(sub) {
    for (std::size_t t = 0; t < sub.trees().size(); ++t) {
      const ForestTree& tree = sub.trees()[t];
      // The model file's leaf ids, as ForestCommon maps them (leaf index -> id).
      const std::int32_t* id = common.leaf_source_id.data() + common.leaf_id_begin[t];
      const index_t leaves = common.leaf_id_begin[t + 1] - common.leaf_id_begin[t];
      const std::int32_t most = leaves > 0 ? *std::max_element(id, id + leaves) : -1;
      begin.push_back(static_cast<index_t>(value.size()));
      ids.push_back(most + 1);
      value.resize(value.size() + static_cast<std::size_t>(most + 1), 0.0f);
      info.resize(value.size(), kNoLeaf);
      for (index_t k = 0; k < tree.size(); ++k) {
        if (!tree.is_leaf(k)) continue;
        const std::int32_t leaf = tree.leaf_index[static_cast<std::size_t>(k)];
        const std::size_t at = static_cast<std::size_t>(begin.back() + id[leaf]);
        value[at] = tree.value[static_cast<std::size_t>(k)];
        info[at] = kForestLeafBit | static_cast<std::uint32_t>(leaf);
      }
    }
  }
  // Values per row of the running sums, and their bytes.
  int carry_values() const { return common.leaf_width == 0 ? common.n_groups : common.leaf_width; }
  std::size_t carry_bytes() const {
    return static_cast<std::size_t>(carry_values()) * (common.leaf_width == 0 ? sizeof(float) : sizeof(double));
  }

  ForestCommon common;
  std::vector<index_t> begin;      // per tree: its first entry in value / info
  std::vector<std::int32_t> ids;   // per tree: entries (its largest leaf id + 1)
  std::vector<float> value;        // scalar leaves: the value
  std::vector<std::uint32_t> info; // the leaf's ForestNode::info (its leaf index), kNoLeaf: no leaf has that id
};

PartitionedForest::PartitionedForest(MPI_Comm comm, const Forest& forest, const ForestConfig& config,
                                     std::uint64_t memory_budget)
    : comm_(comm) {
  const Place p = place_in(comm);
  rank_ = p.rank;
  ranks_ = p.ranks;
  n_features_ = forest.n_features();
  n_trees_ = forest.n_trees();
  // The same on every rank (the same forest): every rank throws it, no rank waits.
  if (n_trees_ < ranks_)
    throw Error(forest.source() + ": " + std::to_string(n_trees_) + " trees cannot be split among " +
                std::to_string(ranks_) + " ranks (at least one tree each)");
  // The executors' tree order (output group by group, the model's order within a group), so
  // each rank's run continues the sums of the run before it.
  const std::vector<index_t> order = ForestCommon(forest).order;
  const std::vector<index_t> b = cut_by_nodes(forest, order, ranks_);
  first_ = b[static_cast<std::size_t>(rank_)];
  local_trees_ = b[static_cast<std::size_t>(rank_) + 1] - first_;
  for (int r = 0; r < ranks_; ++r)
    most_local_trees_ = std::max(most_local_trees_, b[static_cast<std::size_t>(r) + 1] - b[static_cast<std::size_t>(r)]);
  run_share(comm, "trees", Share{first_, local_trees_}, [&] {
    const Forest sub = forest.subset(std::vector<index_t>(order.begin() + first_, order.begin() + first_ + local_trees_));
    predictor_ = std::make_unique<ForestPredictor>(sub, config);
    const std::uint64_t bytes = predictor_->footprint_bytes();
    if (memory_budget > 0 && bytes > memory_budget)
      throw Error("this rank's " + std::to_string(local_trees_) + " trees' " + to_string(predictor_->layout()) +
                  " layout needs " + std::to_string(bytes) + " bytes, over the memory budget of " +
                  std::to_string(memory_budget) + " bytes (more ranks spread the trees thinner)");
    tables_ = std::make_unique<Tables>(sub);
  });
}

PartitionedForest::~PartitionedForest() = default;

int PartitionedForest::output_width(ForestOutput out) const { return predictor_->output_width(out); }

std::uint64_t PartitionedForest::local_bytes() const { return predictor_->footprint_bytes(); }

void PartitionedForest::set_chunk_rows(index_t rows) {
  if (rows < 0) throw Error("chunk rows " + std::to_string(rows) + " must be >= 0");
  chunk_rows_ = rows;
}

namespace {

// Rows [0, m) of a chunk: continue each row's sums from `carry_in` (null: the model's start),
// add this rank's trees' leaves (leaves[m][trees], pred_leaf ids), then save the sums to
// `carry_out`, or (the last rank: carry_out null) finish them into out[m][width].
template <class Tables>
void add_leaves(const Tables& tb, index_t global_trees, const float* leaves, index_t m, index_t trees,
                const unsigned char* carry_in, unsigned char* carry_out, float* out, int width, ForestOutput kind) {
  const ForestCommonView c = tb.common.view();
  ForestCommonView whole = c;  // the forests' average divides by every tree of the model
  whole.n_trees = global_trees;
  const std::size_t step = tb.carry_bytes();
  dispatch_forest_sums(c, [&](auto proto) {
    using Sums = decltype(proto);
    using Carry = typename Sums::Carry;
    tbb::parallel_for(tbb::blocked_range<index_t>(0, m, 256), [&](const tbb::blocked_range<index_t>& range) {
      for (index_t i = range.begin(); i < range.end(); ++i) {
        Sums s = proto;
        if (carry_in) {
          Carry from[Sums::kMax];
          std::memcpy(from, carry_in + static_cast<std::size_t>(i) * step, step);
          s.load(c, from, 0);
        } else {
          s.begin(c);
        }
        const float* row = leaves + i * trees;
        for (index_t t = 0; t < trees; ++t) {
          const float id = row[t];
          const std::size_t at = static_cast<std::size_t>(tb.begin[static_cast<std::size_t>(t)]) + static_cast<std::size_t>(id);
          if (!(id >= 0.0f && id < static_cast<float>(tb.ids[static_cast<std::size_t>(t)])) || tb.info[at] == kNoLeaf)
            throw Error("tree " + std::to_string(t) + " of this rank gave leaf id " + std::to_string(id) +
                        ", which is no leaf of it (internal error)");
          s.add(c, t, ForestNode{tb.value[at], tb.info[at]});
        }
        if (carry_out) {
          Carry to[Sums::kMax];
          s.save(c, to);
          std::memcpy(carry_out + static_cast<std::size_t>(i) * step, to, step);
        } else {
          s.end(c);
          s.write(whole, kind, out + i * width);
        }
      }
    });
  });
}

}  // namespace

void PartitionedForest::predict(const float* rows, index_t n, const ForestRunOptions& options, float* out,
                                DistributedStats* stats, Gather gather) {
  const Clock::time_point start = Clock::now();
  if (stats) {
    *stats = DistributedStats{};
    stats->local_items = std::max<index_t>(n, 0);  // every rank runs every row over its own trees
  }
  int width = 0;
  run_share(comm_, "rows", Share{0, std::max<index_t>(n, 0)}, [&] {
    if (n < 0) throw Error(std::to_string(n) + " rows");
    if (options.output == ForestOutput::Leaf)
      throw Error("ForestOutput::Leaf: a partitioned forest gives margins, probabilities or classes "
                  "(predict_forest over a replicated forest gives leaves)");
    width = predictor_->output_width(options.output);
    if (n > 0 && (!rows || !out)) throw Error("null rows or output buffer");
    if (n > 0 && (is_device_pointer(rows) || is_device_pointer(out)))
      throw Error("the rows and the output of a partitioned forest are host memory (its sums are added on the host)");
    if (n > static_cast<index_t>(INT_MAX)) throw Error(std::to_string(n) + " rows are more than one MPI message's items");
  });
  const bool first = rank_ == 0, last = rank_ == ranks_ - 1;
  const std::size_t step = tables_->carry_bytes();
  const index_t chunk = chunk_rows_ > 0 ? chunk_rows_
                                        : std::clamp<index_t>(static_cast<index_t>(kChunkLeafBytes / (sizeof(float) * static_cast<std::size_t>(most_local_trees_))),
                                                              256, index_t{1} << 20);
  ForestRunOptions leaf_options = options;
  leaf_options.output = ForestOutput::Leaf;
  std::vector<float> leaves(static_cast<std::size_t>(std::min(chunk, std::max<index_t>(n, 1)) * local_trees_));
  std::vector<unsigned char> carry_in, carry_out[2];
  MPI_Request sent[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  double local_ms = 0;
  std::uint64_t bytes = 0;
  try {
    for (index_t a = 0, c = 0; a < n; a += chunk, ++c) {
      const index_t m = std::min(chunk, n - a);
      const int message = static_cast<int>(static_cast<std::size_t>(m) * step);
      Clock::time_point t = Clock::now();
      run_share(comm_, "rows", Share{a, m}, [&] {
        predictor_->predict(rows + a * n_features_, m, leaf_options, leaves.data());
      });
      local_ms += ms_since(t);
      if (!first) {
        carry_in.resize(static_cast<std::size_t>(message));
        check_mpi(MPI_Recv(carry_in.data(), message, MPI_BYTE, rank_ - 1, kCarryTag, comm_, MPI_STATUS_IGNORE), "MPI_Recv");
        bytes += static_cast<std::uint64_t>(message);
      }
      unsigned char* to = nullptr;
      if (!last) {
        std::vector<unsigned char>& buf = carry_out[c % 2];
        check_mpi(MPI_Wait(&sent[c % 2], MPI_STATUS_IGNORE), "MPI_Wait");
        buf.resize(static_cast<std::size_t>(message));
        to = buf.data();
      }
      t = Clock::now();
      add_leaves(*tables_, n_trees_, leaves.data(), m, local_trees_, first ? nullptr : carry_in.data(), to,
                 last ? out + a * width : nullptr, width, options.output);
      local_ms += ms_since(t);
      if (!last) {
        check_mpi(MPI_Isend(to, message, MPI_BYTE, rank_ + 1, kCarryTag, comm_, &sent[c % 2]), "MPI_Isend");
        bytes += static_cast<std::uint64_t>(message);
      }
    }
    check_mpi(MPI_Waitall(2, sent, MPI_STATUSES_IGNORE), "MPI_Waitall");
  } catch (...) {
    MPI_Waitall(2, sent, MPI_STATUSES_IGNORE);  // every send was matched before the failure was agreed
    throw;
  }
  if (stats) stats->local_ms = local_ms;

  // The chain ended on the last rank, which holds every result: send them where `gather` says.
  const int from = ranks_ - 1;
  MPI_Datatype item;
  check_mpi(MPI_Type_contiguous(width, MPI_FLOAT, &item), "MPI_Type_contiguous");
  check_mpi(MPI_Type_commit(&item), "MPI_Type_commit");
  const std::uint64_t item_bytes = static_cast<std::uint64_t>(width) * sizeof(float);
  int rc = MPI_SUCCESS;
  const char* call = "MPI_Bcast";
  if (ranks_ > 1 && gather == Gather::All) {
    rc = MPI_Bcast(out, static_cast<int>(n), item, from, comm_);
    bytes += static_cast<std::uint64_t>(n) * item_bytes * (last ? static_cast<std::uint64_t>(ranks_ - 1) : 1);
  } else if (ranks_ > 1) {
    // Local and Root: every rank its share, as the replicated calls leave them; Root: rank 0
    // every row as well.
    call = "MPI_Scatterv";
    const ShareCounts sc = share_counts(n, ranks_);
    const std::vector<int>& count = sc.count;
    const std::vector<int>& at = sc.at;
    const Share mine = share_of(n, rank_, ranks_);
    rc = last ? MPI_Scatterv(out, count.data(), at.data(), item, MPI_IN_PLACE, 0, item, from, comm_)
              : MPI_Scatterv(nullptr, nullptr, nullptr, item, out + mine.begin * width, static_cast<int>(mine.count),
                             item, from, comm_);
    bytes += (last ? static_cast<std::uint64_t>(n - mine.count) : static_cast<std::uint64_t>(mine.count)) * item_bytes;
    if (rc == MPI_SUCCESS && gather == Gather::Root) {
      call = "MPI_Send";
      if (last) rc = MPI_Send(out, static_cast<int>(n), item, 0, kCarryTag, comm_);
      else if (first) rc = MPI_Recv(out, static_cast<int>(n), item, from, kCarryTag, comm_, MPI_STATUS_IGNORE);
      if (first || last) bytes += static_cast<std::uint64_t>(n) * item_bytes;
    }
  }
  MPI_Type_free(&item);
  check_mpi(rc, call);
  if (stats) stats->bytes_moved = bytes;
  finish_stats(comm_, stats, start);
}

}  // namespace distributed
}  // namespace canopy
