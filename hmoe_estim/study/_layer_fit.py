"""One fit of a layer study, run in a worker: data, the layer fit, the per-entry baseline,
their metrics, one results record.

The fit draws fresh data from the true layer with
``hmoe_estim.layer.make_attention_regression``, fits
:class:`~hmoe_estim.AttentionLayerRegressor` (random multi-starts) and records against
the truth, on the fixed reference sample of token matrices: the layer's regression error, the
gauge-invariant parameter errors ``‖P̂ − P*‖`` and ``‖Ĉ − C*‖`` (``C = W_V W_O``, the record's
``VO_error``) after head matching, the layer Voronoi loss (G1 and G2, whose channels the layer
identifies), the Voronoi loss of the baseline entry's measure read off the fitted layer (raw,
and aligned to the truth's V/O gauge: an oracle, labelled ``_aligned``), and the certificate:
the fit's objective against the truth's own on the same data. On the same data the per-entry
baseline fits that one entry with :class:`~hmoe_estim.HMoERegressor` (signed weights, as
``W_O`` is) and records its Voronoi loss, expert error and regression error against the
truth's entry measure, so the study shows what sharing the parameters across entries gains.
"""

import time
import warnings

import numpy as np

from ._fit import record_head
from ._layer_plan import layer_reference_sample, layer_to_dict
from ._seeds import _child_seeds

__all__ = ["fit_layer_record", "LAYER_METRICS", "BASELINE_METRICS", "LAYER_REQUIRED_KEYS",
           "LAYER_PARAMETER_METRICS"]

#: Keys every layer record has.
LAYER_REQUIRED_KEYS = ("model", "n", "rep", "seed", "regression_error", "P_error", "VO_error",
                       "fit_seconds", "converged")
#: Gates of the layer Voronoi loss (``hmoe_estim.layer.layer_voronoi_loss``): G2 and G1,
#: whose value channels the layer identifies.
VORONOI_GATES = ("value", "sdpa")
#: Metrics of the per-entry baseline and of the layer's reading of the same entry: a record
#: has them only where the entry is an HMoE (``ENTRY_GATES``) and the baseline is enabled.
BASELINE_METRICS = ("entry_voronoi_loss", "baseline_voronoi_loss", "baseline_expert_error",
                    "baseline_regression_error")
#: Rate metrics of a layer study; ``layer_voronoi_loss`` and :data:`BASELINE_METRICS` are
#: left out of a model none of whose records has them.
LAYER_METRICS = ("regression_error", "P_error", "VO_error", "layer_voronoi_loss") \
    + BASELINE_METRICS
#: Metrics of the per-entry baseline whose slopes are parameter rates only for an identifiable
#: entry measure.
BASELINE_PARAMETER_METRICS = ("baseline_voronoi_loss", "baseline_expert_error")
#: Metrics whose slopes are parameter rates only for an identifiable layer.
LAYER_PARAMETER_METRICS = ("P_error", "VO_error", "layer_voronoi_loss", "entry_voronoi_loss")


def _certificate(objective, truth_objective, m):
    """``(gap, unit, worse)``: the fit's objective minus the truth's, the unit ``σ̂²/m`` gaps are
    read in (``σ̂²`` the truth's mean squared residual, ``m`` residuals: the unit of the
    search's own agreement test), and whether the fit ended above the truth's objective (a
    certified optimisation failure, as in entry studies)."""
    gap = float(objective) - float(truth_objective)
    unit = max(float(truth_objective), 0.0) / max(int(m), 1)
    return gap, unit, bool(gap > 0.0)


def _layer_metrics(fitted, truth, *, gate, activation, gate_form, rows, X_ref, r, entry):
    """The layer metrics of ``fitted`` against ``truth`` (``hmoe_estim.layer``'s metrics)
    on the reference token matrices ``X_ref``."""
    from ..layer import (
        entry_voronoi_loss,
        layer_parameter_errors,
        layer_regression_error,
        layer_voronoi_loss,
    )

    kw = dict(gate=gate, activation=activation, X=X_ref)
    errors = layer_parameter_errors(fitted, truth)
    out = {
        "regression_error": layer_regression_error(fitted, truth, gate_form=gate_form, rows=rows,
                                                   **kw),
        "P_error": errors.P_error,
        "VO_error": errors.VO_error,
        "P_relative_error": errors.P_relative_error,
        "VO_relative_error": errors.VO_relative_error,
        "head_matching": errors.heads.tolist(),
    }
    if gate in VORONOI_GATES and gate_form == "activation":
        out["layer_voronoi_loss"] = layer_voronoi_loss(fitted, truth, r=r, rows=rows, **kw)
    if entry is not None:
        row, column = entry
        out["entry_voronoi_loss"] = float(entry_voronoi_loss(fitted, truth, row, column, r=r,
                                                             **kw))
        if (fitted.n_heads, fitted.head_dim) == (truth.n_heads, truth.head_dim):
            out["entry_voronoi_loss_aligned"] = float(entry_voronoi_loss(
                fitted, truth, row, column, r=r, align=True, **kw))
    return out


def _timed_fit(est, X, Y):
    """``est.fit(X, Y)`` without its convergence and box warnings (the record keeps
    ``converged``); the seconds it took."""
    from sklearn.exceptions import ConvergenceWarning

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        est.fit(X, Y)
    return time.perf_counter() - t0


def _baseline(config, truth, model, X, Y, seed, X_ref, r):
    """Fit the per-entry HMoE on the baseline entry of ``(X, Y)``; its record fields."""
    from ..estimators import HMoERegressor
    from ..metrics import expert_error, regression_error, voronoi_loss
    from ..model import regression_function

    b, n, N = config.baseline, X.shape[0], config.data.n_tokens
    row, column = config.baseline_row, b.column
    y = Y[:, column] if Y.ndim == 2 else Y[:, row, column]
    Xf = X.reshape(n, -1)
    G_true = truth.entry_measure(row, column, n_tokens=N)
    est = HMoERegressor(
        n_heads=config.truth.n_heads, n_tokens=N, n_experts=b.n_experts, gate=model.gate,
        activation=model.activation, solver=b.solver, n_starts=b.n_starts,
        max_iter=b.max_iter, positive_weights=False, fit_intercept=config.fit.fit_intercept,
        n_jobs=1, random_state=seed)
    seconds = _timed_fit(est, Xf, y)
    truth_objective = float(np.mean(
        (regression_function(G_true, Xf, gate=model.gate, activation=model.activation) - y) ** 2))
    gap, margin, worse = _certificate(est.objective_, truth_objective, n)
    G = est.measure_
    kw = dict(gate=model.gate, activation=model.activation, X_ref=X_ref.reshape(len(X_ref), -1))
    return {
        "baseline_entry": [int(row), int(column)],
        "baseline_K": int(b.n_experts),
        "baseline_K_true": int(config.truth.head_dim),
        "baseline_voronoi_loss": float(voronoi_loss(G, G_true, r=r, **kw)),
        "baseline_expert_error": float(expert_error(G, G_true, weighting="heaviest", **kw)),
        "baseline_regression_error": float(regression_error(G, G_true, **kw)),
        "baseline_objective": float(est.objective_),
        "baseline_truth_objective": truth_objective,
        "baseline_objective_gap": gap,
        "baseline_worse_than_truth": worse,
        "baseline_converged": bool(est.converged_),
        "baseline_n_rounds_agreeing": int(est.n_rounds_agreeing_),
        "baseline_fit_seconds": seconds,
        "baseline_measure": G.to_dict(),
    }


def fit_layer_record(config, truth, model, n, rep, seed):
    """Run one fit of a layer study (the layer and, where it exists, the per-entry baseline
    on the same data) and return its record.

    Parameters
    ----------
    config : LayerStudyConfig
    truth : AttentionLayer
    model : ModelSpec
    n, rep, seed : int

    Returns
    -------
    dict
        The record written to ``results.jsonl`` (see :doc:`/user_guide/studies`, "Layer
        studies").
    """
    from ..layer import AttentionLayerRegressor, attention_layer_output, make_attention_regression

    t, f, data = config.truth, config.fit, config.data
    gate_form = t.gate_form
    data_seed, est_seed, base_seed = _child_seeds(seed)
    X, Y = make_attention_regression(
        n, truth, n_tokens=data.n_tokens, gate=model.gate, activation=model.activation,
        gate_form=gate_form, noise=data.noise, rows=data.rows, tokens=data.tokens,
        random_state=data_seed)
    est = AttentionLayerRegressor(
        n_heads=t.n_heads, head_dim=f.head_dim, gate=model.gate, activation=model.activation,
        gate_form=gate_form, granularity=t.granularity, qk=f.qk, rows=data.rows,
        fit_intercept=f.fit_intercept, varpro=f.varpro,
        n_starts=None if f.n_starts == "auto" else f.n_starts,
        max_iter=f.max_iter, random_state=est_seed)
    fit_seconds = _timed_fit(est, X, Y)

    t1 = time.perf_counter()
    truth_pred = attention_layer_output(X, truth, gate=model.gate, activation=model.activation,
                                        gate_form=gate_form, rows=data.rows)
    truth_objective = float(np.mean((truth_pred - Y) ** 2))
    gap, margin, worse = _certificate(est.objective_, truth_objective, Y.size)
    X_ref = layer_reference_sample(config)
    r = config.metrics.r or None
    entry = (config.baseline_row, config.baseline.column) if config.has_baseline(model) \
        else None
    record = {
        **record_head(model, n, rep, seed, data_seed, est_seed, "random"),
        "K": int(f.head_dim),
        "K_true": int(t.head_dim),
        **_layer_metrics(est.layer_, truth, gate=model.gate, activation=model.activation,
                         gate_form=gate_form, rows=data.rows, X_ref=X_ref, r=r, entry=entry),
        "fit_seconds": fit_seconds,
        "converged": bool(est.converged_),
        "search_rounds": int(est.search_rounds_),
        "n_rounds_agreeing": int(est.n_rounds_agreeing_),
        "search_stop": est.search_stop_,
        "objective": float(est.objective_),
        "start_objectives": [float(v) for v in est.start_objectives_],
        "n_starts_agreeing": int(est.n_starts_agreeing_),
        "n_iter": int(est.n_iter_),
        "truth_objective": truth_objective,
        "objective_gap": gap,
        "certificate_margin": margin,
        "worse_than_truth": bool(worse and f.head_dim >= t.head_dim),
        "layer": layer_to_dict(est.layer_),
    }
    record["metric_seconds"] = time.perf_counter() - t1
    if entry is not None:
        record.update(_baseline(config, truth, model, X, Y, base_seed, X_ref, r))
    return record
