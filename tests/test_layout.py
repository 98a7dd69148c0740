"""The package's layout: every public import path of earlier releases still works (the old
module paths with a ``DeprecationWarning``), the subpackages re-export their public names, and
there is no import cycle (the layering itself: ``test_import_graph.py``)."""

import importlib
import pickle
import re
import subprocess
import sys
import warnings

import pytest

import hmoe_estim
from hmoe_estim import _moved

#: ``from hmoe_estim import NAME`` for every top-level public name of release 0.1.0
TOP_LEVEL = [
    "MixingMeasure", "regression_function", "HMoERegressor", "MHARegressor", "G1Regressor",
    "G2Regressor", "voronoi_loss", "voronoi_cells", "expert_error", "regression_error",
    "make_voronoi_scorer", "make_expert_error_scorer", "make_regression_error_scorer",
    "make_hmoe_regression", "random_measure", "GATES", "ACTIVATIONS", "__version__",
]

#: module paths of release 0.1.0 and public names each had -> where they live now
OLD_PATHS = {
    "hmoe_estim.measure": ["MixingMeasure"],
    "hmoe_estim.parameters": ["n_params", "pack", "unpack", "triangle_indices", "make_bounds"],
    "hmoe_estim.regression": ["regression_function"],
    "hmoe_estim.initialization": ["random_start", "split_heaviest_channel", "check_init_measure"],
    "hmoe_estim.estimator": ["HMoERegressor", "MHARegressor", "G1Regressor", "G2Regressor"],
    "hmoe_estim.optim": ["StartResult", "run_starts"],
    "hmoe_estim.branches": ["reference_sample", "DEFAULT_N_REF", "EXPERT_READINGS"],
    "hmoe_estim.voronoi": ["voronoi_cells", "voronoi_loss", "VoronoiCells", "VoronoiDetails"],
    "hmoe_estim.expert_metrics": ["expert_error", "regression_error", "WEIGHTINGS"],
    "hmoe_estim.scorers": ["make_voronoi_scorer", "make_expert_error_scorer",
                           "make_regression_error_scorer", "MetricScorer"],
    "hmoe_estim.datasets": ["random_measure", "make_hmoe_regression"],
    "hmoe_estim.attention": ["multihead_attention", "attention_to_measure"],
    "hmoe_estim.config": ["ConfigError", "ModelSpec", "TruthConfig", "DataConfig", "GridConfig",
                          "FitConfig", "MetricsConfig", "StudyConfig", "load_config",
                          "load_preset", "PRESETS", "INIT_CHOICES"],
    "hmoe_estim.study": ["StudyError", "fit_seed", "true_measure", "reference_sample_for",
                         "near_truth_starts", "plan_fits", "run_fit", "prepare_out",
                         "run_study", "load_study", "write_rates", "fit_diagnostics",
                         "sort_records", "format_diagnostics", "dask_backend", "CONFIG_FILE",
                         "TRUTH_FILE", "RATES_FILE", "RUNS_FILE"],
    "hmoe_estim.results": ["RESULTS_FILE", "REQUIRED_KEYS", "ResultsError", "read_results",
                           "set_aside_partial", "ResultsWriter", "record_key", "deduplicate",
                           "json_safe"],
    "hmoe_estim.rates": ["fit_power_law", "fit_log_law", "fit_rates", "rates_from_records",
                         "format_rates_table", "RATE_METRICS", "CRITERION"],
    "hmoe_estim.plotting": ["plot_learning_curves", "PLOT_METRICS", "METRIC_TITLES",
                            "PlottingError"],
    "hmoe_estim.progress": ["ProgressBar", "format_duration"],
    "hmoe_estim.cli": ["main", "build_parser"],
}

#: old paths that are the new subpackages themselves: they import without a warning
SUBPACKAGE_PATHS = ("hmoe_estim.datasets", "hmoe_estim.attention", "hmoe_estim.study")

SUBPACKAGES = ["model", "kernels", "estimators", "solvers", "metrics", "datasets", "attention",
               "study"]


@pytest.fixture
def forget_alias(monkeypatch):
    """Drop an old path from the import cache for one test, so that importing it warns again
    (the alias warns once per process: later imports are answered by ``sys.modules``)."""

    def forget(path):
        assert path in _moved.MOVED_MODULES, path  # never a real module: it would run twice
        monkeypatch.delitem(sys.modules, path, raising=False)
        monkeypatch.delattr(hmoe_estim, path.rpartition(".")[2], raising=False)

    return forget


def _deprecation(path):
    """``pytest.warns`` of the warning an import of the old path ``path`` gives."""
    new = _moved.public_path(path)
    return pytest.warns(DeprecationWarning, match=(
        rf"^{re.escape(path)} is deprecated and will be removed in 0\.4\.0: import from "
        rf"{re.escape(new)} instead"))


@pytest.mark.parametrize("name", TOP_LEVEL)
def test_top_level_names(name):
    assert getattr(hmoe_estim, name) is not None
    assert name in hmoe_estim.__all__


@pytest.mark.parametrize("path", sorted(OLD_PATHS))
def test_old_module_paths_still_import(path, forget_alias):
    if path in SUBPACKAGE_PATHS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(path)
        assert not [w for w in caught if "deprecated" in str(w.message) and path in
                    str(w.message)], "a subpackage of the new layout warns as an old path"
    else:
        forget_alias(path)
        with _deprecation(path):
            module = importlib.import_module(path)
    for name in OLD_PATHS[path]:
        assert hasattr(module, name), f"{path}.{name}"
        exec(f"from {path} import {name}", {})
    # one module object whichever path imported it: no duplicated classes
    assert module.__spec__.name == module.__name__


def test_the_aliases_are_the_paths_of_0_1_0():
    # hmoe_estim.identifiability was never released: no alias
    assert set(_moved.MOVED_MODULES) == set(OLD_PATHS) - set(SUBPACKAGE_PATHS)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("hmoe_estim.identifiability")


@pytest.mark.parametrize("path", sorted(set(OLD_PATHS) - set(SUBPACKAGE_PATHS)))
def test_the_path_the_warning_names_has_the_old_names(path):
    new = importlib.import_module(_moved.public_path(path))
    renamed = _moved.RENAMED.get(path, {})
    missing = [renamed.get(name, name) for name in OLD_PATHS[path]
               if renamed.get(name, name) not in getattr(new, "__all__", ())]
    assert not missing, f"{_moved.public_path(path)} does not export {missing} of {path}"


def test_an_old_path_warns_once_and_at_the_importing_line(forget_alias):
    forget_alias("hmoe_estim.voronoi")
    with _deprecation("hmoe_estim.voronoi") as caught:
        import hmoe_estim.voronoi  # noqa: F401
    assert [w.filename for w in caught] == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.import_module("hmoe_estim.voronoi")  # from the import cache: no warning


def test_old_and_new_paths_give_the_same_objects(forget_alias):
    from hmoe_estim.estimators import HMoERegressor
    from hmoe_estim.metrics import VoronoiCells
    from hmoe_estim.study import StudyConfig

    for path in ("hmoe_estim.config", "hmoe_estim.estimator", "hmoe_estim.voronoi"):
        forget_alias(path)
    with _deprecation("hmoe_estim.config"):
        from hmoe_estim.config import StudyConfig as old_config
    with _deprecation("hmoe_estim.estimator"):
        from hmoe_estim.estimator import HMoERegressor as old_estimator
    with _deprecation("hmoe_estim.voronoi"):
        from hmoe_estim.voronoi import VoronoiCells as old_cells

    assert old_estimator is HMoERegressor
    assert old_cells is VoronoiCells
    assert old_config is StudyConfig


def test_pickles_of_the_old_layout_load(forget_alias):
    # an estimator pickled by release 0.1.0 names its class hmoe_estim.estimator.HMoERegressor
    est = hmoe_estim.HMoERegressor(n_experts=1)
    data = pickle.dumps(est, protocol=0).replace(
        b"hmoe_estim.estimators._regressor", b"hmoe_estim.estimator")
    assert b"hmoe_estim.estimator\n" in data
    forget_alias("hmoe_estim.estimator")
    with _deprecation("hmoe_estim.estimator"):
        loaded = pickle.loads(data)
    assert type(loaded) is hmoe_estim.HMoERegressor
    # pickled again, it names the new path and loads without the alias
    assert b"hmoe_estim.estimators._regressor" in pickle.dumps(loaded, protocol=0)


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_subpackages_reexport_their_public_names(sub):
    module = importlib.import_module(f"hmoe_estim.{sub}")
    for name in getattr(module, "__all__", []):
        assert hasattr(module, name), f"hmoe_estim.{sub}.{name}"


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_each_subpackage_imports_alone(sub):
    # a fresh interpreter per subpackage: an import cycle fails here whatever the test order
    proc = subprocess.run([sys.executable, "-c", f"import hmoe_estim.{sub}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
