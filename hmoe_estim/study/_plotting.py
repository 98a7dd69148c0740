"""Learning curves of a study: log–log plots of each metric against ``n``.

The figure of the experiment template (docs: Theory to code, "The experiment template").

One panel per metric, all models together. For each model and ``n``: the replications as faint
dots, their mean as a marker, a bar from the 16th to the 84th percentile of the replications
(the "±1σ" spread, always positive on log axes), and the fitted power law ``c·n^b`` as a dashed
line whose legend entry gives ``b`` and its bootstrap interval.

matplotlib is an optional dependency (``pip install 'hmoe-estim[plot]'``); the Agg backend is
used, so no display is needed.
"""

import math
import textwrap

import numpy as np

from ._rates import RATE_METRICS

__all__ = ["plot_learning_curves", "PLOT_METRICS", "METRIC_TITLES", "PlottingError"]

#: Panels of the learning-curve figure, in order: the metrics whose rates a study fits.
PLOT_METRICS = RATE_METRICS
METRIC_TITLES = {
    "voronoi_loss": "Voronoi loss $L_2$",
    "voronoi_exact": "$L_2$: exactly-specified cells",
    "voronoi_over": "$L_2$: over-specified cells",
    "extra_weight": "weight of extra atoms",
    "expert_error": "expert error (heaviest atom)",
    "expert_error_weighted": "expert error (weighted)",
    "expert_error_max": "expert error (worst atom)",
    "regression_error": "regression error $\\|f_{\\hat G}-f_{G^*}\\|_{L^2}$",
    "voronoi_weight": "$L_2$: weight part",
    "voronoi_loss_measure": "Voronoi loss $L_2$, measure level",
    "expert_error_measure": "expert error, measure level",
}


class PlottingError(RuntimeError):
    """matplotlib is missing or the data cannot be plotted."""


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlottingError(
            "plots need matplotlib: pip install 'hmoe-estim[plot]' (or pip install matplotlib). "
            "The results and rates.json are written without it."
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_learning_curves(records, path, *, rates=None, metrics=PLOT_METRICS, labels=None,
                         title=None, dpi=120):
    """Draw the learning curves of ``records`` and save them as a PNG.

    Parameters
    ----------
    records : list of dict
        Study records (``model``, ``n`` and the metrics).
    path : str
        Output file (PNG).
    rates : dict or None
        :func:`hmoe_estim.study.rates_from_records` output; the power laws are drawn from it
        (models or metrics missing from it are drawn without a fitted line).
    metrics : sequence of str, default=PLOT_METRICS
        One panel each; metrics absent from every record are skipped.
    labels : dict or None
        Model name -> legend label (default: the name).
    title : str or None
        Figure title.
    dpi : int, default=120

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    PlottingError
        matplotlib missing, or no record has a positive value of any requested metric.
    """
    plt = _pyplot()
    models = list(dict.fromkeys(r["model"] for r in records))
    metrics = [m for m in metrics if any(r.get(m) is not None for r in records)]
    if not metrics or not models:
        raise PlottingError("nothing to plot: no finished fits with metrics.")
    ncols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.0 * nrows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes.ravel(), metrics):
        for j, model in enumerate(models):
            color = colors[j % len(colors)]
            pts = [(r["n"], r[metric]) for r in records
                   if r["model"] == model and r.get(metric) is not None and r[metric] > 0]
            if not pts:
                continue
            n = np.array([p[0] for p in pts], dtype=float)
            v = np.array([p[1] for p in pts], dtype=float)
            grid = np.unique(n)
            mean = np.array([v[n == g].mean() for g in grid])
            lo = np.array([np.percentile(v[n == g], 16) for g in grid])
            hi = np.array([np.percentile(v[n == g], 84) for g in grid])
            jitter = np.exp(0.03 * (j - (len(models) - 1) / 2))
            ax.scatter(n * jitter, v, s=6, color=color, alpha=0.25, linewidths=0)
            name = labels.get(model, model) if labels else model
            fit = (rates or {}).get(model, {}).get(metric)
            if fit and "slope" in fit:
                lo_b, hi_b = fit["slope_ci"]
                name = f"{name}: b = {fit['slope']:+.2f} [{lo_b:+.2f}, {hi_b:+.2f}]"
                if fit.get("reading", "rate") != "rate":  # identifiability verdict
                    name += "".join("\n  " + ln for ln in textwrap.wrap(fit["reading"], 56))
                ng = np.geomspace(grid.min(), grid.max(), 50)
                ax.plot(ng, fit["c"] * ng ** fit["slope"], "--", color=color, lw=1.2)
            ax.errorbar(grid * jitter, mean, yerr=[mean - np.minimum(lo, mean),
                                                   np.maximum(hi, mean) - mean],
                        fmt="o-", color=color, ms=4, lw=1.0, capsize=2, label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sample size n")
        ax.set_title(METRIC_TITLES.get(metric, metric), fontsize=10)
        ax.grid(True, which="both", alpha=0.25)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "no positive values", transform=ax.transAxes, ha="center",
                    va="center", color="gray")
    for ax in axes.ravel()[len(metrics):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
