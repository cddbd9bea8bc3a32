#include "layouts/forest.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace canopy {

const char* to_string(ForestObjective o) {
  switch (o) {
    case ForestObjective::BinaryLogistic: return "binary:logistic";
    case ForestObjective::MultiSoftprob: return "multi:softprob";
    case ForestObjective::MultiSoftmax: return "multi:softmax";
    case ForestObjective::SquaredError: return "reg:squarederror";
    case ForestObjective::RfClassifier: return "forest classifier";
    case ForestObjective::RfRegressor: return "forest regressor";
  }
  return "?";
}

const char* to_string(ForestOutput o) {
  switch (o) {
    case ForestOutput::Margin: return "margin";
    case ForestOutput::Prob: return "prob";
    case ForestOutput::Class: return "class";
    case ForestOutput::Leaf: return "leaf";
    case ForestOutput::Proba: return "proba";
  }
  return "?";
}

int Forest::output_width(ForestOutput out) const {
  if (out == ForestOutput::Leaf) return static_cast<int>(trees_.size());
  if (out == ForestOutput::Class || out == ForestOutput::Proba) {
    if (!is_classifier())
      throw Error(std::string("the ") + to_string(out) + " output needs a classifier; this model is a regressor (" +
                  to_string(objective_) + ")");
    if (out == ForestOutput::Class) return 1;
    if (objective_ == ForestObjective::BinaryLogistic) return 2;
    return output_width(ForestOutput::Prob);
  }
  if (leaf_width_ > 0) return leaf_width_;
  if (objective_ == ForestObjective::MultiSoftprob || objective_ == ForestObjective::MultiSoftmax) return n_groups_;
  return 1;
}

float above_float(double t) {
  const float f = static_cast<float>(t);
  if (static_cast<double>(f) > t) return f;
  return std::nextafter(f, std::numeric_limits<float>::infinity());
}

Forest Forest::subset(const std::vector<index_t>& ids) const {
  Forest f;
  f.objective_ = objective_;
  f.n_features_ = n_features_;
  f.n_groups_ = n_groups_;
  f.leaf_width_ = leaf_width_;
  f.class_values_ = class_values_;
  f.base_margin_ = base_margin_;
  f.source_ = source_;
  f.trees_.reserve(ids.size());
  for (index_t id : ids) {
    if (id < 0 || id >= n_trees())
      throw Error(source_ + ": subset: tree " + std::to_string(id) + " is outside 0.." + std::to_string(n_trees() - 1));
    f.trees_.push_back(trees_[static_cast<std::size_t>(id)]);
  }
  return f;
}

index_t Forest::n_nodes() const {
  index_t n = 0;
  for (const ForestTree& t : trees_) n += t.size();
  return n;
}

index_t Forest::n_leaves() const {
  index_t n = 0;
  for (const ForestTree& t : trees_)
    for (index_t i = 0; i < t.size(); ++i) n += t.is_leaf(i) ? 1 : 0;
  return n;
}

int Forest::max_depth() const {
  int d = 0;
  for (const ForestTree& t : trees_) d = std::max(d, t.depth);
  return d;
}

std::string Forest::describe() const {
  std::ostringstream s;
  s << (is_xgboost() ? "XGBoost " : "") << to_string(objective_) << ", " << n_trees() << " trees";
  if (n_groups_ > 1) s << " in " << n_groups_ << " output groups";
  if (n_classes() > 0) s << ", " << n_classes() << " classes";
  s << ", " << n_features_ << " features, " << n_nodes() << " nodes, max depth " << max_depth();
  if (const index_t c = n_categorical_nodes()) s << ", " << c << " categorical splits";
  return s.str();
}

index_t Forest::n_categorical_nodes() const {
  index_t c = 0;
  for (const ForestTree& t : trees_)
    for (std::uint8_t k : t.categorical) c += k != 0;
  return c;
}

}  // namespace canopy
