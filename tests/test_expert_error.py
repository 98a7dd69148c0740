"""Expert error (paper eq. (7)) and regression error (Proposition 1) against brute force."""

import numpy as np
import pytest

from hmoe_estim import MixingMeasure, regression_function
from hmoe_estim.metrics import expert_error, regression_error

from .reference import f_ref, phi_ref, random_arrays
from .test_voronoi import slow_branches, slow_cells, slow_pair_cost, split_fit, true_measure


def brute_expert_error(G, Gs, X, gate="none", activation="sigmoid", weighting="heaviest",
                       reading=None):
    """Per true expert (h, i, k): max over x of |ê(x) − e*(x)|, loop by loop."""
    if reading is None:
        reading = "activated" if gate == "value" else "linear"
    cell_reading = "activated" if gate == "value" else "linear"
    cells = slow_cells(G, Gs, X, cell_reading, activation)
    Hs, N, Ks, _ = Gs.shape

    def e(a, x):
        z = float(a @ x)
        return float(phi_ref(activation, z)) if reading == "activated" else z

    out = np.zeros((Hs, N, Ks))
    for (h, k), members in cells.items():
        if members:
            exponent = 1 if len(members) == 1 else 2
            atoms = [(m, slow_pair_cost(G, Gs, *m, h, k, exponent)[1]) for m in members]
        else:  # empty cell: the fitted channel whose branch is nearest to the true branch
            Bf = slow_branches(G, X, cell_reading, activation)
            Bt = slow_branches(Gs, X, cell_reading, activation)
            best, best_d = None, np.inf
            for hp in range(G.n_heads):
                for kp in range(G.n_experts):
                    d = np.mean((Bf[:, hp, kp] - Bt[:, h, k]) ** 2)
                    if d < best_d:
                        best, best_d = (hp, kp), d
            atoms = [(best, slow_pair_cost(G, Gs, *best, h, k, 1)[1])]
        for i in range(N):
            errs = []
            for (hp, kp), p in atoms:
                errs.append(max(abs(e(G.a[hp, p[i], kp], x) - e(Gs.a[h, i, k], x)) for x in X))
            w = [G.omega[m] for m, _ in atoms]
            if weighting == "heaviest":
                out[h, i, k] = errs[int(np.argmax(w))]
            elif weighting == "max":
                out[h, i, k] = max(errs)
            else:
                out[h, i, k] = sum(wj * ej for wj, ej in zip(w, errs)) / sum(w)
    return out


@pytest.fixture
def X_small():
    return np.random.default_rng(321).uniform(-1, 1, size=(120, 3))


@pytest.mark.parametrize("gate", ["none", "value", "sdpa", "output"])
def test_zero_at_truth_and_relabelling(gate):
    rng = np.random.default_rng(0)
    Gs = true_measure(rng, H=2, N=3, K=2, D=3)
    assert expert_error(Gs, Gs, gate=gate) <= 1e-12
    P = Gs.permuted(heads=[1, 0], channels=[1, 0], tokens=[[2, 0, 1], [1, 2, 0]]).normalized()
    assert expert_error(P, Gs, gate=gate) <= 1e-12
    assert regression_error(Gs, Gs, gate=gate) == 0.0
    assert regression_error(P, Gs, gate=gate) <= 1e-12
    per = expert_error(P, Gs, gate=gate, per_expert=True)
    assert per.shape == (2, 3, 2) and np.all(per <= 1e-12)


@pytest.mark.parametrize("gate", ["none", "value"])
@pytest.mark.parametrize("weighting", ["heaviest", "weighted", "max"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_brute_force(gate, weighting, seed, X_small):
    rng = np.random.default_rng(20 + seed)
    Gs = true_measure(rng, H=1 + seed, N=3, K=2, D=3)
    G = split_fit(Gs, rng, noise=0.15)
    want = brute_expert_error(G, Gs, X_small, gate=gate, weighting=weighting)
    got = expert_error(G, Gs, gate=gate, X_ref=X_small, weighting=weighting, per_expert=True)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
    got = expert_error(G, Gs, gate=gate, X_ref=X_small, weighting=weighting)
    assert got == pytest.approx(want.max())


@pytest.mark.parametrize("reading", ["linear", "activated"])
def test_expert_reading_option(reading, X_small):
    rng = np.random.default_rng(5)
    Gs = true_measure(rng, H=1, N=3, K=2, D=3)
    G = split_fit(Gs, rng, noise=0.1)
    for gate in ("none", "value"):
        want = brute_expert_error(G, Gs, X_small, gate=gate, reading=reading)
        got = expert_error(G, Gs, gate=gate, X_ref=X_small, expert=reading, per_expert=True)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


def test_over_specified_treatments(X_small):
    """A near-zero-weight extra atom far away: 'max' sees it, 'heaviest' does not."""
    rng = np.random.default_rng(6)
    Gs = true_measure(rng, H=1, N=2, K=2, D=3)
    # extra atom: a copy of channel 0's gate branch with tiny weight and wandering experts
    a_extra = Gs.a[:, :, :1] + 0.3 * rng.normal(size=(1, 2, 1, 3))
    G = MixingMeasure(
        np.concatenate([Gs.omega, [[1e-3]]], axis=1),
        Gs.M,
        np.concatenate([Gs.a, a_extra], axis=2),
    )
    heavy = expert_error(G, Gs, X_ref=X_small)
    worst = expert_error(G, Gs, X_ref=X_small, weighting="max")
    weighted = expert_error(G, Gs, X_ref=X_small, weighting="weighted")
    assert heavy <= 1e-12
    assert worst > 0.1
    assert 0 < weighted < 1e-2 * worst


def test_empty_cell_uses_nearest_branch(X_small):
    rng = np.random.default_rng(7)
    Gs = true_measure(rng, H=1, N=2, K=2, D=3)
    G = MixingMeasure(Gs.omega[:, :1], Gs.M, Gs.a[:, :, :1])  # K = 1 < K* = 2
    want = brute_expert_error(G, Gs, X_small)
    got = expert_error(G, Gs, X_ref=X_small, per_expert=True)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert np.all(got[:, :, 0] <= 1e-12) and np.all(got[:, :, 1] > 0)


def test_grows_with_perturbation():
    rng = np.random.default_rng(8)
    Gs = true_measure(rng, H=1, N=3, K=2, D=3)
    da = rng.normal(size=Gs.a.shape)
    errs = [expert_error(MixingMeasure(Gs.omega, Gs.M, Gs.a + t * da), Gs)
            for t in (1e-3, 1e-2, 1e-1)]
    assert np.all(np.diff(errs) > 0)


@pytest.mark.parametrize("gate", ["none", "value", "sdpa", "output"])
@pytest.mark.parametrize("activation", ["sigmoid", "gelu"])
def test_regression_error_direct(gate, activation, X_small):
    rng = np.random.default_rng(9)
    Gs = true_measure(rng, H=2, N=3, K=2, D=3)
    omega, M, a = random_arrays(1, 2, 3, 3, rng)  # another H, N and K
    G = MixingMeasure(omega, M, a)
    diff = f_ref(G.omega, G.M, G.a, X_small, gate, activation) - f_ref(
        Gs.omega, Gs.M, Gs.a, X_small, gate, activation
    )
    want = np.sqrt(np.mean(diff**2))
    got = regression_error(G, Gs, gate=gate, activation=activation, X_ref=X_small)
    assert got == pytest.approx(want, rel=1e-10)
    # default reference sample: seeded uniform on [-1, 1]^D
    X_def = np.random.default_rng(0).uniform(-1, 1, size=(4096, 3))
    d2 = regression_function(G, X_def, gate=gate, activation=activation) - regression_function(
        Gs, X_def, gate=gate, activation=activation
    )
    assert regression_error(G, Gs, gate=gate, activation=activation) == pytest.approx(
        np.sqrt(np.mean(d2**2)), rel=1e-12
    )


def test_bad_inputs():
    rng = np.random.default_rng(10)
    Gs = true_measure(rng, H=1, N=3, K=2, D=3)
    other_D = true_measure(rng, H=1, N=3, K=2, D=2)
    with pytest.raises(ValueError, match="D = 2.*D = 3"):
        expert_error(other_D, Gs)
    with pytest.raises(ValueError, match="D = 2.*D = 3"):
        regression_error(other_D, Gs)
    with pytest.raises(ValueError, match="n_tokens=3"):
        expert_error(true_measure(rng, H=1, N=2, K=2, D=3), Gs)
    with pytest.raises(ValueError, match="weighting"):
        expert_error(Gs, Gs, weighting="mean")
    with pytest.raises(ValueError, match="expert reading"):
        expert_error(Gs, Gs, expert="relu")
    with pytest.raises(ValueError, match=r"shape \(n_ref, 3\)"):
        expert_error(Gs, Gs, X_ref=np.zeros((5, 4)))
    with pytest.raises(ValueError, match=r"shape \(n_ref, 3\)"):
        regression_error(Gs, Gs, X_ref=np.zeros((5, 4)))
    with pytest.raises(ValueError, match="activation"):
        regression_error(Gs, Gs, activation="relu")
