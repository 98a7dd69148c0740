"""Empirical convergence rates of a sample-complexity study (docs: Theory to code, "The
predicted rates").

For one model and one metric, a study gives values ``loss[n, rep]`` on a grid of sample sizes.
This module fits the two laws the theory distinguishes,

- the **power law** ``loss ≈ c · n^b``, by ordinary least squares of ``log m(n)`` on ``log n``,
- the **logarithmic law** ``loss ≈ c / log(n)^λ``, by least squares of ``log m(n)`` on
  ``log log n`` (slope ``−λ``),

where ``m(n)`` is the per-``n`` average (mean by default) over replications. Confidence
intervals for ``b`` and ``λ`` come from a bootstrap over replications: the replications inside
each ``n`` are resampled with replacement, the averages recomputed and the laws refitted
(percentile interval). The better law is the one with the smaller residual sum of squares of
``log m(n)``; both laws have two parameters, so the comparison needs no penalty. On a grid
``1e3..1e5``, ``log log n`` is nearly linear in ``log n`` and the two laws are hard to tell
apart from the shape alone — read ``better_law`` together with the slope's interval.

Finally each fitted law is inverted to predict the sample size for a target accuracy ``ε``:
``n = (ε / c)^(1/b)`` for the power law and ``n = exp((c / ε)^(1/λ))`` for the logarithmic law
(paper, Table 1: ``ε^{-4}``-type versus ``exp(ε^{-1/λ})``). Those numbers overflow quickly, so
they are reported as ``log10`` as well.
"""

import math

import numpy as np

__all__ = [
    "fit_power_law",
    "fit_log_law",
    "fit_rates",
    "rates_from_records",
    "format_rates_table",
    "RATE_METRICS",
    "CRITERION",
    "MODEL_KEYS",
]

#: Entries of a model in ``rates.json`` that describe the model's fits, not a metric's rate.
MODEL_KEYS = ("certificate", "identifiability")

#: The measure-level metrics: only fits of a gate with that reading record them.
MEASURE_METRICS = ("voronoi_loss_measure", "expert_error_measure")

#: Metrics of a study record for which rates are fitted by default.
RATE_METRICS = (
    "voronoi_loss", "voronoi_exact", "voronoi_over", "extra_weight", "expert_error",
    "regression_error",
) + MEASURE_METRICS

#: The stated criterion for ``better_law``.
CRITERION = (
    "smaller residual sum of squares of log(average loss) over the n grid; "
    "both laws have two parameters"
)


def _ols(x, y):
    """Intercept, slope and residual sum of squares of the least-squares line ``y ≈ α + β x``."""
    xm = x.mean()
    ym = y.mean()
    sxx = np.sum((x - xm) ** 2)
    beta = np.sum((x - xm) * (y - ym)) / sxx
    alpha = ym - beta * xm
    rss = float(np.sum((y - alpha - beta * x) ** 2))
    return float(alpha), float(beta), rss


def _ols_slopes(x, Y):
    """Slopes of ``Y[b] ≈ α_b + β_b x`` for every row of ``Y`` (shape (B, J))."""
    xc = x - x.mean()
    return (Y - Y.mean(axis=1, keepdims=True)) @ xc / np.sum(xc**2)


def _check_grid(n, values):
    n = np.asarray(n, dtype=np.float64).ravel()
    values = np.asarray(values, dtype=np.float64).ravel()
    if n.shape != values.shape:
        raise ValueError(
            f"n and values must have the same length; got {n.shape[0]} and {values.shape[0]}."
        )
    if not np.all(np.isfinite(values)):
        raise ValueError("values contain NaN or infinite entries; drop the failed fits first.")
    if np.any(n < 3):
        raise ValueError(
            "every n must be >= 3 (the logarithmic law uses log log n, which needs log n > 1)."
        )
    grid = np.unique(n)
    if grid.size < 2:
        raise ValueError(
            f"a rate needs at least two distinct sample sizes; got {grid.size}. "
            "Add points to the n grid."
        )
    return n, values, grid


def _averages(n, values, grid, average):
    if average == "mean":
        avg = np.array([values[n == g].mean() for g in grid])
    elif average == "median":
        avg = np.array([np.median(values[n == g]) for g in grid])
    else:
        raise ValueError(f"average must be 'mean' or 'median'; got {average!r}.")
    return avg


def fit_power_law(n, loss):
    """Fit ``loss ≈ c · n^b`` by least squares on log–log axes.

    Parameters
    ----------
    n : array-like of shape (J,)
        Sample sizes (> 0).
    loss : array-like of shape (J,)
        Positive losses, one per ``n`` (typically per-``n`` averages).

    Returns
    -------
    dict
        ``slope`` (``b``), ``c``, ``log_c`` (natural log) and ``rss`` (residual sum of squares of
        ``log loss``).

    Raises
    ------
    ValueError
        Non-positive losses, or fewer than two distinct ``n``.
    """
    n = np.asarray(n, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    if np.any(loss <= 0) or np.any(n <= 0):
        raise ValueError("the power law is fitted on log axes: n and loss must be > 0.")
    if np.unique(n).size < 2:
        raise ValueError("the power law needs at least two distinct n.")
    alpha, beta, rss = _ols(np.log(n), np.log(loss))
    return {"slope": beta, "c": math.exp(alpha), "log_c": alpha, "rss": rss}


def fit_log_law(n, loss):
    """Fit ``loss ≈ c / log(n)^λ``, i.e. ``log loss = log c − λ log log n``, by least squares.

    Parameters
    ----------
    n : array-like of shape (J,)
        Sample sizes (> e, so that ``log log n`` is defined and ``log n > 1``).
    loss : array-like of shape (J,)
        Positive losses, one per ``n``.

    Returns
    -------
    dict
        ``log_lambda`` (``λ``), ``c``, ``log_c`` and ``rss`` (on ``log loss``).

    Raises
    ------
    ValueError
        Non-positive losses, ``n <= e``, or fewer than two distinct ``n``.
    """
    n = np.asarray(n, dtype=np.float64)
    loss = np.asarray(loss, dtype=np.float64)
    if np.any(loss <= 0):
        raise ValueError("the logarithmic law is fitted on log axes: loss must be > 0.")
    if np.any(n <= math.e):
        raise ValueError("the logarithmic law needs n > e (log log n must be defined).")
    if np.unique(n).size < 2:
        raise ValueError("the logarithmic law needs at least two distinct n.")
    alpha, beta, rss = _ols(np.log(np.log(n)), np.log(loss))
    return {"log_lambda": -beta, "c": math.exp(alpha), "log_c": alpha, "rss": rss}


def _log10_n_power(log_c, b, eps):
    """``log10`` of ``n`` solving ``c n^b = ε``; None if the law never reaches ``ε``."""
    if b >= 0:
        return None
    return (math.log(eps) - log_c) / b / math.log(10)


def _log10_n_log(log_c, lam, eps):
    """``log10`` of ``n`` solving ``c / log(n)^λ = ε``; None if the law never reaches ``ε``."""
    if lam <= 0:
        return None
    # log n = (c/ε)^(1/λ)  ->  log10 n = (c/ε)^(1/λ) / ln 10
    expo = (log_c - math.log(eps)) / lam
    if expo > 700:
        return math.inf
    return math.exp(expo) / math.log(10)


def _finite_or_none(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def fit_rates(n, values, *, eps=None, n_boot=2000, ci=0.95, average="mean", random_state=0):
    """Power and logarithmic laws of one metric, with bootstrap intervals over replications.

    Parameters
    ----------
    n : array-like of shape (n_fits,)
        Sample size of each fit (every value >= 3; at least two distinct values).
    values : array-like of shape (n_fits,)
        The metric of each fit (finite; the averages must be > 0).
    eps : float or None, default=None
        Target accuracy for the predicted sample sizes. None: half the smallest average.
    n_boot : int, default=2000
        Bootstrap resamples (replications resampled with replacement inside each ``n``).
    ci : float, default=0.95
        Level of the percentile intervals.
    average : {"mean", "median"}, default="mean"
        How replications are averaged at each ``n`` before fitting on log axes.
    random_state : int, default=0
        Seed of the bootstrap.

    Returns
    -------
    dict
        ``slope``, ``slope_ci`` ``[lo, hi]``, ``c``, ``log_lambda``, ``log_lambda_ci``,
        ``log_c_log_law``, ``rss_power``, ``rss_log``, ``better_law`` (``"power"`` or ``"log"``;
        None with only two sample sizes, where both laws fit exactly), ``criterion``,
        ``decreasing`` (the slope's whole interval is below 0), ``eps``, ``n_for_eps``
        ``{"power": n or None, "log": n or None}`` and ``log10_n_for_eps`` (same, as log10;
        None when the fitted law never reaches ``eps``), ``n`` (grid), ``average`` (per ``n``),
        ``n_reps`` (per ``n``), ``ci``, ``n_boot``, ``averaging``.

    Raises
    ------
    ValueError
        Mismatched lengths, non-finite values, ``n < 3``, fewer than two sample sizes,
        non-positive averages, or bad ``ci`` / ``n_boot`` / ``eps``.
    """
    n, values, grid = _check_grid(n, values)
    if not 0 < ci < 1:
        raise ValueError(f"ci must be in (0, 1); got {ci}.")
    if int(n_boot) < 1:
        raise ValueError(f"n_boot must be >= 1; got {n_boot}.")
    avg = _averages(n, values, grid, average)
    if np.any(avg <= 0):
        raise ValueError(
            "an average loss is <= 0; rates are fitted on log axes and need positive values."
        )
    power = fit_power_law(grid, avg)
    loglaw = fit_log_law(grid, avg)

    # Bootstrap over replications within each n.
    rng = np.random.default_rng(random_state)
    B = int(n_boot)
    boot = np.empty((B, grid.size))
    for j, g in enumerate(grid):
        v = values[n == g]
        idx = rng.integers(0, v.size, size=(B, v.size))
        sample = v[idx]
        boot[:, j] = sample.mean(axis=1) if average == "mean" else np.median(sample, axis=1)
    ok = np.all(boot > 0, axis=1)
    logb = np.log(boot[ok])
    slopes = _ols_slopes(np.log(grid), logb)
    lambdas = -_ols_slopes(np.log(np.log(grid)), logb)
    q = [(1 - ci) / 2, (1 + ci) / 2]
    slope_ci = np.quantile(slopes, q).tolist() if slopes.size else [math.nan, math.nan]
    lam_ci = np.quantile(lambdas, q).tolist() if lambdas.size else [math.nan, math.nan]

    if eps is None:
        eps = float(avg.min()) / 2
    eps = float(eps)
    if not eps > 0:
        raise ValueError(f"eps must be > 0; got {eps}.")
    l10_pow = _log10_n_power(power["log_c"], power["slope"], eps)
    l10_log = _log10_n_log(loglaw["log_c"], loglaw["log_lambda"], eps)

    def n_of(l10):
        if l10 is None or not math.isfinite(l10) or l10 > 300:
            return None
        return 10.0**l10

    if grid.size >= 3:
        better = "power" if power["rss"] <= loglaw["rss"] else "log"
    else:
        better = None
    return {
        "slope": power["slope"],
        "slope_ci": [float(x) for x in slope_ci],
        "c": power["c"],
        "log_lambda": loglaw["log_lambda"],
        "log_lambda_ci": [float(x) for x in lam_ci],
        "c_log_law": loglaw["c"],
        "rss_power": power["rss"],
        "rss_log": loglaw["rss"],
        "better_law": better,
        "criterion": CRITERION,
        "decreasing": bool(slope_ci[1] < 0),
        "eps": eps,
        "n_for_eps": {"power": n_of(l10_pow), "log": n_of(l10_log)},
        "log10_n_for_eps": {"power": _finite_or_none(l10_pow), "log": _finite_or_none(l10_log)},
        "n": [int(g) if float(g).is_integer() else float(g) for g in grid],
        "average": avg.tolist(),
        "n_reps": [int(np.sum(n == g)) for g in grid],
        "averaging": average,
        "ci": ci,
        "n_boot": B,
    }


def rates_from_records(records, *, metrics=RATE_METRICS, eps=None, n_boot=2000, ci=0.95,
                       average="mean", random_state=0, optional=MEASURE_METRICS):
    """Rates of every model and metric of a study's records.

    Parameters
    ----------
    records : iterable of dict
        Study results (``results.jsonl`` lines): each has ``model``, ``n`` and the metrics.
        Records whose metric is missing, None or not finite are skipped (and counted); an
        ``optional`` metric that none of a model's records has (by default the measure-level
        ``voronoi_loss_measure`` and ``expert_error_measure``, for a gate without that
        reading) is left out of that model. The
        bootstrap depends on the order of the replications inside each ``n``: pass the records
        in a canonical order (:func:`hmoe_estim.study.sort_records`) for results that do not
        depend on the order in which fits finished.
    metrics : sequence of str, default=RATE_METRICS
    eps : float, dict or None, default=None
        Target accuracy; a dict maps metric -> ε. None: half the smallest average.
    n_boot, ci, average, random_state
        As in :func:`fit_rates`.
    optional : sequence of str, default=MEASURE_METRICS
        Metrics that only some models record (a layer study's: its config's
        ``optional_metrics``).

    Returns
    -------
    dict
        ``{model: {metric: fit_rates(...) or {"error": message}}}``, models in first-seen order.
        A metric that cannot be fitted (e.g. a single sample size) carries an ``"error"`` string.
    """
    by_model = {}
    for rec in records:
        by_model.setdefault(rec["model"], []).append(rec)
    out = {}
    for model, recs in by_model.items():
        out[model] = {}
        for metric in metrics:
            if metric in optional and not any(metric in r for r in recs):
                continue
            pairs = [
                (r["n"], r[metric])
                for r in recs
                if r.get(metric) is not None and math.isfinite(float(r[metric]))
            ]
            skipped = len(recs) - len(pairs)
            target = eps.get(metric) if isinstance(eps, dict) else eps
            try:
                if not pairs:
                    raise ValueError(f"no finite values of {metric!r}.")
                nn, vv = zip(*pairs)
                res = fit_rates(nn, vv, eps=target, n_boot=n_boot, ci=ci, average=average,
                                random_state=random_state)
            except ValueError as exc:
                res = {"error": str(exc)}
            res["skipped"] = skipped
            out[model][metric] = res
    return out


def _fmt(x, spec=".3f"):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def format_rates_table(rates, *, labels=None):
    """Render :func:`rates_from_records` output as a plain-text table.

    Columns: model, metric, slope ``b`` with its interval, ``λ`` of the log law with its
    interval, the better law, and ``log10 n`` needed for ``ε`` under each law.
    """
    w = max([20] + [len(m) for per in rates.values() for m in per if m not in MODEL_KEYS])
    head = (
        f"{'model':<12} {'metric':<{w}} {'slope b':>8} {'95% CI of b':>18} "
        f"{'lambda':>7} {'CI of lambda':>17} {'better':>6} {'eps':>9} "
        f"{'log10 n(eps) pow/log':>21}"
    )
    lines = [head, "-" * len(head)]
    for model, per in rates.items():
        name = labels.get(model, model) if labels else model
        for metric, r in per.items():
            if metric in MODEL_KEYS:
                continue
            if "error" in r:
                lines.append(f"{name:<12} {metric:<{w}} (not fitted: {r['error']})")
                continue
            lo, hi = r["slope_ci"]
            llo, lhi = r["log_lambda_ci"]
            ln = r["log10_n_for_eps"]
            lines.append(
                f"{name:<12} {metric:<{w}} {r['slope']:>8.3f} "
                f"{'[' + _fmt(lo) + ', ' + _fmt(hi) + ']':>18} "
                f"{r['log_lambda']:>7.2f} "
                f"{'[' + _fmt(llo, '.2f') + ', ' + _fmt(lhi, '.2f') + ']':>17} "
                f"{r['better_law'] or '-':>6} {r['eps']:>9.2e} "
                f"{_fmt(ln['power'], '.1f') + ' / ' + _fmt(ln['log'], '.3g'):>21}"
                + ("" if r.get("reading", "rate") == "rate" else f"  <- {r['reading']}")
            )
        if "identifiability" in per:  # hmoe_estim.study.annotate_rates
            ident = per["identifiability"]
            lines.append(f"{name:<12} identifiability: {ident['label']}")
            if "measure_level" in ident:
                lines.append(f"{name:<12} identifiability, {ident['measure_level']['label']}")
            if "baseline_entry" in ident:  # a layer study's per-entry baseline
                lines.append(f"{name:<12} identifiability, {ident['baseline_entry']['label']}")
    return "\n".join(lines)
