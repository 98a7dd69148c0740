"""Choosing the number of channels K with GridSearchCV.

Data from a true measure with ``K* = 2`` channels (one head, two tokens, ``D = 3``), fitted with
``K = 1 … 4`` by :class:`~hmoe_estim.MHARegressor` (data without gate) and
:class:`~hmoe_estim.G2Regressor` (data with the value gate), scored by 3-fold cross-validated
mean squared error and — because the truth is known here — by the Voronoi loss ``L_2``
(:func:`~hmoe_estim.make_voronoi_scorer`).

* G2: the cross-validated error drops from ``K = 1`` to ``K = 2`` and is flat afterwards, so
  ``K = 2`` is the smallest model that fits; the Voronoi loss is smallest there and grows with
  the extra atoms.
* MHA: the cross-validated error is the same for every ``K`` — the MHA function depends on the
  channels only through ``b[h, i] = Σ_k omega[h,k] a[h,i,k]``, so one channel already spans the
  whole model class and ``K`` cannot be chosen from data.

Run: ``python docs/examples/plot_choose_k.py --out docs/_static/examples`` (a few seconds).
"""

import argparse
import warnings
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.model_selection import GridSearchCV, KFold  # noqa: E402

from hmoe_estim import (  # noqa: E402
    G2Regressor,
    MHARegressor,
    make_hmoe_regression,
    make_voronoi_scorer,
    random_measure,
)

NOISE = 0.1
KS = [1, 2, 3, 4]


def main(out, quick=False):
    # --quick (used by the tests): smaller data and fewer iterations, same figure layout
    n_samples, n_starts, max_iter, folds = (400, 1, 60, 2) if quick else (1500, 4, 2000, 3)
    ks = KS[:2] if quick else KS
    G_star = random_measure(n_heads=1, n_tokens=2, n_experts=2, n_features=3, random_state=0)
    fig, (ax_mse, ax_vor) = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    for est, gate, label, color in [
        (MHARegressor, "none", "MHA (no gate)", "C0"),
        (G2Regressor, "value", "G2 (value gate)", "C3"),
    ]:
        X, y = make_hmoe_regression(n_samples, measure=G_star, gate=gate, noise=NOISE,
                                    random_state=1)
        search = GridSearchCV(
            est(n_tokens=2, n_starts=n_starts, max_iter=max_iter, random_state=0),
            {"n_experts": ks},
            scoring={"mse": "neg_mean_squared_error", "voronoi": make_voronoi_scorer(G_star)},
            refit="mse",
            cv=KFold(folds, shuffle=True, random_state=0),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            search.fit(X, y)
        mse = -search.cv_results_["mean_test_mse"]
        vor = -search.cv_results_["mean_test_voronoi"]
        ax_mse.plot(ks, mse, "o-", color=color, label=label)
        ax_vor.plot(ks, vor, "o-", color=color, label=label)
        print(f"{label:>16}: CV MSE {np.round(mse, 5)}, Voronoi L2 {np.round(vor, 2)}, "
              f"best K by MSE = {search.best_params_['n_experts']}")
    ax_mse.axhline(NOISE**2, color="0.6", ls=":", label=r"noise level $\sigma^2$")
    ax_mse.set(xlabel="K (channels fitted)", ylabel="3-fold CV mean squared error",
               title=r"Cross-validated error ($K^* = 2$)", xticks=KS)
    ax_vor.set(xlabel="K (channels fitted)", ylabel=r"Voronoi loss $\mathcal{L}_2$",
               title="Distance to the true parameters", xticks=KS, yscale="log")
    ax_vor.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax_vor.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax_vor.set_yticks([5, 10, 20, 50, 100])
    for ax in (ax_mse, ax_vor):
        ax.axvline(2, color="0.85", lw=6, zorder=0)
        ax.legend(fontsize=9)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "plot_choose_k.png", dpi=110)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent.parent / "_static" / "examples")
    parser.add_argument("--quick", action="store_true", help="small sizes (for the tests)")
    args = parser.parse_args()
    main(args.out, quick=args.quick)
