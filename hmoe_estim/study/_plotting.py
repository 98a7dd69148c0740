"""Learning curves of a study: log–log plots of each metric against ``n``.

The figure of the experiment template (docs: Theory to code, "The experiment template").

One panel per metric, all models together. For each model and ``n``: the replications as faint
dots, their mean as a marker, a bar from the 16th to the 84th percentile of the replications
(the "±1σ" spread, always positive on log axes), and the fitted power law ``c·n^b`` as a dashed
line whose legend entry gives ``b`` and its bootstrap interval. A panel may hold several
metrics (a tuple of names, e.g. a layer study's loss of one entry read off the fitted layer
and that of the per-entry baseline): the first drawn as above, the others with open markers
and dotted lines, the metric named in the legend.

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
    "P_error": "$\\|\\hat P - P^*\\|$ (heads matched)",
    "VO_error": "$\\|\\hat C - C^*\\|$, $C = W_V W_O$ (heads matched)",
    "layer_voronoi_loss": "layer Voronoi loss",
    "entry_voronoi_loss": "entry Voronoi loss, read off the layer fit",
    "baseline_voronoi_loss": "entry Voronoi loss, per-entry fit",
    "baseline_expert_error": "expert error, per-entry fit",
    "baseline_regression_error": "entry regression error, per-entry fit",
}
#: Legend names of the metrics drawn second or later in a shared panel.
METRIC_SHORT = {"entry_voronoi_loss": "layer fit", "baseline_voronoi_loss": "per-entry fit"}


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


def _panel(metric):
    """A panel's metrics as a tuple (a panel is one metric name or a tuple of them)."""
    return (metric,) if isinstance(metric, str) else tuple(metric)


def _panel_title(panel):
    if len(panel) == 1:
        return METRIC_TITLES.get(panel[0], panel[0])
    return " vs ".join(METRIC_SHORT.get(m, m) for m in panel) + ": " + \
        METRIC_TITLES.get(panel[0], panel[0]).split(",")[0]


def _draw_series(ax, records, model, metric, *, color, jitter, name, fit, first):
    """One model's values of one metric on ``ax``: dots, mean ± spread, the fitted law."""
    pts = [(r["n"], r[metric]) for r in records
           if r["model"] == model and r.get(metric) is not None and r[metric] > 0]
    if not pts:
        return
    n = np.array([p[0] for p in pts], dtype=float)
    v = np.array([p[1] for p in pts], dtype=float)
    grid = np.unique(n)
    mean = np.array([v[n == g].mean() for g in grid])
    lo = np.array([np.percentile(v[n == g], 16) for g in grid])
    hi = np.array([np.percentile(v[n == g], 84) for g in grid])
    ax.scatter(n * jitter, v, s=6, color=color, alpha=0.25, linewidths=0)
    if fit and "slope" in fit:
        lo_b, hi_b = fit["slope_ci"]
        name = f"{name}: b = {fit['slope']:+.2f} [{lo_b:+.2f}, {hi_b:+.2f}]"
        if fit.get("reading", "rate") != "rate":  # identifiability verdict
            name += "".join("\n  " + ln for ln in textwrap.wrap(fit["reading"], 56))
        ng = np.geomspace(grid.min(), grid.max(), 50)
        ax.plot(ng, fit["c"] * ng ** fit["slope"], "--" if first else ":", color=color, lw=1.2)
    ax.errorbar(grid * jitter, mean, yerr=[mean - np.minimum(lo, mean),
                                           np.maximum(hi, mean) - mean],
                fmt="o-" if first else "s:", color=color, ms=4, lw=1.0, capsize=2, label=name,
                mfc=color if first else "none")


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
    metrics : sequence of str or of tuples of str, default=PLOT_METRICS
        One panel each; a tuple draws several metrics in one panel (the first with filled
        markers, the others open and dotted). Metrics absent from every record are skipped.
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
    panels = [tuple(m for m in _panel(p) if any(r.get(m) is not None for r in records))
              for p in metrics]
    panels = [p for p in panels if p]
    if not panels or not models:
        raise PlottingError("nothing to plot: no finished fits with metrics.")
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 4.0 * nrows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    legend_slot = None
    for p, (ax, panel) in enumerate(zip(axes.ravel(), panels)):
        for i, metric in enumerate(panel):
            for j, model in enumerate(models):
                name = labels.get(model, model) if labels else model
                if len(panel) > 1:
                    name = f"{name} [{METRIC_SHORT.get(metric, metric)}]"
                _draw_series(ax, records, model, metric, color=colors[j % len(colors)],
                             jitter=np.exp(0.03 * (j - (len(models) - 1) / 2 + 0.5 * i)),
                             name=name, fit=(rates or {}).get(model, {}).get(metric),
                             first=i == 0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("sample size n")
        ax.set_title(_panel_title(panel), fontsize=10)
        ax.grid(True, which="both", alpha=0.25)
        if ax.get_legend_handles_labels()[0] and len(panel) > 1 and p == len(panels) - 1 \
                and p % ncols < ncols - 1:  # a shared panel's long legend: in the free slot
            spare = axes.ravel()[p + 1]
            spare.axis("off")
            spare.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="center left")
            legend_slot = spare
        elif ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "no positive values", transform=ax.transAxes, ha="center",
                    va="center", color="gray")
    for ax in axes.ravel()[len(panels):]:
        if ax is not legend_slot:
            ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
