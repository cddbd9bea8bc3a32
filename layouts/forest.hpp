// Decision forests in memory, and their import from XGBoost's JSON model format and from
// Canopy's own forest JSON format (scikit-learn forests, written by scripts/export_sklearn.py;
// docs/forest_format.md documents both). CUDA-free. The importers behind Forest::load and
// Forest::parse are io/forest_import.cpp and io/detail/model_json.*.
//
// Every tree is normalised on import to one convention, whatever the source:
//   * nodes are numbered breadth-first from the root (node 0), children left before right;
//   * an inner node sends a row left iff  x[feature] < threshold  (float32), and a missing
//     value (NaN) to its default side; a categorical node (XGBoost's enable_categorical)
//     sends it right iff its category is in the node's set (ForestTree::categories);
//   * a leaf holds either one float32 value (XGBoost) or a vector of float64 values (the
//     class distribution or the regression value of a scikit-learn tree).
// scikit-learn's "x <= t" with a float64 t is turned into "x < t'" where t' is the smallest
// float32 above t: for every float32 x the two tests agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/types.hpp"

namespace canopy {

// What the forest computes and how its outputs are formed.
enum class ForestObjective {
  BinaryLogistic,  // XGBoost binary:logistic: margin = logit(base_score) + sum; prob = sigmoid
  MultiSoftprob,   // XGBoost multi:softprob: per-class margins; prob = softmax
  MultiSoftmax,    // XGBoost multi:softmax: as softprob; its native predict() is the class
  SquaredError,    // XGBoost reg:squarederror: value = base_score + sum
  RfClassifier,    // random forest / extra trees: the average of the trees' class distributions
  RfRegressor,     // random forest / extra trees: the average of the trees' values
};
const char* to_string(ForestObjective o);

// What a prediction reports per row.
//   Margin  XGBoost: the raw sum per output group (base margin included); forests: = Prob
//   Prob    XGBoost: sigmoid / softmax of the margins, or the regression value; forests: the
//           averaged class distribution (scikit-learn's predict_proba) or the mean value
//   Class   the predicted class value (XGBoost binary: prob > 0.5; multi-class: the first
//           largest margin; forests: the first largest probability); regressors have none
//   Leaf    XGBoost's pred_leaf: per tree, in the model's tree order (multi-class: round by
//           round, the classes within a round), the id the model file gives the leaf the row
//           reaches (ForestTree::source_id), as a float (exact below 2^24); n_trees values.
//           On the GPU a kernel of its own (a thread per row and tree) writes it, whatever
//           ForestRunOptions::kernel says.
//   Proba   classifiers: the class probabilities as scikit-learn's predict_proba shapes them,
//           one column per class: a binary XGBoost model's [1 - p, p] (1 - p in float32, as
//           XGBClassifier forms it), else the same as Prob; regressors have none
enum class ForestOutput { Margin, Prob, Class, Leaf, Proba };
const char* to_string(ForestOutput o);

// Most classes (or XGBoost output groups) the executors accumulate per row.
constexpr int kMaxForestOutputs = 64;
// Feature indices must fit the 29 bits a node reserves for them.
constexpr std::int64_t kMaxForestFeatures = std::int64_t{1} << 29;
// Categories are integers below 2^24 (every one exact in float32), as in XGBoost.
constexpr std::int64_t kMaxForestCategory = std::int64_t{1} << 24;

struct ForestTree {
  // Per node, breadth-first from the root. left/right are -1 at a leaf.
  std::vector<std::int32_t> left, right;
  std::vector<std::int32_t> feature;       // inner nodes; 0 at leaves
  std::vector<float> value;                // inner: threshold; scalar leaf: the leaf value
  std::vector<std::uint8_t> default_left;  // inner: 1 if a missing value goes left
  std::vector<std::int32_t> leaf_index;    // leaves: index among the tree's leaves (breadth-first),
                                           // the row of leaf_values for vector leaves; -1 elsewhere
  // The node's id in the model file (XGBoost's node id, pred_leaf's value; Canopy format: its
  // index in the tree's arrays): the breadth-first renumbering keeps no other trace of it.
  std::vector<std::int32_t> source_id;
  std::vector<double> leaf_values;         // vector leaves: [n_leaves][leaf_width]
  // Training weight that reached each node (XGBoost sum_hessian, scikit-learn weighted sample
  // count); empty when the model has none. Edge probabilities come from it.
  std::vector<double> cover;
  // Categorical splits; both empty when the tree has none. categorical[n] = 1: inner node n
  // sends a row right iff its value, truncated to an integer c, is in the node's set: bit
  // c % 32 of categories[n][c / 32]. Negative values, values past the set's last word and
  // +Infinity go left (XGBoost 1.7's predictor does the same); a missing value takes the
  // default side. value[n] is unused at such a node.
  std::vector<std::uint8_t> categorical;
  std::vector<std::vector<std::uint32_t>> categories;
  int group = 0;                           // output group (XGBoost tree_info); 0 for forests
  int depth = 0;                           // edges on the longest root-to-leaf path

  index_t size() const { return static_cast<index_t>(left.size()); }
  bool is_leaf(index_t n) const { return left[static_cast<std::size_t>(n)] < 0; }
  bool is_categorical(index_t n) const { return !categorical.empty() && categorical[static_cast<std::size_t>(n)] != 0; }
};

class Forest {
 public:
  // Reads an XGBoost model (Booster.save_model, 1.7 or 2.x; JSON or UBJSON, .ubj) or a Canopy
  // forest JSON file, recognised by their content; plain or gzip-compressed. XGBoost's NaN,
  // Infinity and -Infinity literals (not JSON) are read: a split condition may be any of them
  // (NaN or -Infinity: every present value goes right, +Infinity: every finite value left, as
  // in XGBoost), a leaf value may be infinite but not NaN, base_score must be finite. Every
  // problem is a canopy::Error naming the file and the JSON path, e.g.
  // "m.json: learner/gradient_booster/model/trees/3/split_indices/7: feature 40 is out of
  // range (the model has 28 features)".
  static Forest load(const std::string& path);
  // The same from JSON text or UBJSON bytes; `name` stands for the file in messages.
  static Forest parse(const std::string& json_text, const std::string& name);

  ForestObjective objective() const { return objective_; }
  bool is_xgboost() const { return objective_ != ForestObjective::RfClassifier && objective_ != ForestObjective::RfRegressor; }
  bool is_classifier() const { return objective_ != ForestObjective::SquaredError && objective_ != ForestObjective::RfRegressor; }
  int n_features() const { return n_features_; }
  // Output groups summed separately: XGBoost classes (1 for binary and regression); 1 for
  // random forests (their trees add whole vectors).
  int n_groups() const { return n_groups_; }
  // 0: scalar float32 leaves (XGBoost); else the float64 values per leaf (random forests:
  // the number of classes, or 1 for regression).
  int leaf_width() const { return leaf_width_; }
  // Classes a classifier predicts (XGBoost binary: 2); 0 for regression.
  int n_classes() const { return static_cast<int>(class_values_.size()); }
  // The value the class output reports for class k (scikit-learn's classes_, XGBoost: k).
  const std::vector<double>& class_values() const { return class_values_; }
  // Per output group, in margin space (XGBoost binary:logistic: logit(base_score)).
  const std::vector<float>& base_margin() const { return base_margin_; }
  const std::vector<ForestTree>& trees() const { return trees_; }
  index_t n_trees() const { return static_cast<index_t>(trees_.size()); }
  // The same model with only trees[ids[0]], trees[ids[1]], ..., in that order (the MPI layer's
  // partitioned forest gives each rank a run of them): its sums are those trees' alone.
  Forest subset(const std::vector<index_t>& ids) const;
  index_t n_nodes() const;
  index_t n_leaves() const;
  int max_depth() const;
  index_t n_categorical_nodes() const;
  // Values per row that `out` produces (a Class output of a regressor is an Error).
  int output_width(ForestOutput out) const;
  const std::string& source() const { return source_; }  // the file it came from
  std::string describe() const;                          // one line for logs

 private:
  friend class ForestImporter;
  ForestObjective objective_ = ForestObjective::SquaredError;
  int n_features_ = 0;
  int n_groups_ = 1;
  int leaf_width_ = 0;
  std::vector<double> class_values_;
  std::vector<float> base_margin_;
  std::vector<ForestTree> trees_;
  std::string source_;
};

// The smallest float32 strictly greater than t (+inf above the float range): for every
// float32 x, (x <= t) == (x < above_float(t)).
float above_float(double t);

}  // namespace canopy
