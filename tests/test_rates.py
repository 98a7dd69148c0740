"""Rate fitting (hmoe_estim.study): known exponents are recovered, with honest intervals."""

import json
import math

import numpy as np
import pytest

from hmoe_estim.study import (
    fit_log_law,
    fit_power_law,
    fit_rates,
    format_rates_table,
    rates_from_records,
)

GRID = np.geomspace(1e3, 1e5, 6).round()


def _replicated(law, reps, sigma, seed):
    """Replications with multiplicative log-normal noise around ``law(n)``."""
    rng = np.random.default_rng(seed)
    n = np.repeat(GRID, reps)
    return n, law(n) * np.exp(rng.normal(0.0, sigma, n.size))


def _ols_slope(x, y):
    """Independent least-squares slope (normal equations, plain NumPy)."""
    A = np.column_stack([np.ones_like(x), x])
    return np.linalg.lstsq(A, y, rcond=None)[0]


def test_power_law_exact_data():
    fit = fit_power_law(GRID, 3.0 * GRID**-0.5)
    assert fit["slope"] == pytest.approx(-0.5, abs=1e-12)
    assert fit["c"] == pytest.approx(3.0, rel=1e-10)
    assert fit["rss"] == pytest.approx(0.0, abs=1e-20)


def test_log_law_exact_data():
    fit = fit_log_law(GRID, 2.0 / np.log(GRID) ** 1.5)
    assert fit["log_lambda"] == pytest.approx(1.5, abs=1e-10)
    assert fit["c"] == pytest.approx(2.0, rel=1e-9)


def test_power_law_matches_independent_least_squares():
    rng = np.random.default_rng(3)
    y = np.exp(rng.normal(size=GRID.size))
    fit = fit_power_law(GRID, y)
    intercept, slope = _ols_slope(np.log(GRID), np.log(y))
    assert fit["slope"] == pytest.approx(slope, rel=1e-10)
    assert fit["c"] == pytest.approx(math.exp(intercept), rel=1e-10)


@pytest.mark.parametrize("b", [-0.5, -0.25, 0.0])
def test_power_exponent_recovered_with_covering_ci(b):
    n, v = _replicated(lambda n: 2.0 * n**b, reps=8, sigma=0.3, seed=11)
    r = fit_rates(n, v, n_boot=1000, random_state=0)
    lo, hi = r["slope_ci"]
    assert lo < b < hi
    assert hi - lo < 0.25
    assert abs(r["slope"] - b) < 0.1
    assert r["decreasing"] == (b < 0)


@pytest.mark.parametrize("lam", [1.0, 2.0])
def test_log_exponent_recovered_with_covering_ci(lam):
    n, v = _replicated(lambda n: 5.0 / np.log(n) ** lam, reps=8, sigma=0.05, seed=5)
    r = fit_rates(n, v, n_boot=1000, random_state=1)
    lo, hi = r["log_lambda_ci"]
    assert lo < lam < hi
    assert abs(r["log_lambda"] - lam) < 0.3


def test_better_law_on_clear_cases():
    # a strongly curved (on log-log axes) log law over a wide grid vs. an exact power law
    n = np.repeat(np.geomspace(20, 1e8, 8), 4)
    r_log = fit_rates(n, 1.0 / np.log(n) ** 3, n_boot=50)
    r_pow = fit_rates(n, 1.0 * n**-0.5, n_boot=50)
    assert r_log["better_law"] == "log"
    assert r_pow["better_law"] == "power"
    assert r_pow["rss_power"] < r_pow["rss_log"]


def test_predicted_sample_sizes():
    n = np.repeat(GRID, 2)
    r = fit_rates(n, 4.0 * n**-0.5, eps=0.004, n_boot=20)
    # 4 n^-1/2 = 0.004 -> n = 1e6
    assert r["log10_n_for_eps"]["power"] == pytest.approx(6.0, abs=1e-9)
    assert r["n_for_eps"]["power"] == pytest.approx(1e6, rel=1e-8)
    r = fit_rates(n, 1.0 / np.log(n), eps=0.05, n_boot=20)
    # 1/log n = 0.05 -> log n = 20 -> log10 n = 20 / ln 10
    assert r["log10_n_for_eps"]["log"] == pytest.approx(20 / math.log(10), rel=1e-8)
    # a flat curve never reaches a smaller eps under the power law
    r = fit_rates(n, np.full(n.size, 2.0), eps=1.0, n_boot=20)
    assert r["log10_n_for_eps"]["power"] is None


def test_bootstrap_resamples_within_each_n():
    # with one replication per n the bootstrap cannot move: the interval collapses on the slope
    r = fit_rates(GRID, 3 * GRID**-0.3, n_boot=50)
    assert r["slope_ci"][0] == pytest.approx(r["slope"])
    assert r["slope_ci"][1] == pytest.approx(r["slope"])
    assert r["n_reps"] == [1] * GRID.size


def test_two_sizes_give_no_law_preference():
    r = fit_rates([1000, 1000, 4000, 4000], [1.0, 1.2, 0.5, 0.6], n_boot=20)
    assert r["better_law"] is None


@pytest.mark.parametrize(
    "n, v, match",
    [
        ([1000, 1000], [1.0, 2.0], "two distinct"),
        ([1000, 2000], [1.0], "same length"),
        ([1000, 2000], [1.0, np.nan], "NaN"),
        ([2, 2000], [1.0, 1.0], ">= 3"),
        ([1000, 2000], [0.0, 0.0], "positive"),
    ],
)
def test_bad_input(n, v, match):
    with pytest.raises(ValueError, match=match):
        fit_rates(n, v)


def test_rates_from_records_and_table():
    n, v = _replicated(lambda n: n**-0.5, reps=3, sigma=0.1, seed=2)
    records = [
        {"model": m, "n": int(a), "voronoi_loss": b * s, "expert_error": None,
         "regression_error": b}
        for m, s in (("none", 1.0), ("value", 2.0)) for a, b in zip(n, v)
    ]
    rates = rates_from_records(records, metrics=("voronoi_loss", "expert_error",
                                                 "regression_error"), n_boot=100)
    assert list(rates) == ["none", "value"]
    assert rates["value"]["voronoi_loss"]["slope"] == pytest.approx(
        rates["none"]["voronoi_loss"]["slope"])
    assert "error" in rates["none"]["expert_error"]
    assert rates["none"]["expert_error"]["skipped"] == n.size
    # a metric no record has: an error, except a measure-level one (a gate without it)
    absent = rates_from_records(records, metrics=("voronoi_exact", "voronoi_loss_measure"),
                                n_boot=10)
    assert "error" in absent["none"]["voronoi_exact"]
    assert "voronoi_loss_measure" not in absent["none"]
    json.dumps(rates, allow_nan=False)  # JSON-clean
    table = format_rates_table(rates)
    assert "voronoi_loss" in table and "not fitted" in table
