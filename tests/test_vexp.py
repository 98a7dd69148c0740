import numpy as np

from hmoe_estim.kernels.vexp import exp_block


def test_exp_block_matches_numpy_within_ulps():
    x = np.concatenate([np.linspace(-708.39, 709.08, 400001), [0.0, -0.0, 1e-300, -1e-300]])
    out = np.empty_like(x)
    exp_block(x, out, x.size)
    ref = np.exp(x)
    ulps = np.abs(out - ref) / (ref * np.finfo(float).eps)
    assert ulps.max() <= 2.0


def test_exp_block_edges():
    x = np.array([np.nan, -np.inf, np.inf, -800.0, 800.0, -708.5, 709.5])
    out = np.empty_like(x)
    exp_block(x, out, x.size)
    assert np.isnan(out[0])
    np.testing.assert_array_equal(out[1:], [0.0, np.inf, 0.0, np.inf, 0.0, np.inf])


def test_exp_block_respects_b():
    x = np.zeros(8)
    out = np.full(8, -1.0)
    exp_block(x, out, 5)
    np.testing.assert_array_equal(out, [1, 1, 1, 1, 1, -1, -1, -1])
