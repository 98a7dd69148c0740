"""Attention ↔ HMoE: the same numbers, computed two ways.

For random attention weights (H = 2 heads, N = 3 tokens, d = 2, d_v = 2) and 200 random token
matrices X, every entry ``(row, column)`` of the attention output is computed

* directly, by :func:`hmoe_estim.attention.multihead_attention`, and
* as the HMoE regression function of the mixing measure that
  :func:`hmoe_estim.attention.attention_to_measure` reads off the weights, evaluated on
  ``x = vec(X)`` by :func:`hmoe_estim.regression_function`,

for the four gate positions. The points lie on the diagonal to rounding error.

Run: ``python docs/examples/plot_attention_identity.py --out docs/_static/examples``
(about a second).
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hmoe_estim import GATES, regression_function  # noqa: E402
from hmoe_estim.attention import attention_to_measure, multihead_attention  # noqa: E402

GATE_LABELS = {"none": "MHA", "value": "G2", "sdpa": "G1", "output": "G5"}


def main(out):
    rng = np.random.default_rng(0)
    H, N, d, d_v, B = 2, 3, 2, 2, 200
    W_Q, W_K, W_V = rng.normal(size=(3, H, d, d_v))
    W_O = rng.normal(size=(H, d_v, d))
    X = rng.uniform(-1, 1, size=(B, N, d))

    fig, axes = plt.subplots(1, len(GATES), figsize=(12, 3.3), constrained_layout=True)
    for ax, gate in zip(axes, GATES):
        direct = multihead_attention(X, W_Q, W_K, W_V, W_O, gate=gate)  # (B, N, d)
        hmoe = np.empty_like(direct)
        for row in range(N):
            for column in range(d):
                G = attention_to_measure(W_Q, W_K, W_V, W_O, n_tokens=N, row=row, column=column)
                hmoe[:, row, column] = regression_function(G, X.reshape(B, -1), gate=gate)
        err = np.max(np.abs(direct - hmoe))
        lo, hi = direct.min(), direct.max()
        ax.plot([lo, hi], [lo, hi], color="0.7", lw=1)
        ax.scatter(direct.ravel(), hmoe.ravel(), s=4, alpha=0.6)
        ax.set_title(f'{GATE_LABELS[gate]} (gate="{gate}")\nmax |diff| = {err:.1e}', fontsize=10)
        ax.set_xlabel("attention layer, computed directly")
        print(f"{GATE_LABELS[gate]:>4}: max |attention - HMoE| = {err:.2e}")
    axes[0].set_ylabel("HMoE regression function")
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "plot_attention_identity.png", dpi=110)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent.parent / "_static" / "examples")
    parser.add_argument("--quick", action="store_true",
                        help="accepted for uniformity; already quick")
    main(parser.parse_args().out)
