"""Plot of ``bench_peers_fit.py``'s JSON: time per fit against certified quality.

One point per (case, method): x = median depth below the truth's objective (σ²/n; left is
deeper, right of the dashed line 0 is above the truth), y = median wall time per fit (log
scale); the colour is the case, the marker the method; a method with certified failures is
labelled ``k/m``. Also prints the table of the documentation (reStructuredText) from the
same JSON.

Usage::

    python benchmarks/plot_peers_fit.py benchmarks/results/peers_fit.json \
        docs/_static/peers_fit.png
"""

import json
import sys

MARKERS = {"lm": "o", "lbfgs": "s", "trf": "^", "torch4": "v"}
NAMES = {"lm": "default (LM search)", "lbfgs": "solver='lbfgs'", "trf": "SciPy trf, 4 starts",
         "torch4": "PyTorch L-BFGS, 4 starts"}


def rst_table(data):
    """The performance page's table: one row per (case, method)."""
    many = f"torch{data['torch_starts']}"
    names = {**NAMES, many: f"PyTorch L-BFGS, {data['torch_starts']} starts"}
    rows = [("case", "method", "median s", "× default", "failures", "median σ²/n")]
    for case, entry in data["summary"].items():
        lm = entry["rows"].get("lm")
        for label, r in entry["rows"].items():
            ratio = f"{r['median_wall'] / lm['median_wall']:.1f}" if lm else ""
            rows.append((case, names.get(label, label), f"{r['median_wall']:.2f}", ratio,
                         f"{r['failures']}/{r['fits']}", f"{r['median_excess']:+.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    rule = "  ".join("=" * w for w in widths)
    lines = [rule, "  ".join(c.ljust(w) for c, w in zip(rows[0], widths)), rule]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows[1:]]
    return "\n".join(lines + [rule])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    src = argv[0] if argv else "benchmarks/results/peers_fit.json"
    dst = argv[1] if len(argv) > 1 else "docs/_static/peers_fit.png"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(src) as fh:
        data = json.load(fh)
    many = f"torch{data['torch_starts']}"
    markers = {**MARKERS, many: "D"}
    names = {**NAMES, many: f"PyTorch L-BFGS, {data['torch_starts']} starts"}
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    for i, (case, entry) in enumerate(data["summary"].items()):
        col = colours[i % len(colours)]
        for label, r in entry["rows"].items():
            ax.scatter(r["median_excess"], r["median_wall"], marker=markers.get(label, "x"),
                       color=col, s=55, edgecolor="black", linewidth=0.5, zorder=3)
            if r["failures"]:
                ax.annotate(f"{r['failures']}/{r['fits']}", (r["median_excess"],
                            r["median_wall"]), textcoords="offset points", xytext=(6, 4),
                            fontsize=8, color=col)
        ax.scatter([], [], color=col, marker="s", label=case)
    for label in markers:
        ax.scatter([], [], color="grey", marker=markers[label], label=names[label])
    ax.axvline(0.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("median objective − truth's objective (σ²/n; left = deeper)")
    ax.set_ylabel("median wall time per fit (s)")
    cpu = data.get("environment", {}).get("cpu", "?")
    ax.set_title(f"Fits on the same data: {cpu}, {data['threads']} threads, "
                 f"{data['truths']} truths per case", fontsize=10)
    ax.legend(fontsize=7, loc="best", ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(dst)
    print(f"wrote {dst}\n")
    print(rst_table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
