"""Learning-curve plots (hmoe_estim.study) and the progress bar (hmoe_estim.study)."""

import io
import sys

import numpy as np
import pytest

from hmoe_estim.study import (
    PlottingError,
    ProgressBar,
    format_duration,
    plot_learning_curves,
    rates_from_records,
)


def _records():
    rng = np.random.default_rng(0)
    recs = []
    for model, b in (("none", 0.0), ("value", -0.5)):
        for n in (1000, 3000, 10000):
            for rep in range(3):
                v = 2.0 * n**b * np.exp(rng.normal(0, 0.2))
                recs.append({"model": model, "n": n, "rep": rep, "voronoi_loss": v,
                             "expert_error": v / 2, "regression_error": 0.5 * n**-0.5,
                             "voronoi_over": 0.0})
    return recs


def test_png_is_written(tmp_path):
    mpl_image = pytest.importorskip("matplotlib.image")
    recs = _records()
    rates = rates_from_records(recs, metrics=("voronoi_loss", "regression_error"), n_boot=50)
    path = plot_learning_curves(recs, str(tmp_path / "lc.png"), rates=rates,
                                labels={"none": "MHA", "value": "G2"}, title="t")
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpl_image.imread(path)
    # three panels with data (voronoi_over is all zero on log axes but still gets a panel)
    assert img.shape[1] > img.shape[0] and img.shape[1] >= 1000


def test_missing_matplotlib_message(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlottingError, match="pip install 'hmoe-estim\\[plot\\]'"):
        plot_learning_curves(_records(), str(tmp_path / "x.png"))


def test_nothing_to_plot(tmp_path):
    pytest.importorskip("matplotlib")
    with pytest.raises(PlottingError, match="nothing to plot"):
        plot_learning_curves([], str(tmp_path / "x.png"))


def test_progress_bar_weighted_eta():
    stream = io.StringIO()
    bar = ProgressBar(3, total_weight=10.0, stream=stream, min_interval=0)
    bar.start = bar.start - 10.0  # pretend 10 s have passed
    bar.update(weight=5.0)
    # half the weight done in 10 s -> about 10 s left
    assert bar.eta() == pytest.approx(10.0, rel=0.05)
    bar.update(weight=4.0)
    bar.update(weight=1.0)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert lines[-1].startswith("[" + "#" * 30 + "]") and "3/3 fits" in lines[-1]
    assert "ETA 0:00" in lines[-1]


def test_format_duration():
    assert format_duration(None) == "?"
    assert format_duration(65) == "1:05"
    assert format_duration(3725) == "1:02:05"
