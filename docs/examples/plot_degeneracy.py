"""Why linear experts are slow: two measures, one function.

A true measure ``G*`` with one head, two tokens and one channel (``K* = 1``) is split into an
over-specified measure ``G`` with two channels: ``omega = (omega*, omega*)`` and experts
``a[:, 0] = a* + v``, ``a[:, 1] = -v``. Then ``b[h, i] = Σ_k omega[h,k] a[h,i,k]`` is the same
for ``G`` and ``G*``:

* without gate (MHA) the two regression functions are identical — the regression error is 0
  while the Voronoi loss is large;
* with the gate after the value projection (G2, sigmoid) the same split changes the function,
  so a least-squares fit cannot drift there.

The figure draws both regression functions along the segment ``x = t·(1, 0.5)``,
``t ∈ [-1, 1]``, and reports the regression error (on ``[-1, 1]²``) and ``L_2`` in the titles.

Run: ``python docs/examples/plot_degeneracy.py --out docs/_static/examples`` (about a second).
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hmoe_estim import MixingMeasure, regression_error, regression_function, voronoi_loss  # noqa: E402

LABELS = {"none": "MHA (linear experts)", "value": "G2 (sigmoid after the value projection)"}


def measures():
    """The true measure and its split, as in the module docstring."""
    omega_star = np.array([[1.0]])
    M = np.zeros((1, 2, 2, 2))
    M[0, 0] = [[2.0, -1.0], [-1.0, 1.5]]
    a_star = np.array([[[[2.0, -1.5]], [[-1.0, 2.0]]]])  # (H, N, K, D) = (1, 2, 1, 2)
    v = np.array([[1.5, 1.0], [-1.0, 1.5]])  # one shift per token
    a_split = np.zeros((1, 2, 2, 2))
    a_split[0, :, 0] = a_star[0, :, 0] + v
    a_split[0, :, 1] = -v
    G_star = MixingMeasure(omega_star, M, a_star)
    G_split = MixingMeasure(np.array([[1.0, 1.0]]), M, a_split)
    return G_star, G_split


def main(out):
    G_star, G_split = measures()
    t = np.linspace(-1, 1, 201)
    X = np.column_stack([t, 0.5 * t])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    for ax, gate in zip(axes, ["none", "value"]):
        f_star = regression_function(G_star, X, gate=gate)
        f_split = regression_function(G_split, X, gate=gate)
        err = regression_error(G_split, G_star, gate=gate)
        loss = voronoi_loss(G_split, G_star, gate=gate)
        ax.plot(t, f_star, lw=3, color="0.75", label=r"$f_{G^*}$ (one channel)")
        ax.plot(t, f_split, lw=1.5, ls="--", color="C3", label=r"$f_G$ (split into two channels)")
        ax.set_title(
            f"{LABELS[gate]}\n"
            rf"$\|f_G - f_{{G^*}}\|_{{L^2}}$ = {err:.2g},   $\mathcal{{L}}_2(G, G^*)$ = {loss:.3g}",
            fontsize=10,
        )
        ax.set_xlabel(r"$t$,  $x = t\,(1, 0.5)$")
        ax.legend(fontsize=9, loc="best")
        print(f"{gate:>5}: regression error {err:.3g}, Voronoi loss L2 {loss:.3g}")
    axes[0].set_ylabel("regression function")
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "plot_degeneracy.png", dpi=110)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent.parent / "_static" / "examples")
    parser.add_argument("--quick", action="store_true",
                        help="accepted for uniformity; already quick")
    main(parser.parse_args().out)
