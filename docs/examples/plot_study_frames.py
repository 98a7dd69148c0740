"""A custom figure from a study read as pandas DataFrames.

:func:`hmoe_estim.study.study_dataframes` returns a study folder's records (one row per fit),
rates (one row per model and metric, as in ``rates.json``) and certificate as DataFrames. This
script runs a small study of MHA and G2 (or reads the folder given with ``--study``), then draws
what the built-in figure does not:

* left, every fit's regression error against ``n`` (one dot per fit) with the power law
  ``c · n^slope`` of the rates frame and its slope interval in the legend;
* right, each fit's expert error against its regression error: does a fit that predicts well
  also have the right experts?

Run: ``python docs/examples/plot_study_frames.py --out docs/_static/examples`` (about 15 s;
``--quick``: a few seconds after compilation).
"""

import argparse
import io
import tempfile
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from hmoe_estim.study import (  # noqa: E402
    StudyConfig,
    run_study,
    study_dataframes,
    write_rates,
)

LABELS = {"none": "MHA", "value": "G2 (sigmoid)"}


def small_study(out, quick):
    """Run a small MHA/G2 study into ``out`` and write its rates."""
    grid = {"n": [40, 80], "reps": 2} if quick else {"n": [100, 200, 400, 800], "reps": 3}
    fit = {"n_starts": 1, "max_iter": 15} if quick else {"n_starts": 2, "max_iter": 200}
    cfg = StudyConfig.from_dict({
        "name": "frames-example", "seed": 0, "models": ["none", "value"],
        "truth": {"n_features": 2, "seed": 1}, "grid": grid, "fit": fit,
        "metrics": {"n_ref": 300 if quick else 2000},
    })
    run_study(cfg, str(out), n_jobs=1, progress=False, stream=io.StringIO())
    write_rates(str(out), n_boot=100 if quick else 2000, stream=io.StringIO())


def draw(frames, out):
    records, rates = frames.records, frames.rates.set_index(["model", "metric"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), constrained_layout=True)
    for j, (model, fits) in enumerate(records.groupby("model", sort=False)):
        color = f"C{j}"
        label = LABELS.get(model, model)
        left.scatter(fits["n"], fits["regression_error"], s=14, alpha=0.6, color=color)
        rate = rates.loc[(model, "regression_error")]
        n = np.geomspace(records["n"].min(), records["n"].max(), 50)
        left.plot(n, rate["c"] * n ** rate["slope"], color=color,
                  label=f"{label}: slope {rate['slope']:.2f} "
                        f"[{rate['slope_ci_low']:.2f}, {rate['slope_ci_high']:.2f}]")
        right.scatter(fits["regression_error"], fits["expert_error"], s=14, alpha=0.7,
                      color=color, label=label)
        print(f"{label}: {len(fits)} fits, regression-error slope {rate['slope']:.2f}, "
              f"certified failures {frames.certificate.loc[model, 'failures']}")
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend(fontsize=8)
    sizes = sorted(records["n"].unique())
    left.set_xticks(sizes, [str(n) for n in sizes])
    left.set_xlabel("n (samples)")
    left.set_ylabel(r"$\|f_{\widehat G} - f_{G^*}\|_{L^2}$ (one dot per fit)")
    left.set_title("regression error and its fitted power law", fontsize=10)
    right.set_xlabel("regression error")
    right.set_ylabel("expert error")
    right.set_title("good predictions, right experts?", fontsize=10)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "plot_study_frames.png", dpi=110)


def main(out, study=None, quick=False):
    if study is None:
        with tempfile.TemporaryDirectory() as tmp:
            small_study(Path(tmp) / "study", quick)
            frames = study_dataframes(Path(tmp) / "study")
    else:
        frames = study_dataframes(study)
    draw(frames, out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent.parent / "_static" / "examples")
    parser.add_argument("--study", type=Path, default=None,
                        help="a study folder with rates.json (default: run a small study)")
    parser.add_argument("--quick", action="store_true", help="small sizes (for the tests)")
    args = parser.parse_args()
    main(args.out, study=args.study, quick=args.quick)
