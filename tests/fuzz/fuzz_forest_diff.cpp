// Differential fuzz target for forest inference: the input is decoded into a small forest
// (XGBoost or Canopy JSON, a few trees, depth <= 6, < 8 features, XGBoost categorical splits
// among them) and a few rows with missing values; every CPU executor and layout must give the
// bits of a naive walk of the source trees.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <tbb/global_control.h>

#include "executor/forest_eval.hpp"
#include "fuzz_util.hpp"
#include "layouts/forest_adaptive.hpp"
#include "layouts/forest_layouts.hpp"
#include "runtime/forest_predictor.hpp"
#include "scheduler/forest_rows.hpp"

using namespace canopy;

namespace {

// One thread: inputs run faster and alike (the batches are far too small to split anyway).
const tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);

enum Kind { kBinary, kSoftprob, kSoftmax, kSquared, kRfClass, kRfReg, kKinds };

// Source-format node (ids as written to the JSON, which are not breadth-first).
struct Node {
  int left = -1, right = -1, feature = 0;
  double threshold = 0;  // XGBoost: a float32 value; forests: a float64 ("x <= t")
  bool default_left = false;
  bool categorical = false;  // XGBoost only: right iff trunc(x) is one of `cats`
  std::vector<int> cats;
  double samples = 0, weight = 0;
  float leaf = 0;              // XGBoost leaf
  std::vector<double> values;  // forest leaf
};
struct Tree {
  std::vector<Node> nodes;
  int group = 0;
};

struct Model {
  Kind kind = kSquared;
  int features = 1, groups = 1, classes = 0, width = 0;
  double base_score = 0.5;
  int base_style = 0;            // XGBoost: number, "string", "[string]"
  bool cover = false;            // XGBoost sum_hessian / forest weighted_node_samples
  int missing_rule = 0;          // forests: 0 default_left, 1 node_samples, 2 both
  std::vector<double> class_values;
  std::vector<Tree> trees;
  bool xgb() const { return kind <= kSquared; }
};

// Values where ties, signs, denormals and huge magnitudes meet.
float pick_float(fuzz::Bytes& in) {
  static const float table[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 0.1f, 1e-30f,
                                1.5f, 2.0f,  100.0f, -100.0f, 3.0e38f, 1e-45f, 0.25f, 0.75f};
  const std::uint8_t b = in.u8();
  if (b < 224) return table[b % 16];
  const std::uint32_t bits = in.u32();
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return std::isfinite(f) ? f : 0.5f;
}

// A float64 threshold near a float32 value: exactly on it or one float64 step to either side.
double pick_double(fuzz::Bytes& in) {
  const double f = pick_float(in);
  switch (in.below(4)) {
    case 1: return std::nextafter(f, std::numeric_limits<double>::infinity());
    case 2: return std::nextafter(f, -std::numeric_limits<double>::infinity());
    default: return f;
  }
}

int build_node(fuzz::Bytes& in, const Model& m, Tree& t, int depth, int max_depth) {
  const int id = static_cast<int>(t.nodes.size());
  t.nodes.emplace_back();
  Node nd;
  nd.samples = in.u8();
  nd.weight = in.u8() / 4.0;
  if (depth < max_depth && (in.u8() & 3) != 0) {
    nd.feature = in.below(m.features);
    nd.threshold = m.xgb() ? static_cast<double>(pick_float(in)) : pick_double(in);
    if (m.xgb() && in.below(4) == 0) {
      nd.categorical = true;
      for (int c = in.below(7); c > 0; --c) nd.cats.push_back(in.below(40));  // repeats and none too
    }
    nd.default_left = in.bit();
    // Pre-order ids: the importer must renumber them breadth-first.
    nd.left = build_node(in, m, t, depth + 1, max_depth);
    nd.right = build_node(in, m, t, depth + 1, max_depth);
  } else if (m.xgb()) {
    nd.leaf = pick_float(in);
  } else if (m.kind == kRfClass) {
    std::vector<double> w(static_cast<std::size_t>(m.width));
    double sum = 0;
    for (double& x : w) sum += (x = in.u8() % 4);
    for (double& x : w) x = sum > 0 ? x / sum : 0.0;  // all zero is accepted too
    nd.values = w;
  } else {
    nd.values = {pick_double(in)};
  }
  t.nodes[static_cast<std::size_t>(id)] = nd;
  return id;
}

Model decode_model(fuzz::Bytes& in) {
  Model m;
  m.kind = static_cast<Kind>(in.below(kKinds));
  m.features = 1 + in.below(7);
  if (m.kind == kSoftprob || m.kind == kSoftmax) m.groups = 1 + in.below(4);
  if (m.kind == kBinary) m.classes = 2;
  if (m.kind == kSoftprob || m.kind == kSoftmax) m.classes = m.groups;
  if (m.kind == kRfClass) m.classes = m.width = 1 + in.below(4);
  if (m.kind == kRfReg) m.width = 1;
  if (m.kind == kRfClass)
    for (int c = 0; c < m.classes; ++c) m.class_values.push_back(static_cast<double>(pick_float(in)));
  static const double binary_scores[] = {0.5, 0.25, 0.1, 0.9, 1.0 / 3.0, 1e-3, 0.999, 0.6};
  m.base_score = m.kind == kBinary ? binary_scores[in.below(8)] : static_cast<double>(pick_float(in));
  m.base_style = in.below(3);
  m.cover = in.bit();
  m.missing_rule = in.below(3);
  const int n_trees = 1 + in.below(6);
  const int max_depth = in.below(7);
  for (int i = 0; i < n_trees; ++i) {
    Tree t;
    t.group = in.below(m.groups);
    build_node(in, m, t, 0, max_depth);
    m.trees.push_back(std::move(t));
  }
  return m;
}

// JSON "-0" is the integer 0 to nlohmann-json (the sign is lost); "-0.0" keeps it.
std::string num(double v) {
  if (v == 0 && std::signbit(v)) return "-0.0";
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}
std::string numf(float v) {  // 9 digits: a float32 round-trips
  if (v == 0 && std::signbit(v)) return "-0.0";
  char b[40];
  std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v));
  return b;
}

template <class F>
std::string array(const Tree& t, F&& f) {
  std::string s = "[";
  for (std::size_t k = 0; k < t.nodes.size(); ++k) s += (k ? "," : "") + f(t.nodes[k]);
  return s + "]";
}

std::string to_json(const Model& m) {
  std::string s;
  if (m.xgb()) {
    static const char* names[] = {"binary:logistic", "multi:softprob", "multi:softmax", "reg:squarederror"};
    const std::string bs = m.base_style == 0 ? num(m.base_score)
                           : m.base_style == 1 ? "\"" + num(m.base_score) + "\""
                                               : "\"[" + num(m.base_score) + "]\"";
    s = std::string(R"({"learner":{"objective":{"name":")") + names[m.kind] + R"("},"learner_model_param":{"num_feature":")" +
        std::to_string(m.features) + R"(","num_class":")" + std::to_string(m.groups > 1 || m.kind == kSoftprob || m.kind == kSoftmax ? m.groups : 0) +
        R"(","base_score":)" + bs + R"(},"gradient_booster":{"name":"gbtree","model":{"trees":[)";
    std::string info;
    for (std::size_t i = 0; i < m.trees.size(); ++i) {
      const Tree& t = m.trees[i];
      s += (i ? "," : "") + std::string(R"({"tree_param":{"num_nodes":")") + std::to_string(t.nodes.size()) + R"("})";
      s += R"(,"left_children":)" + array(t, [](const Node& n) { return std::to_string(n.left); });
      s += R"(,"right_children":)" + array(t, [](const Node& n) { return std::to_string(n.right); });
      s += R"(,"split_indices":)" + array(t, [](const Node& n) { return std::to_string(n.feature); });
      s += R"(,"split_conditions":)" +
           array(t, [](const Node& n) { return numf(n.left < 0 ? n.leaf : static_cast<float>(n.threshold)); });
      s += R"(,"default_left":)" + array(t, [](const Node& n) { return std::string(n.default_left ? "1" : "0"); });
      if (m.cover) s += R"(,"sum_hessian":)" + array(t, [](const Node& n) { return num(n.weight); });
      // As XGBoost 1.7 writes them, empty lists included.
      s += R"(,"split_type":)" + array(t, [](const Node& n) { return std::string(n.left >= 0 && n.categorical ? "1" : "0"); });
      std::string nodes, begins, sizes, cats;
      int at = 0;
      for (std::size_t k = 0; k < t.nodes.size(); ++k) {
        const Node& n = t.nodes[k];
        if (n.left < 0 || !n.categorical) continue;
        const char* sep = nodes.empty() ? "" : ",";
        nodes += sep + std::to_string(k);
        begins += sep + std::to_string(at);
        sizes += sep + std::to_string(n.cats.size());
        for (int c : n.cats) cats += (at++ ? "," : "") + std::to_string(c);
      }
      s += R"(,"categories_nodes":[)" + nodes + R"(],"categories_segments":[)" + begins + R"(],"categories_sizes":[)" +
           sizes + R"(],"categories":[)" + cats + "]";
      s += "}";
      info += (i ? "," : "") + std::to_string(t.group);
    }
    s += R"(],"tree_info":[)" + info + R"(],"gbtree_model_param":{"num_trees":")" + std::to_string(m.trees.size()) +
         R"("}}}}})";
    return s;
  }
  s = std::string(R"({"format":"canopy-forest","version":1,"task":")") +
      (m.kind == kRfClass ? "classification" : "regression") + R"(","num_features":)" + std::to_string(m.features);
  if (m.kind == kRfClass) {
    s += R"(,"classes":[)";
    for (std::size_t c = 0; c < m.class_values.size(); ++c) s += (c ? "," : "") + num(m.class_values[c]);
    s += "]";
  }
  s += R"(,"trees":[)";
  for (std::size_t i = 0; i < m.trees.size(); ++i) {
    const Tree& t = m.trees[i];
    s += (i ? "," : "") + std::string(R"({"left_children":)") + array(t, [](const Node& n) { return std::to_string(n.left); });
    s += R"(,"right_children":)" + array(t, [](const Node& n) { return std::to_string(n.right); });
    s += R"(,"features":)" + array(t, [](const Node& n) { return std::to_string(n.left < 0 ? -2 : n.feature); });
    s += R"(,"thresholds":)" + array(t, [](const Node& n) { return n.left < 0 ? std::string("-2") : num(n.threshold); });
    s += R"(,"values":)" + array(t, [](const Node& n) {
      std::string v = "[";
      for (std::size_t c = 0; c < n.values.size(); ++c) v += (c ? "," : "") + num(n.values[c]);
      return v + "]";
    });
    if (m.missing_rule != 1)
      s += R"(,"default_left":)" + array(t, [](const Node& n) { return std::string(n.default_left ? "true" : "false"); });
    if (m.missing_rule != 0) s += R"(,"node_samples":)" + array(t, [](const Node& n) { return num(n.samples); });
    if (m.cover) s += R"(,"weighted_node_samples":)" + array(t, [](const Node& n) { return num(n.weight); });
    s += "}";
  }
  return s + "]}";
}

// The documented semantics, walked on the source trees: XGBoost left iff x < float32 t,
// forests left iff x <= float64 t; a missing value to default_left, or (forests without it)
// to the child with more samples, a tie going right.
const Node& naive_leaf(const Model& m, const Tree& t, const float* row) {
  const Node* n = &t.nodes[0];
  while (n->left >= 0) {
    const float x = row[n->feature];
    bool left;
    if (std::isnan(x)) {
      left = m.xgb() || m.missing_rule != 1 ? n->default_left
                                              : t.nodes[static_cast<std::size_t>(n->left)].samples >
                                                    t.nodes[static_cast<std::size_t>(n->right)].samples;
    } else if (n->categorical) {
      // XGBoost: right iff the category is in the set; negative and unseen ones go left.
      left = !(x >= 0.0f && x < 1e9f &&
               std::find(n->cats.begin(), n->cats.end(), static_cast<int>(x)) != n->cats.end());
    } else {
      left = m.xgb() ? x < static_cast<float>(n->threshold) : static_cast<double>(x) <= n->threshold;
    }
    n = &t.nodes[static_cast<std::size_t>(left ? n->left : n->right)];
  }
  return *n;
}

// Margins (XGBoost, float32 sums per group in model order from the base margin) or the
// averaged leaf vectors (forests, float64 sums in model order, divided by the tree count).
std::vector<float> naive_margin(const Model& m, const float* row) {
  if (m.xgb()) {
    float base = static_cast<float>(m.base_score);
    if (m.kind == kBinary) {
      const float p = static_cast<float>(m.base_score);
      base = -std::log(1.0f / p - 1.0f);
    }
    std::vector<float> g(static_cast<std::size_t>(m.groups), base);
    for (const Tree& t : m.trees) g[static_cast<std::size_t>(t.group)] += naive_leaf(m, t, row).leaf;
    return g;
  }
  std::vector<double> sum(static_cast<std::size_t>(m.width), 0.0);
  for (const Tree& t : m.trees) {
    const Node& leaf = naive_leaf(m, t, row);
    for (int c = 0; c < m.width; ++c) sum[static_cast<std::size_t>(c)] += leaf.values[static_cast<std::size_t>(c)];
  }
  std::vector<float> out;
  for (double s : sum) out.push_back(static_cast<float>(s / static_cast<double>(m.trees.size())));
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // Empty outputs (no class output) have null data: memcmp must not see them.
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::string show(const std::vector<float>& v) {
  std::string s;
  for (float x : v) s += numf(x) + " ";
  return s;
}

struct Run {
  std::string name;
  std::vector<float> out[4];  // per ForestOutput (the leaf output through the predictor only)
};

// Every row through one layout view, one row at a time with every tree in layout order (the
// GPU direct kernel's code), for the outputs the forest has.
template <class View>
Run per_row(const std::string& name, const View& v, const std::vector<float>& rows, int n_rows, const int* width) {
  Run r;
  r.name = name;
  dispatch_forest_sums(v.common, [&](auto sums) {
    using Sums = decltype(sums);
    for (int o = 0; o < 3; ++o) {
      if (width[o] == 0) continue;
      r.out[o].assign(static_cast<std::size_t>(n_rows * width[o]), 0.0f);
      for (int i = 0; i < n_rows; ++i)
        predict_row<Sums>(v, rows.data() + static_cast<std::size_t>(i) * v.common.n_features, static_cast<ForestOutput>(o),
                          r.out[o].data() + static_cast<std::size_t>(i) * width[o]);
    }
  });
  return r;
}

// The adaptive layout as the shared-data and splitting strategies read it: trees walked in
// the interleaved copy (storage order), and the sums saved and reloaded at `split` trees.
Run adaptive_emulated(const AdaptiveForestView& v, const std::vector<float>& rows, int n_rows, const int* width,
                      index_t split) {
  Run r;
  r.name = "adaptive interleaved + split at " + std::to_string(split);
  const index_t T = v.common.n_trees;
  std::vector<index_t> storage_of(static_cast<std::size_t>(T));
  for (index_t s = 0; s < T; ++s) storage_of[static_cast<std::size_t>(v.inter_tree[s])] = s;
  dispatch_forest_sums(v.common, [&](auto sums) {
    using Sums = decltype(sums);
    for (int o = 0; o < 3; ++o) {
      if (width[o] == 0) continue;
      r.out[o].assign(static_cast<std::size_t>(n_rows * width[o]), 0.0f);
      for (int i = 0; i < n_rows; ++i) {
        const float* row = rows.data() + static_cast<std::size_t>(i) * v.common.n_features;
        Sums s;
        s.begin(v.common);
        typename Sums::Carry carry[Sums::kMax] = {};
        for (index_t t = 0; t < T; ++t) {
          if (t == split && t > 0) {
            s.save(v.common, carry);
            s = Sums{};
            s.load(v.common, carry, t);
          }
          const std::uint32_t k = adaptive_walk(v.inter + storage_of[static_cast<std::size_t>(t)], T, v.depth[t],
                                                v.feature_bits, v.feature_mask, [row](int f) { return row[f]; }, v.common.categories);
          s.add(v.common, t, adaptive_leaf(v, t, k));
        }
        s.end(v.common);
        s.write(v.common, static_cast<ForestOutput>(o), r.out[o].data() + static_cast<std::size_t>(i) * width[o]);
      }
    }
  });
  return r;
}

Run through_predictor(const std::string& name, const Forest& f, const ForestConfig& cfg, const std::vector<float>& rows,
                      int n_rows, const int* width) {
  Run r;
  r.name = name;
  ForestPredictor p(f, cfg);
  for (int o = 0; o < 4; ++o) {
    if (width[o] == 0) continue;
    r.out[o].assign(static_cast<std::size_t>(n_rows * width[o]), 0.0f);
    ForestRunOptions run;
    run.output = static_cast<ForestOutput>(o);
    p.predict(rows.data(), n_rows, run, r.out[o].data());
  }
  if (cfg.layout == ForestLayout::Adaptive) {
    // The CPU reference of row scheduling must be a permutation of the rows.
    const int max_depth = f.max_depth();
    if (max_depth >= 1) {
      const std::vector<index_t> order = p.schedule_rows(rows.data(), n_rows, std::min(max_depth, 16));
      std::vector<index_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      CANOPY_FUZZ_CHECK(sorted.size() == static_cast<std::size_t>(n_rows), "row order length");
      for (int i = 0; i < n_rows; ++i) CANOPY_FUZZ_CHECK(sorted[static_cast<std::size_t>(i)] == i, "row order is not a permutation");
      const double npw = p.nodes_per_warp(rows.data(), n_rows, order.data());
      CANOPY_FUZZ_CHECK(std::isfinite(npw) && npw >= 0, "nodes per warp");
    }
  }
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::Bytes in(data, size);
  const Model m = decode_model(in);
  const int n_rows = 1 + in.below(8);
  std::vector<float> rows(static_cast<std::size_t>(n_rows * m.features));
  for (float& x : rows) x = in.below(5) == 0 ? std::numeric_limits<float>::quiet_NaN() : pick_float(in);
  HierarchicalOptions hier;
  hier.subtree_depth = 1 + in.below(8);
  hier.root_depth = 1 + in.below(kMaxRootDepth);
  AdaptiveConfig adaptive;
  adaptive.node_rearrangement = in.bit();
  adaptive.tree_rearrangement = in.bit();
  adaptive.token_nodes = 1 + in.below(6);
  adaptive.hash_bits = 64 << in.below(4);
  adaptive.chunks = 1 << in.below(7);
  const std::uint8_t split_byte = in.u8();

  const std::string json = to_json(m);
  Forest f;
  try {
    f = Forest::parse(json, "diff.json");
  } catch (const Error& e) {
    fuzz::fail(std::string("a valid model was refused: ") + e.what() + "\n" + json);
  }

  int width[4];
  for (int o = 0; o < 4; ++o) {
    width[o] = 0;
    fuzz::library_call([&] { width[o] = f.output_width(static_cast<ForestOutput>(o)); });
  }
  const int margin = static_cast<int>(ForestOutput::Margin);
  CANOPY_FUZZ_CHECK(width[margin] == (m.xgb() ? (m.kind == kSoftprob || m.kind == kSoftmax ? m.groups : 1) : m.width),
                    "margin width");

  // The naive margins, and the leaf output: per row, per tree in model order, the file's id of
  // the leaf reached.
  std::vector<float> expected, expected_leaf;
  for (int i = 0; i < n_rows; ++i) {
    const float* row = rows.data() + static_cast<std::size_t>(i) * m.features;
    const std::vector<float> e = naive_margin(m, row);
    expected.insert(expected.end(), e.begin(), e.end());
    for (const Tree& t : m.trees) expected_leaf.push_back(static_cast<float>(&naive_leaf(m, t, row) - t.nodes.data()));
  }

  // Each layout once through the predictor (the CPU executor), hierarchical and adaptive with
  // fuzzed options; then the adaptive layout as the GPU's shared-data and splitting strategies
  // read it (interleaved copy in a rotated tree order, sums saved and reloaded mid-forest).
  std::vector<Run> runs;
  ForestConfig cfg;
  cfg.device = Device::Cpu;
  cfg.hierarchical = hier;
  cfg.adaptive = adaptive;
  for (ForestLayout l : {ForestLayout::Csr, ForestLayout::Reorg, ForestLayout::Hierarchical, ForestLayout::Adaptive}) {
    cfg.layout = l;
    runs.push_back(through_predictor(to_string(l), f, cfg, rows, n_rows, width));
  }
  AdaptiveOptions ao;
  ao.node_rearrangement = adaptive.node_rearrangement;
  ao.tree_order.resize(static_cast<std::size_t>(f.n_trees()));
  for (index_t t = 0; t < f.n_trees(); ++t) ao.tree_order[static_cast<std::size_t>(t)] = (t + split_byte) % f.n_trees();
  const AdaptiveForest a = AdaptiveForest::build(f, ao);
  runs.push_back(adaptive_emulated(a.view(), rows, n_rows, width, split_byte % (f.n_trees() + 1)));
  runs.push_back(per_row("adaptive, predict_row", a.view(), rows, n_rows, width));

  const Run& ref = runs[0];  // the CSR layout through the predictor: the tests' reference
  if (!same_bits(ref.out[margin], expected))
    fuzz::fail("csr margins " + show(ref.out[margin]) + "differ from the naive walk's " + show(expected) + "\n" + json);
  const int leaf = static_cast<int>(ForestOutput::Leaf);
  if (!same_bits(ref.out[leaf], expected_leaf))
    fuzz::fail("csr leaf ids " + show(ref.out[leaf]) + "differ from the naive walk's " + show(expected_leaf) + "\n" + json);
  for (const Run& r : runs)
    for (int o = 0; o < 4; ++o)
      if (!(o == leaf && r.out[o].empty()) && !same_bits(r.out[o], ref.out[o]))
        fuzz::fail(r.name + " " + to_string(static_cast<ForestOutput>(o)) + ": " + show(r.out[o]) + "vs csr " +
                   show(ref.out[o]) + "\n" + json);
  return 0;
}
