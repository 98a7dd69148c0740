import numpy as np
import pytest

from hmoe_estim import MixingMeasure, regression_function
from hmoe_estim.model import make_bounds, n_params, pack, unpack

from .reference import random_arrays


def test_shapes_and_properties():
    omega, M, a = random_arrays(2, 3, 4, 5, np.random.default_rng(0))
    G = MixingMeasure(omega, M, a)
    assert (G.n_heads, G.n_tokens, G.n_experts, G.n_features) == (2, 3, 4, 5)
    assert G.shape == (2, 3, 4, 5)
    assert MixingMeasure.from_dict(G.to_dict()) == G


@pytest.mark.parametrize(
    "args, match",
    [
        ((np.ones(2), np.zeros((1, 2, 2, 2)), np.ones((1, 2, 2, 2))), "omega must be a 2-D"),
        ((np.ones((2, 2)), np.zeros((1, 2, 2, 2)), np.ones((1, 2, 2, 2))), "heads"),
        ((np.ones((1, 2)), np.zeros((1, 2, 2, 3)), np.ones((1, 2, 2, 2))), r"\(H, N, D, D\)"),
        ((np.ones((1, 2)), np.zeros((1, 2, 2, 2)), np.ones((1, 2, 3, 2))), r"a must have shape"),
        ((np.ones((1, 2)), np.zeros((1, 2, 2, 2)), np.full((1, 2, 2, 2), np.nan)), "NaN"),
        ((np.ones((1, 2)), np.arange(8.0).reshape(1, 2, 2, 2), np.ones((1, 2, 2, 2))), "symmetric"),
        (("x", np.zeros((1, 2, 2, 2)), np.ones((1, 2, 2, 2))), "omega"),
    ],
)
def test_bad_measures(args, match):
    with pytest.raises(ValueError, match=match):
        MixingMeasure(*args)


def test_normalisation_and_relabelling_leave_f_unchanged():
    rng = np.random.default_rng(1)
    G = MixingMeasure(*random_arrays(2, 3, 2, 3, rng))
    X = rng.uniform(-1, 1, size=(200, 3))
    Gn = G.normalized()
    assert Gn.is_normalized() and not G.is_normalized()
    P = G.permuted(heads=[1, 0], channels=[1, 0], tokens=[[2, 0, 1], [1, 2, 0]])
    for gate in ("none", "value", "sdpa", "output"):
        f = regression_function(G, X, gate=gate)
        np.testing.assert_allclose(regression_function(Gn, X, gate=gate), f, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(regression_function(P, X, gate=gate), f, rtol=1e-12, atol=1e-12)


def test_pack_unpack_roundtrip_and_bounds():
    rng = np.random.default_rng(2)
    G = MixingMeasure(*random_arrays(2, 3, 2, 3, rng)).normalized()
    theta = pack(G)
    assert theta.shape == (n_params(2, 3, 2, 3),) == (2 * 2 + 2 * 2 * 6 + 2 * 3 * 2 * 3,)
    back = unpack(theta, G.shape)
    np.testing.assert_allclose(back.M, G.M, atol=1e-15)
    np.testing.assert_array_equal(back.a, G.a)
    lo, hi = make_bounds(G.shape, omega_max=5.0, param_bound=3.0)
    assert np.all(lo[:4] == 0) and np.all(hi[:4] == 5) and np.all(hi[4:] == 3)
    with pytest.raises(ValueError, match="theta"):
        unpack(theta[:-1], G.shape)


def test_regression_function_bad_input():
    G = MixingMeasure(np.ones((1, 1)), np.zeros((1, 2, 2, 2)), np.ones((1, 2, 1, 2)))
    with pytest.raises(ValueError, match="features"):
        regression_function(G, np.ones((3, 3)))
    with pytest.raises(ValueError, match="2-D"):
        regression_function(G, np.ones(2))
    with pytest.raises(ValueError, match="NaN"):
        regression_function(G, np.array([[np.nan, 0.0]]))
    with pytest.raises(ValueError, match="Unknown gate"):
        regression_function(G, np.ones((1, 2)), gate="G3")
    with pytest.raises(ValueError, match="Unknown activation"):
        regression_function(G, np.ones((1, 2)), gate="value", activation="relu")
    with pytest.raises(ValueError, match="MixingMeasure"):
        regression_function("G", np.ones((1, 2)))
