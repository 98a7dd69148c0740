"""Tests of hmoe_estim.datasets: random_measure and make_hmoe_regression."""

import itertools

import numpy as np
import pytest

from hmoe_estim import MixingMeasure, regression_function
from hmoe_estim.datasets import make_hmoe_regression, random_measure

from .reference import f_ref

GATES = ("none", "value", "sdpa", "output")


# --- random_measure ----------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 2, 2, 2), (1, 2, 3, 3), (2, 3, 3, 4), (3, 2, 1, 2),
                                   (1, 2, 2, 1)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_measure_assumptions(shape, seed):
    H, N, K, D = shape
    scale = 2.0
    G = random_measure(H, N, K, D, scale=scale, random_state=seed)
    assert isinstance(G, MixingMeasure)
    assert G.shape == shape
    # (A.2) positive weights inside omega_range
    assert np.all(G.omega >= 0.5) and np.all(G.omega <= 1.5)
    # (A.3) symmetric, last token's matrix zero
    np.testing.assert_array_equal(G.M, np.swapaxes(G.M, 2, 3))
    assert np.all(G.M[:, -1] == 0)
    # (A.4) some non-zero M[h, i] per head (here every i < N-1)
    for h in range(H):
        assert any(np.any(G.M[h, i] != 0) for i in range(N - 1))
    # entries of size ~scale: magnitudes in [scale/2, scale]
    Mabs = np.abs(G.M[:, :-1])
    assert Mabs.min() >= scale / 2 and Mabs.max() <= scale
    assert np.abs(G.a).min() >= scale / 2 and np.abs(G.a).max() <= scale
    # (A.5) experts pairwise separated by the default 0.25 * scale
    experts = G.a.reshape(-1, D)
    for p, q in itertools.combinations(range(len(experts)), 2):
        assert np.linalg.norm(experts[p] - experts[q]) >= 0.25 * scale


def test_random_measure_separation_and_ranges():
    G = random_measure(1, 2, 3, 3, scale=1.0, min_separation=1.2, omega_range=(2.0, 3.0),
                       random_state=5)
    experts = G.a.reshape(-1, 3)
    dists = [np.linalg.norm(p - q) for p, q in itertools.combinations(experts, 2)]
    assert min(dists) >= 1.2
    assert np.all((G.omega >= 2.0) & (G.omega <= 3.0))
    assert np.abs(G.a).max() <= 1.0


def test_random_measure_reproducible():
    G1 = random_measure(2, 3, 2, 3, random_state=7)
    G2 = random_measure(2, 3, 2, 3, random_state=7)
    G3 = random_measure(2, 3, 2, 3, random_state=8)
    assert G1 == G2
    assert G1 != G3
    G4 = random_measure(2, 3, 2, 3, random_state=np.random.RandomState(7))
    assert G4 == G1


def test_random_measure_impossible_separation():
    # 48 experts in R^2 with coordinates of magnitude in [1, 2] cannot be 0.5 apart
    with pytest.raises(ValueError, match="Lower min_separation"):
        random_measure(3, 4, 4, 2, random_state=0)
    with pytest.raises(ValueError, match="diameter"):
        random_measure(1, 2, 2, 2, min_separation=100.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_heads": 0}, "n_heads"),
        ({"n_tokens": 1}, "n_tokens"),
        ({"n_experts": 1.5}, "n_experts"),
        ({"n_features": True}, "n_features"),
        ({"scale": 0.0}, "scale"),
        ({"scale": np.inf}, "scale"),
        ({"min_separation": -1.0}, "min_separation"),
        ({"omega_range": (0.0, 1.0)}, "omega_range"),
        ({"omega_range": (2.0, 1.0)}, "omega_range"),
        ({"omega_range": 3.0}, "omega_range"),
        ({"random_state": "seed"}, "seed"),
    ],
)
def test_random_measure_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        random_measure(**kwargs)


# --- make_hmoe_regression ----------------------------------------------------------------


@pytest.mark.parametrize("gate", GATES)
def test_shapes_and_noise_free_values(gate):
    X, y, G = make_hmoe_regression(
        40, n_heads=2, n_tokens=3, n_experts=2, n_features=3, gate=gate, activation="tanh",
        noise=0.0, return_measure=True, random_state=0,
    )
    assert X.shape == (40, 3) and y.shape == (40,)
    assert G.shape == (2, 3, 2, 3)
    # independent plain-NumPy evaluation of the paper's eq. (2), (9), (12)
    np.testing.assert_allclose(y, f_ref(G.omega, G.M, G.a, X, gate, "tanh"), rtol=1e-12,
                               atol=1e-12)


def test_given_measure_and_box():
    G = random_measure(1, 2, 2, 4, random_state=3)
    X, y = make_hmoe_regression(500, measure=G, box=2.5, noise=0.0, random_state=1,
                                gate="value")
    assert X.shape == (500, 4)
    assert np.all(np.abs(X) <= 2.5)
    assert np.abs(X).max() > 2.0  # actually fills the box
    np.testing.assert_allclose(y, f_ref(G.omega, G.M, G.a, X[:, :], "value", "sigmoid"),
                               rtol=1e-12, atol=1e-12)
    # sizes keywords are ignored when a measure is given
    X2, _ = make_hmoe_regression(5, measure=G, n_features=2, random_state=1)
    assert X2.shape == (5, 4)


def test_X_inside_default_box():
    X, _ = make_hmoe_regression(2000, n_features=3, random_state=0)
    assert np.all(X >= -1.0) and np.all(X <= 1.0)
    # roughly uniform: mean ~0, variance ~1/3
    assert abs(X.mean()) < 0.05
    assert abs(X.var() - 1 / 3) < 0.02


@pytest.mark.parametrize("noise", [0.1, 0.5])
def test_noise_level(noise):
    n = 20000
    X, y, G = make_hmoe_regression(n, n_features=3, gate="sdpa", noise=noise,
                                   return_measure=True, random_state=11)
    resid = y - regression_function(G, X, gate="sdpa")
    # sample variance has relative sd sqrt(2/n) = 1 %: 5 % is a 5-sigma band
    assert abs(resid.var() / noise**2 - 1) < 0.05
    assert abs(resid.mean()) < 5 * noise / np.sqrt(n)


def test_reproducible_and_nested():
    kw = dict(n_heads=1, n_tokens=2, n_experts=3, n_features=3, gate="value",
              return_measure=True)
    X1, y1, G1 = make_hmoe_regression(300, random_state=4, **kw)
    X2, y2, G2 = make_hmoe_regression(300, random_state=4, **kw)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    assert G1 == G2
    # nested: the first m rows do not depend on n_samples; the measure neither
    for m in (1, 17, 299):
        Xm, ym, Gm = make_hmoe_regression(m, random_state=4, **kw)
        np.testing.assert_array_equal(Xm, X1[:m])
        np.testing.assert_array_equal(ym, y1[:m])
        assert Gm == G1
    X3, y3, G3 = make_hmoe_regression(300, random_state=5, **kw)
    assert not np.array_equal(X1, X3) and G3 != G1
    # X does not depend on whether the measure is passed
    X4, y4 = make_hmoe_regression(300, measure=G1, random_state=4, gate="value")
    np.testing.assert_array_equal(X4, X1)
    np.testing.assert_array_equal(y4, y1)


def test_random_state_instance_advances():
    rs = np.random.RandomState(0)
    X1, _ = make_hmoe_regression(10, random_state=rs)
    X2, _ = make_hmoe_regression(10, random_state=rs)
    assert not np.array_equal(X1, X2)
    X3, _ = make_hmoe_regression(10, random_state=np.random.RandomState(0))
    np.testing.assert_array_equal(X1, X3)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((0,), {}, "n_samples"),
        ((10.5,), {}, "n_samples"),
        (("10",), {}, "n_samples"),
        ((True,), {}, "n_samples"),
        ((10,), {"noise": -0.1}, "noise"),
        ((10,), {"noise": np.nan}, "noise"),
        ((10,), {"box": 0.0}, "box"),
        ((10,), {"box": -1.0}, "box"),
        ((10,), {"measure": {"omega": [[1.0]]}}, "MixingMeasure"),
        ((10,), {"gate": "G1"}, "Unknown gate"),
        ((10,), {"activation": "relu"}, "Unknown activation"),
        ((10,), {"n_tokens": 1}, "n_tokens"),
        ((10,), {"random_state": 1.5}, "seed"),
    ],
)
def test_make_bad_inputs(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_hmoe_regression(*args, **kwargs)


def test_top_level_exports():
    import hmoe_estim

    assert hmoe_estim.make_hmoe_regression is make_hmoe_regression
    assert hmoe_estim.random_measure is random_measure
