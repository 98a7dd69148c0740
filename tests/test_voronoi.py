"""Voronoi cells and losses (paper, Section 3) against a loop-by-loop evaluation written here."""

import itertools

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from hmoe_estim import MixingMeasure, voronoi_cells, voronoi_loss
from hmoe_estim.metrics._branches import match_tokens, token_cost_tables

from .reference import gate_ref, phi_ref, random_arrays

# --------------------------------------------------------------------------------------
# independent slow evaluation, written from the definitions in docs/theory.rst
# --------------------------------------------------------------------------------------


def slow_branches(G, X, reading, activation):
    """f_G^{h,k}(x) = Σ_i g[h,i](x) expert[h,i,k](x), one sample at a time."""
    H, N, K, D = G.shape
    out = np.zeros((len(X), H, K))
    for t, x in enumerate(X):
        for h in range(H):
            g = gate_ref(G.M[h], x)
            for k in range(K):
                for i in range(N):
                    z = G.a[h, i, k] @ x
                    e = phi_ref(activation, z) if reading == "activated" else z
                    out[t, h, k] += g[i] * e
    return out


def slow_cells(G, Gs, X, reading, activation):
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
                    d = np.sqrt(np.mean((B[:, hp, kp] - Bs[:, h, k]) ** 2))
                    if d < best_d:
                        best, best_d = (h, k), d
            cells[best].append((hp, kp))
    return cells


def slow_pair_cost(G, Gs, hp, kp, h, k, e):
    """min over token permutations of Σ_i ‖ΔM_i‖_F^e + ‖Δa_i‖^e, gauge re-normalised."""
    N = G.n_tokens
    best, best_perm = np.inf, None
    for p in itertools.permutations(range(N)):
        total = 0.0
        for i in range(N):
            M_fit = G.M[hp, p[i]] - G.M[hp, p[N - 1]]
            M_true = Gs.M[h, i] - Gs.M[h, N - 1]
            total += np.linalg.norm(M_fit - M_true, "fro") ** e
            total += np.linalg.norm(G.a[hp, p[i], kp] - Gs.a[h, i, k]) ** e
        if total < best:
            best, best_perm = total, p
    return best, best_perm


def slow_voronoi(G, Gs, X, r=None, gate="none", activation="sigmoid"):
    reading = "activated" if gate == "value" else "linear"
    cells = slow_cells(G, Gs, X, reading, activation)
    weight = exact = over = 0.0
    for (h, k), members in cells.items():
        weight += abs(sum(G.omega[m] for m in members) - Gs.omega[h, k])
        e = r if r is not None else (1 if len(members) == 1 else 2)
        for hp, kp in members:
            cost, _ = slow_pair_cost(G, Gs, hp, kp, h, k, e)
            if len(members) == 1:
                exact += G.omega[hp, kp] * cost
            else:
                over += G.omega[hp, kp] * cost
    return weight + exact + over, weight, exact, over, cells


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------


def true_measure(rng, H=1, N=3, K=2, D=3, scale=1.0):
    return MixingMeasure(*random_arrays(H, N, K, D, rng, scale=scale)).normalized()


def split_fit(Gs, rng, noise=0.05, frac=0.3, gauge_shift=True):
    """An over-specified 'fit' with K = K*+1: channel 0 split in two, noise, relabelled."""
    H, N, K, D = Gs.shape
    omega = np.concatenate([Gs.omega, Gs.omega[:, :1] * frac], axis=1)
    omega[:, 0] *= 1 - frac
    a = np.concatenate([Gs.a, Gs.a[:, :, :1]], axis=2)
    a = a + noise * rng.normal(size=a.shape)
    M = Gs.M + noise * rng.normal(size=Gs.M.shape)
    M = 0.5 * (M + M.transpose(0, 1, 3, 2))
    if gauge_shift:  # any gauge: add one symmetric matrix per head
        S = rng.normal(size=(H, 1, D, D))
        M = M + 0.5 * (S + S.transpose(0, 1, 3, 2))
    omega = omega * (1 + noise * rng.uniform(-1, 1, size=omega.shape))
    G = MixingMeasure(omega, M, a)
    return G.permuted(
        heads=rng.permutation(H),
        channels=rng.permutation(K + 1),
        tokens=np.array([rng.permutation(N) for _ in range(H)]),
    )


@pytest.fixture
def X_small():
    return np.random.default_rng(123).uniform(-1, 1, size=(150, 3))


# --------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("gate", ["none", "value", "sdpa"])
@pytest.mark.parametrize("r", [None, 1, 2])
def test_zero_at_truth(gate, r):
    rng = np.random.default_rng(0)
    Gs = true_measure(rng, H=2, N=3, K=3, D=3)
    assert voronoi_loss(Gs, Gs, gate=gate, r=r) <= 1e-12
    # a measure given in another gauge is the same function: still 0
    Gs_shift = MixingMeasure(Gs.omega, Gs.M + np.eye(3), Gs.a)
    assert voronoi_loss(Gs_shift, Gs, gate=gate, r=r) <= 1e-12
    assert voronoi_loss(Gs, Gs_shift, gate=gate, r=r) <= 1e-12


@pytest.mark.parametrize("r", [None, 1, 3])
def test_invariant_under_relabelling(r):
    rng = np.random.default_rng(1)
    Gs = true_measure(rng, H=2, N=4, K=3, D=3)
    G = split_fit(Gs, rng, gauge_shift=False)
    base = voronoi_loss(G, Gs, r=r)
    for _ in range(3):
        P = G.permuted(
            heads=rng.permutation(2),
            channels=rng.permutation(G.n_experts),
            tokens=np.array([rng.permutation(4) for _ in range(2)]),
        ).normalized()
        assert voronoi_loss(P, Gs, r=r) == pytest.approx(base, rel=1e-10, abs=1e-12)
        # relabelled truth is the truth
        Ps = Gs.permuted(
            heads=[1, 0], channels=rng.permutation(3), tokens=rng.permutation(4)
        ).normalized()
        assert voronoi_loss(Ps, Gs, r=r) <= 1e-12
        # relabelling the truth's heads, channels and tokens other than the last (the gauge
        # reference of the normalised G*, assumption (A.3)) leaves the loss unchanged
        Ps_fixed_last = Gs.permuted(
            heads=[1, 0], channels=rng.permutation(3), tokens=[*rng.permutation(3), 3]
        )
        assert voronoi_loss(G, Ps_fixed_last, r=r) == pytest.approx(base, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("r", [None, 1, 2])
def test_grows_with_perturbation(r):
    rng = np.random.default_rng(2)
    Gs = true_measure(rng, H=1, N=3, K=2, D=3)
    dM = rng.normal(size=Gs.M.shape)
    dM = 0.5 * (dM + dM.transpose(0, 1, 3, 2))
    da = rng.normal(size=Gs.a.shape)
    dw = rng.uniform(0.1, 1.0, size=Gs.omega.shape)
    losses = []
    for t in [1e-4, 1e-3, 1e-2, 1e-1, 3e-1]:
        G = MixingMeasure(Gs.omega + t * dw, Gs.M + t * dM, Gs.a + t * da)
        losses.append(voronoi_loss(G, Gs, r=r))
    assert np.all(np.diff(losses) > 0), losses
    assert losses[0] < 1e-2


@pytest.mark.parametrize("gate", ["none", "value"])
@pytest.mark.parametrize("r", [None, 1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_slow_evaluation_over_specified(gate, r, seed, X_small):
    rng = np.random.default_rng(10 + seed)
    Gs = true_measure(rng, H=1 + seed % 2, N=3, K=2, D=3)
    G = split_fit(Gs, rng, noise=0.1)
    loss, weight, exact, over, cells = slow_voronoi(G, Gs, X_small, r=r, gate=gate)
    d = voronoi_loss(G, Gs, gate=gate, r=r, X_ref=X_small, return_details=True)
    assert d.loss == pytest.approx(loss, rel=1e-10)
    assert d.weight_part == pytest.approx(weight, rel=1e-10, abs=1e-14)
    assert d.exact_part == pytest.approx(exact, rel=1e-10, abs=1e-14)
    assert d.over_part == pytest.approx(over, rel=1e-10, abs=1e-14)
    assert d.weight_part + d.exact_part + d.over_part == pytest.approx(d.loss)
    for (h, k), members in cells.items():
        assert d.cells[h, k] == members
    assert voronoi_loss(G, Gs, gate=gate, r=r, X_ref=X_small) == pytest.approx(loss, rel=1e-10)


def test_details_of_a_split_channel(X_small):
    rng = np.random.default_rng(3)
    Gs = true_measure(rng, H=1, N=3, K=2, D=3)
    G = split_fit(Gs, rng, noise=0.0, frac=0.2, gauge_shift=True)
    d = voronoi_loss(G, Gs, X_ref=X_small, return_details=True)
    # exact split of channel 0 (weights 0.8 / 0.2 of omega*), channel 1 untouched
    assert d.loss <= 1e-12
    assert sorted(d.cells.sizes.ravel().tolist()) == [1, 2]
    np.testing.assert_allclose(d.cell_weights, Gs.omega, atol=1e-14)
    assert len(d.extra_atoms) == 1
    np.testing.assert_allclose(d.extra_weights, [0.2 * Gs.omega[0, 0]])
    assert d.cell_exponents[0, 0] == 2 and d.cell_exponents[0, 1] == 1
    # the token permutations undo the relabelling: parameters coincide after matching
    for (hp, kp) in d.cells[0, 0] + d.cells[0, 1]:
        h, k = d.cells.assignment[hp, kp]
        perm = d.token_permutations[hp, kp]
        np.testing.assert_allclose(G.a[hp, perm, kp], Gs.a[h, :, k], atol=1e-12)
    # L_{1,1} and L_2 differ once atoms are off the truth in an over-specified cell
    G2 = split_fit(Gs, rng, noise=0.3)
    assert voronoi_loss(G2, Gs, r=1) != pytest.approx(voronoi_loss(G2, Gs))


def test_token_swap_is_gauge_aware():
    rng = np.random.default_rng(4)
    Gs = true_measure(rng, H=1, N=3, K=2, D=3, scale=2.0)
    # swap the last token with another one, then re-normalise (M[N-1] = 0 again)
    G = Gs.permuted(tokens=[0, 2, 1]).normalized()
    assert voronoi_loss(G, Gs) <= 1e-12
    assert voronoi_loss(G, Gs, r=2) <= 1e-12
    # naive: Hungarian on raw M and a, no gauge re-normalisation
    naive = 0.0
    for k in range(2):
        C = np.array(
            [
                [
                    np.linalg.norm(G.M[0, j] - Gs.M[0, i])
                    + np.linalg.norm(G.a[0, j, k] - Gs.a[0, i, k])
                    for j in range(3)
                ]
                for i in range(3)
            ]
        )
        rows, cols = linear_sum_assignment(C)
        naive += G.omega[0, k] * C[rows, cols].sum()
    assert naive > 0.5


@pytest.mark.parametrize("N", [1, 2, 3, 5, 7])
def test_hungarian_equals_enumeration(N):
    rng = np.random.default_rng(N)
    D = 2
    for e in (1, 2, 3):
        M_fit = rng.normal(size=(N, D, D))
        M_fit = M_fit + M_fit.transpose(0, 2, 1)
        M_true = rng.normal(size=(N, D, D))
        M_true = M_true + M_true.transpose(0, 2, 1)
        M_true -= M_true[-1]
        cM, ca = token_cost_tables(M_fit, rng.normal(size=(N, D)), M_true,
                                   rng.normal(size=(N, D)), e)
        p1, c1 = match_tokens(cM, ca, method="enumerate")
        p2, c2 = match_tokens(cM, ca, method="hungarian")
        assert c1 == pytest.approx(c2, rel=1e-12)
        idx = np.arange(N)
        assert cM[p2[-1], p2, idx].sum() + ca[p2, idx].sum() == pytest.approx(c2)
        assert sorted(p2.tolist()) == list(range(N))


def test_hungarian_option_in_loss(X_small):
    rng = np.random.default_rng(5)
    Gs = true_measure(rng, H=2, N=3, K=2, D=3)
    G = split_fit(Gs, rng, noise=0.2)
    a = voronoi_loss(G, Gs, X_ref=X_small, token_matching="enumerate")
    b = voronoi_loss(G, Gs, X_ref=X_small, token_matching="hungarian")
    assert a == pytest.approx(b, rel=1e-12)


def test_different_K_and_H_and_empty_cells(X_small):
    rng = np.random.default_rng(6)
    Gs = true_measure(rng, H=1, N=2, K=3, D=3)
    # fit with a single channel: at least two empty cells; they contribute |0 - omega*|
    G1 = MixingMeasure(Gs.omega[:, :1], Gs.M, Gs.a[:, :, :1])
    d = voronoi_loss(G1, Gs, X_ref=X_small, return_details=True)
    assert d.cells.sizes.sum() == 1
    empty = d.cells.sizes == 0
    assert d.weight_part == pytest.approx(Gs.omega[empty].sum(), rel=1e-12)
    assert d.loss == pytest.approx(slow_voronoi(G1, Gs, X_small)[0], rel=1e-10)
    # a fit with two heads for a one-head truth
    G2 = MixingMeasure(
        np.concatenate([Gs.omega, 0.1 * Gs.omega]),
        np.concatenate([Gs.M, Gs.M + 0.1]),
        np.concatenate([Gs.a, Gs.a + 0.1]),
    )
    assert voronoi_loss(G2, Gs, X_ref=X_small, r=2) == pytest.approx(
        slow_voronoi(G2, Gs, X_small, r=2)[0], rel=1e-10
    )


def test_cells_api(X_small):
    rng = np.random.default_rng(7)
    Gs = true_measure(rng, H=2, N=3, K=2, D=3)
    G = split_fit(Gs, rng, noise=0.05)
    cells = voronoi_cells(G, Gs, X_ref=X_small)
    assert cells.assignment.shape == (2, 3, 2)
    assert cells.distances.shape == (2, 3, 2, 2)
    assert cells.sizes.sum() == 6
    slow = slow_cells(G, Gs, X_small, "linear", "sigmoid")
    for (h, k), members in slow.items():
        assert cells.members[h][k] == members
    # distances are the L2(X_ref) norms of branch differences, with the gate's expert reading
    for gate, reading in [("none", "linear"), ("value", "activated"), ("sdpa", "linear")]:
        c = voronoi_cells(G, Gs, gate=gate, activation="tanh", X_ref=X_small)
        B = slow_branches(G, X_small, reading, "tanh")
        Bs = slow_branches(Gs, X_small, reading, "tanh")
        want = np.sqrt(((B[:, :, :, None, None] - Bs[:, None, None]) ** 2).mean(axis=0))
        if gate != "none":  # tanh is odd: G1/G2 distances quotient the sign flip of a channel
            flip = np.sqrt(((B[:, :, :, None, None] + Bs[:, None, None]) ** 2).mean(axis=0))
            want = np.minimum(want, flip)
        np.testing.assert_allclose(c.distances, want, rtol=1e-10, atol=1e-14)
        assert c.expert == reading
    # default reference sample is seeded: same cells twice, n_ref honoured
    c1 = voronoi_cells(G, Gs, n_ref=500, random_state=3)
    c2 = voronoi_cells(G, Gs, n_ref=500, random_state=3)
    np.testing.assert_array_equal(c1.distances, c2.distances)
    assert c1.n_ref == 500


def test_bad_inputs():
    rng = np.random.default_rng(8)
    Gs = true_measure(rng, H=1, N=3, K=2, D=3)
    for r in (0, -1, 1.5, "2", True):
        with pytest.raises(ValueError, match="r must be an integer"):
            voronoi_loss(Gs, Gs, r=r)
    assert voronoi_loss(Gs, Gs, r=2.0) <= 1e-12  # an integral float is an integer
    other_D = true_measure(rng, H=1, N=3, K=2, D=4)
    with pytest.raises(ValueError, match="D = 4.*D = 3"):
        voronoi_loss(other_D, Gs)
    with pytest.raises(ValueError, match="D = 4.*D = 3"):
        voronoi_cells(other_D, Gs)
    other_N = true_measure(rng, H=1, N=2, K=2, D=3)
    with pytest.raises(ValueError, match="n_tokens=3"):
        voronoi_loss(other_N, Gs)
    with pytest.raises(ValueError, match=r"X_ref.*shape \(n_ref, 3\)"):
        voronoi_loss(Gs, Gs, X_ref=np.zeros((10, 2)))
    with pytest.raises(ValueError, match="X_ref"):
        voronoi_loss(Gs, Gs, X_ref=np.zeros(10))
    with pytest.raises(ValueError, match="MixingMeasure"):
        voronoi_loss(Gs.to_dict(), Gs)
    with pytest.raises(ValueError, match="gate"):
        voronoi_loss(Gs, Gs, gate="G7")
    with pytest.raises(ValueError, match="token_matching"):
        voronoi_loss(Gs, Gs, token_matching="greedy")
    with pytest.raises(ValueError, match="expert reading"):
        voronoi_cells(Gs, Gs, expert="quadratic")
    with pytest.raises(ValueError, match="n_ref"):
        voronoi_cells(Gs, Gs, n_ref=0)
