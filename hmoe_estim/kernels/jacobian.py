"""Gauss–Newton quantities of the least-squares objective: ``JᵀJ``, ``Jᵀr`` and ``Σ r²``.

For ``theta`` in the layout of ``hmoe_estim/model/_parameters.py`` and the residuals of eq. (3),

    r_j = f_theta(x_j) + offset − y_j,      J[j, p] = ∂ f_theta(x_j) / ∂ theta_p,

one pass over the samples accumulates

    JᵀJ (P × P),   Jᵀr (P),   Σ_j r_j²,   Σ_j J[j, :] (P),   Σ_j r_j

without storing the n × P Jacobian: the rows of ``J`` are formed for one block of ``BLOCK``
samples at a time (``P × BLOCK`` per worker), multiplied out (:func:`_accumulate_block`), and
dropped. Memory is O(P² + n·D). Entries of ``JᵀJ`` that are equal up to a power of two, by the
structure of ``J`` (a factor times a monomial of ``x`` per row), are summed once
(:func:`_distinct_entries`; 60 % of the entries at P = 118) and spread afterwards
(:func:`_gather`).

For the linear gates (none, output) the pass sums the products of a basis ``J̃`` of the rows
instead, ``J = J̃ L`` with a sparse ``L`` that depends on ``theta`` only (:func:`summed_rows`,
:func:`basis_map`): the ``H·N·D`` rows ``g_hi x_d`` stand for the ``H·N·K·D`` rows of ``a``
and the ``H·K`` rows of ``ω``, and ``JᵀJ = Lᵀ (J̃ᵀJ̃) L`` after the pass
(:func:`expand_basis`; 1 040 sums per sample instead of 4 193 at P = 118). There, rows with
nested lists of entries are paired, and a pair is summed two rows by four columns at a time
(:func:`_tiles`), so that each loaded ``J̃[q, t]`` serves two rows.

The scalar ``offset`` is an intercept added to ``f``; the column sums let the caller append
the intercept's column (all ones) to ``J`` in Python, with ``Σ r``:
``[J 1]ᵀ[J 1] = [[JᵀJ, ΣJ], [ΣJᵀ, n]]`` and ``[J 1]ᵀr = [Jᵀr, Σr]``.

The derivatives per sample, for head ``h``, token ``i``, channel ``k`` (``g_i = g[h, i](x)``,
``s_i = xᵀ M[h, i] x``, ``∂g_l/∂s_i = g_l (δ_li − g_i)``; the models of eq. (2), (9), (12)):

- ``gate="none"`` (``z_ik = a_ik·x``, ``b_i = Σ_k ω_k a_ik``, ``f_h = Σ_i g_i b_i·x``):
  ``∂f/∂ω_k = Σ_i g_i z_ik``, ``∂f/∂a_ik = ω_k g_i x``, ``∂f/∂s_i = g_i (b_i·x − f_h)``;
- ``gate="value"`` (``vv_i = Σ_k ω_k φ(z_ik)``, ``f_h = Σ_i g_i vv_i``):
  ``∂f/∂ω_k = Σ_i g_i φ(z_ik)``, ``∂f/∂a_ik = ω_k g_i φ'(z_ik) x``,
  ``∂f/∂s_i = g_i (vv_i − f_h)``;
- ``gate="sdpa"`` (``u_k = Σ_i g_i z_ik``, ``f = Σ_k ω_k φ(u_k)``, ``du_k = ω_k φ'(u_k)``):
  ``∂f/∂ω_k = φ(u_k)``, ``∂f/∂a_ik = du_k g_i x``,
  ``∂f/∂s_i = g_i (Σ_k du_k z_ik − Σ_k du_k u_k)``;
- ``gate="output"``: the ``gate="none"`` row times ``φ'(f_MHA)``;

and ``∂f/∂M[h, i][pq] = (∂f/∂s_i) c_pq x_p x_q`` for the free tokens ``i < N-1`` (A.3).

The forward pass is :func:`~.objective._forward_block`, so ``f`` is the same number the
objective kernel computes. Prediction (:func:`forward_values`, behind
``objective.predict``) runs the same compiled pass without the sums: the data generator, the
solver's trial points and the Gauss–Newton sums need one compilation, not two. The pass is
compiled per gate and activation (:func:`_entry`: the two codes are literal types, so only
their branches are compiled — a fifth less compilation for a first fit — and Python calls the
compiled entry point directly).

Determinism as in :mod:`.objective`: blocks are grouped in chunks whose number depends only on
``n`` and ``P``, each chunk's partial sums are added in chunk order, so the result is
bit-identical for any number of threads, serial or parallel variant.
"""

import functools

import numba
import numpy as np
from numba import njit, prange, types

from . import background
from .layout import theta_offsets as _offsets
from .objective import (
    _PARALLEL,
    BLOCK,
    GATE_NONE,
    GATE_OUTPUT,
    GATE_SDPA,
    _chunks,
    _forward_block,
    _temporaries,
    chunk_total,
    kernel_threads,
    mixed_values,
)
from .rows import combine_rows, gated_sum
from .target import INTERNAL, collector_paused, wide_vectors

__all__ = ["gauss_newton_sums", "sum_of_squares", "jacobian_matrix"]

_FM = {"reassoc", "contract"}
#: Doubles of per-chunk partial sums at most (8 MB): with many parameters, fewer chunks.
_MAX_PARTIAL = 1 << 20


def _jchunks(n, width):
    """:func:`~.objective._chunks`, with fewer chunks when ``width`` sums per chunk would pass
    ``_MAX_PARTIAL``; the count depends only on ``n`` and ``width`` (determinism)."""
    nblocks, nchunks = _chunks(n)
    return nblocks, max(1, min(nchunks, _MAX_PARTIAL // width))


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def _jacobian_block(b, theta, H, N, K, gate, basis, J, x, xx, g, z, phz, dphz, vv, u, phu,
                    dphu, v, du, fo, fh, tmp):
    """Rows ``J[p, :b] = ∂f/∂theta_p`` of a block after :func:`_forward_block`; with
    ``basis`` (the linear gates only), the rows of the basis ``J̃`` of :func:`summed_rows`."""
    wide_vectors()
    zero = np.int64(0)  # row 0 as an int64, not a literal (see objective._forward_block)
    D = x.shape[0]
    T, o1, o2, P = _offsets(H, N, K, D)
    if basis:
        T, o1, o2, P = _rows_offsets(*summed_rows(H, N, K, gate), D)
    for h in range(H):
        r0 = h * N
        if gate == GATE_NONE or gate == GATE_OUTPUT:  # compared here: a literal gate prunes
            gated_sum(g, z, r0, N, fh, b)  # f_h, z[r] = b_i·x
            if basis:
                for i in range(N):
                    ri = r0 + i
                    for d in range(D):
                        for t in range(b):
                            J[o2 + ri * D + d, t] = g[ri, t] * x[d, t]
            else:
                for k in range(K):
                    hk = h * K + k
                    w = theta[hk]
                    for t in range(b):
                        J[hk, t] = 0.0
                    for i in range(N):
                        ri = r0 + i
                        r = ri * K + k
                        combine_rows(theta, o2 + r * D, D, x, tmp, zero, b)  # a_ik·x
                        for t in range(b):
                            J[hk, t] += g[ri, t] * tmp[0, t]
                        for d in range(D):
                            for t in range(b):
                                J[o2 + r * D + d, t] = w * g[ri, t] * x[d, t]
            for i in range(N - 1):
                ri = r0 + i
                for t in range(b):
                    v[i, t] = g[ri, t] * (z[ri, t] - fh[t])
        elif gate == GATE_SDPA:
            for k in range(K):
                hk = h * K + k
                w = theta[hk]
                for t in range(b):
                    J[hk, t] = phu[hk, t]
                    du[k, t] = w * dphu[hk, t]
            for t in range(b):
                fh[t] = du[0, t] * u[h * K, t]
            for k in range(1, K):
                for t in range(b):
                    fh[t] += du[k, t] * u[h * K + k, t]
            for i in range(N):
                ri = r0 + i
                for k in range(K):
                    r = ri * K + k
                    for d in range(D):
                        for t in range(b):
                            J[o2 + r * D + d, t] = du[k, t] * g[ri, t] * x[d, t]
                if i < N - 1:
                    for t in range(b):
                        v[i, t] = du[0, t] * z[ri * K, t]
                    for k in range(1, K):
                        r = ri * K + k
                        for t in range(b):
                            v[i, t] += du[k, t] * z[r, t]
                    for t in range(b):
                        v[i, t] = g[ri, t] * (v[i, t] - fh[t])
        else:  # value gate
            gated_sum(g, vv, r0, N, fh, b)
            for k in range(K):
                hk = h * K + k
                w = theta[hk]
                for t in range(b):
                    J[hk, t] = g[r0, t] * phz[r0 * K + k, t]
                for i in range(1, N):
                    ri = r0 + i
                    for t in range(b):
                        J[hk, t] += g[ri, t] * phz[ri * K + k, t]
                for i in range(N):
                    ri = r0 + i
                    r = ri * K + k
                    for t in range(b):
                        tmp[0, t] = w * g[ri, t] * dphz[r, t]
                    for d in range(D):
                        for t in range(b):
                            J[o2 + r * D + d, t] = tmp[0, t] * x[d, t]
            for i in range(N - 1):
                ri = r0 + i
                for t in range(b):
                    v[i, t] = g[ri, t] * (vv[ri, t] - fh[t])
        for i in range(N - 1):
            om = o1 + (h * (N - 1) + i) * T
            for pq in range(T):
                for t in range(b):
                    J[om + pq, t] = v[i, t] * xx[pq, t]
    if gate == GATE_OUTPUT:
        for p in range(P):
            for t in range(b):
                J[p, t] *= fo[2, t]


@njit(cache=True)
def summed_rows(H, N, K, gate):
    """``(n0, Mm, R)``: the rows of ``J`` that the Gauss–Newton pass forms and sums.

    ``n0`` rows of degree 0 (``ω``), ``Mm`` groups of ``T`` rows ``(M_m, pq)`` and ``R``
    groups of ``D`` rows of degree 1, laid out as ``theta`` is. For the value and SDPA gates
    these are the rows of ``J`` itself: ``(H·K, H·(N−1), H·N·K)``. For the linear gates (none,
    output) they are a basis ``J̃`` of them, ``(0, H·(N−1), H·N)``: the rows of ``M`` and
    ``B[(h, i), d] = g_hi x_d`` (times ``φ'(f_MHA)`` for the output gate), from which every
    row of ``J`` is a combination, ``J[a_hik, d] = ω_hk B[(h, i), d]`` and
    ``J[ω_hk] = Σ_i g_hi a_hik·x = Σ_(i, d) a_hikd B[(h, i), d]`` (:func:`basis_map`).
    """
    if gate == GATE_NONE or gate == GATE_OUTPUT:
        return 0, H * (N - 1), H * N
    return H * K, H * (N - 1), H * N * K


@njit(cache=True)
def _rows_offsets(n0, Mm, R, D):
    """``(T, o1, o2, P)`` of the summed rows ``(n0, Mm, R)`` (:func:`summed_rows`)."""
    T = D * (D + 1) // 2
    o2 = n0 + Mm * T
    return T, n0, o2, o2 + R * D


@njit(cache=True)
def _second_of_pairs(D):
    """``q`` of each pair ``pq`` (``p <= q``, row-major) of the upper triangle of ``M``."""
    second = np.empty(D * (D + 1) // 2, dtype=np.int64)
    k = 0
    for p1 in range(D):
        for q1 in range(p1, D):
            second[k] = q1
            k += 1
    return second


@njit(cache=True)
def _distinct_entries(n0, Mm, R, D):
    """The entries of the upper triangle of ``JᵀJ`` that the pass sums: ``cols[ptr[p]:ptr[p+1]]``
    are the columns ``q >= p`` of row ``p``, in increasing order.

    Every row of ``J`` is a per-sample factor times a monomial of ``x`` of degree 0, 1 or 2:
    ``J[ω_hk] = ∂f/∂ω_hk`` (degree 0), ``J[a_r, d] = c_r x_d`` (the row ``r = (h, i, k)`` of
    the expert weights, ``c_r`` its factor of the module docstring) and
    ``J[M_m, pq] = v_m c_pq x_p x_q`` (``m = (h, i)``, ``c_pq`` 1 or 2). An entry of ``JᵀJ`` is
    therefore ``Σ_j`` (product of two factors) × (monomial of degree up to 4) times a constant
    1, 2 or 4, and entries with the same two factors and the same monomial differ only by
    that power of two: ``(a_r, d)·(a_r', d')`` equals ``(a_r, d')·(a_r', d)``,
    ``(M_m, pq)·(a_r, d)`` depends on ``{p, q, d}``, ``(M_m, pq)·(M_m', p'q')`` on
    ``{p, q, p', q'}``. The pass sums one entry of each class, the first in row-major order:

    - a row ``ω_hk``: every column ``q >= p``;
    - a row ``(M_m, pq)``: the columns ``(M_m', p'q')``, ``m' >= m``, with ``p' >= q``, and the
      columns ``(a_r, d)`` with ``d >= q``;
    - a row ``(a_r, d)``: the columns ``(a_r', d')``, ``r' >= r``, with ``d' >= d``.

    The rows are those of :func:`summed_rows` ``(n0, Mm, R)``. For ``J`` itself at shape
    (2, 3, 3, 4) that is 4193 of the 7021 entries (P = 118); :func:`_gather` fills in the
    others (:func:`gauss_newton_sums`). Depends only on the layout.
    """
    T, o1, o2, P = _rows_offsets(n0, Mm, R, D)
    second = _second_of_pairs(D)
    ptr = np.empty(P + 1, dtype=np.int64)
    cols = np.empty(P * (P + 1) // 2, dtype=np.int64)
    n = 0
    for p in range(P):
        ptr[p] = n
        if p < o1:
            for q in range(p, P):
                cols[n] = q
                n += 1
        elif p < o2:
            m = (p - o1) // T
            q1 = second[(p - o1) % T]
            first = q1 * D - q1 * (q1 - 1) // 2  # the pair (q1, q1)
            for m2 in range(m, Mm):
                for j in range(first, T):
                    cols[n] = o1 + m2 * T + j
                    n += 1
            for r in range(R):
                for d in range(q1, D):
                    cols[n] = o2 + r * D + d
                    n += 1
        else:
            r = (p - o2) // D
            d = (p - o2) % D
            for r2 in range(r, R):
                for d2 in range(d, D):
                    cols[n] = o2 + r2 * D + d2
                    n += 1
    ptr[P] = n
    return ptr, cols[:n].copy()


@njit(cache=True)
def _tiles(n0, Mm, R, D, pair):
    """The entries of :func:`_distinct_entries` as tiles of two rows and, for the rest, rows:
    ``(rows2, tptr, tcols, ptr, cols)``.

    Rows ``rows2[g, 0]`` and ``rows2[g, 1]`` both sum the columns ``tcols[tptr[g]:tptr[g+1]]``
    (:func:`_dot2x4`: each loaded ``J[q, t]`` serves two rows); row ``p`` sums the columns
    ``cols[ptr[p]:ptr[p+1]]`` that no tile of it has. The pairs are rows of one class whose
    column lists are nested: ``ω`` rows ``p, p+1``; the rows ``(M_m, pq)`` of one ``m`` in the
    order of ``q`` (the column list of row ``pq`` depends on ``q`` only and shrinks as ``q``
    grows); the rows ``(a_r, d), (a_r+1, d)``. A pair shares the intersection of its two lists
    when it has four columns or more. Without ``pair``, no tiles: every row sums its own
    columns. Depends only on the layout ``(n0, Mm, R, D)``.
    """
    T, o1, o2, P = _rows_offsets(n0, Mm, R, D)
    ptr0, cols0 = _distinct_entries(n0, Mm, R, D)
    second = _second_of_pairs(D)
    seq = np.empty(P, dtype=np.int64)  # rows in pairing order, cls: their class
    cls = np.empty(P, dtype=np.int64)
    n = 0
    for p in range(o1):
        seq[n], cls[n] = p, 0
        n += 1
    for m in range(Mm):
        for q1 in range(D):
            for k in range(T):
                if second[k] == q1:
                    seq[n], cls[n] = o1 + m * T + k, 1 + m
                    n += 1
    for d in range(D):
        for r in range(R):
            seq[n], cls[n] = o2 + r * D + d, 1 + Mm + d
            n += 1
    rows2 = np.empty((P // 2, 2), dtype=np.int64)
    tptr = np.zeros(P // 2 + 1, dtype=np.int64)
    tcols = np.empty(cols0.size, dtype=np.int64)
    shared = np.zeros(cols0.size, dtype=np.bool_)  # entry of cols0 summed by a tile
    at = np.empty((cols0.size, 2), dtype=np.int64)  # where a pair's shared columns are in cols0
    ng = 0
    nt = 0
    i = 0
    while i < P:
        if pair and i + 1 < P and cls[i + 1] == cls[i]:
            p, p2 = seq[i], seq[i + 1]
            a, ea, c, ec = ptr0[p], ptr0[p + 1], ptr0[p2], ptr0[p2 + 1]
            common = 0
            while a < ea and c < ec:  # sorted lists: the intersection, after the tiles so far
                if cols0[a] == cols0[c]:
                    tcols[nt + common] = cols0[a]
                    at[common, 0], at[common, 1] = a, c
                    common += 1
                    a += 1
                    c += 1
                elif cols0[a] < cols0[c]:
                    a += 1
                else:
                    c += 1
            if common >= 4:  # a tile; otherwise its columns are overwritten
                rows2[ng, 0], rows2[ng, 1] = p, p2
                for j in range(common):
                    shared[at[j, 0]] = True
                    shared[at[j, 1]] = True
                nt += common
                ng += 1
                tptr[ng] = nt
            i += 2
        else:
            i += 1
    ptr = np.empty(P + 1, dtype=np.int64)
    cols = np.empty(cols0.size, dtype=np.int64)
    n = 0
    for p in range(P):
        ptr[p] = n
        for j in range(ptr0[p], ptr0[p + 1]):
            if not shared[j]:
                cols[n] = cols0[j]
                n += 1
    ptr[P] = n
    return rows2[:ng].copy(), tptr[:ng + 1].copy(), tcols[:nt].copy(), ptr, cols[:n].copy()


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def _dot2x4(J, p0, p1, q0, q1, q2, q3, b):
    """``Σ_t J[p, t] J[q, t]`` for the two rows ``p`` and the four rows ``q``: the tile of
    :func:`_accumulate_block` (6 loads for 8 products per sample, where :func:`_dot8` has 9
    for 8: the fused multiply-adds, not the loads, bound it)."""
    wide_vectors()
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for t in range(b):
        a = J[p0, t]
        c = J[p1, t]
        u0 = J[q0, t]
        u1 = J[q1, t]
        u2 = J[q2, t]
        u3 = J[q3, t]
        s0 += a * u0
        s1 += a * u1
        s2 += a * u2
        s3 += a * u3
        s4 += c * u0
        s5 += c * u1
        s6 += c * u2
        s7 += c * u3
    return s0, s1, s2, s3, s4, s5, s6, s7


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def _dot8(J, p, q, j, b):
    """``Σ_t J[p, t] J[q[j + k], t]`` for ``k < 8``: the micro-kernel of
    :func:`_accumulate_block`, vectorised over the samples (a function of its own, so that
    LLVM vectorises its loop on its own)."""
    wide_vectors()
    q0, q1, q2, q3, q4, q5, q6, q7 = q[j], q[j + 1], q[j + 2], q[j + 3], q[j + 4], q[j + 5], \
        q[j + 6], q[j + 7]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for t in range(b):
        a = J[p, t]
        s0 += a * J[q0, t]
        s1 += a * J[q1, t]
        s2 += a * J[q2, t]
        s3 += a * J[q3, t]
        s4 += a * J[q4, t]
        s5 += a * J[q5, t]
        s6 += a * J[q6, t]
        s7 += a * J[q7, t]
    return s0, s1, s2, s3, s4, s5, s6, s7


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def _dot4(J, p, q0, q1, q2, q3, b):
    """As :func:`_dot8`, four rows ``q``."""
    wide_vectors()
    s0 = s1 = s2 = s3 = 0.0
    for t in range(b):
        a = J[p, t]
        s0 += a * J[q0, t]
        s1 += a * J[q1, t]
        s2 += a * J[q2, t]
        s3 += a * J[q3, t]
    return s0, s1, s2, s3


@njit(cache=True, **INTERNAL)
def _four(cols, j, e):
    """``(m, q0, q1, q2, q3)``: the next ``m = e − j`` (at most four used) columns
    ``cols[j:e]``, the last repeated when there are fewer than four (summed, not added)."""
    m = e - j
    q0 = cols[j]
    q1 = cols[j + 1] if m > 1 else q0
    q2 = cols[j + 2] if m > 2 else q1
    q3 = cols[j + 3] if m > 3 else q2
    return m, q0, q1, q2, q3


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def _accumulate_block(J, res, P, b, acc, rows2, tptr, tcols, ptr, cols):
    """Add the block's sums of ``JᵀJ`` (the entries of :func:`_distinct_entries`, at their
    places in the row-major upper triangle), ``Jᵀr``, ``Σr²`` and ``ΣJ`` to ``acc``.

    The tiles of :func:`_tiles` first, two rows against four of their shared columns at a
    time (:func:`_dot2x4`), then each row against the rest of its columns, eight at a time
    (:func:`_dot8`) and four at a time (:func:`_dot4`). A last group of fewer than four
    columns repeats its last column, summed but not added again. Each entry of ``acc`` gets
    one sum per block, in an order fixed by the code: the same bits for any number of threads.
    """
    wide_vectors()
    for g in range(rows2.shape[0]):
        p0 = rows2[g, 0]
        p1 = rows2[g, 1]
        i0 = p0 * P - p0 * (p0 - 1) // 2 - p0
        i1 = p1 * P - p1 * (p1 - 1) // 2 - p1
        j = tptr[g]
        e = tptr[g + 1]
        while j < e:
            m, q0, q1, q2, q3 = _four(tcols, j, e)
            s0, s1, s2, s3, s4, s5, s6, s7 = _dot2x4(J, p0, p1, q0, q1, q2, q3, b)
            acc[i0 + q0] += s0
            acc[i1 + q0] += s4
            if m > 1:
                acc[i0 + q1] += s1
                acc[i1 + q1] += s5
            if m > 2:
                acc[i0 + q2] += s2
                acc[i1 + q2] += s6
            if m > 3:
                acc[i0 + q3] += s3
                acc[i1 + q3] += s7
            j += 4
    for p in range(P):
        i0 = p * P - p * (p - 1) // 2 - p  # acc[i0 + q] = entry (p, q) of the upper triangle
        j = ptr[p]
        e = ptr[p + 1]
        while j + 8 <= e:
            s0, s1, s2, s3, s4, s5, s6, s7 = _dot8(J, p, cols, j, b)
            acc[i0 + cols[j]] += s0
            acc[i0 + cols[j + 1]] += s1
            acc[i0 + cols[j + 2]] += s2
            acc[i0 + cols[j + 3]] += s3
            acc[i0 + cols[j + 4]] += s4
            acc[i0 + cols[j + 5]] += s5
            acc[i0 + cols[j + 6]] += s6
            acc[i0 + cols[j + 7]] += s7
            j += 8
        while j < e:
            m, q0, q1, q2, q3 = _four(cols, j, e)
            s0, s1, s2, s3 = _dot4(J, p, q0, q1, q2, q3, b)
            acc[i0 + q0] += s0
            if m > 1:
                acc[i0 + q1] += s1
            if m > 2:
                acc[i0 + q2] += s2
            if m > 3:
                acc[i0 + q3] += s3
            j += 4
    idx = P * (P + 1) // 2
    for p in range(P):
        s0 = 0.0
        s1 = 0.0
        for t in range(b):
            s0 += J[p, t] * res[t]
            s1 += J[p, t]
        acc[idx + p] += s0
        acc[idx + P + 1 + p] += s1
    s0 = 0.0
    s1 = 0.0
    for t in range(b):
        s0 += res[t] * res[t]
        s1 += res[t]
    acc[idx + P] += s0
    acc[idx + 2 * P + 1] += s1


@njit(cache=True, error_model="numpy", fastmath=_FM)
def _pass_worker(wk, nworkers, theta, XT, y, offset, bv, H, N, K, gate, act, partial, out, sums):
    """Chunks ``wk, wk + nworkers, …`` of one pass over the samples.

    The forward pass writes ``f_theta(x_j)`` into ``out[j]`` when ``out`` has ``n`` entries;
    with ``sums``, each chunk's Gauss–Newton sums go into ``partial[c]``. Prediction and the
    sums share this one compiled pass (a second one would be compiled again on a cold start).
    """
    wide_vectors()
    D, n = XT.shape
    n0, Mm, R = summed_rows(H, N, K, gate)
    P = _rows_offsets(n0, Mm, R, D)[3]
    basis = gate == GATE_NONE or gate == GATE_OUTPUT
    nchunks = partial.shape[0]
    nblocks = (n + BLOCK - 1) // BLOCK
    values = out.shape[0] == n
    nj = P if sums else 0
    (x, xx, s, g, z, phz, dphz, vv, u, phu, dphu, v, du, fo, e, coef, work, ones, f,
     fh, rest) = _temporaries(H, N, K, D, gate, nj + 1)
    J = rest[:nj]
    res = rest[nj]
    # tiles for the basis only: on the value and SDPA gates' rows they did not speed up fits
    # (one head, side by side) and would change the bits of their sums
    rows2, tptr, tcols, ptr, cols = _tiles(n0, Mm, R, D if sums else 1, basis)
    for c in range(wk, nchunks, nworkers):
        acc = partial[c]
        acc[:] = 0.0  # zeroed here, by its worker, not by the caller before the pass
        for blk in range(c * nblocks // nchunks, (c + 1) * nblocks // nchunks):
            j0 = blk * BLOCK
            b = n - j0 if n - j0 < BLOCK else BLOCK
            _forward_block(
                XT, j0, b, theta, bv, H, N, K, gate, act,
                x, xx, s, g, z, phz, dphz, vv, u, phu, dphu, fo, f, work,
            )
            if values:
                for t in range(b):
                    out[j0 + t] = f[t]
            if sums:
                for t in range(b):
                    res[t] = f[t] + offset - y[j0 + t]
                _jacobian_block(b, theta, H, N, K, gate, basis, J, x, xx, g, z, phz, dphz, vv,
                                u, phu, dphu, v, du, fo, fh, coef)
                _accumulate_block(J, res, P, b, acc, rows2, tptr, tcols, ptr, cols)


@functools.lru_cache(maxsize=16)
def _gather(n0, Mm, R, D):
    """``(idx, scale)``, both (P, P): ``J̃ᵀJ̃ = total[idx] * scale`` from the summed chunks, for
    the summed rows ``(n0, Mm, R)`` of :func:`summed_rows` (P of them).

    ``idx[p, q]`` is the place in the upper triangle of the entry summed for the class of
    ``(min(p, q), max(p, q))`` (:func:`_distinct_entries`), ``scale`` the power of two (1/4 to
    4, so exact) between the two: the ratio of the constants ``c_pq`` of the rows of ``M``.
    """
    T, o1, o2, P = _rows_offsets_py(n0, Mm, R, D)
    ptr, cols = _distinct_entries(n0, Mm, R, D)
    pairs = [(p, q) for p in range(D) for q in range(p, D)]
    # per row: factor, monomial (two indices of x, D for none), constant
    fac = np.empty(P, dtype=np.int64)
    mono = np.full((P, 2), D, dtype=np.int64)
    const = np.ones(P)
    fac[:o1] = np.arange(o1)
    for m in range(Mm):
        for k, (p, q) in enumerate(pairs):
            row = o1 + m * T + k
            fac[row], mono[row] = o1 + m, (p, q)
            const[row] = 1.0 if p == q else 2.0
    rows = np.arange(o2, P)
    fac[o2:] = o1 + Mm + (rows - o2) // D
    mono[o2:, 0] = (rows - o2) % D
    iu, ju = np.triu_indices(P)
    F = o1 + Mm + R
    fa, fb = np.minimum(fac[iu], fac[ju]), np.maximum(fac[iu], fac[ju])
    m4 = np.sort(np.concatenate([mono[iu], mono[ju]], axis=1), axis=1)
    code = ((m4[:, 0] * (D + 1) + m4[:, 1]) * (D + 1) + m4[:, 2]) * (D + 1) + m4[:, 3]
    key = (fa * F + fb) * (D + 1) ** 4 + code
    rows_of = np.repeat(np.arange(P), np.diff(ptr))
    summed = rows_of * P - rows_of * (rows_of - 1) // 2 + (cols - rows_of)
    order = np.argsort(key[summed], kind="stable")
    pos = np.searchsorted(key[summed][order], key)
    rep = summed[order][np.minimum(pos, summed.size - 1)]
    if summed.size and not (np.array_equal(key[rep], key)
                            and np.unique(key[summed]).size == summed.size):
        raise AssertionError("JᵀJ classes of the Gauss-Newton pass are not distinct")
    idx = np.empty((P, P), dtype=np.int64)
    scale = np.empty((P, P))
    sc = const[iu] * const[ju] / (const[iu[rep]] * const[ju[rep]])  # rep: a place in the triangle
    idx[iu, ju] = idx[ju, iu] = rep
    scale[iu, ju] = scale[ju, iu] = sc
    return idx, scale


@njit(cache=True)
def basis_map(theta, H, N, K, D):
    """``(ptr, idx, val)``: column ``p`` of ``J`` is ``Σ val[j] J̃[:, idx[j]]`` over
    ``j in range(ptr[p], ptr[p + 1])``, for the basis ``J̃`` of the linear gates
    (:func:`summed_rows`): ``N·D`` terms ``a_hikd`` for ``ω_hk``, one ``1`` for a row of
    ``M``, one ``ω_hk`` for ``a_hikd``."""
    T, o1, o2, P = _offsets(H, N, K, D)
    ob = H * (N - 1) * T  # the rows B[(h, i), d] in J̃
    nnz = H * K * N * D + (o2 - o1) + (P - o2)
    ptr = np.empty(P + 1, dtype=np.int64)
    idx = np.empty(nnz, dtype=np.int64)
    val = np.empty(nnz)
    j = 0
    for p in range(P):
        ptr[p] = j
        if p < o1:
            h, k = p // K, p % K
            for i in range(N):
                ri = h * N + i
                for d in range(D):
                    idx[j], val[j] = ob + ri * D + d, theta[o2 + (ri * K + k) * D + d]
                    j += 1
        elif p < o2:
            idx[j], val[j] = p - o1, 1.0
            j += 1
        else:
            r, d = (p - o2) // D, (p - o2) % D
            ri, k = r // K, r % K
            idx[j], val[j] = ob + ri * D + d, theta[(ri // N) * K + k]
            j += 1
    ptr[P] = j
    return ptr, idx, val


@njit(cache=True, error_model="numpy")
def expand_basis(G, jtr, col, ptr, idx, val):
    """``(JᵀJ, Jᵀr, ΣJ)`` from ``J̃ᵀJ̃``, ``J̃ᵀr`` and ``ΣJ̃`` (``J = J̃ L``, ``L`` the sparse map of
    :func:`basis_map`): ``JᵀJ = Lᵀ (J̃ᵀJ̃) L``, its upper triangle computed and mirrored (so
    exactly symmetric), in a fixed order."""
    P = ptr.shape[0] - 1
    Pb = G.shape[0]
    Y = np.zeros((P, Pb))  # Y = Lᵀ J̃ᵀJ̃, row by row: rows of G combined
    for q in range(P):
        row = Y[q]
        for j in range(ptr[q], ptr[q + 1]):
            c = val[j]
            Gj = G[idx[j]]
            for a in range(Pb):
                row[a] += c * Gj[a]
    Z = np.ascontiguousarray(Y.T)  # J̃ᵀJ̃ L (G is symmetric)
    JtJ = np.zeros((P, P))  # Lᵀ Z, upper triangle, rows of Z combined in a fixed order
    Jtr = np.zeros(P)
    cs = np.zeros(P)
    for p in range(P):
        row = JtJ[p]
        for j in range(ptr[p], ptr[p + 1]):
            c = val[j]
            Zj = Z[idx[j]]
            for q in range(p, P):
                row[q] += c * Zj[q]
            Jtr[p] += c * jtr[idx[j]]
            cs[p] += c * col[idx[j]]
    for p in range(P):
        for q in range(p + 1, P):
            JtJ[q, p] = JtJ[p, q]
    return JtJ, Jtr, cs


#: :func:`summed_rows` and :func:`_rows_offsets` as plain Python (no compilation, no dispatch).
_summed_rows = getattr(summed_rows, "py_func", summed_rows)
_rows_offsets_py = getattr(_rows_offsets, "py_func", _rows_offsets)


@functools.lru_cache(maxsize=64)
def _symmetric_index(P):
    """``idx[p, q]``: position of ``(min(p, q), max(p, q))`` in the row-by-row upper triangle."""
    i = np.arange(P)
    p, q = np.minimum.outer(i, i), np.maximum.outer(i, i)
    return p * P - p * (p - 1) // 2 + (q - p)


@njit(cache=True, parallel=_PARALLEL)
def _pass(theta, XT, y, offset, bv, H, N, K, gate, act, partial, out, sums, nthreads):
    nworkers = min(nthreads, partial.shape[0])
    for wk in prange(nworkers):
        _pass_worker(wk, nworkers, theta, XT, y, offset, bv, H, N, K, gate, act, partial, out,
                     sums)


_ENTRIES = {}


def _entry(parallel, gate, act):
    """The pass compiled for one gate and one activation, as a direct entry point.

    ``gate`` and ``act`` enter the signature as literal types, so Numba compiles only their
    branches of the block passes (the others are dropped before typing), and the entry point
    is called without the dispatcher's type matching. Every other argument has one fixed type,
    which :func:`_run_pass` ensures (C-contiguous float64 arrays).
    """
    key = (parallel, gate, act)
    entry = _ENTRIES.get(key)
    if entry is None:
        if numba.config.DISABLE_JIT:
            entry = _pass if parallel else _pass_worker
        else:
            i8, f8 = types.int64, types.float64
            a1, a2 = types.Array(f8, 1, "C"), types.Array(f8, 2, "C")
            args = (a1, a2, a1, f8, a1, i8, i8, i8, types.literal(int(gate)),
                    types.literal(int(act)), a2, a1, types.boolean)
            if parallel:
                dispatcher, sig = _pass, args + (i8,)
            else:
                dispatcher, sig = _pass_worker, (i8, i8) + args
            background.compile_ahead(dispatcher, sig, gate, act)  # cold: a helper process
            with collector_paused():  # a cold compile: see target.collector_paused
                entry = dispatcher.compile(sig)
            background.settle()
        _ENTRIES[key] = entry
    return entry


def _run_pass(theta, XT, y, offset, H, N, K, D, gate, act, partial, out, sums):
    """One pass, serial or parallel (:func:`~.objective.kernel_threads`)."""
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    XT = np.ascontiguousarray(XT, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    bv = mixed_values(theta, H, N, K, D, gate)
    H, N, K, offset, sums = int(H), int(N), int(K), float(offset), bool(sums)
    nthreads = kernel_threads(XT.shape[1])
    if nthreads <= 1:
        _entry(False, gate, act)(0, 1, theta, XT, y, offset, bv, H, N, K, gate, act, partial,
                                 out, sums)
    else:
        _entry(True, gate, act)(theta, XT, y, offset, bv, H, N, K, gate, act, partial, out,
                                sums, nthreads)


def forward_values(theta, XT, H, N, K, D, gate, act):
    """``f_theta(x_j)`` for every column of ``XT`` (shape (D, n)); see ``objective.predict``."""
    n = XT.shape[1]
    out = np.empty(n)
    partial = np.zeros((_chunks(n)[1], 0))  # no sums: the chunks only split the work
    _run_pass(theta, XT, _EMPTY, 0.0, H, N, K, D, gate, act, partial, out, False)
    return out


#: Placeholder for an unused array argument (targets of a prediction, values of the sums).
_EMPTY = np.zeros(0)


def gauss_newton_sums(theta, XT, y, H, N, K, D, gate, act, offset=0.0):
    """``(JᵀJ, Jᵀr, Σ r², Σ_j J[j, :], Σ r)`` of the residuals ``r = f_theta(x) + offset − y``.

    Parameters
    ----------
    theta : ndarray of shape (P,)
        Parameters in the layout of ``hmoe_estim/model/_parameters.py``.
    XT : ndarray of shape (D, n), C-contiguous
        Inputs, transposed.
    y : ndarray of shape (n,)
    H, N, K, D : int
    gate, act : int
        Gate and activation codes (:mod:`hmoe_estim._names`).
    offset : float, default=0.0
        Intercept added to ``f``.

    Returns
    -------
    JtJ : ndarray of shape (P, P)
        ``Σ_j J[j, :]ᵀ J[j, :]`` (sums, not means).
    Jtr : ndarray of shape (P,)
        ``Σ_j r_j J[j, :]``: half the gradient of ``Σ_j r_j²``.
    ssr : float
        ``Σ_j r_j²``; the objective of eq. (3) divided by ``n`` is ``ssr / n``.
    colsum : ndarray of shape (P,)
        ``Σ_j J[j, :]``.
    rsum : float
        ``Σ_j r_j``. With ``colsum`` and ``n``, the intercept's row and column of the
        extended system (module docstring).
    """
    n = XT.shape[1]
    H, N, K, D, gate = int(H), int(N), int(K), int(D), int(gate)
    width = sums_width(H, N, K, D, gate)
    partial = np.empty((_jchunks(n, width)[1], width))  # each chunk zeroes its own row
    _run_pass(theta, XT, y, float(offset), H, N, K, D, gate, act, partial, _EMPTY, True)
    return finish_sums(chunk_total(partial), theta, H, N, K, D, gate)


def sums_layout(H, N, K, D, gate):
    """``(P̃, idx, scale, basis)``: the number of rows the pass sums (:func:`summed_rows`), the
    spreading of their summed entries (:func:`_gather`), and whether they are the basis ``J̃``
    of a linear gate, to be expanded (:func:`expand_basis`). One chunk's sums are
    ``[J̃ᵀJ̃ upper | J̃ᵀr | Σr² | ΣJ̃ | Σr]``: :func:`sums_width` doubles."""
    rows = _summed_rows(int(H), int(N), int(K), int(gate))
    idx, scale = _gather(*rows, int(D))
    return idx.shape[0], idx, scale, gate == GATE_NONE or gate == GATE_OUTPUT


def sums_width(H, N, K, D, gate):
    """Doubles of one chunk's sums (:func:`sums_layout`)."""
    P = sums_layout(H, N, K, D, gate)[0]
    return P * (P + 1) // 2 + 2 * P + 2


def finish_sums(total, theta, H, N, K, D, gate):
    """What :func:`gauss_newton_sums` returns, from the chunks' ``total`` (its
    :func:`sums_width` entries): the summed entries spread over ``J̃ᵀJ̃`` and, for the linear
    gates, ``J = J̃ L`` expanded (:func:`expand_basis`)."""
    P, idx, scale, basis = sums_layout(H, N, K, D, gate)
    ntri = P * (P + 1) // 2
    JtJ = total[idx] * scale  # the summed entries, spread over the upper triangle, mirrored
    Jtr, colsum = total[ntri:ntri + P].copy(), total[ntri + P + 1:ntri + 2 * P + 1].copy()
    if basis:  # J = J̃ L
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        JtJ, Jtr, colsum = expand_basis(JtJ, Jtr, colsum, *basis_map(theta, H, N, K, D))
    return JtJ, Jtr, float(total[ntri + P]), colsum, float(total[ntri + 2 * P + 1])


def sum_of_squares(theta, XT, y, H, N, K, D, gate, act, offset=0.0):
    """``Σ_j (f_theta(x_j) + offset − y_j)²`` from one forward pass (:func:`forward_values`).

    The same for any number of threads: the values are, and NumPy's pairwise sum (not a BLAS
    call, whose threads could change the order) adds them after the pass.
    """
    r = forward_values(theta, XT, H, N, K, D, gate, act)
    r += float(offset)
    r -= y
    return float(np.sum(r * r))


@njit(cache=True, error_model="numpy", fastmath=_FM)
def _jacobian_matrix(theta, XT, bv, H, N, K, D, gate, act):
    n = XT.shape[1]
    P = _offsets(H, N, K, D)[3]
    out = np.empty((n, P))
    (x, xx, s, g, z, phz, dphz, vv, u, phu, dphu, v, du, fo, e, coef, work, ones, f,
     fh, J) = _temporaries(H, N, K, D, gate, P)
    for j0 in range(0, n, BLOCK):
        b = min(BLOCK, n - j0)
        _forward_block(XT, j0, b, theta, bv, H, N, K, gate, act,
                       x, xx, s, g, z, phz, dphz, vv, u, phu, dphu, fo, f, work)
        _jacobian_block(b, theta, H, N, K, gate, False, J, x, xx, g, z, phz, dphz, vv, u, phu,
                        dphu, v, du, fo, fh, coef)
        for p in range(P):
            for t in range(b):
                out[j0 + t, p] = J[p, t]
    return out


def jacobian_matrix(theta, XT, H, N, K, D, gate, act):
    """The n × P Jacobian ``J[j, p] = ∂f_theta(x_j)/∂theta_p`` (one thread; O(n·P) memory).

    For references and tests only: the solvers use :func:`gauss_newton_sums`, which never
    stores it.
    """
    background.stop()  # another signature of the Jacobian block (see background.py)
    return _jacobian_matrix(theta, XT, mixed_values(theta, H, N, K, D, gate), H, N, K, D, gate,
                            act)
