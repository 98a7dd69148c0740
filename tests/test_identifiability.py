"""Identifiability: the sign-symmetry-aware metrics, the obstructions' witnesses, the Jacobian.

The slow references below are written loop by loop from the definitions (cells by the smaller
of ``‖B − B*‖`` and ``‖B + B*‖``, signed weights in the cell sums, ``|ω|`` in the atom terms).
"""

import numpy as np
import pytest

from hmoe_estim import MixingMeasure, regression_function, voronoi_cells, voronoi_loss
from hmoe_estim.datasets import random_measure
from hmoe_estim.expert_metrics import expert_error

from .test_voronoi import slow_branches, slow_pair_cost

# --------------------------------------------------------------------------------------
# 1. sign symmetry of odd activations in the metrics
# --------------------------------------------------------------------------------------


def continuum_point(Gs, c, k=0, h=0):
    """Channel (h, k) of G* held as (ω* + c, a*) plus a spare channel (c, −a*): K = K* + 1."""
    H, _, K, _ = Gs.shape
    omega = np.concatenate([Gs.omega, np.zeros((H, 1))], axis=1)
    omega[h, k] += c
    omega[h, K] = c
    a = np.concatenate([Gs.a, Gs.a[:, :, k : k + 1]], axis=2)
    a[h, :, K] = -Gs.a[h, :, k]
    return MixingMeasure(omega, Gs.M, a)


def slow_signed_loss(G, Gs, X, gate, activation, r=None):
    """Signed Voronoi loss, one branch pair and one sign at a time."""
    reading = "activated" if gate == "value" else "linear"
    B = slow_branches(G, X, reading, activation)
    Bs = slow_branches(Gs, X, reading, activation)
    H, K = G.omega.shape
    Hs, Ks = Gs.omega.shape
    cells = {(h, k): [] for h in range(Hs) for k in range(Ks)}
    for hp in range(H):
        for kp in range(K):
            best, best_d = None, np.inf
            for h in range(Hs):
                for k in range(Ks):
                    for s in (1, -1):
                        d = np.sqrt(np.mean((s * B[:, hp, kp] - Bs[:, h, k]) ** 2))
                        if d < best_d:
                            best, best_d = (h, k, s), d
            cells[best[:2]].append((hp, kp, best[2]))
    total = 0.0
    for (h, k), members in cells.items():
        total += abs(sum(s * G.omega[hp, kp] for hp, kp, s in members) - Gs.omega[h, k])
        e = r if r is not None else (1 if len(members) == 1 else 2)
        for hp, kp, s in members:
            flipped = MixingMeasure(G.omega, G.M, G.a.copy())
            flipped.a[hp, :, kp] *= s
            cost, _ = slow_pair_cost(flipped, Gs, hp, kp, h, k, e)
            total += abs(G.omega[hp, kp]) * cost
    return total


@pytest.mark.parametrize("gate", ["value", "sdpa"])
@pytest.mark.parametrize("shape", [(1, 2, 2, 2), (2, 3, 2, 3)])
def test_tanh_continuum_has_zero_loss(gate, shape):
    H, N, K, D = shape
    Gs = random_measure(H, N, K, D, random_state=3)
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(300, D))
    for c in (0.0, 0.05, 0.7, 3.0):
        for k in range(K):
            G = continuum_point(Gs, c, k=k, h=H - 1)
            # the same function exactly ...
            f, fs = (regression_function(m, X, gate=gate, activation="tanh") for m in (G, Gs))
            assert np.max(np.abs(f - fs)) <= 1e-12
            # ... and, relabelled, loss and expert error 0
            G = G.permuted(channels=rng.permutation(K + 1), tokens=rng.permutation(N))
            for r in (None, 1, 2):
                assert voronoi_loss(G, Gs, gate=gate, activation="tanh", r=r) <= 1e-10
            for weighting in ("heaviest", "weighted", "max"):
                assert expert_error(G, Gs, gate=gate, activation="tanh",
                                    weighting=weighting) <= 1e-10
            # sigmoid (not odd): the same measure is another function, and the loss sees it
            if c > 0:
                assert voronoi_loss(G, Gs, gate=gate, activation="sigmoid") > 0.1 * c
                # without the quotient, tanh charges the flipped atom as far away
                assert voronoi_loss(G, Gs, gate=gate, activation="tanh",
                                    sign_symmetry=False) > 0.1 * c


@pytest.mark.parametrize("gate", ["value", "sdpa"])
@pytest.mark.parametrize("seed", [0, 1])
def test_signed_loss_matches_slow_reference(gate, seed):
    rng = np.random.default_rng(seed)
    Gs = random_measure(1, 3, 2, 2, random_state=seed)
    G = continuum_point(Gs, 0.4, k=1)
    # perturb: some channels sit near the truth, one near its flip, with noise
    G = MixingMeasure(G.omega * rng.uniform(0.8, 1.2, size=G.omega.shape),
                      G.M + 0.05 * np.eye(2), G.a + 0.1 * rng.normal(size=G.a.shape))
    X = rng.uniform(-1, 1, size=(120, 2))
    for r in (None, 1):
        got = voronoi_loss(G, Gs, gate=gate, activation="tanh", r=r, X_ref=X)
        want = slow_signed_loss(G, Gs, X, gate, "tanh", r=r)
        assert got == pytest.approx(want, rel=1e-10, abs=1e-12)
    cells = voronoi_cells(G, Gs, gate=gate, activation="tanh", X_ref=X)
    assert cells.sign_symmetric
    assert set(np.unique(cells.signs)) == {-1, 1}  # the spare channel sits as a signed atom


@pytest.mark.parametrize("activation", ["sigmoid", "gelu", "silu"])
@pytest.mark.parametrize("gate", ["none", "value", "sdpa", "output"])
def test_no_sign_quotient_without_odd_activation(gate, activation):
    Gs = random_measure(1, 2, 2, 2, random_state=5)
    G = continuum_point(Gs, 0.5)
    G = MixingMeasure(G.omega, G.M, G.a + 0.01)
    auto = voronoi_loss(G, Gs, gate=gate, activation=activation, return_details=True)
    off = voronoi_loss(G, Gs, gate=gate, activation=activation, sign_symmetry=False)
    assert auto.loss == off
    assert not auto.cells.sign_symmetric and np.all(auto.cells.signs == 1)
    assert expert_error(G, Gs, gate=gate, activation=activation) == expert_error(
        G, Gs, gate=gate, activation=activation, sign_symmetry=False)


def test_tanh_without_gate_keeps_plain_cells():
    Gs = random_measure(1, 2, 2, 2, random_state=5)
    G = continuum_point(Gs, 0.5)
    assert not voronoi_cells(G, Gs, gate="none", activation="tanh").sign_symmetric
    assert voronoi_loss(G, Gs, gate="none", activation="tanh") > 0.05


def test_sign_symmetry_bad_value():
    Gs = random_measure(1, 2, 2, 2, random_state=5)
    for fn in (voronoi_loss, voronoi_cells, expert_error):
        with pytest.raises(ValueError, match="sign_symmetry must be 'auto', True or False"):
            fn(Gs, Gs, gate="value", activation="tanh", sign_symmetry="yes")
