"""One fit of a study, run in a worker: data, estimator, metrics, one results record.

The fit draws fresh data from ``G*`` with :func:`~hmoe_estim.datasets.make_hmoe_regression`,
fits :class:`~hmoe_estim.HMoERegressor` (random multi-starts by default; near-truth starts
only with ``fit.init = "near-truth"``, an oracle recorded as such; optionally a start split
from a ``K-1`` fit) and records the metrics of the theory against ``G*`` on the fixed
reference sample (see :doc:`/theory`): the Voronoi loss with its parts and the extra atoms'
weights, the expert error (three weightings), the regression error, and the certificate
``worse_than_truth`` (the fit's objective above the truth's own on the same data). Where the
measure determines ``f`` (the value gate G2), the Voronoi loss and the expert error are also
read at the measure level (``*_measure``; :doc:`/user_guide/metrics`, "Channel and measure
readings").
"""

import socket
import time
import traceback
import warnings

import numpy as np

from ._plan import near_truth_starts, reference_sample_for, true_measure
from ._rates import MEASURE_METRICS
from ._seeds import _child_seeds

__all__ = ["run_fit", "measure_level_metrics", "with_measure_level"]



def measure_level_metrics(G, truth, *, gate, activation, X_ref, r):
    """The measure-level Voronoi loss and expert error of the fitted ``G`` (the record fields
    ``MEASURE_METRICS`` of ``study/_rates.py``, as :func:`~hmoe_estim.fit_metrics` gives them);
    ``{}`` for a gate whose ``f`` the measure does not determine."""
    from ..metrics import MEASURE_GATES, fit_metrics

    if gate not in MEASURE_GATES:
        return {}
    metrics = fit_metrics(G, truth, gate=gate, activation=activation, X_ref=X_ref, r=r)
    return {name: metrics[name] for name in MEASURE_METRICS}


def with_measure_level(config, records):
    """``records`` with the measure-level fields of the gates that have them, recomputed from
    each record's stored measure where a record was written before they existed (no refit;
    the records themselves are not changed: such a record is replaced by a copy)."""
    from ..metrics import MEASURE_GATES
    from ..model import MixingMeasure

    if config.kind != "entry":
        return records

    def stale(rec):
        return (rec.get("gate") in MEASURE_GATES and rec.get("measure") is not None
                and any(f not in rec for f in MEASURE_METRICS))

    if not any(stale(rec) for rec in records):
        return records
    truth, X_ref, r = true_measure(config), reference_sample_for(config), config.metrics.r or None
    return [
        {**rec, **measure_level_metrics(MixingMeasure.from_dict(rec["measure"]), truth,
                                        gate=rec["gate"], activation=rec["activation"],
                                        X_ref=X_ref, r=r)} if stale(rec) else rec
        for rec in records
    ]


def record_head(model, n, rep, seed, data_seed, fit_seed, init):
    """The first fields of a study record: the model, the fit's place on the grid, its seeds
    and its start strategy (``oracle`` for near-truth starts)."""
    return {
        "model": model.name,
        "gate": model.gate,
        "activation": model.activation,
        "n": int(n),
        "rep": int(rep),
        "seed": int(seed),
        "data_seed": data_seed,
        "fit_seed": fit_seed,
        "init": init,
        "oracle": init == "near-truth",
    }


def _fit_one(config, truth, model, n, rep, seed):
    from sklearn.exceptions import ConvergenceWarning

    from ..datasets import make_hmoe_regression
    from ..estimators import HMoERegressor
    from ..metrics import fit_metrics
    from ..model import regression_function, split_heaviest_channel

    fit = config.fit
    data_seed, est_seed, split_seed = _child_seeds(seed)
    X, y = make_hmoe_regression(
        n, measure=truth, gate=model.gate, activation=model.activation,
        noise=config.data.noise, box=config.data.box, random_state=data_seed,
    )
    H, N, K, D = config.fitted_shape
    params = dict(
        n_heads=H, n_tokens=N, gate=model.gate, activation=model.activation,
        solver=fit.solver, n_starts=fit.n_starts, max_iter=fit.max_iter, tol=fit.tol,
        param_bound=fit.param_bound, omega_max=fit.omega_max, n_jobs=1,
    )
    init = []
    if fit.init == "near-truth":
        init = near_truth_starts(
            truth, K, fit.n_starts, fit.near_truth_noise, np.random.default_rng(est_seed),
            param_bound=fit.param_bound, omega_max=fit.omega_max,
        )
    t0 = time.perf_counter()
    split_objective = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        if fit.split_init:
            small = HMoERegressor(n_experts=K - 1, random_state=split_seed, **params).fit(X, y)
            split_objective = small.objective_
            init = [split_heaviest_channel(small.measure_, random_state=split_seed)] + init
        est = HMoERegressor(
            n_experts=K, init=init if init else "random", random_state=est_seed, **params
        ).fit(X, y)
    fit_seconds = time.perf_counter() - t0

    t1 = time.perf_counter()
    # objective of G* itself on the same data: with K >= K* the truth lies in the fitted class,
    # so a fit whose objective is above it certainly missed the least-squares optimum
    truth_objective = float(np.mean(
        (regression_function(truth, X, gate=model.gate, activation=model.activation) - y) ** 2))
    X_ref = reference_sample_for(config)
    r = config.metrics.r or None
    G = est.measure_
    record = {
        **record_head(model, n, rep, seed, data_seed, est_seed, fit.init),
        "split_init": bool(fit.split_init),
        "K": int(K),
        "K_true": int(truth.n_experts),
        **fit_metrics(G, truth, gate=model.gate, activation=model.activation, X_ref=X_ref, r=r),
        "fit_seconds": fit_seconds,
        "converged": bool(est.converged_),
        "search_rounds": int(est.search_rounds_),
        "n_rounds_agreeing": int(est.n_rounds_agreeing_),
        "objective": float(est.objective_),
        "start_objectives": [float(v) for v in est.start_objectives_],
        "n_starts_agreeing": int(est.n_starts_agreeing_),
        "n_iter": int(est.n_iter_),
        "start_n_iter": [int(v) for v in est.start_n_iter_],
        "split_objective": split_objective,
        "truth_objective": truth_objective,
        "objective_gap": float(est.objective_) - truth_objective,
        "worse_than_truth": bool(est.objective_ > truth_objective and K >= truth.n_experts),
        "measure": G.to_dict(),
    }
    record["metric_seconds"] = time.perf_counter() - t1
    return record


def run_fit(config, truth, model_name, n, rep, seed, numba_threads=None):
    """Run one fit; never raises.

    Parameters
    ----------
    config : StudyConfig or LayerStudyConfig
    truth : MixingMeasure or AttentionLayer
        The study's truth (an ``AttentionLayer`` in a layer study).
    model_name : str
    n, rep, seed : int
    numba_threads : int or None
        Set Numba's thread count in this worker (1 when fits already run in parallel).

    Returns
    -------
    dict
        ``{"ok": True, "record": {...}}`` or ``{"ok": False, "key": (model, n, rep),
        "error": message, "traceback": text}``.
    """
    try:
        if numba_threads is not None:
            from ..kernels import set_numba_threads

            set_numba_threads(numba_threads)
        model = config.model(model_name)
        if config.kind == "layer":
            from ._layer_fit import fit_layer_record

            rec = fit_layer_record(config, truth, model, n, rep, seed)
        else:
            rec = _fit_one(config, truth, model, n, rep, seed)
        rec["host"] = socket.gethostname()
        return {"ok": True, "record": rec}
    except Exception as exc:  # reported by the parent, never lost silently
        return {
            "ok": False,
            "key": (model_name, int(n), int(rep)),
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
