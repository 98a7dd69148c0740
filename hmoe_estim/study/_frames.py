"""A study folder as pandas DataFrames, for notebooks (see :doc:`/user_guide/studies`,
"Reading a study in pandas").

The habits matched are Optuna's ``Study.trials_dataframe()`` (one row per trial, one column
per attribute) and scikit-learn's ``cv_results_`` (one column per quantity, nested values kept
whole). The folder is read by the study's own readers: :func:`load_study` (``config.json``
and ``results.jsonl``, validated and deduplicated), ``rates.json`` as written by
:func:`write_rates`, and :func:`certificate_summary` over the records. pandas is an optional
dependency (``pip install hmoe-estim[pandas]``), imported when this function is called.
"""

import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from ._certificate import certificate_summary
from ._diagnostics import _by_model, _found_twice, sort_records
from ._rates import MODEL_KEYS
from ._store import RATES_FILE, _read_json, load_study

__all__ = ["StudyFrames", "study_dataframes"]

#: The columns of each frame that always exist, also when the frame is empty.
RATES_INDEX = ("model", "metric")


def _pandas():
    try:
        import pandas
    except ImportError as exc:
        raise ImportError(
            "study_dataframes needs pandas, an optional dependency of hmoe-estim: install it "
            "with `pip install hmoe-estim[pandas]` (or `pip install pandas`)."
        ) from exc
    return pandas


def _flat(entry):
    """One row of a ``rates.json`` entry: a dict value becomes one column per key
    (``n_for_eps`` -> ``n_for_eps_power``, ``n_for_eps_log``), a two-number ``*_ci`` list
    ``*_ci_low`` and ``*_ci_high``; any other value (the per-``n`` lists) is kept whole."""
    row = {}
    for key, value in entry.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                row[f"{key}_{sub}"] = v
        elif key.endswith("_ci") and isinstance(value, list) and len(value) == 2:
            row[f"{key}_low"], row[f"{key}_high"] = value
        else:
            row[key] = value
    return row


@dataclass(frozen=True)
class StudyFrames:
    """A study folder as DataFrames (returned by :func:`study_dataframes`).

    Attributes
    ----------
    records : pandas.DataFrame
        One row per finished fit, one column per field of its record in ``results.jsonl``
        (every field of every record; a field a record lacks is missing there). Scalars are
        columns of numbers, strings and booleans; JSON ``null`` reads as ``NaN`` in a column of
        numbers and ``None`` elsewhere. Nested fields are kept whole, one Python object per
        cell, as in the file: ``measure`` (a dict ``omega``, ``M``, ``a`` of nested lists;
        :meth:`hmoe_estim.MixingMeasure.from_dict` reads it), ``start_objectives``,
        ``start_n_iter``, ``extra_weights``, ``cell_sizes``. Rows are in the study's canonical
        order (config's model order, then ``n``, then ``rep``).
    rates : pandas.DataFrame
        One row per model and metric of ``rates.json`` (columns ``model``, ``metric``, then the
        entry's fields): ``slope``, ``slope_ci_low``, ``slope_ci_high``, ``c``,
        ``log_lambda`` (and its ``_ci_low``/``_ci_high``), ``better_law``, ``decreasing``,
        ``eps``, ``n_for_eps_power``, ``n_for_eps_log``, ``reading``, ...; the per-``n`` lists
        ``n``, ``average``, ``n_reps`` are kept whole. Empty (with those two columns) when the
        folder has no ``rates.json``.
    certificate : pandas.DataFrame
        One row per model (index ``model``): ``fits``, ``checked``, ``failures``,
        ``failure_rate`` (:func:`certificate_summary` of the records) and ``found_twice`` (share
        of fits whose best objective two or more starts reached). It is computed from the
        records, so it matches ``records``; it equals ``rates.json``'s ``certificate`` entries
        when the rates were written on the same records.
    identifiability : pandas.DataFrame
        One row per model (index ``model``) of ``rates.json``'s ``identifiability`` entries:
        ``verdict``, ``label``, ``identifiable``, ``reason``, ``jacobian_*``, ...; lists
        (``obstructions`` with their witnesses, ``symmetries``, ``notes``) kept whole. Empty
        without ``rates.json``.
    config : StudyConfig
        The study's configuration (``config.json``).
    path : str
        The folder.
    """

    records: Any
    rates: Any
    certificate: Any
    identifiability: Any
    config: Any
    path: str

    def __getitem__(self, name):
        """``frames["records"]`` etc., as for a dict of DataFrames."""
        if name not in ("records", "rates", "certificate", "identifiability"):
            raise KeyError(f"{name!r}: use 'records', 'rates', 'certificate' or "
                           "'identifiability'.")
        return getattr(self, name)

    def keys(self):
        return ("records", "rates", "certificate", "identifiability")


def study_dataframes(out, *, stream=None):
    """Read a study folder into pandas DataFrames: records, rates, certificate, verdicts.

    Parameters
    ----------
    out : str or path-like
        The study's ``OUT`` (``config.json``, ``results.jsonl`` and, once rates were written
        with ``hmoe-estim rates OUT`` or :func:`write_rates`, ``rates.json``). It may be a
        study still running: the finished fits are read.
    stream : file-like or None
        Where the reader's messages go (an unfinished last line, duplicates); default stderr.

    Returns
    -------
    StudyFrames
        ``records`` (one row per fit), ``rates`` (one row per model and metric, as in
        ``rates.json``), ``certificate`` and ``identifiability`` (one row per model), with the
        ``config``. Also indexable as ``frames["records"]``.

    Raises
    ------
    ImportError
        pandas is not installed (``pip install hmoe-estim[pandas]``).
    StudyError, ResultsError
        ``out`` is not a study folder, or a file of it is corrupt (the message says how to fix
        it).

    Warns
    -----
    UserWarning
        The folder has no ``rates.json`` (``rates`` and ``identifiability`` are empty).

    Examples
    --------
    >>> from hmoe_estim.study import study_dataframes
    >>> # frames = study_dataframes("runs/quick")
    >>> # frames.records.groupby(["model", "n"])["voronoi_loss"].median()
    >>> # frames.rates.set_index(["model", "metric"])[["slope", "slope_ci_low", "slope_ci_high"]]
    """
    pd = _pandas()
    out = os.fspath(out)
    config, records = load_study(out, stream=sys.stderr if stream is None else stream)
    records = sort_records(config, records)
    records_df = pd.DataFrame.from_records(records) if records else pd.DataFrame(
        columns=["model", "n", "rep"])

    summary = certificate_summary(records)
    by_model = _by_model(records)
    cert_rows = [{"model": model, **d, "found_twice": _found_twice(by_model[model])}
                 for model, d in summary.items()]
    certificate = pd.DataFrame(cert_rows, columns=["model", "fits", "checked", "failures",
                                                   "failure_rate", "found_twice"])
    certificate = certificate.set_index("model")

    rates_path = os.path.join(out, RATES_FILE)
    rate_rows, verdict_rows = [], []
    if os.path.exists(rates_path):
        rates = _read_json(rates_path, RATES_FILE)
        for model, entry in rates.items():
            for metric, value in entry.items():
                if metric not in MODEL_KEYS and isinstance(value, dict):
                    rate_rows.append({"model": model, "metric": metric, **_flat(value)})
            if isinstance(entry.get("identifiability"), dict):
                verdict_rows.append({"model": model, **_flat(entry["identifiability"])})
    else:
        warnings.warn(
            f"{out} has no {RATES_FILE}: the rates and identifiability frames are empty. Write "
            f"them with `hmoe-estim rates {out}` (or hmoe_estim.study.write_rates).",
            UserWarning, stacklevel=2)
    rates_df = pd.DataFrame(rate_rows) if rate_rows else pd.DataFrame(columns=list(RATES_INDEX))
    identifiability = (pd.DataFrame(verdict_rows) if verdict_rows
                       else pd.DataFrame(columns=["model"])).set_index("model")
    return StudyFrames(records=records_df, rates=rates_df, certificate=certificate,
                       identifiability=identifiability, config=config, path=out)
