"""The Gauss–Newton kernel (``JᵀJ``, ``Jᵀr``, ``Σr²``, ``ΣJ``) against a plain-NumPy Jacobian.

The reference Jacobian is built column by column from central finite differences of the
prediction kernel (itself checked against the loop-by-loop ``f_ref`` in ``test_kernels.py``),
for every gate × activation and several shapes, with a non-zero intercept ``offset``.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from hmoe_estim._names import ACTIVATION_CODES, ACTIVATIONS, GATE_CODES, GATES
from hmoe_estim.kernels.jacobian import (
    gauss_newton_sums,
    jacobian_matrix,
    sum_of_squares,
    summed_rows,
)
from hmoe_estim.kernels.objective import BLOCK, objective_and_gradient, predict
from hmoe_estim.model import n_params


def _fd_jacobian(theta, XT, shape, g, a, rel=1e-6):
    P = theta.size
    J = np.empty((XT.shape[1], P))
    for p in range(P):
        h = rel * max(1.0, abs(theta[p]))
        e = np.zeros(P)
        e[p] = h
        up, down = predict(theta + e, XT, *shape, g, a), predict(theta - e, XT, *shape, g, a)
        J[:, p] = (up - down) / (2 * h)
    return J


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("shape", [(1, 2, 3, 2), (2, 3, 2, 3), (1, 1, 2, 3)])
def test_gauss_newton_sums_match_numpy_jacobian(gate, activation, shape):
    rng = np.random.default_rng(abs(hash((gate, activation, shape))) % 2**32)
    D = shape[3]
    P = n_params(*shape)
    theta = 0.8 * rng.normal(size=P)
    n = BLOCK + 45  # a full block and a remainder
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(D, n)))
    y = rng.normal(size=n)
    g, a = GATE_CODES[gate], ACTIVATION_CODES[activation]
    offset = 0.37
    JtJ, Jtr, ssr, colsum, rsum = gauss_newton_sums(theta, XT, y, *shape, g, a, offset=offset)
    J = _fd_jacobian(theta, XT, shape, g, a)
    r = predict(theta, XT, *shape, g, a) + offset - y
    ref = J.T @ J
    assert JtJ.shape == (P, P)
    np.testing.assert_array_equal(JtJ, JtJ.T)
    np.testing.assert_allclose(JtJ, ref, rtol=1e-6, atol=1e-7 * np.abs(ref).max())
    np.testing.assert_allclose(Jtr, J.T @ r, rtol=1e-6, atol=1e-7 * np.abs(J.T @ r).max())
    np.testing.assert_allclose(colsum, J.sum(0), rtol=1e-6, atol=1e-7 * np.abs(J).sum(0).max())
    assert ssr == pytest.approx(r @ r, rel=1e-12)
    Jk = jacobian_matrix(theta, XT, *shape, g, a)  # the explicit Jacobian, same derivatives
    np.testing.assert_allclose(Jk, J, rtol=1e-5, atol=1e-7 * np.abs(J).max())
    np.testing.assert_allclose(JtJ, Jk.T @ Jk, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
    assert rsum == pytest.approx(r.sum(), rel=1e-10, abs=1e-12 * np.abs(r).sum())
    ssq = sum_of_squares(theta, XT, y, *shape, g, a, offset=offset)
    assert ssq == pytest.approx(r @ r, rel=1e-12)
    # 2 Jᵀr is the gradient of the summed squares: the objective kernel's gradient times n
    obj, grad = objective_and_gradient(theta, XT, y - offset, *shape, g, a)
    np.testing.assert_allclose(2 * Jtr / n, grad, rtol=1e-9, atol=1e-12 * np.abs(grad).max())
    assert obj == pytest.approx(ssr / n, rel=1e-12)


@pytest.mark.parametrize("shape", [(2, 3, 3, 4), (1, 3, 3, 2)])  # P = 118 and 27 (odd)
def test_thread_count_does_not_change_the_sums(shape):
    import numba

    rng = np.random.default_rng(5)
    theta = 0.5 * rng.normal(size=n_params(*shape))
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(shape[3], 40 * BLOCK + 7)))
    y = rng.normal(size=XT.shape[1])
    old = numba.get_num_threads()
    try:
        for gate in (1,):  # one gate: the accumulation is shared (each gate compiles anew)
            numba.set_num_threads(1)
            one = gauss_newton_sums(theta, XT, y, *shape, gate, 1, offset=0.1)
            s1 = sum_of_squares(theta, XT, y, *shape, gate, 1, offset=0.1)
            numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
            two = gauss_newton_sums(theta, XT, y, *shape, gate, 1, offset=0.1)
            s2 = sum_of_squares(theta, XT, y, *shape, gate, 1, offset=0.1)
            for u, v in zip(one, two):
                np.testing.assert_array_equal(u, v)
            assert s1 == s2
    finally:
        numba.set_num_threads(old)


def test_empty_input():
    P = n_params(1, 2, 1, 2)
    JtJ, Jtr, ssr, colsum, rsum = gauss_newton_sums(
        np.zeros(P), np.zeros((2, 0)), np.zeros(0), 1, 2, 1, 2, 1, 0)
    assert ssr == 0.0 and rsum == 0.0 and not JtJ.any() and not Jtr.any() and not colsum.any()


_SCRIPT = r"""
import json, sys
import numpy as np
from hmoe_estim.kernels.jacobian import gauss_newton_sums
rng = np.random.default_rng(1)
out = {}
H, N, K, D = 1, 3, 2, 2
P = H * K + H * (N - 1) * 3 + H * N * K * D
for gate in range(4):
    theta = rng.normal(size=P)
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(D, 90)))
    y = rng.normal(size=90)
    JtJ, Jtr, ssr, cs, rs = gauss_newton_sums(theta, XT, y, H, N, K, D, gate, (gate + 1) % 4, 0.2)
    out[gate] = [theta.tolist(), XT.tolist(), y.tolist(), JtJ.tolist(), Jtr.tolist(), ssr]
json.dump(out, sys.stdout)
"""


def test_interpreted_kernel_matches_compiled():
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    for gate, (theta, XT, y, JtJ, Jtr, ssr) in json.loads(proc.stdout).items():
        gate = int(gate)
        got = gauss_newton_sums(np.array(theta), np.array(XT), np.array(y), 1, 3, 2, 2, gate,
                                (gate + 1) % 4, 0.2)
        np.testing.assert_allclose(got[0], JtJ, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got[1], Jtr, rtol=1e-10, atol=1e-12)
        assert got[2] == pytest.approx(ssr, rel=1e-12)


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("shape", [(1, 1, 1, 2), (1, 1, 1, 4), (1, 3, 3, 2), (2, 2, 2, 2)])
def test_distinct_entries_and_remainders_against_the_explicit_jacobian(gate, shape):
    # P = 3, 5, 27 and 38: rows with fewer than four or eight summed columns, entries of JᵀJ
    # filled in from another of their class (a power of two apart) — every entry against the
    # explicit Jacobian's J.T @ J
    rng = np.random.default_rng(7)
    P = n_params(*shape)
    theta = 0.7 * rng.normal(size=P)
    n = 2 * BLOCK + 13
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(shape[3], n)))
    y = rng.normal(size=n)
    g, a = GATE_CODES[gate], ACTIVATION_CODES["tanh"]
    JtJ, Jtr, ssr, colsum, rsum = gauss_newton_sums(theta, XT, y, *shape, g, a, offset=-0.2)
    J = jacobian_matrix(theta, XT, *shape, g, a)
    r = predict(theta, XT, *shape, g, a) - 0.2 - y
    ref = J.T @ J
    np.testing.assert_array_equal(JtJ, JtJ.T)
    np.testing.assert_allclose(JtJ, ref, rtol=1e-11, atol=1e-13 * np.abs(ref).max())
    np.testing.assert_allclose(Jtr, J.T @ r, rtol=1e-11, atol=1e-13 * np.abs(J.T @ r).max())
    np.testing.assert_allclose(colsum, J.sum(0), rtol=1e-11, atol=1e-13 * np.abs(J).sum(0).max())
    assert ssr == pytest.approx(r @ r, rel=1e-12)
    assert rsum == pytest.approx(r.sum(), rel=1e-10, abs=1e-12 * np.abs(r).sum())


_SHAPES = [(1, 1, 1, 1), (1, 2, 1, 2), (1, 3, 3, 2), (2, 3, 3, 4), (2, 2, 2, 3), (1, 2, 1, 5)]
# the summed rows of the value gate (J's own) and of the linear gates (the basis J̃)
_LAYOUTS = [(summed_rows(*s[:3], GATE_CODES[g]), s[3]) for s in _SHAPES for g in ("value", "none")]


@pytest.mark.parametrize("rows, D", _LAYOUTS)
def test_distinct_entries_are_one_per_class(rows, D):
    # the pass sums one entry of each class (same two factors, same monomial of x; the
    # docstring of _distinct_entries), counted here by brute force over the upper triangle
    from hmoe_estim.kernels.jacobian import _distinct_entries, _gather

    n0, Mm, R = rows
    T = D * (D + 1) // 2
    P = n0 + Mm * T + R * D
    pairs = [(p, q) for p in range(D) for q in range(p, D)]
    rows = [(("w", k), ()) for k in range(n0)]
    rows += [(("m", m), pq) for m in range(Mm) for pq in pairs]
    rows += [(("a", r), (d,)) for r in range(R) for d in range(D)]
    assert len(rows) == P
    first = {}
    for p in range(P):
        for q in range(p, P):
            key = (tuple(sorted([rows[p][0], rows[q][0]])), tuple(sorted(rows[p][1] + rows[q][1])))
            first.setdefault(key, (p, q))
    ptr, cols = _distinct_entries(n0, Mm, R, D)
    summed = {(p, int(q)) for p in range(P) for q in cols[ptr[p]:ptr[p + 1]]}
    assert summed == set(first.values())
    idx, scale = _gather(n0, Mm, R, D)
    assert set(np.unique(scale)) <= {0.25, 0.5, 1.0, 2.0, 4.0}
    np.testing.assert_array_equal(idx, idx.T)


@pytest.mark.parametrize("rows, D", _LAYOUTS)
def test_tiles_sum_each_distinct_entry_once(rows, D):
    # the tiles of two rows and the rows' rest cover the entries of _distinct_entries, each once
    from hmoe_estim.kernels.jacobian import _distinct_entries, _tiles

    ptr, cols = _distinct_entries(*rows, D)
    rows2, tptr, tcols, rptr, rcols = _tiles(*rows, D, True)
    P = ptr.size - 1
    summed = [(p, int(q)) for p in range(P) for q in rcols[rptr[p]:rptr[p + 1]]]
    for g in range(rows2.shape[0]):
        for q in tcols[tptr[g]:tptr[g + 1]]:
            summed += [(int(rows2[g, 0]), int(q)), (int(rows2[g, 1]), int(q))]
    assert len(summed) == len(set(summed)) == cols.size
    assert set(summed) == {(p, int(q)) for p in range(P) for q in cols[ptr[p]:ptr[p + 1]]}
    assert all(tptr[g + 1] - tptr[g] >= 4 for g in range(rows2.shape[0]))
    rows2, tptr, tcols, rptr, rcols = _tiles(*rows, D, False)  # no tiles: the rows as they are
    assert rows2.shape[0] == 0 and np.array_equal(rptr, ptr) and np.array_equal(rcols, cols)


@pytest.mark.parametrize("gate", ["none", "output"])
def test_linear_gates_sum_a_basis_and_expand_it_exactly(gate):
    # the linear gates sum the products of the basis rows g_hi x_d and M's rows (fewer sums
    # per chunk than JᵀJ has entries), and JᵀJ = Lᵀ(J̃ᵀJ̃)L reproduces the explicit Jacobian's,
    # also with a zero omega (its a rows are then zero, its own row is not)
    from hmoe_estim.kernels.jacobian import sums_width

    shape = (2, 3, 2, 3)
    H, N, K, D = shape
    P = n_params(*shape)
    g, a = GATE_CODES[gate], ACTIVATION_CODES["silu"]
    assert sums_width(*shape, g) < P * (P + 1) // 2 < sums_width(*shape, GATE_CODES["value"])
    rng = np.random.default_rng(11)
    theta = 0.7 * rng.normal(size=P)
    theta[1] = 0.0
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(D, BLOCK + 40)))
    y = rng.normal(size=XT.shape[1])
    JtJ, Jtr, ssr, colsum, rsum = gauss_newton_sums(theta, XT, y, *shape, g, a)
    J = jacobian_matrix(theta, XT, *shape, g, a)
    r = predict(theta, XT, *shape, g, a) - y
    ref = J.T @ J
    o2 = H * K + H * (N - 1) * D * (D + 1) // 2
    zero_rows = [o2 + (i * K + 1) * D + d for i in range(N) for d in range(D)]  # a_0i1
    assert not J[:, zero_rows].any() and not JtJ[zero_rows].any()
    np.testing.assert_array_equal(JtJ, JtJ.T)
    np.testing.assert_allclose(JtJ, ref, rtol=1e-11, atol=1e-13 * np.abs(ref).max())
    np.testing.assert_allclose(Jtr, J.T @ r, rtol=1e-11, atol=1e-13 * np.abs(J.T @ r).max())
    np.testing.assert_allclose(colsum, J.sum(0), rtol=1e-11, atol=1e-13 * np.abs(J).sum(0).max())
    assert JtJ[1, 1] > 0.0  # the zero omega's own column is not zero
