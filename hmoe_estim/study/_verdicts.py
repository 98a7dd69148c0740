"""The identifiability verdict of every model of a study, and the reading it gives its rates.

:func:`study_verdicts` runs :func:`hmoe_estim.metrics.identifiability_report` on the study's
``G*`` for each model (the layer identifiability report on the true layer in a layer study);
:func:`annotate_rates` puts the verdicts into ``rates.json`` and says whether each parameter
metric's slope reads as a rate (see the user guide page "Which gates and activations are
identifiable").
"""

import copy
import functools

from ._plan import true_measure
from ._rates import MEASURE_METRICS

__all__ = ["study_verdicts", "annotate_rates"]

#: Metrics of a study whose slopes are parameter rates only for an identifiable model.
PARAMETER_METRICS = ("voronoi_loss", "voronoi_exact", "voronoi_over", "extra_weight",
                     "expert_error")


def entry_verdict(truth, gate, activation, *, n_experts, n_heads, n_tokens, noise):
    """Verdict record of one model fitted per entry (:func:`study_verdicts`' records): the
    identifiability report of ``truth`` (a :class:`~hmoe_estim.MixingMeasure`) with its label,
    the noise and the samples that resolve each near-alternative, and the measure-level report
    for a gate with that reading."""
    # (imported here: the metrics load Numba, which reading a study does not need)
    from ..kernels import single_thread_blas
    from ..metrics import (
        MEASURE_GATES,
        identifiability_report,
        measure_verdict_label,
        verdict_label,
    )

    kw = dict(gate=gate, activation=activation, n_experts=n_experts, n_heads=n_heads,
              n_tokens=n_tokens)
    with single_thread_blas():  # small SVDs: a threaded BLAS only spins on a busy machine
        rep = identifiability_report(truth, **kw)
    rec = rep.to_dict()
    rec["label"] = verdict_label(rec)
    for a, alt in zip(rec["near_alternatives"], rep.near_alternatives):
        a["noise"] = noise
        a["n_to_resolve"] = alt.samples_to_resolve(noise) if noise > 0 else None
    if gate in MEASURE_GATES:
        with single_thread_blas():
            mrec = identifiability_report(truth, level="measure", **kw).to_dict()
        mrec["label"] = measure_verdict_label(mrec)
        rec["measure_level"] = mrec
    return rec


def _not_assessed(reason):
    """The verdict record of a model whose identifiability was not assessed, and why."""
    return {"identifiable": "unknown", "verdict": "unknown", "reason": reason,
            "obstructions": [], "near_alternatives": [],
            "label": f"identifiability not assessed: {reason}"}


@functools.lru_cache(maxsize=8)
def _layer_verdicts_of(config):
    return layer_study_verdicts(config)


def layer_study_verdicts(config, truth=None):
    """Verdict record of every model of a layer study.

    The layer's verdict comes from the layer identifiability report on the true layer; where
    that report is not available the record says so explicitly (verdict ``"unknown"``,
    label ``"identifiability not assessed: <why>"``). A model with the per-entry baseline also
    gets ``"baseline_entry"``: :func:`entry_verdict` of the truth's measure of the baseline
    entry, fitted with the baseline's ``K``.

    Parameters
    ----------
    config : LayerStudyConfig
    truth : AttentionLayer or None
        The true layer (default: :func:`~hmoe_estim.study.true_layer` of ``config``).

    Returns
    -------
    dict
        ``{model name: verdict record}`` with the keys of :func:`study_verdicts`' records.
    """
    from ._layer_plan import true_layer

    if truth is None:
        truth = true_layer(config)
    try:
        from ..layer import layer_identifiability_report, layer_verdict_label
    except ImportError:
        layer_identifiability_report = None
    out = {}
    for m in config.models:
        if layer_identifiability_report is None:
            rec = _not_assessed("this installation has no layer identifiability report "
                                "(hmoe_estim.layer.layer_identifiability_report)")
        else:
            from ..kernels import single_thread_blas

            with single_thread_blas():
                rec = layer_identifiability_report(
                    truth, gate=m.gate, activation=m.activation,
                    gate_form=config.truth.gate_form, qk=config.fit.qk,
                    n_tokens=config.data.n_tokens, head_dim=config.fit.head_dim,
                    rows=config.data.rows).to_dict()
            rec["label"] = layer_verdict_label(rec)
            rec.setdefault("near_alternatives", [])
            rec.setdefault("obstructions", [])
        if config.has_baseline(m):
            N = config.data.n_tokens
            G = truth.entry_measure(config.baseline_row, config.baseline.column, n_tokens=N)
            brec = entry_verdict(G, m.gate, m.activation, n_experts=config.baseline.n_experts,
                                 n_heads=config.truth.n_heads, n_tokens=N,
                                 noise=config.data.noise)
            brec["label"] = "per-entry baseline: " + brec["label"]
            rec["baseline_entry"] = brec
        out[m.name] = rec
    return out


def study_verdicts(config, truth=None):
    """Verdict record of every model of a study config.

    Parameters
    ----------
    config : StudyConfig
    truth : MixingMeasure or None
        The study's ``G*`` (default: :func:`~hmoe_estim.study.true_measure` of ``config``).

    Returns
    -------
    dict
        ``{model name: IdentifiabilityReport.to_dict() (witnesses as lists) plus "label"}``
        (:class:`~hmoe_estim.metrics.IdentifiabilityReport`,
        :func:`~hmoe_estim.metrics.verdict_label`); a model whose gate has a measure-level
        reading (``MEASURE_GATES``) also gets ``"measure_level"``: the report at
        ``level="measure"`` with its own ``"label"``
        (:func:`~hmoe_estim.metrics.measure_verdict_label`).

    Raises
    ------
    ValueError
        The truth's shape disagrees with the config's fitted shape, or ``K < K*``.
    """
    if config.kind == "layer":
        # a layer study's verdicts depend on its config only: computed once per process
        # (their identifiability reports take seconds), a copy returned
        if truth is None:
            return copy.deepcopy(_layer_verdicts_of(config))
        return layer_study_verdicts(config, truth)
    if truth is None:
        truth = true_measure(config)
    H, N, K, D = config.fitted_shape
    if D != truth.n_features:
        raise ValueError(f"the config fits D = {D} features but its truth has "
                         f"{truth.n_features}: use a truth with D = {D}.")
    return {m.name: entry_verdict(truth, m.gate, m.activation, n_experts=K, n_heads=H,
                                  n_tokens=N, noise=config.data.noise)
            for m in config.models}


def _reading(rec, slow):
    """The reading of a parameter metric's slope under the verdict record ``rec`` (a layer's
    ``"identifiable up to the gauges"`` reads as identifiable: its metrics are invariant)."""
    if rec["verdict"] == "not identifiable":
        reading = "not a rate: " + rec["label"]
    elif rec["verdict"] in ("identifiable", "identifiable up to the gauges"):
        reading = "rate"
    else:
        reading = "rate if identifiable (identifiability unknown)"
    if slow and rec["verdict"] != "not identifiable":
        a = slow[0]
        reading += (f"; pre-asymptotic: near-alternative {a['name']} (rms gap "
                    f"{a['rms_gap']:.1e}) unresolved below n ~ {a['n_to_resolve']:.1e}")
    return reading


#: Fits at the largest n that :func:`fit_check` moves towards ``f*`` (per model, at most).
FIT_CHECK_FITS = 8


def fit_check(records, model, truth, noise):
    """Where the fits of ``model`` at the study's largest ``n`` lead
    (:func:`hmoe_estim.metrics.fit_alternatives`): the record ``rates[model]["identifiability"]
    ["fit_check"]`` that explains a flat parameter curve, or ``None`` without such fits.

    The fits that are not certified optimisation failures (their objective is not above the
    truth's), at most :data:`FIT_CHECK_FITS` in replication order, each moved to the nearest
    local minimiser of ``‖f − f*‖``.
    """
    from ..kernels import single_thread_blas
    from ..metrics import fit_alternatives
    from ..model import MixingMeasure

    recs = [r for r in records if r.get("model") == model and r.get("measure")]
    if not recs:
        return None
    n_max = max(r["n"] for r in recs)
    recs = sorted((r for r in recs if r["n"] == n_max and not r.get("worse_than_truth")),
                  key=lambda r: r.get("rep", 0))[:FIT_CHECK_FITS]
    if not recs:
        return None
    fits = [MixingMeasure.from_dict(r["measure"]) for r in recs]
    first = recs[0]
    with single_thread_blas():
        res = fit_alternatives(truth, fits, gate=first["gate"], activation=first["activation"])
    out = {k: res[k] for k in ("fits", "to_truth", "to_alternative", "to_exact")}
    out["n"] = int(n_max)
    for key in ("alternative", "exact"):
        alt = res[key]
        out[key] = None if alt is None else {
            "rms_gap": alt.rms_gap, "voronoi_loss": alt.voronoi_loss, "n_params": alt.n_params,
            "n_to_resolve": alt.samples_to_resolve(noise) if noise > 0 else None,
            "measure": alt.measure.to_dict()}
    return out


def _flat_reading(check):
    """What the fit check says about a flat parameter curve (appended to its reading)."""
    n, m = check["n"], check["fits"]
    if check["to_exact"]:
        ex = check["exact"]
        return (f"; flat: {check['to_exact']} of {m} fits at n = {n} lead to an exact "
                f"alternative of G* (same function, Voronoi loss {ex['voronoi_loss']:.2g}): not "
                "identifiable at this truth")
    if check["to_alternative"]:
        alt = check["alternative"]
        when = "" if alt["n_to_resolve"] is None else \
            f", resolved from n ~ {alt['n_to_resolve']:.1e}"
        return (f"; flat: {check['to_alternative']} of {m} fits at n = {n} lead to a "
                f"near-alternative (rms gap {alt['rms_gap']:.1e}, Voronoi loss "
                f"{alt['voronoi_loss']:.2g}{when}), {check['to_truth']} back to G*")
    which = f"the fit at n = {n} leads" if m == 1 else f"the {m} fits at n = {n} all lead"
    return f"; flat: {which} back to G* (its basin): a slow rate, not an alternative"


def annotate_rates(rates, config, truth=None, verdicts=None, records=None):
    """Add the identifiability verdict to a study's rates (``rates.json``), in place.

    Each model gets ``rates[model]["identifiability"]`` (:func:`study_verdicts`), and each
    parameter metric (Voronoi loss and its parts, extra weight, expert error; the
    measure-level ones under the measure-level verdict) a ``"reading"``:
    ``"rate"`` for an identifiable model, ``"not a rate: not identifiable (<obstructions>)"``
    or ``"rate if identifiable (identifiability unknown)"``, followed by
    ``"; pre-asymptotic: near-alternative ..."`` when a
    :class:`~hmoe_estim.metrics.NearAlternative` needs more samples than the grid's largest
    ``n`` (``P σ² / rms_gap²`` with the study's noise σ). The regression error is a rate for
    every model (Proposition 1).

    With the study's ``records``, a per-entry model that is not known to be non-identifiable
    and has a parameter metric whose slope interval does not lie below 0 (a flat curve) gets
    a fit check (where its fits at the largest ``n`` lead,
    :func:`hmoe_estim.metrics.fit_alternatives`), stored as
    ``identifiability["fit_check"]``, and the flat metrics' readings say what it found: an
    exact alternative (not identifiable at this truth), a near-alternative (pre-asymptotic),
    or the basin of ``G*`` (a slow rate).

    A study that cannot be assessed (``K < K*``, which a study config allows) gets the verdict
    ``"unknown"`` with the reason, instead of an error. ``verdicts``: the output of
    :func:`study_verdicts` for this config, when the caller has it already.

    Returns
    -------
    dict
        ``rates``.
    """
    try:
        if verdicts is None:
            verdicts = study_verdicts(config, truth)
    except ValueError as exc:
        verdicts = {m.name: _not_assessed(str(exc)) for m in config.models}
    parameter_metrics, baseline_metrics = PARAMETER_METRICS, ()
    if config.kind == "layer":
        from ._layer_fit import BASELINE_PARAMETER_METRICS, LAYER_PARAMETER_METRICS

        parameter_metrics, baseline_metrics = LAYER_PARAMETER_METRICS, BASELINE_PARAMETER_METRICS
    n_max = max(config.grid.n)
    for model, per in rates.items():
        rec = verdicts.get(model)
        if rec is None:
            continue
        flat = [m for m in parameter_metrics
                if "slope" in per.get(m, {}) and not per[m].get("decreasing", True)]
        if (records is not None and flat and config.kind != "layer"
                and rec.get("verdict") != "not identifiable"):
            if truth is None:
                truth = true_measure(config)
            try:
                check = fit_check(records, model, truth, config.data.noise)
            except ValueError:  # fits that cannot hold G* (K < K*): nothing to move
                check = None
            if check is not None:
                rec = {**rec, "fit_check": check}
        per["identifiability"] = rec
        slow = [a for a in rec["near_alternatives"]
                if a.get("n_to_resolve") is not None and a["n_to_resolve"] > n_max]
        for metric in parameter_metrics:
            if metric in per and "slope" in per[metric]:
                per[metric]["reading"] = _reading(rec, slow)
                if metric in flat and "fit_check" in rec:
                    per[metric]["reading"] += _flat_reading(rec["fit_check"])
        gauge = config.kind == "layer" and rec.get("verdict") != "not identifiable" \
            and config.model(model).gate not in ("value", "sdpa")
        if gauge and "slope" in per.get("entry_voronoi_loss", {}):
            per["entry_voronoi_loss"]["reading"] = (
                "not a rate: the raw entry loss is not invariant under this gate's V/O gauge "
                "(W_V B, B^-1 W_O); read VO_error")
        for key, metrics in (("measure_level", MEASURE_METRICS),
                             ("baseline_entry", baseline_metrics)):
            sub = rec.get(key)
            sub_slow = [] if sub is None else [
                a for a in sub["near_alternatives"]
                if a.get("n_to_resolve") is not None and a["n_to_resolve"] > n_max]
            for metric in metrics:
                if metric in per and "slope" in per[metric]:
                    per[metric]["reading"] = _reading(sub, sub_slow or slow) if sub else \
                        "rate if identifiable (identifiability unknown)"
    return rates
