"""Speed of the fused Numba kernel against NumPy, PyTorch and JAX (figure of the performance page).

Reads the JSON files that the benchmark scripts wrote to ``benchmarks/results/``:

* ``kernels.json`` from ``benchmarks/bench_kernels.py`` — one objective+gradient evaluation,
  median time per call, every implementation on 2 threads;
* ``scaling.json`` from ``benchmarks/bench_scaling.py`` — the kernel on 1 and 2 threads for
  ``n`` up to 1e6.

Only plots: no benchmark is run here (see ``benchmarks/README.md`` to measure).

Run: ``python docs/examples/plot_benchmarks.py --out docs/_static/examples`` (a second).
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PERF = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
IMPLS = [("hmoe", "hmoe-estim kernel", "C3"), ("numpy", "NumPy", "C0"),
         ("torch", "PyTorch autograd", "C2"), ("jax", "JAX jit(value_and_grad)", "C1")]
GATES = [("none", "MHA"), ("value", "G2"), ("sdpa", "G1")]
REFERENCE = [2, 3, 3, 4]


def main(out):
    kernels = json.loads((PERF / "kernels.json").read_text())
    scaling = json.loads((PERF / "scaling.json").read_text())
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.7), constrained_layout=True)
    for ax, (gate, label) in zip(axes[:3], GATES):
        cases = sorted(
            (c for c in kernels["cases"] if c["shape"] == REFERENCE and c["gate"] == gate),
            key=lambda c: c["n"],
        )
        n = [c["n"] for c in cases]
        for impl, name, color in IMPLS:
            if all(impl in c["times"] for c in cases):
                ms = [1e3 * c["times"][impl]["median"] for c in cases]
                ax.plot(n, ms, "o-", color=color, label=name, lw=2.2 if impl == "hmoe" else 1.3)
        ax.set(xscale="log", yscale="log", xlabel="samples n", title=f"{label} (gate={gate!r})")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ms per objective + gradient")
    axes[0].legend(fontsize=8)
    ax = axes[3]
    for gate, label in GATES:
        for threads, style in [(1, "--"), (2, "-")]:
            rows = sorted(
                (t for t in scaling["timings"] if t["gate"] == gate and t["threads"] == threads),
                key=lambda t: t["n"],
            )
            ax.plot([t["n"] for t in rows], [1e3 * t["median"] for t in rows], style,
                    marker="o", ms=3, color={"none": "C0", "value": "C1", "sdpa": "C2"}[gate],
                    label=f"{label}, {threads} thread{'s' if threads > 1 else ''}")
    ax.set(xscale="log", yscale="log", xlabel="samples n", title="kernel: 1 vs 2 threads")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=1)
    fig.suptitle("(H, N, K, D) = (2, 3, 3, 4), float64, 2-core machine; median per call",
                 fontsize=10)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "plot_benchmarks.png", dpi=110)
    ref = kernels["ratios"]
    print("reference case, n = 1e5, time of peer / kernel:",
          ", ".join(f"{k} {v:.1f}x" for k, v in ref.items() if v is not None))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent.parent / "_static" / "examples")
    parser.add_argument("--quick", action="store_true",
                        help="accepted for uniformity; already quick")
    main(parser.parse_args().out)
