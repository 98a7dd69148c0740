"""Sample-complexity studies: configuration, the resumable runner, the results store, rates,
plots, progress and the command line (see :doc:`/user_guide/studies`).

A study (:class:`StudyConfig`) is the list of fits ``(model, n, rep)`` for every model, sample
size of the grid and replication; :func:`run_study` runs the ones not yet in ``OUT``, writing
each to ``OUT/results.jsonl`` as it finishes. Modules: ``_config`` (TOML, validation, presets),
``_seeds`` (one seed per fit), ``_plan`` (truth, reference sample, fits to run), ``_fit`` (one
fit and its record), ``_results`` (the crash-safe JSON-lines store), ``_frames`` (a study
folder as pandas DataFrames), ``_store`` (the output
folder and its lock), ``_runner`` (the run loop), ``_diagnostics``, ``_rates``, ``_plotting``,
``_verdicts`` (the identifiability verdict of each model and the reading of its rates),
``_claims`` (the paper's claims against a study's rates),
``_progress``, ``_dask`` and ``_cli``. A layer study (``kind = "layer"``: a whole attention
layer, with a per-entry fit of one entry as the baseline) has its own ``_layer_config``,
``_layer_plan`` and ``_layer_fit``; everything else is shared.
"""

from ._certificate import certificate_summary, certified_records, format_certificate
from ._claims import claim_rows, claims_table
from ._cli import build_parser, main
from ._config import (
    INIT_CHOICES,
    KINDS,
    PRESETS,
    ConfigError,
    DataConfig,
    FitConfig,
    GridConfig,
    MetricsConfig,
    ModelSpec,
    StudyConfig,
    TruthConfig,
    load_config,
    load_preset,
)
from ._dask import dask_backend
from ._diagnostics import fit_diagnostics, format_diagnostics, sort_records, write_rates
from ._fit import run_fit
from ._frames import StudyFrames, study_dataframes
from ._layer_config import LayerStudyConfig
from ._layer_plan import layer_reference_sample, true_layer
from ._plan import near_truth_starts, plan_fits, reference_sample_for, true_measure
from ._plotting import METRIC_TITLES, PLOT_METRICS, PlottingError, plot_learning_curves
from ._progress import ProgressBar, format_duration
from ._rates import (
    CRITERION,
    MODEL_KEYS,
    RATE_METRICS,
    fit_log_law,
    fit_power_law,
    fit_rates,
    format_rates_table,
    rates_from_records,
)
from ._results import (
    REQUIRED_KEYS,
    RESULTS_FILE,
    ResultsError,
    ResultsWriter,
    deduplicate,
    json_safe,
    read_results,
    record_key,
    set_aside_partial,
)
from ._runner import run_study
from ._seeds import fit_seed
from ._store import (
    CONFIG_FILE,
    RATES_FILE,
    RUNS_FILE,
    TRUTH_FILE,
    StudyError,
    load_study,
    prepare_out,
)
from ._verdicts import annotate_rates, study_verdicts

__all__ = [
    # configuration
    "StudyConfig", "ModelSpec", "TruthConfig", "DataConfig", "GridConfig", "FitConfig",
    "MetricsConfig", "ConfigError", "load_config", "load_preset", "PRESETS", "INIT_CHOICES",
    "KINDS", "LayerStudyConfig",
    # running
    "run_study", "run_fit", "plan_fits", "fit_seed", "true_measure", "reference_sample_for",
    "near_truth_starts", "dask_backend", "StudyError", "true_layer", "layer_reference_sample",
    # the output folder and its results
    "prepare_out", "load_study", "CONFIG_FILE", "TRUTH_FILE", "RATES_FILE", "RUNS_FILE",
    "RESULTS_FILE", "REQUIRED_KEYS", "ResultsError", "ResultsWriter", "read_results",
    "set_aside_partial", "record_key", "deduplicate", "json_safe",
    "study_dataframes", "StudyFrames",
    # what a study says
    "certificate_summary", "certified_records", "format_certificate",
    "fit_diagnostics", "format_diagnostics", "sort_records", "write_rates",
    "fit_power_law", "fit_log_law", "fit_rates", "rates_from_records", "format_rates_table",
    "RATE_METRICS", "CRITERION", "MODEL_KEYS", "study_verdicts", "annotate_rates",
    "plot_learning_curves", "PLOT_METRICS", "METRIC_TITLES", "PlottingError",
    "ProgressBar", "format_duration", "claims_table", "claim_rows",
    # command line
    "main", "build_parser",
]
