"""``fit_metrics``: the same numbers, bit for bit, as the separate metric calls."""

import numpy as np
import pytest

from hmoe_estim import MixingMeasure, random_measure
from hmoe_estim.metrics import (
    MEASURE_GATES,
    expert_error,
    fit_metrics,
    regression_error,
    voronoi_loss,
)


def _separate(G, truth, *, gate, activation, X_ref, r):
    kw = dict(gate=gate, activation=activation, X_ref=X_ref)
    det = voronoi_loss(G, truth, r=r, return_details=True, **kw)
    out = {
        "voronoi_loss": float(det.loss),
        "voronoi_weight": float(det.weight_part),
        "voronoi_exact": float(det.exact_part),
        "voronoi_over": float(det.over_part),
        "voronoi_r": r,
        "extra_weights": [float(w) for w in det.extra_weights],
        "extra_weight": float(np.sum(det.extra_weights)),
        "cell_sizes": det.cells.sizes.tolist(),
        "expert_error": expert_error(G, truth, weighting="heaviest", **kw),
        "expert_error_weighted": expert_error(G, truth, weighting="weighted", **kw),
        "expert_error_max": expert_error(G, truth, weighting="max", **kw),
        "regression_error": regression_error(G, truth, **kw),
    }
    if gate in MEASURE_GATES:
        out["voronoi_loss_measure"] = voronoi_loss(G, truth, r=r, level="measure", **kw)
        out["expert_error_measure"] = expert_error(G, truth, level="measure", **kw)
    return out


def _perturbed(truth, K, rng, noise=0.3):
    """An over-specified fit near ``truth``: its channels plus extra ones, all perturbed."""
    H, N, Ks, D = truth.shape
    extra = K - Ks
    omega = np.concatenate([truth.omega, rng.uniform(0.05, 0.5, (H, extra))], axis=1)
    a = np.concatenate([truth.a, truth.a[:, :, :extra] + rng.normal(0, 1, (H, N, extra, D))],
                       axis=2)
    M = truth.M + noise * rng.normal(size=truth.M.shape)
    M = (M + np.swapaxes(M, -1, -2)) / 2
    return MixingMeasure(omega * rng.uniform(0.8, 1.2, omega.shape),
                         M, a + noise * rng.normal(size=a.shape))


@pytest.mark.parametrize("gate", ["none", "value", "sdpa", "output"])
@pytest.mark.parametrize("activation,r,H", [("sigmoid", None, 1), ("tanh", None, 2),
                                            ("gelu", 1, 1), ("silu", 2, 2)])
def test_fit_metrics_equal_the_separate_calls(gate, activation, r, H):
    rng = np.random.default_rng(7)
    truth = random_measure(H, 2, 2, 3, random_state=3)
    G = _perturbed(truth, 3, rng)
    if activation == "tanh":  # a flipped channel: the sign symmetry's cells
        G = MixingMeasure(G.omega * np.array([1, -1, 1]), G.M, G.a * np.array([1, -1, 1])[
            None, None, :, None]) if gate in ("value", "sdpa") else G
    X_ref = rng.uniform(-1, 1, (500, 3))
    got = fit_metrics(G, truth, gate=gate, activation=activation, X_ref=X_ref, r=r)
    want = _separate(G, truth, gate=gate, activation=activation, X_ref=X_ref, r=r)
    assert list(got) == list(want)
    assert got == want  # exact: the same arithmetic on the same cells
    assert all(isinstance(v, (float, list)) or v is None or isinstance(v, int)
               for v in got.values())


def test_fit_metrics_default_reference_sample_and_identity():
    truth = random_measure(1, 2, 2, 2, random_state=0)
    m = fit_metrics(truth, truth, gate="value")
    assert m["voronoi_loss"] == 0.0 and m["expert_error"] == 0.0
    assert m["voronoi_loss_measure"] == 0.0 and m["expert_error_measure"] == 0.0
    assert m == fit_metrics(truth, truth, gate="value", X_ref=None, n_ref=4096, random_state=0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(gate="bogus"), "Unknown gate 'bogus'"),
    (dict(activation="relu"), "Unknown activation 'relu'"),
    (dict(r=-1), "r must be an integer >= 1"),
    (dict(X_ref=np.zeros((5, 4))), "X_ref"),
])
def test_fit_metrics_bad_input(kwargs, match):
    truth = random_measure(1, 2, 2, 3, random_state=0)
    with pytest.raises(ValueError, match=match):
        fit_metrics(truth, truth, **kwargs)


def test_fit_metrics_measures_of_different_tokens():
    G = random_measure(1, 2, 2, 3, random_state=0)
    G3 = random_measure(1, 3, 2, 3, random_state=0)
    with pytest.raises(ValueError):
        fit_metrics(G3, G, gate="sdpa")
