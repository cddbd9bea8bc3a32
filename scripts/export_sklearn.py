#!/usr/bin/python3
"""Writes a pickled scikit-learn forest as a Canopy forest JSON file:

    /usr/bin/python3 scripts/export_sklearn.py model.pkl forest.json

The exporter lives in the Python package (python/canopy/sklearn_export.py); this loads that file
directly, so it runs without the compiled module. `from export_sklearn import export_forest`
keeps working for the scripts that import it.
"""
import importlib.util
import pathlib
import sys

_path = pathlib.Path(__file__).resolve().parent.parent / "python" / "canopy" / "sklearn_export.py"
_spec = importlib.util.spec_from_file_location("canopy_sklearn_export", _path)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
export_forest = _module.export_forest
forest_to_dict = _module.forest_to_dict

if __name__ == "__main__":
    sys.exit(_module.main(sys.argv))
