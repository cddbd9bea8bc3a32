// Forest inference, the part every executor shares (FIL's habit: one function evaluates one
// row on one tree, with no parallelism inside; the CPU executor and the GPU kernels only
// decide which thread runs which (row, tree) pair and how partial sums meet).
//
//   find_leaf(view, t, row)   the leaf row `row` reaches in tree t (layout order) of any layout
//   ScalarSums / VectorSums   a row's running sums: XGBoost's float32 sum per output group,
//                             or a forest's float64 sum of leaf vectors
//   write(...)                margins -> margin / probability / class, into the caller's row
//   predict_row(...)          all trees of one row, in layout order
//
// Numerics, chosen so the CPU and every GPU kernel that sums trees in the same order give
// the same bits, and so XGBoost and scikit-learn are reproduced:
//   * XGBoost: the margin of group g starts at base_margin[g] and adds the group's trees'
//     leaf values one by one in float32, in model order (python3-xgboost 1.7 does exactly
//     this; tests/data/forest checks it bit for bit).
//   * Forests: float64 sum of the leaves' class distributions from 0.0, tree by tree, then
//     divided by the number of trees: scikit-learn's predict_proba / predict, step by step.
//   * XGBoost's transforms are XGBoost 1.7's own float32 arithmetic (sigmoid: 1 / (1 + e^-m)
//     with e^-m capped at e^88.7; softmax: e^(m - max) in float32, their float64 sum, then
//     float32 divisions by it), with one difference: e^x is Canopy's own, correctly rounded to
//     float32 from a float64 evaluation with explicit round-to-nearest operations, identical
//     on host and device. glibc's expf, which XGBoost calls, is misrounded for 7.6e-5 of the
//     floats (an exhaustive count: docs/forests.md), the only place the two can differ.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "layouts/forest.hpp"
#include "layouts/forest_adaptive.hpp"
#include "layouts/forest_layouts.hpp"
#include "core/rounding.hpp"

#if defined(__CUDA_ARCH__)
#define CANOPY_FOREST_UNROLL _Pragma("unroll")
#else
#define CANOPY_FOREST_UNROLL
#endif

namespace canopy {

// ---- the one per-row, per-tree function -------------------------------------------------------

// The leaf of tree t (layout order) that `row` reaches. For the hierarchical layout, `root`
// may point at a copy of tree t's root subtree (the hybrid kernel's shared memory); null
// reads it from the view.
template <class View>
CANOPY_HD inline ForestNode find_leaf(const View& v, index_t t, const float* row, const ForestNode* root = nullptr) {
  if constexpr (std::is_same<View, CsrForestView>::value) {
    (void)root;
    const index_t base = v.tree_node_begin[t];
    const std::int32_t* children = v.children + v.tree_child_begin[t];
    std::int32_t n = 0;
    for (;;) {
      const ForestNode node{v.value[base + n], v.info[base + n]};
      if (forest_is_leaf(node.info)) return node;
      n = children[v.child_index[base + n] + forest_go_right(node, row, v.common.categories)];
    }
  } else if constexpr (std::is_same<View, ReorgForestView>::value) {
    (void)root;
    const index_t trees = v.common.n_trees;
    std::int32_t slot = 0;
    for (int level = 0;; ++level) {
      const index_t at = v.level_begin[level] + slot * trees + t;
      const ForestNode node = v.nodes[at];
      if (forest_is_leaf(node.info)) return node;
      slot = v.child_slot[at] + forest_go_right(node, row, v.common.categories);
    }
  } else if constexpr (std::is_same<View, AdaptiveForestView>::value) {
    (void)root;
    const std::uint32_t k = adaptive_walk(v.nodes + v.tree_begin[t], 1, v.depth[t], v.feature_bits, v.feature_mask,
                                          [row](int f) { return row[f]; }, v.common.categories);
    return adaptive_leaf(v, t, k);
  } else {
    static_assert(std::is_same<View, HierarchicalForestView>::value, "find_leaf: unknown forest layout view");
    const ForestNode* sub = root ? root : v.root_nodes + t * v.root_stride;
    index_t s = t;                                          // the root subtree of tree t has id t
    std::int32_t bottom = (std::int32_t{1} << (v.root_depth - 1)) - 1;  // first bottom-level position
    std::int32_t p = 0;
    for (;;) {
      const ForestNode node = sub[p];
      if (forest_is_leaf(node.info)) return node;
      const int right = forest_go_right(node, row, v.common.categories);
      if (p < bottom) {
        p = 2 * p + 1 + right;  // inside the subtree: arithmetic indexing
      } else {
        // Leaving the subtree through the connection table (the paper's subtree_connection).
        s = v.connections[v.connection_begin[s] + 2 * static_cast<index_t>(p - bottom) + right];
        sub = v.nodes + v.subtree_node_begin[s];
        bottom = (std::int32_t{1} << (v.subtree_depth - 1)) - 1;
        p = 0;
      }
    }
  }
}

// ---- deterministic arithmetic -----------------------------------------------------------------

namespace forest_math {

CANOPY_HD inline double dfloor(double x) {
#if defined(__CUDA_ARCH__)
  return ::floor(x);
#else
  return std::floor(x);
#endif
}
// 2^k for k in [-1022, 1023], built from its bits.
CANOPY_HD inline double pow2(int k) {
  const std::uint64_t bits = static_cast<std::uint64_t>(k + 1023) << 52;
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
#endif
}

// e^x in float64 (0 below -708, +inf above 709): x = k ln2 + r with |r| <= ln2 / 2, e^r by its
// Taylor polynomial of degree 13 (truncation below 1e-17), every operation rounded explicitly.
CANOPY_HD inline double exp_rn(double x) {
  if (x != x) return x;
  if (!(x > -708.0)) return 0.0;
  if (x > 709.0) return 1.0 / 0.0;
  const double kd = dfloor(add_rn(mul_rn(x, 1.4426950408889634), 0.5));
  // ln 2 split so that kd * kLn2Hi is exact (fdlibm's constants).
  const double r = add_rn(add_rn(x, -mul_rn(kd, 6.93147180369123816490e-01)), -mul_rn(kd, 1.90821492927058770002e-10));
  double p = 1.6059043836821613e-10;
  p = add_rn(mul_rn(p, r), 2.08767569878681e-09);
  p = add_rn(mul_rn(p, r), 2.505210838544172e-08);
  p = add_rn(mul_rn(p, r), 2.755731922398589e-07);
  p = add_rn(mul_rn(p, r), 2.7557319223985893e-06);
  p = add_rn(mul_rn(p, r), 2.48015873015873e-05);
  p = add_rn(mul_rn(p, r), 0.0001984126984126984);
  p = add_rn(mul_rn(p, r), 0.001388888888888889);
  p = add_rn(mul_rn(p, r), 0.008333333333333333);
  p = add_rn(mul_rn(p, r), 0.041666666666666664);
  p = add_rn(mul_rn(p, r), 0.16666666666666666);
  p = add_rn(mul_rn(p, r), 0.5);
  p = add_rn(mul_rn(p, r), 1.0);
  p = add_rn(mul_rn(p, r), 1.0);
  return mul_rn(p, pow2(static_cast<int>(kd)));
}

// e^x rounded to float32 (expf's job: XGBoost's transforms call it).
CANOPY_HD inline float expf_rn(float x) { return static_cast<float>(exp_rn(static_cast<double>(x))); }

// C's fmaxf: a NaN operand gives the other one.
CANOPY_HD inline float fmax_c(float a, float b) {
  if (a != a) return b;
  if (b != b) return a;
  return a > b ? a : b;
}

// XGBoost 1.7's Sigmoid: x = min(-m, 88.7f); 1.0f / (expf(x) + 1.0f + 1e-16f), in float32.
CANOPY_HD inline float sigmoid(float m) {
  const float neg = -m;
  const float x = 88.7f < neg ? 88.7f : neg;  // std::min(-m, 88.7f), NaN kept
  return div_rn(1.0f, add_rn(add_rn(expf_rn(x), 1.0f), 1e-16f));
}

}  // namespace forest_math

// ---- per-row sums -------------------------------------------------------------------------------

// Result k of a row into the caller's row: float32, or float64 when f64 (dst then holds
// doubles: ForestPredictor's double output).
CANOPY_HD inline void store_result(float* dst, int k, double v, bool f64) {
  if (f64)
    reinterpret_cast<double*>(dst)[k] = v;
  else
    dst[k] = static_cast<float>(v);
}

// XGBoost: one float32 margin per output group, kMaxK >= n_groups. Trees must be added in
// layout order, where each group's trees are contiguous: the running sum `cur` of group g
// is stored when the first tree of a later group arrives.
template <int kMaxK>
struct ScalarSums {
  static constexpr int kMax = kMaxK;
  static constexpr bool kScalarLeaves = true;
  float margin[kMaxK];
  float cur;
  int group;
  index_t next;  // first tree of the group after `group`

  CANOPY_HD void begin(const ForestCommonView& c) {
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k) margin[k] = k < c.n_groups ? c.base_margin[k] : 0.0f;
    group = 0;
    cur = c.base_margin[0];
    next = c.group_begin[1];
  }
  CANOPY_HD void add(const ForestCommonView& c, index_t t, ForestNode leaf) {
    while (t >= next) {
      store();
      ++group;
      cur = c.base_margin[group];
      next = c.group_begin[group + 1];
    }
    cur = add_rn(cur, leaf.value);
  }
  CANOPY_HD void end(const ForestCommonView&) { store(); }

  // A row's sums leave and re-enter between runs over parts of the forest (the splitting
  // strategy): the group margins as they stand, and the group of the next tree to add. The
  // additions continue exactly where they stopped, so the result is the same bits.
  using Carry = float;
  CANOPY_HD void save(const ForestCommonView& c, Carry* dst) {
    store();
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k)
      if (k < c.n_groups) dst[k] = margin[k];
  }
  CANOPY_HD void load(const ForestCommonView& c, const Carry* src, index_t next_tree) {
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k) margin[k] = k < c.n_groups ? src[k] : 0.0f;
    group = 0;
    while (group + 1 < c.n_groups && next_tree >= c.group_begin[group + 1]) ++group;
    cur = 0.0f;
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k)
      if (k == group) cur = margin[k];
    next = c.group_begin[group + 1];
  }

  CANOPY_HD void write(const ForestCommonView& c, ForestOutput out, float* dst, bool f64 = false) const {
    const int K = c.n_groups;
    const bool multi = c.objective == ForestObjective::MultiSoftprob || c.objective == ForestObjective::MultiSoftmax;
    if (out == ForestOutput::Margin || (out == ForestOutput::Prob && c.objective == ForestObjective::SquaredError)) {
      CANOPY_FOREST_UNROLL
      for (int k = 0; k < kMaxK; ++k)
        if (k < K) store_result(dst, k, margin[k], f64);
      return;
    }
    if (!multi) {  // binary:logistic
      const float p = forest_math::sigmoid(margin[0]);
      if (out == ForestOutput::Proba) {
        store_result(dst, 0, sub_rn(1.0f, p), f64);
        store_result(dst, 1, p, f64);
        return;
      }
      store_result(dst, 0, out == ForestOutput::Prob ? static_cast<double>(p) : c.class_values[p > 0.5f ? 1 : 0], f64);
      return;
    }
    if (out == ForestOutput::Class) {
      int best = 0;
      float top = margin[0];
      CANOPY_FOREST_UNROLL
      for (int k = 1; k < kMaxK; ++k)
        if (k < K && margin[k] > top) {
          top = margin[k];
          best = k;
        }
      store_result(dst, 0, c.class_values[best], f64);
      return;
    }
    // XGBoost 1.7's Softmax: the largest margin (fmaxf), e^(m - max) in float32, their sum in
    // float64 in class order, each divided by the sum rounded to float32.
    float top = margin[0];
    CANOPY_FOREST_UNROLL
    for (int k = 1; k < kMaxK; ++k)
      if (k < K) top = forest_math::fmax_c(margin[k], top);
    float e[kMaxK];
    double sum = 0.0;
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k) {
      e[k] = k < K ? forest_math::expf_rn(sub_rn(margin[k], top)) : 0.0f;
      if (k < K) sum = add_rn(sum, static_cast<double>(e[k]));
    }
    const float total = static_cast<float>(sum);
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k)
      if (k < K) store_result(dst, k, div_rn(e[k], total), f64);
  }

 private:
  CANOPY_HD void store() {
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k)
      if (k == group) margin[k] = cur;
  }
};

// Forests: the float64 sum of the leaves' vectors (class distributions or one value),
// kMaxK >= leaf_width. Any tree order gives the same sums only up to rounding: the
// sequential executors add in layout order (= the model's order, as scikit-learn does).
template <int kMaxK>
struct VectorSums {
  static constexpr int kMax = kMaxK;
  static constexpr bool kScalarLeaves = false;
  double sum[kMaxK];

  CANOPY_HD void begin(const ForestCommonView&) {
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k) sum[k] = 0.0;
  }
  CANOPY_HD void add(const ForestCommonView& c, index_t t, ForestNode leaf) {
    const double* v = c.leaf_values + (c.tree_leaf_begin[t] + static_cast<index_t>(forest_index(leaf.info))) * c.leaf_width;
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k)
      if (k < c.leaf_width) sum[k] = add_rn(sum[k], v[k]);
  }
  CANOPY_HD void end(const ForestCommonView&) {}

  using Carry = double;
  CANOPY_HD void save(const ForestCommonView& c, Carry* dst) const {
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k)
      if (k < c.leaf_width) dst[k] = sum[k];
  }
  CANOPY_HD void load(const ForestCommonView& c, const Carry* src, index_t) {
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k) sum[k] = k < c.leaf_width ? src[k] : 0.0;
  }

  CANOPY_HD void write(const ForestCommonView& c, ForestOutput out, float* dst, bool f64 = false) const {
    const double trees = static_cast<double>(c.n_trees);
    if (out == ForestOutput::Class) {
      int best = 0;
      double top = div_rn(sum[0], trees);
      CANOPY_FOREST_UNROLL
      for (int k = 1; k < kMaxK; ++k)
        if (k < c.leaf_width) {
          const double p = div_rn(sum[k], trees);
          if (p > top) {
            top = p;
            best = k;
          }
        }
      store_result(dst, 0, c.class_values[best], f64);
      return;
    }
    CANOPY_FOREST_UNROLL
    for (int k = 0; k < kMaxK; ++k)
      if (k < c.leaf_width) store_result(dst, k, div_rn(sum[k], trees), f64);
  }
};

// Calls f(Sums{}) with the sums type that fits the forest (the set the library instantiates).
template <class F>
void dispatch_forest_sums(const ForestCommonView& c, F&& f) {
  if (c.leaf_width == 0) {
    if (c.n_groups == 1) return f(ScalarSums<1>{});
    if (c.n_groups <= 8) return f(ScalarSums<8>{});
    if (c.n_groups <= kMaxForestOutputs) return f(ScalarSums<kMaxForestOutputs>{});
    throw Error("the model has " + std::to_string(c.n_groups) + " output groups; at most " +
                std::to_string(kMaxForestOutputs) + " are supported");
  }
  if (c.leaf_width <= 2) return f(VectorSums<2>{});
  if (c.leaf_width <= 8) return f(VectorSums<8>{});
  if (c.leaf_width <= kMaxForestOutputs) return f(VectorSums<kMaxForestOutputs>{});
  throw Error("the model has " + std::to_string(c.leaf_width) + " classes; at most " +
              std::to_string(kMaxForestOutputs) + " are supported");
}

// One row, every tree in layout order: what the CPU executor and the direct kernel run.
template <class Sums, class View>
CANOPY_HD inline void predict_row(const View& v, const float* row, ForestOutput out, float* dst, bool f64 = false) {
  Sums s;
  s.begin(v.common);
  for (index_t t = 0; t < v.common.n_trees; ++t) s.add(v.common, t, find_leaf(v, t, row));
  s.end(v.common);
  s.write(v.common, out, dst, f64);
}

}  // namespace canopy
