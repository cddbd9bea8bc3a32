"""A scikit-learn random forest as a Canopy forest JSON document (docs/forest_format.md).

Supported: RandomForestClassifier, RandomForestRegressor, ExtraTreesClassifier,
ExtraTreesRegressor with a single output. canopy.Forest.load(model) calls forest_to_dict; the
file needs only numpy and scikit-learn, so scripts/export_sklearn.py loads it without the
compiled module:

    export_forest(model, "forest.json")
    /usr/bin/python3 scripts/export_sklearn.py model.pkl forest.json

Leaf class distributions are taken exactly as scikit-learn's predict_proba forms them (before
1.4: value / value.sum(axis=1), an all-zero row left as zeros; from 1.4: tree_.value itself,
which then holds the fractions), so Canopy adds the very same float64 numbers scikit-learn adds
and the averaged probabilities agree to the last bit.
"""
import json
import pickle
import sys

import numpy as np

SUPPORTED = ("RandomForestClassifier", "RandomForestRegressor",
             "ExtraTreesClassifier", "ExtraTreesRegressor")


def _sklearn_version():
    import sklearn
    parts = []
    for p in sklearn.__version__.split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _tree_json(tree, task, n_classes):
    t = tree.tree_
    n = t.node_count
    if task == "classification":
        # The same expression scikit-learn's DecisionTreeClassifier.predict_proba evaluates:
        # before 1.4 it divides tree_.value (weighted counts) by its row sums; from 1.4 on
        # tree_.value holds the fractions and predict_proba returns them as they are.
        proba = t.value.reshape(n, -1)[:, :n_classes].copy()
        if _sklearn_version() < (1, 4):
            normalizer = proba.sum(axis=1)[:, np.newaxis]
            normalizer[normalizer == 0.0] = 1.0
            proba /= normalizer
        values = proba.tolist()
    else:
        values = t.value.reshape(n, -1)[:, :1].tolist()
    # Inference reads only the leaves' values: inner nodes get [] to keep the file small.
    leaf = t.children_left == -1
    values = [v if leaf[i] else [] for i, v in enumerate(values)]
    out = {
        "left_children": t.children_left.tolist(),
        "right_children": t.children_right.tolist(),
        "features": t.feature.tolist(),
        "thresholds": [float(v) for v in t.threshold],
        "values": values,
        "node_samples": t.n_node_samples.tolist(),
        "weighted_node_samples": [float(v) for v in t.weighted_n_node_samples],
    }
    if hasattr(t, "missing_go_to_left"):  # scikit-learn >= 1.3
        out["default_left"] = [int(v) for v in t.missing_go_to_left]
    return out


def forest_to_dict(model):
    import sklearn
    kind = type(model).__name__
    if kind not in SUPPORTED:
        raise ValueError(f"{kind} is not supported (supported: {', '.join(SUPPORTED)})")
    if getattr(model, "n_outputs_", 1) != 1:
        raise ValueError("multi-output forests are not supported")
    task = "classification" if kind.endswith("Classifier") else "regression"
    doc = {
        "format": "canopy-forest",
        "version": 1,
        "producer": f"scripts/export_sklearn.py (scikit-learn {sklearn.__version__}, {kind})",
        "task": task,
        "num_features": int(model.n_features_in_),
    }
    n_classes = 0
    if task == "classification":
        classes = model.classes_
        n_classes = len(classes)
        if np.issubdtype(np.asarray(classes).dtype, np.number):
            doc["classes"] = [c.item() for c in np.asarray(classes)]
        else:  # labels that are not numbers: Canopy outputs the class index
            doc["classes"] = list(range(n_classes))
            doc["class_names"] = [str(c) for c in classes]
    doc["trees"] = [_tree_json(est, task, n_classes) for est in model.estimators_]
    return doc


def export_forest(model, path):
    with open(path, "w") as f:
        json.dump(forest_to_dict(model), f, separators=(",", ":"))


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], "rb") as f:
        model = pickle.load(f)
    export_forest(model, argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
