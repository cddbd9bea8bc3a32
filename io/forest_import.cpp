// The model importers: XGBoost's JSON and UBJSON models and Canopy's forest JSON format, read
// into a Forest (layouts/forest.hpp declares Forest::load and Forest::parse; they are defined
// here). docs/forest_format.md documents both formats.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "io/detail/model_json.hpp"
#include "layouts/forest.hpp"

namespace canopy {

using nlohmann::json;
using io_detail::At;
using io_detail::UbjsonBudget;
using io_detail::json_message;
using io_detail::looks_like_ubjson;
using io_detail::read_whole_file;
using io_detail::replace_nonfinite_literals;

namespace {

// An array whose length must be n (the node count), checked once.
At node_array(const At& tree, const char* key, std::size_t n, const char* count_name);

// Training weight per node (XGBoost's sum_hessian, scikit-learn's sample counts): finite, >= 0.
std::vector<double> node_weights(const At& tree, const char* key, std::size_t n, const char* count_name) {
  const At a = node_array(tree, key, n, count_name);
  std::vector<double> w(n);
  for (std::size_t k = 0; k < n; ++k) {
    w[k] = a[k].number();
    if (!(w[k] >= 0) || !std::isfinite(w[k])) a[k].fail("a node weight must be finite and >= 0");
  }
  return w;
}

At node_array(const At& tree, const char* key, std::size_t n, const char* count_name) {
  At a = tree[key];
  if (a.size() != n)
    a.fail("has " + std::to_string(a.size()) + " entries, but " + count_name + " is " + std::to_string(n));
  return a;
}

// Raw per-node description shared by both formats, before normalisation.
struct RawTree {
  std::vector<std::int64_t> left, right, feature;
  std::vector<double> threshold;  // the source's number (XGBoost float32, scikit-learn float64)
  std::vector<std::int8_t> default_left;  // -1: not given
  std::vector<double> cover;              // training weight per node; empty: not given
  // Categorical splits by source id (both empty: none): ForestTree::categorical / categories.
  std::vector<std::uint8_t> categorical;
  std::vector<std::vector<std::uint32_t>> categories;
};

// The words of all category sets in one model: a file cannot make the importer allocate more
// than this (2^24 words, 64 MiB; a set of the largest category takes 2^19).
constexpr std::size_t kMaxCategoryWords = std::size_t{1} << 24;

}  // namespace

class ForestImporter {
 public:
  ForestImporter(const json& doc, const std::string& file, char marker = 0) : doc_(doc, "", &file, marker), file_(file) {}

  Forest run() {
    doc_.expect(json::value_t::object, "a JSON object (an XGBoost model or a Canopy forest)");
    if (doc_.has("learner")) return xgboost();
    if (doc_.has("format")) return canopy_format();
    doc_.fail("neither an XGBoost model (no field 'learner') nor a Canopy forest (no field 'format')");
  }

 private:
  Forest xgboost() {
    Forest f;
    f.source_ = file_;
    const At learner = doc_["learner"];
    const std::string obj = xgboost_objective(f, learner["objective"]["name"]);
    xgboost_model_param(f, learner["learner_model_param"], obj);
    xgboost_trees(f, learner["gradient_booster"]);
    f.leaf_width_ = 0;
    return f;
  }

  // The objective's name, and f's objective from it.
  static std::string xgboost_objective(Forest& f, const At& name) {
    const std::string obj = name.str();
    if (obj == "binary:logistic") f.objective_ = ForestObjective::BinaryLogistic;
    else if (obj == "multi:softprob") f.objective_ = ForestObjective::MultiSoftprob;
    else if (obj == "multi:softmax") f.objective_ = ForestObjective::MultiSoftmax;
    else if (obj == "reg:squarederror") f.objective_ = ForestObjective::SquaredError;
    else
      name.fail("objective '" + obj +
                "' is not supported (supported: binary:logistic, multi:softprob, multi:softmax, reg:squarederror)");
    return obj;
  }

  // learner_model_param: the features, the output groups, the base margin and the classes.
  static void xgboost_model_param(Forest& f, const At& lmp, const std::string& obj) {
    const std::int64_t nf = lmp["num_feature"].int_param();
    if (nf < 1 || nf >= kMaxForestFeatures)
      lmp["num_feature"].fail(std::to_string(nf) + " features: must be 1.." + std::to_string(kMaxForestFeatures - 1));
    f.n_features_ = static_cast<int>(nf);
    const std::int64_t num_class = lmp.has("num_class") ? lmp["num_class"].int_param() : 0;
    if (lmp.has("num_target")) {
      const std::int64_t nt = lmp["num_target"].int_param();
      if (nt > 1) lmp["num_target"].fail(std::to_string(nt) + " targets: multi-target models are not supported");
    }
    const bool multi = f.objective_ == ForestObjective::MultiSoftprob || f.objective_ == ForestObjective::MultiSoftmax;
    if (multi) {
      if (num_class < 1 || num_class > kMaxForestOutputs)
        lmp["num_class"].fail(std::to_string(num_class) + " classes: " + obj + " needs 1.." +
                              std::to_string(kMaxForestOutputs));
      f.n_groups_ = static_cast<int>(num_class);
    } else {
      if (num_class > 1) lmp["num_class"].fail(std::to_string(num_class) + " classes with objective " + obj);
      f.n_groups_ = 1;
    }
    const double bs = lmp["base_score"].float_param();
    if (!std::isfinite(bs)) lmp["base_score"].fail("the base score is not finite");
    float margin = static_cast<float>(bs);
    if (f.objective_ == ForestObjective::BinaryLogistic) {
      if (!(bs > 0.0 && bs < 1.0))
        lmp["base_score"].fail("binary:logistic needs a base score strictly between 0 and 1, found " + std::to_string(bs));
      // XGBoost's ProbToMargin, in float32 exactly as it computes it: checked bit for bit
      // against predict(output_margin=True) of python3-xgboost 1.7.
      const float p = static_cast<float>(bs);
      margin = -std::log(1.0f / p - 1.0f);
    }
    f.base_margin_.assign(static_cast<std::size_t>(f.n_groups_), margin);
    if (f.objective_ == ForestObjective::BinaryLogistic) f.class_values_ = {0.0, 1.0};
    if (multi)
      for (int k = 0; k < f.n_groups_; ++k) f.class_values_.push_back(k);
  }

  // gradient_booster: the trees, each in its output group.
  void xgboost_trees(Forest& f, const At& gb) {
    const std::string booster = gb["name"].str();
    if (booster != "gbtree") gb["name"].fail("booster '" + booster + "' is not supported (only gbtree)");
    const At model = gb["model"];
    const At trees = model["trees"];
    const At info = model["tree_info"];
    const std::size_t nt = trees.size();
    if (info.size() != nt)
      info.fail("has " + std::to_string(info.size()) + " entries for " + std::to_string(nt) + " trees");
    if (model.has("gbtree_model_param") && model["gbtree_model_param"].has("num_trees")) {
      const std::int64_t declared = model["gbtree_model_param"]["num_trees"].int_param();
      if (declared != static_cast<std::int64_t>(nt))
        model["gbtree_model_param"]["num_trees"].fail("says " + std::to_string(declared) + " trees, the model has " +
                                                      std::to_string(nt));
    }
    f.trees_.reserve(nt);
    for (std::size_t i = 0; i < nt; ++i) {
      const At t = trees[i];
      tree_ = i;
      const RawTree raw = xgboost_raw_tree(t);
      const std::int64_t group = info[i].integer();
      if (group < 0 || group >= f.n_groups_)
        info[i].fail("output group " + std::to_string(group) + " is out of range (the model has " +
                     std::to_string(f.n_groups_) + ")");
      ForestTree tree = normalise(raw, t, f.n_features_, /*sklearn=*/false, nullptr, 0);
      tree.group = static_cast<int>(group);
      f.trees_.push_back(std::move(tree));
    }
  }

  // One XGBoost tree's node arrays: numerical and categorical splits, scalar leaves.
  RawTree xgboost_raw_tree(const At& t) {
    const At tp = t["tree_param"];
    const std::int64_t n64 = tp["num_nodes"].int_param();
    if (n64 < 1 || n64 > INT32_MAX) tp["num_nodes"].fail(std::to_string(n64) + " nodes");
    const std::size_t n = static_cast<std::size_t>(n64);
    if (tp.has("size_leaf_vector")) {
      const std::int64_t slv = tp["size_leaf_vector"].int_param();
      if (slv > 1) tp["size_leaf_vector"].fail("vector leaves (multi-target trees) are not supported");
    }
    const char* count = "tree_param/num_nodes";
    const At lc = node_array(t, "left_children", n, count);
    const At rc = node_array(t, "right_children", n, count);
    const At si = node_array(t, "split_indices", n, count);
    const At sc = node_array(t, "split_conditions", n, count);
    const At dl = node_array(t, "default_left", n, count);
    RawTree raw;
    xgboost_categories(t, n, count, &raw);
    raw.left.resize(n);
    raw.right.resize(n);
    raw.feature.resize(n);
    raw.threshold.resize(n);
    raw.default_left.resize(n);
    if (t.has("sum_hessian")) {
      raw.cover = node_weights(t, "sum_hessian", n, count);
      // XGBoost's float32, whether the file held its shortest decimal form (JSON) or its bits
      // (UBJSON): the same model gives the same cover, and the same adaptive layout.
      for (double& w : raw.cover) w = static_cast<float>(w);
    }
    for (std::size_t k = 0; k < n; ++k) {
      raw.left[k] = lc[k].integer();
      raw.right[k] = rc[k].integer();
      raw.threshold[k] = sc[k].number();
      if (raw.left[k] != -1) {
        raw.feature[k] = si[k].integer();
        raw.default_left[k] = dl[k].flag() ? 1 : 0;
      }
    }
    return raw;
  }

  // XGBoost's categorical splits (enable_categorical): split_type 1 marks them, and
  // categories_nodes[i] lists node i's categories as categories[segments[i] ..][sizes[i]]. A
  // categorical node the lists leave out has an empty set (every category goes left), as in
  // XGBoost.
  void xgboost_categories(const At& t, std::size_t n, const char* count, RawTree* raw) {
    bool any = false;
    std::vector<std::uint8_t> cat(n, 0);
    if (t.has("split_type")) {
      const At st = node_array(t, "split_type", n, count);
      for (std::size_t k = 0; k < n; ++k) {
        const std::int64_t v = st[k].integer();
        if (v != 0 && v != 1)
          st[k].fail("tree " + std::to_string(tree_) + ", node " + std::to_string(k) + ": split type " + std::to_string(v) +
                     " is neither 0 (numerical) nor 1 (categorical)");
        cat[k] = static_cast<std::uint8_t>(v);
        any = any || v == 1;
      }
    }
    const bool listed = t.has("categories_nodes") && t["categories_nodes"].size() > 0;
    if (!any && !listed) return;
    raw->categorical = std::move(cat);
    raw->categories.assign(n, {});
    if (!listed) return;
    const At nodes = t["categories_nodes"], begins = t["categories_segments"], sizes = t["categories_sizes"];
    const At cats = t["categories"];
    if (begins.size() != nodes.size())
      begins.fail("has " + std::to_string(begins.size()) + " entries for " + std::to_string(nodes.size()) + " categorical nodes");
    if (sizes.size() != nodes.size())
      sizes.fail("has " + std::to_string(sizes.size()) + " entries for " + std::to_string(nodes.size()) + " categorical nodes");
    const std::int64_t n_cats = static_cast<std::int64_t>(cats.size());
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const std::int64_t node = nodes[i].integer();
      const std::string where = "tree " + std::to_string(tree_) + ", node " + std::to_string(node);
      if (node < 0 || node >= static_cast<std::int64_t>(n))
        nodes[i].fail(where + " is out of range (the tree has " + std::to_string(n) + " nodes)");
      if (!raw->categorical[static_cast<std::size_t>(node)])
        nodes[i].fail(where + " has categories but split type 0 (numerical)");
      const std::int64_t b = begins[i].integer(), z = sizes[i].integer();
      if (b < 0 || b > n_cats) begins[i].fail(where + ": segment start " + std::to_string(b) + " is outside the " +
                                              std::to_string(n_cats) + " categories");
      if (z < 0 || z > n_cats - b)
        sizes[i].fail(where + ": " + std::to_string(z) + " categories from " + std::to_string(b) + " run past the " +
                      std::to_string(n_cats) + " categories");
      std::vector<std::uint32_t>& set = raw->categories[static_cast<std::size_t>(node)];
      if (!set.empty()) nodes[i].fail(where + " is listed twice");
      for (std::int64_t j = b; j < b + z; ++j) {
        const At at = cats[static_cast<std::size_t>(j)];
        const std::int64_t c = at.integer();
        if (c < 0 || c >= kMaxForestCategory)
          at.fail(where + ": category " + std::to_string(c) + " is outside 0.." + std::to_string(kMaxForestCategory - 1));
        const std::size_t word = static_cast<std::size_t>(c) / 32;
        if (word >= set.size()) {
          category_words_ += word + 1 - set.size();
          if (category_words_ > kMaxCategoryWords)
            at.fail(where + ": the model's category sets exceed " + std::to_string(kMaxCategoryWords) + " words");
          set.resize(word + 1, 0u);
        }
        set[word] |= 1u << (c % 32);
      }
    }
  }

  Forest canopy_format() {
    Forest f;
    f.source_ = file_;
    const int width = canopy_header(f);
    const At trees = doc_["trees"];
    if (trees.size() == 0) trees.fail("the forest has no trees");
    for (std::size_t i = 0; i < trees.size(); ++i) {
      const At t = trees[i];
      std::vector<double> samples;
      const RawTree raw = canopy_raw_tree(t, &samples);
      const bool have_dl = t.has("default_left");
      ForestTree tree = normalise(raw, t, f.n_features_, /*sklearn=*/true, have_dl ? nullptr : &samples, width);
      canopy_leaf_values(tree, t["values"], width, f.objective_);
      f.trees_.push_back(std::move(tree));
    }
    return f;
  }

  // The format, version, task, features and classes; returns the values per leaf.
  int canopy_header(Forest& f) const {
    const std::string format = doc_["format"].str();
    if (format != "canopy-forest") doc_["format"].fail("'" + format + "' is not 'canopy-forest'");
    const std::int64_t version = doc_["version"].integer();
    if (version != 1) doc_["version"].fail("version " + std::to_string(version) + " is not supported (this Canopy reads version 1)");
    const std::string task = doc_["task"].str();
    if (task != "classification" && task != "regression")
      doc_["task"].fail("'" + task + "' is neither 'classification' nor 'regression'");
    const std::int64_t nf = doc_["num_features"].integer();
    if (nf < 1 || nf >= kMaxForestFeatures)
      doc_["num_features"].fail(std::to_string(nf) + " features: must be 1.." + std::to_string(kMaxForestFeatures - 1));
    f.n_features_ = static_cast<int>(nf);
    f.n_groups_ = 1;
    int width = 1;
    if (task == "classification") {
      f.objective_ = ForestObjective::RfClassifier;
      const At classes = doc_["classes"];
      if (classes.size() < 1 || classes.size() > static_cast<std::size_t>(kMaxForestOutputs))
        classes.fail(std::to_string(classes.size()) + " classes: must be 1.." + std::to_string(kMaxForestOutputs));
      for (std::size_t k = 0; k < classes.size(); ++k) f.class_values_.push_back(classes[k].number());
      width = static_cast<int>(classes.size());
    } else {
      f.objective_ = ForestObjective::RfRegressor;
    }
    f.leaf_width_ = width;
    f.base_margin_.assign(1, 0.0f);
    return width;
  }

  // One Canopy tree's node arrays; *samples: its node_samples (empty when it has none).
  static RawTree canopy_raw_tree(const At& t, std::vector<double>* samples) {
    const At lc = t["left_children"];
    const std::size_t n = lc.size();
    if (n < 1 || n > static_cast<std::size_t>(INT32_MAX)) lc.fail(std::to_string(n) + " nodes");
    const char* count = "the length of left_children";
    const At rc = node_array(t, "right_children", n, count);
    const At fe = node_array(t, "features", n, count);
    const At th = node_array(t, "thresholds", n, count);
    node_array(t, "values", n, count);
    const bool have_dl = t.has("default_left");
    const bool have_ns = t.has("node_samples");
    if (!have_dl && !have_ns) t.fail("needs 'default_left' or 'node_samples' to send missing values somewhere");
    RawTree raw;
    raw.left.resize(n);
    raw.right.resize(n);
    raw.feature.resize(n);
    raw.threshold.resize(n);
    raw.default_left.assign(n, -1);
    for (std::size_t k = 0; k < n; ++k) {
      raw.left[k] = lc[k].integer();
      raw.right[k] = rc[k].integer();
      if (raw.left[k] != -1) {
        raw.feature[k] = fe[k].integer();
        raw.threshold[k] = th[k].number();
      }
    }
    if (have_dl) {
      const At dl = node_array(t, "default_left", n, count);
      for (std::size_t k = 0; k < n; ++k)
        if (raw.left[k] != -1) raw.default_left[k] = dl[k].flag() ? 1 : 0;
    }
    if (have_ns) {
      const At ns = node_array(t, "node_samples", n, count);
      samples->resize(n);
      for (std::size_t k = 0; k < n; ++k) {
        (*samples)[k] = ns[k].number();
        if (!((*samples)[k] >= 0)) ns[k].fail("a sample count must be >= 0");
      }
    }
    if (t.has("weighted_node_samples")) raw.cover = node_weights(t, "weighted_node_samples", n, count);
    else if (have_ns) raw.cover = *samples;
    return raw;
  }

  // The leaves' values (`values`, by source node id), in the normalised (breadth-first) leaf
  // order that normalise() left in orig_of_.
  void canopy_leaf_values(ForestTree& tree, const At& va, int width, ForestObjective objective) const {
    tree.leaf_values.assign(static_cast<std::size_t>(std::count_if(tree.leaf_index.begin(), tree.leaf_index.end(),
                                                                   [](std::int32_t v) { return v >= 0; })) * width,
                            0.0);
    for (std::size_t k = 0; k < orig_of_.size(); ++k) {
      const std::int32_t leaf = tree.leaf_index[k];
      if (leaf < 0) continue;
      const At v = va[static_cast<std::size_t>(orig_of_[k])];
      if (v.size() != static_cast<std::size_t>(width))
        v.fail("a leaf needs " + std::to_string(width) + (width == 1 ? " value" : " values (one per class)") +
               ", found " + std::to_string(v.size()));
      double sum = 0;
      for (int c = 0; c < width; ++c) {
        const double x = v[static_cast<std::size_t>(c)].number();
        if (!std::isfinite(x)) v[static_cast<std::size_t>(c)].fail("a leaf value must be finite");
        if (objective == ForestObjective::RfClassifier && !(x >= 0.0))
          v[static_cast<std::size_t>(c)].fail("a class probability must be >= 0");
        tree.leaf_values[static_cast<std::size_t>(leaf) * width + c] = x;
        sum += x;
      }
      if (objective == ForestObjective::RfClassifier && sum != 0.0 && std::fabs(sum - 1.0) > 1e-6)
        v.fail("the class distribution sums to " + std::to_string(sum) +
               ", not 1 (Canopy expects normalised distributions; see docs/forest_format.md)");
    }
  }

  // Checks the topology (children in range, every node reached once from the root: no cycle,
  // no shared subtree), the features, and renumbers the reachable nodes breadth-first.
  // Records orig_of_ (new id -> source id). samples: the "more samples" rule for missing
  // values when the source gives no default direction.
  ForestTree normalise(const RawTree& raw, const At& t, int n_features, bool sklearn,
                       const std::vector<double>* samples, int width) {
    const std::size_t n = raw.left.size();
    std::vector<std::int32_t> new_id(n, -1);
    orig_of_.clear();
    orig_of_.push_back(0);
    new_id[0] = 0;
    ForestTree tree;
    std::vector<int> level{0};
    // Breadth-first: orig_of_ grows as children are discovered; left before right.
    for (std::size_t q = 0; q < orig_of_.size(); ++q) {
      const std::int64_t o = orig_of_[q];
      const std::int64_t l = raw.left[o], r = raw.right[o];
      if (l == -1) {
        if (r != -1) t["right_children"][static_cast<std::size_t>(o)].fail(
            "node " + std::to_string(o) + " has no left child but a right child (" + std::to_string(r) + ")");
        continue;
      }
      for (int side = 0; side < 2; ++side) {
        const std::int64_t c = side == 0 ? l : r;
        const char* key = side == 0 ? "left_children" : "right_children";
        if (c < 0 || c >= static_cast<std::int64_t>(n))
          t[key][static_cast<std::size_t>(o)].fail("child " + std::to_string(c) + " is out of range (the tree has " +
                                                   std::to_string(n) + " nodes)");
        if (new_id[c] >= 0)
          t[key][static_cast<std::size_t>(o)].fail("node " + std::to_string(c) +
                                                   " is reached a second time (the tree has a cycle or a shared subtree)");
        new_id[c] = static_cast<std::int32_t>(orig_of_.size());
        orig_of_.push_back(c);
        level.push_back(level[q] + 1);
      }
      const std::int64_t feat = raw.feature[o];
      if (feat < 0 || feat >= n_features)
        t[sklearn ? "features" : "split_indices"][static_cast<std::size_t>(o)].fail(
            "feature " + std::to_string(feat) + " is out of range (the model has " + std::to_string(n_features) +
            " features)");
    }
    const std::size_t m = orig_of_.size();
    tree.left.assign(m, -1);
    tree.right.assign(m, -1);
    tree.feature.assign(m, 0);
    tree.value.assign(m, 0.0f);
    tree.default_left.assign(m, 0);
    tree.leaf_index.assign(m, -1);
    tree.source_id.assign(orig_of_.begin(), orig_of_.end());
    if (!raw.cover.empty()) {
      tree.cover.resize(m);
      for (std::size_t k = 0; k < m; ++k) tree.cover[k] = raw.cover[static_cast<std::size_t>(orig_of_[k])];
    }
    if (!raw.categorical.empty()) {
      tree.categorical.assign(m, 0);
      tree.categories.assign(m, {});
    }
    std::int32_t leaves = 0;
    for (std::size_t k = 0; k < m; ++k) {
      const std::int64_t o = orig_of_[k];
      tree.depth = std::max(tree.depth, level[k]);
      if (raw.left[o] == -1) {
        tree.leaf_index[k] = leaves;
        if (width == 0) {
          // XGBoost keeps leaf values in split_conditions. NaN would make every prediction
          // through this leaf NaN (XGBoost sums it as it is); +-Infinity saturates the
          // margin as in XGBoost and is kept.
          if (std::isnan(raw.threshold[o]))
            t["split_conditions"][static_cast<std::size_t>(o)].fail("tree " + std::to_string(tree_) + ", leaf node " +
                                                                    std::to_string(o) + ": the leaf value is NaN");
          tree.value[k] = static_cast<float>(raw.threshold[o]);
        }
        ++leaves;
        continue;
      }
      tree.left[k] = new_id[raw.left[o]];
      tree.right[k] = new_id[raw.right[o]];
      tree.feature[k] = static_cast<std::int32_t>(raw.feature[o]);
      if (!raw.categorical.empty() && raw.categorical[static_cast<std::size_t>(o)]) {
        tree.categorical[k] = 1;
        tree.categories[k] = raw.categories[static_cast<std::size_t>(o)];
        tree.default_left[k] = static_cast<std::uint8_t>(raw.default_left[o] > 0);
        continue;  // XGBoost writes NaN as its split condition
      }
      // XGBoost: go left iff x < t with t a float32 (the JSON holds its shortest decimal form).
      // scikit-learn: go left iff x <= t with t a float64, i.e. iff x < above_float(t).
      tree.value[k] = sklearn ? above_float(raw.threshold[o]) : static_cast<float>(raw.threshold[o]);
      if (raw.default_left[o] >= 0) {
        tree.default_left[k] = static_cast<std::uint8_t>(raw.default_left[o]);
      } else {
        // scikit-learn >= 1.3's rule for features without missing values in training: the
        // child that saw more samples (a tie goes right).
        tree.default_left[k] = (*samples)[raw.left[o]] > (*samples)[raw.right[o]] ? 1 : 0;
      }
    }
    return tree;
  }

  At doc_;
  std::string file_;
  std::vector<std::int64_t> orig_of_;
  std::size_t tree_ = 0;  // the tree normalise() works on, for messages
  std::size_t category_words_ = 0;  // of every category set read so far
};

Forest Forest::parse(const std::string& text, const std::string& name) {
  json doc;
  if (looks_like_ubjson(text)) {
    UbjsonBudget budget(text.size());
    try {
      json::sax_parse(text, &budget, json::input_format_t::ubjson);
      if (!budget.exceeded() && !budget.too_deep()) doc = json::from_ubjson(text);
    } catch (const json::exception& e) {
      throw Error(name + ": not valid UBJSON (" + json_message(e) + ")");
    }
    if (budget.exceeded())
      throw Error(name + ": not valid UBJSON (it declares more values than its " + std::to_string(text.size()) +
                  " bytes can hold)");
    if (budget.too_deep())
      throw Error(name + ": not valid UBJSON (containers nested deeper than " + std::to_string(UbjsonBudget::kMaxDepth) +
                  " levels)");
    return ForestImporter(doc, name).run();
  }
  std::string copy;  // only when there are literals to replace
  char marker = 0;
  if (text.find("NaN") != std::string::npos || text.find("Infinity") != std::string::npos) {
    copy = text;
    marker = replace_nonfinite_literals(copy, name);
  }
  try {
    doc = json::parse(marker ? copy : text);
  } catch (const json::exception& e) {
    throw Error(name + ": not valid JSON (" + json_message(e) + ")");
  }
  return ForestImporter(doc, name, marker).run();
}

Forest Forest::load(const std::string& path) { return parse(read_whole_file(path), path); }

}  // namespace canopy
