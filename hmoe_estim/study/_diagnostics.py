"""What a finished study says: per-model fit diagnostics and the rates written to ``rates.json``."""

import os

import numpy as np

from ._certificate import certificate_summary
from ._store import RATES_FILE, StudyError, _write_json_atomic, load_study

__all__ = ["fit_diagnostics", "format_diagnostics", "sort_records", "write_rates"]


def starts_agreeing(record):
    """How many finished starts of a study fit reached its best objective (within
    ``AGREE_TOL · objective / n``, the estimator's ``n_starts_agreeing_``); recomputed from
    ``start_objectives`` for records written before the field existed."""
    if record.get("n_starts_agreeing") is not None:
        return int(record["n_starts_agreeing"])
    # (imported here: the solvers package loads Numba, which reading a study does not need)
    from ..solvers import AGREE_TOL, count_agreeing

    return count_agreeing(record.get("start_objectives", []), record["n"], AGREE_TOL)


def _by_model(records):
    """``{model: [records]}`` in first-seen order."""
    out = {}
    for rec in records:
        out.setdefault(rec["model"], []).append(rec)
    return out


def _found_twice(records):
    """Share of ``records`` whose best objective two or more starts reached."""
    return float(np.mean([starts_agreeing(r) >= 2 for r in records]))


def fit_diagnostics(records):
    """Per model: fits, converged share, share of fits worse than ``G*`` on their own data,
    share whose best objective was found by two or more starts, median fit seconds and mean
    weight of extra atoms (``None`` for layers, which have none); for a layer study's models
    with the per-entry baseline, the baseline's median fit seconds
    (``median_baseline_seconds``).

    ``worse_than_truth`` (objective above the true measure's objective on the same data, with
    ``K >= K*``) certainly marks a fit that missed the least-squares optimum — a local optimum
    of the multi-start search, not a statistical effect. Its share is the certificate's
    failure rate (:func:`hmoe_estim.study.certificate_summary`). ``found_twice`` needs no
    truth: the share of fits whose best objective was reached by at least two starts
    (``starts_agreeing`` in this module). It is a hint, not a certificate — two starts can
    agree on a local optimum, and over-specified fits (``K > K*``) often end with distinct
    near-equal optima.
    """
    certificate = certificate_summary(records)
    table = {}
    for model, recs in _by_model(records).items():
        table[model] = {
            "fits": len(recs),
            "converged": float(np.mean([bool(r["converged"]) for r in recs])),
            "worse_than_truth": certificate[model]["failure_rate"],
            "found_twice": _found_twice(recs),
            "median_fit_seconds": float(np.median([r["fit_seconds"] for r in recs])),
            "total_fit_seconds": float(np.sum([r["fit_seconds"] for r in recs])),
            # a layer has no extra atoms: None (printed "-"), not a mean of zeros
            "mean_extra_weight": (float(np.mean([r["extra_weight"] for r in recs]))
                                  if all("extra_weight" in r for r in recs) else None),
        }
        base = [r["baseline_fit_seconds"] for r in recs if "baseline_fit_seconds" in r]
        if base:  # a layer study's per-entry baseline, fitted on the same data
            table[model]["median_baseline_seconds"] = float(np.median(base))
    return table


def format_diagnostics(table, labels=None):
    """Plain-text table of :func:`fit_diagnostics` (with a column ``baseline fit s``, the
    median time of a layer study's per-entry baseline fits, when a model has them)."""
    base = any("median_baseline_seconds" in d for d in table.values())
    head = (f"{'model':<12} {'fits':>5} {'converged':>10} {'worse than G*':>14} "
            f"{'found twice':>12} {'median fit s':>13} {'total fit s':>12} "
            f"{'extra weight':>13}" + (f" {'baseline fit s':>15}" if base else ""))
    lines = [head, "-" * len(head)]
    for model, d in table.items():
        name = labels.get(model, model) if labels else model
        worse = "-" if d["worse_than_truth"] is None else f"{100 * d['worse_than_truth']:.0f}%"
        twice = f"{100 * d['found_twice']:.0f}%"
        extra = "-" if d["mean_extra_weight"] is None else f"{d['mean_extra_weight']:.3f}"
        lines.append(
            f"{name:<12} {d['fits']:>5} {100 * d['converged']:>9.0f}% {worse:>14} {twice:>12} "
            f"{d['median_fit_seconds']:>13.2f} {d['total_fit_seconds']:>12.1f} "
            f"{extra:>13}"
            + (f" {d.get('median_baseline_seconds', float('nan')):>15.2f}" if base else "")
        )
    return "\n".join(lines)


def sort_records(config, records):
    """Records in the canonical order (config's model order, then ``n``, then ``rep``).

    Results arrive in completion order, which depends on the machine; sorting makes the rates
    (including their bootstrap intervals) independent of how the study was run.
    """
    order = {m.name: j for j, m in enumerate(config.models)}
    return sorted(records, key=lambda r: (order.get(r["model"], len(order)), r["n"], r["rep"]))


def write_rates(out, *, records=None, config=None, eps=None, n_boot=2000, metrics=None,
                stream=None, certified_only=False):
    """Fit the rates of every model and metric of ``out`` and write ``OUT/rates.json``.

    Parameters
    ----------
    certified_only : bool, default=False
        Fit the rates on the fits that are not certified optimisation failures (objective
        above the truth's own); each model's ``certificate`` entry says how many were dropped.

    Returns
    -------
    dict
        ``{model: {metric: {...}, "certificate": {...}}}`` as written (see
        :func:`hmoe_estim.study.fit_rates`); ``certificate`` holds the model's fits, the fits
        checked, the certified failures, their rate, whether the rates use certified fits only,
        how many fits that dropped and ``found_twice``, the share of the model's fits whose
        best objective two or more starts reached (:func:`fit_diagnostics`);
        ``identifiability`` holds the model's verdict and each parameter metric a
        ``"reading"`` of its slope (:func:`hmoe_estim.study.annotate_rates`).
    """
    from ._certificate import certified_records
    from ._rates import rates_from_records

    if records is None or config is None:
        config, records = load_study(out, stream=stream)
    records = sort_records(config, records)
    if not records:
        raise StudyError(f"{out} has no finished fits yet; run the study first.")
    # records written before the measure-level reading get it from their stored measures
    from ._fit import with_measure_level

    records = with_measure_level(config, records)
    summary = certificate_summary(records)
    # found twice: the hint a user without a truth also has, over all of the model's fits
    twice = {model: _found_twice(recs) for model, recs in _by_model(records).items()}
    dropped = {m: 0 for m in summary}
    if certified_only:
        records, dropped = certified_records(records)
    rates = rates_from_records(records, metrics=metrics or config.rate_metrics, eps=eps,
                               n_boot=n_boot, random_state=config.seed,
                               optional=config.optional_metrics)
    for model, cert in summary.items():
        entry = rates.setdefault(model, {})
        entry["certificate"] = {**cert, "certified_only": bool(certified_only),
                                "dropped": dropped.get(model, 0),
                                "found_twice": twice[model]}
    # the identifiability verdict of each model next to its slopes
    from ._verdicts import annotate_rates

    annotate_rates(rates, config, records=records)
    _write_json_atomic(os.path.join(out, RATES_FILE), rates)
    return rates
