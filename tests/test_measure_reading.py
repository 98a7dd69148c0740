"""The measure level of the Voronoi loss and the expert error (``level="measure"``), and the
identifiability report per level.

The reference below is a slow, independent plain-Python/NumPy implementation (loops, its own
activations, gate, merging, cells and gauge matching): it shares no helper with the package.
"""

import itertools
import math

import numpy as np
import pytest

from hmoe_estim import MixingMeasure, random_measure, regression_function
from hmoe_estim.metrics import (
    expert_error,
    identifiability_report,
    measure_atoms,
    measure_verdict_label,
    verdict_label,
    voronoi_cells,
    voronoi_loss,
)

ACTIVATIONS = ("sigmoid", "tanh", "gelu", "silu")
TOL = 1e-9


# -- the slow reference ------------------------------------------------------------------------
def _phi(act, z):
    if act == "sigmoid":
        return 1.0 / (1.0 + math.exp(-z))
    if act == "tanh":
        return math.tanh(z)
    if act == "gelu":
        return z * 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
    return z / (1.0 + math.exp(-z))


def _norm(v):
    return math.sqrt(sum(float(t) ** 2 for t in np.ravel(v)))


def _normalized_M(G):
    H, N = G.M.shape[:2]
    return [[G.M[h, i] - G.M[h, N - 1] for i in range(N)] for h in range(H)]


def _slow_atoms(G, act):
    """List of (head, token, weight, a, members), merged per head, null/zero dropped."""
    H, N, K, D = G.a.shape
    M = _normalized_M(G)
    out = []
    for h in range(H):
        groups = [[(i, k)] for i in range(N) for k in range(K)]
        merged = True
        while merged:  # merge any two groups with a pair of coinciding atoms, until stable
            merged = False
            for p in range(len(groups)):
                for q in range(p + 1, len(groups)):
                    if any(_norm(M[h][i] - M[h][j]) <= TOL and _norm(G.a[h, i, k] - G.a[h, j, m])
                           <= TOL for i, k in groups[p] for j, m in groups[q]):
                        groups[p] = groups[p] + groups[q]
                        del groups[q]
                        merged = True
                        break
                if merged:
                    break
        groups = [sorted(g) for g in groups]
        groups.sort(key=lambda g: g[0])
        for g in groups:
            total = sum(G.omega[h, k] for _, k in g)
            best = None
            for i, k in g:
                if best is None or abs(G.omega[h, k]) > abs(G.omega[h, best[1]]):
                    best = (i, k)
            i, k = best
            a = G.a[h, i, k]
            if (act != "sigmoid" and _norm(a) <= TOL) or abs(total) <= TOL:
                continue
            out.append((h, i, total, a, [(h, ii, kk) for ii, kk in g]))
    return out


def _slow_gate(G, x):
    H, N = G.M.shape[:2]
    g = np.zeros((H, N))
    for h in range(H):
        s = [float(x @ G.M[h, i] @ x) for i in range(N)]
        m = max(s)
        e = [math.exp(v - m) for v in s]
        for i in range(N):
            g[h, i] = e[i] / sum(e)
    return g


def _slow_branches(G, atoms, X, act):
    B = np.zeros((len(X), len(atoms)))
    for t, x in enumerate(X):
        g = _slow_gate(G, x)
        for m, (h, i, _, a, _) in enumerate(atoms):
            B[t, m] = g[h, i] * _phi(act, float(a @ x))
    return B


def _slow_gauge(G, Gs, hp, h):
    """Fitted token matched to the true last token: the gate permutation of least Σ ‖ΔM‖_F."""
    N = G.M.shape[1]
    Mt = _normalized_M(Gs)[h]
    best, best_perm = None, None
    for perm in itertools.permutations(range(N)):
        c = sum(_norm((G.M[hp, perm[i]] - G.M[hp, perm[N - 1]]) - Mt[i]) for i in range(N))
        if best is None or c < best:
            best, best_perm = c, perm
    return best_perm[N - 1]


def _slow_cells(G, Gs, act, X, signed):
    A, As = _slow_atoms(G, act), _slow_atoms(Gs, act)
    B, Bs = _slow_branches(G, A, X, act), _slow_branches(Gs, As, X, act)
    cell, sign = [], []
    for m in range(len(A)):
        best = None
        for j in range(len(As)):
            for s in ((1, -1) if signed else (1,)):
                d = math.sqrt(sum((s * B[t, m] - Bs[t, j]) ** 2 for t in range(len(X))) / len(X))
                if best is None or d < best[0]:
                    best = (d, j, s)
        cell.append(best[1])
        sign.append(best[2])
    return A, As, cell, sign, B, Bs


def slow_measure_loss(G, Gs, act, X, r=None):
    signed = act == "tanh"
    A, As, cell, sign, _, _ = _slow_cells(G, Gs, act, X, signed)
    Mt = _normalized_M(Gs)
    loss = 0.0
    for j, (h, i, w_true, a_true, _) in enumerate(As):
        members = [m for m in range(len(A)) if cell[m] == j]
        loss += abs(sum(sign[m] * A[m][2] for m in members) - w_true)
        e = r if r is not None else (1 if len(members) == 1 else 2)
        for m in members:
            hp, ip, w, a, _ = A[m]
            j0 = _slow_gauge(G, Gs, hp, h)
            dM = (G.M[hp, ip] - G.M[hp, j0]) - Mt[h][i]
            loss += abs(w) * (_norm(dM) ** e + _norm(sign[m] * a - a_true) ** e)
    return loss


def slow_measure_expert_error(G, Gs, act, X, weighting="heaviest"):
    signed = act == "tanh"
    A, As, cell, sign, B, Bs = _slow_cells(G, Gs, act, X, signed)
    worst = 0.0
    for j, (_, _, _, a_true, _) in enumerate(As):
        members = [m for m in range(len(A)) if cell[m] == j]
        if not members:  # nearest fitted atom by branch distance
            best = None
            for m in range(len(A)):
                for s in ((1, -1) if signed else (1,)):
                    d = math.sqrt(sum((s * B[t, m] - Bs[t, j]) ** 2 for t in range(len(X))))
                    if best is None or d < best[0]:
                        best = (d, m, s)
            chosen = [(best[1], best[2])]
        else:
            chosen = [(m, sign[m]) for m in members]
        errs = [max(abs(_phi(act, float(s * A[m][3] @ x)) - _phi(act, float(a_true @ x)))
                    for x in X) for m, s in chosen]
        ws = [abs(A[m][2]) for m, _ in chosen]
        if weighting == "heaviest":
            err = errs[ws.index(max(ws))]
        elif weighting == "max":
            err = max(errs)
        else:
            err = sum(w * e for w, e in zip(ws, errs)) / sum(ws)
        worst = max(worst, err)
    return worst


# -- fixtures ----------------------------------------------------------------------------------
def _X(D, n=200, seed=7):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, D))


def _perturbed(Gs, K, seed, scale=0.3):
    """A fitted-size measure near G*: perturbed channels plus random spare channels."""
    rng = np.random.default_rng(seed)
    H, N, Ks, D = Gs.shape
    omega = np.concatenate([Gs.omega + scale * rng.uniform(0, 1, Gs.omega.shape),
                            rng.uniform(0.05, 0.5, (H, K - Ks))], axis=1)
    M = Gs.M + scale * rng.normal(size=Gs.M.shape)
    M = 0.5 * (M + np.swapaxes(M, 2, 3))
    a = np.concatenate([Gs.a + scale * rng.normal(size=Gs.a.shape),
                        rng.normal(size=(H, N, K - Ks, D))], axis=2)
    return MixingMeasure(omega, M, a)


def _witness(Gs, act, name, K):
    rep = identifiability_report(Gs, gate="value", activation=act, n_experts=K, n_check=300,
                                 search_near=False)
    return next(o.witness for o in rep.obstructions if o.name == name)


# -- agreement with the slow reference ---------------------------------------------------------
@pytest.mark.parametrize("act,shape,K,seed,r", [
    ("sigmoid", (1, 2, 2, 2), 3, 0, None),
    ("tanh", (1, 2, 2, 2), 3, 1, None),
    ("gelu", (2, 2, 2, 2), 3, 2, 1),
    ("silu", (1, 3, 2, 2), 4, 3, 2),
    ("sigmoid", (2, 3, 1, 2), 2, 4, None),
])
def test_measure_loss_matches_the_slow_reference(act, shape, K, seed, r):
    Gs = random_measure(*shape, random_state=seed)
    G = _perturbed(Gs, K, seed + 10)
    X = _X(shape[3])
    fast = voronoi_loss(G, Gs, gate="value", activation=act, X_ref=X, r=r, level="measure")
    slow = slow_measure_loss(G, Gs, act, X, r=r)
    assert fast == pytest.approx(slow, rel=1e-10, abs=1e-12)
    err = expert_error(G, Gs, gate="value", activation=act, X_ref=X, level="measure")
    assert err == pytest.approx(slow_measure_expert_error(G, Gs, act, X), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("act", ["tanh", "sigmoid"])
def test_merging_and_dropping_match_the_slow_reference(act):
    # duplicated channels (merge), a zero-weight channel (dropped), a zero expert (null for tanh)
    Gs = random_measure(1, 2, 2, 2, random_state=5)
    G = _perturbed(Gs, 2, 6, scale=0.2)
    omega = np.concatenate([G.omega, [[0.3, 0.0]]], axis=1)
    a = np.concatenate([G.a, G.a[:, :, :1], G.a[:, :, 1:]], axis=2)
    a[0, 1, 0] = 0.0
    G = MixingMeasure(omega, G.M, a)
    atoms = measure_atoms(G, activation=act)
    assert len(atoms) == (4 if act == "tanh" else 5)  # token 0: 2 merged; token 1: 2 or 3
    X = _X(2)
    for weighting in ("heaviest", "weighted", "max"):
        assert expert_error(G, Gs, gate="value", activation=act, X_ref=X, level="measure",
                            weighting=weighting) == pytest.approx(
            slow_measure_expert_error(G, Gs, act, X, weighting), rel=1e-10, abs=1e-12)
    assert voronoi_loss(G, Gs, gate="value", activation=act, X_ref=X, level="measure") \
        == pytest.approx(slow_measure_loss(G, Gs, act, X), rel=1e-10, abs=1e-12)


# -- the two levels agree where they must ------------------------------------------------------
@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("H,K", [(1, 2), (2, 3)])
@pytest.mark.parametrize("r", [None, 1, 2])
def test_levels_agree_with_one_token_exactly_specified(act, H, K, r):
    T = random_measure(H, 2, K, 3, random_state=H + K)  # keep one token: a constant gate
    Gs = MixingMeasure(T.omega, np.zeros((H, 1, 3, 3)), T.a[:, :1])
    G = _perturbed(Gs, K, 11, scale=0.2)
    X = _X(3, n=500)
    kw = dict(gate="value", activation=act, X_ref=X)
    channel = voronoi_loss(G, Gs, r=r, **kw)
    measure = voronoi_loss(G, Gs, r=r, level="measure", **kw)
    assert measure == pytest.approx(channel, rel=1e-12, abs=1e-14)
    assert expert_error(G, Gs, level="measure", **kw) == pytest.approx(
        expert_error(G, Gs, **kw), rel=1e-12, abs=1e-14)


# -- zero on the quotiented alternatives, positive on different measures ----------------------
@pytest.mark.parametrize("act", ACTIVATIONS)
def test_measure_loss_is_zero_on_the_regroup_and_split_witnesses(act):
    Gs = random_measure(1, 2, 2, 3, random_state=0)
    X = _X(3, n=400)
    names = ["token-regroup"] + (["token-split", "null-atom"] if act != "sigmoid" else [])
    for name in names:
        W = _witness(Gs, act, name, 3)
        assert np.max(np.abs(regression_function(W, X, gate="value", activation=act)
                             - regression_function(Gs, X, gate="value", activation=act))) < 1e-12
        assert voronoi_loss(W, Gs, gate="value", activation=act, X_ref=X) > 1.0  # channel
        for r in (None, 1, 2):
            assert voronoi_loss(W, Gs, gate="value", activation=act, X_ref=X, r=r,
                                level="measure") <= 1e-12
        assert expert_error(W, Gs, gate="value", activation=act, X_ref=X,
                            level="measure") <= 1e-12


def test_measure_loss_is_zero_on_the_regroup_witness_with_two_heads_and_k_4():
    Gs = random_measure(2, 3, 2, 2, random_state=3)
    W = _witness(Gs, "sigmoid", "token-regroup", 4)
    assert voronoi_loss(W, Gs, gate="value", level="measure", n_ref=500) <= 1e-12


def test_measure_loss_is_invariant_to_relabelling_and_the_gauge():
    Gs = random_measure(2, 3, 2, 2, random_state=4)
    G = _perturbed(Gs, 3, 12, scale=0.2)
    X = _X(2)
    base = voronoi_loss(G, Gs, gate="value", X_ref=X, level="measure")
    # permute heads, channels and tokens of G; shift every M of a head by one matrix
    perm_t = [2, 0, 1]
    S = np.array([[0.7, -0.2], [-0.2, 0.4]])
    G2 = MixingMeasure(G.omega[::-1, ::-1], G.M[::-1][:, perm_t] + S,
                       G.a[::-1][:, perm_t][:, :, ::-1])
    assert voronoi_loss(G2, Gs, gate="value", X_ref=X, level="measure") == pytest.approx(
        base, rel=1e-12)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_measure_loss_is_positive_on_different_measures(act):
    Gs = random_measure(1, 2, 2, 3, random_state=0)
    X = _X(3, n=300)
    kw = dict(gate="value", activation=act, X_ref=X, level="measure")
    a = Gs.a.copy()
    a[0, 0, 0] += 0.05
    M = Gs.M.copy()
    M[0, 0] += 0.05 * np.eye(3)
    for G in (MixingMeasure(Gs.omega, Gs.M, a), MixingMeasure(Gs.omega * 1.1, Gs.M, Gs.a),
              MixingMeasure(Gs.omega, M, Gs.a),
              MixingMeasure(2 * Gs.omega, Gs.M, Gs.a / 2)):  # the MHA fibre move
        assert voronoi_loss(G, Gs, **kw) > 1e-3
    # a measure of another f that regroups tokens *without* the spare channel's correction
    b = Gs.a.copy()
    b[0, 1, 0], b[0, 1, 1] = Gs.a[0, 1, 1], Gs.a[0, 1, 0]
    assert voronoi_loss(MixingMeasure(Gs.omega, Gs.M, b), Gs, **kw) > 1e-3


def test_gelu_and_silu_reflection_is_an_exact_alternative_at_the_measure_level():
    # φ(z) − φ(−z) = z: flipping a token's atoms with Σ_k ω_k a_k = 0 keeps f (the reason the
    # measure-level verdict is "unknown" for GELU and SiLU) and changes the measure
    Gs = random_measure(1, 2, 2, 2, random_state=1)
    omega = np.array([[0.4, 1.0]])
    a = Gs.a.copy()
    a[0, 0, 1] = -0.4 * a[0, 0, 0]  # token 0: 0.4 a + 1.0 (−0.4 a) = 0
    T = MixingMeasure(omega, Gs.M, a)
    b = a.copy()
    b[0, 0] = -a[0, 0]
    F = MixingMeasure(omega, Gs.M, b)
    X = _X(2, n=300)
    for act, expected in (("gelu", True), ("silu", True), ("sigmoid", False)):
        gap = np.max(np.abs(regression_function(F, X, gate="value", activation=act)
                            - regression_function(T, X, gate="value", activation=act)))
        assert bool(gap < 1e-12) is expected
        assert voronoi_loss(F, T, gate="value", activation=act, X_ref=X, level="measure") > 0.1


def test_g1_regrouping_keeps_the_measure_and_changes_f():
    # why the measure level is refused for G1: the regrouped measure equals G*, f does not
    Gs = random_measure(1, 2, 2, 2, random_state=0)
    W = _witness(Gs, "sigmoid", "token-regroup", 3)
    X = _X(2, n=300)
    gap = np.max(np.abs(regression_function(W, X, gate="sdpa", activation="sigmoid")
                        - regression_function(Gs, X, gate="sdpa", activation="sigmoid")))
    assert gap > 1e-3
    assert voronoi_loss(W, Gs, gate="value", X_ref=X, level="measure") <= 1e-12


def test_cells_over_atoms():
    Gs = random_measure(1, 2, 2, 2, random_state=0)
    W = _witness(Gs, "sigmoid", "token-regroup", 3)
    cells = voronoi_cells(W, Gs, gate="value", level="measure", n_ref=300)
    assert cells.level == "measure"
    assert len(cells.true_atoms) == 4 and len(cells.atoms) == 4  # merged to G*'s four atoms
    assert list(cells.sizes) == [1, 1, 1, 1]
    assert np.allclose(cells.distances.min(axis=1), 0.0)
    details = voronoi_loss(W, Gs, gate="value", level="measure", n_ref=300,
                           return_details=True)
    assert details.level == "measure" and float(details) == details.loss <= 1e-12
    assert details.exact_part == details.over_part == 0.0


# -- bad input ---------------------------------------------------------------------------------
def test_unknown_level_is_refused_naming_the_valid_values():
    G = random_measure(1, 2, 2, 2, random_state=0)
    for fn in (voronoi_loss, voronoi_cells, expert_error):
        with pytest.raises(ValueError, match="Unknown level 'atom'.*'channel'.*'measure'"):
            fn(G, G, gate="value", level="atom", n_ref=10)
    with pytest.raises(ValueError, match="Unknown level"):
        identifiability_report(G, gate="value", activation="sigmoid", n_experts=2,
                               level="atoms")


@pytest.mark.parametrize("gate,why", [("none", "mha-fibre"), ("output", "mha-fibre"),
                                      ("sdpa", "grouped into channels")])
def test_gates_without_a_measure_level_are_refused_with_the_reason(gate, why):
    G = random_measure(1, 2, 2, 2, random_state=0)
    for fn in (voronoi_loss, voronoi_cells, expert_error):
        with pytest.raises(ValueError, match=f"level='measure' is not defined.*{why}"):
            fn(G, G, gate=gate, level="measure", n_ref=10)
    with pytest.raises(ValueError, match=why):
        identifiability_report(G, gate=gate, activation="sigmoid", n_experts=2,
                               level="measure")


def test_measures_of_another_n_or_d_are_refused():
    G = random_measure(1, 2, 2, 2, random_state=0)
    for other in (random_measure(1, 3, 2, 2, random_state=0),
                  random_measure(1, 2, 2, 3, random_state=0)):
        for fn in (voronoi_loss, voronoi_cells, expert_error):
            with pytest.raises(ValueError, match="tokens|features"):
                fn(other, G, gate="value", level="measure", n_ref=10)


def test_a_true_measure_without_atoms_is_refused():
    G = random_measure(1, 2, 2, 2, random_state=0)
    Z = MixingMeasure(G.omega, G.M, np.zeros_like(G.a))
    with pytest.raises(ValueError, match="no atom"):
        voronoi_loss(G, Z, gate="value", activation="tanh", level="measure", n_ref=10)


# -- identifiability per level -----------------------------------------------------------------
@pytest.mark.parametrize("act,verdict", [("sigmoid", True), ("tanh", "unknown"),
                                         ("gelu", "unknown"), ("silu", "unknown")])
def test_identifiability_at_the_measure_level(act, verdict):
    Gs = random_measure(1, 2, 2, 3, random_state=0)
    kw = dict(gate="value", activation=act, n_experts=3, n_check=400, search_near=False)
    channel = identifiability_report(Gs, **kw)
    measure = identifiability_report(Gs, level="measure", **kw)
    assert channel.identifiable is False and channel.level == "channel"
    assert channel.quotiented == [] and channel.quotient_jacobian is None
    assert measure.level == "measure" and measure.identifiable == verdict
    assert measure.obstructions == []
    quotiented = {o.name for o in measure.quotiented}
    assert quotiented == ({o.name for o in channel.obstructions} & {
        "token-regroup", "token-split", "null-atom"})
    assert all(o.voronoi_loss <= 1e-12 and o.function_gap <= 1e-10 for o in measure.quotiented)
    q = measure.quotient_jacobian
    assert q.null_dimension == 0 and q.n_params == channel.jacobian.n_params + 2  # H(N-1)K*
    d = measure.to_dict()
    assert d["level"] == "measure" and d["quotient_jacobian"]["null_dimension"] == 0
    assert [o["name"] for o in d["quotiented"]] == [o.name for o in measure.quotiented]
    assert "measure level" in measure.summary()
    label = measure_verdict_label(d)
    assert label == "measure level: " + verdict_label(d)
    assert verdict_label(channel.to_dict()).startswith("not identifiable (")
    with pytest.raises(ValueError, match="channel level"):
        measure_verdict_label(channel.to_dict())


def test_channel_level_report_is_unchanged_by_default():
    Gs = random_measure(1, 2, 2, 2, random_state=0)
    rep = identifiability_report(Gs, gate="value", activation="tanh", n_experts=3,
                                 n_check=300, search_near=False)
    assert [o.name for o in rep.obstructions] == ["token-split", "token-regroup", "null-atom"]
    assert rep.identifiable is False and rep.level == "channel"
