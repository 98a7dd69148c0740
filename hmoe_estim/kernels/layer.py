"""A whole (gated) multi-head attention layer: forward pass, analytic Jacobian and the
Gauss–Newton sums, one sample (token matrix) at a time.

One sample is a token matrix ``X ∈ R^{N×d}`` (rows ``x_j``); the layer has ``H`` heads of
width ``d_v`` and ``d_out`` output columns. Per head ``h`` (the head index is dropped below),
with ``q_ie = x_i·W_Q[:, e]``, ``k_je = x_j·W_K[:, e]``, ``v_je = x_j·W_V[:, e]`` and
``r = sqrt(d_v)``:

- scores ``s_ij = Σ_e Q̃_ie K̃_je / r`` with ``Q̃ = q``, ``K̃ = k`` (the bilinear scores of
  multi-head attention, paper Section 2), ``K̃ = φ(k)`` for ``gate="key"`` (G3) or
  ``Q̃ = φ(q)`` for ``gate="query"`` (G4); with ``full`` Q/K, ``s_ij = x_iᵀ P x_j``
  (``P = W_Q W_Kᵀ / r`` as one free ``d×d`` matrix per head);
- token gate ``g_ij = softmax_j(s_ij)`` (over all ``N`` keys, computed stably);
- values ``ṽ_je = φ(v_je)`` for ``gate="value"`` (G2, eq. (9)), else ``v_je``;
- head output ``u_ie = Σ_j g_ij ṽ_je`` and ``o_ie = φ(u_ie)`` for ``gate="sdpa"`` (G1,
  eq. (12)), ``o_ie = u_ie · φ(x_i·W_θ)`` for the multiplicative gate of Qiu et al. (2025)
  (headwise: ``W_θ`` of shape ``(H, d)``, one factor per head and row; elementwise:
  ``W_θ[:, :, e]``, one factor per head, row and channel), else ``o_ie = u_ie``;
- output ``z_ic = Σ_h Σ_e o_ie W_O[e, c]`` and ``f_ic = φ(z_ic)`` for ``gate="output"``
  (G5), else ``z_ic``; plus the intercept ``b_c`` when there is one.

Derivatives of ``f_ic`` (``γ = φ'(z_ic)`` for G5, else 1; ``λ_ie = φ'(u_ie)`` for G1,
``φ(x_i·W_θ)`` for the multiplicative gate, else 1; ``η_e = γ W_O[e, c] λ_ie``; ``ψ'_je =
φ'(v_je)`` for G2, else 1):

- ``∂f/∂W_O[e, c] = γ o_ie``; ``∂f/∂b_c = 1``;
- ``∂f/∂W_V[p, e] = η_e Σ_j g_ij ψ'_je x_jp``;
- multiplicative, headwise: ``∂f/∂W_θ[p] = Σ_e γ W_O[e, c] u_ie φ'(x_i·W_θ) x_ip``
  (elementwise: one term, channel ``e``);
- through the scores, ``κ_j = ∂f/∂s_ij = Σ_e η_e g_ij (ṽ_je − u_ie)``, and
  ``∂f/∂W_Q[p, e] = x_ip Q̃'_ie Σ_j κ_j K̃_je / r``,
  ``∂f/∂W_K[p, e] = Q̃_ie Σ_j κ_j K̃'_je x_jp / r`` (``Q̃' = φ'(q)`` for G4, else 1;
  ``K̃' = φ'(k)`` for G3, else 1), or ``∂f/∂P[p, p'] = x_ip Σ_j κ_j x_jp'`` (full).

Packed parameters (:func:`layer_offsets`, row-major blocks)::

    theta = [ W_Q (H·d·d_v) | W_K (H·d·d_v) | W_V (H·d·d_v) | W_O (H·d_v·d_out)
              | W_θ (0, H·d or H·d·d_v) | b (0 or d_out) ]

with ``P (H·d·d)`` in place of ``W_Q, W_K`` for full Q/K. The outputs of one sample are the
rows ``i`` of ``f`` (all ``N`` rows, or the last one) flattened row-major: ``(i, c)`` is
entry ``(i − i0)·d_out + c``.

:func:`layer_sums` accumulates ``JᵀJ`` (upper triangle; one BLAS ``dsyrk`` per block of
about 256 Jacobian rows, :mod:`hmoe_estim.kernels.blas`),
``Jᵀr``, ``Σ r²``, ``Σ J`` and ``Σ r`` in chunks of samples (:func:`layer_chunks`: their
number depends only on ``n`` and ``P``), on Numba's threads, and adds the chunks in order: the
result does not depend on the thread count. A layer linear in ``W_O`` (every gate but G5)
with more output columns than head channels (``d_out > H·d_v``) is summed per token row
instead of per output: the Jacobian row of output ``(i, c)`` is ``[W_O[:, c]ᵀ D_i | e_c ⊗
(o_i, 1)]`` with ``D_i = ∂o_i/∂β`` (``β``: every weight but ``W_O`` and ``b``), so
``J_βᵀJ_β = Σ_i D_iᵀ W_O W_Oᵀ D_i`` takes ``H·d_v`` rows per token row (``F D_i``,
``FᵀF = W_O W_Oᵀ``) instead of ``d_out``, and the ``W_O`` blocks follow from ``Σ_i o_i
o_iᵀ`` and ``Σ_i D_iᵀ ⊗ o_i`` (:func:`_sums_worker_wo`). :func:`layer_heads` returns the
head outputs ``Φ`` (the variable projection of ``hmoe_estim.layer`` solves ``W_O`` from
them).
:class:`LayerPasses` sets these passes up once per data set for the solvers, with the
protocol of :class:`~hmoe_estim.kernels.KernelPasses`.
"""

import math

import numpy as np
from numba import get_num_threads, njit, prange

from .blas import SyrkArgs, syrk_upper
from .lm_step import LMWorkspace
from .objective import SERIAL_SAMPLES, chunk_total
from .threads import single_thread_blas

__all__ = [
    "layer_offsets",
    "layer_values",
    "layer_jacobian",
    "layer_sums",
    "layer_heads",
    "layer_chunks",
    "LayerPasses",
]

# gate codes of _names.LAYER_GATE_CODES
_VALUE, _SDPA, _OUTPUT, _KEY, _QUERY = 1, 2, 3, 4, 5

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


@njit(cache=True)
def layer_offsets(H, d, dv, dout, full, theta_kind, intercept):
    """``(oK, oV, oO, oT, oB, P)``: offsets of ``W_K``, ``W_V``, ``W_O``, ``W_θ`` and ``b`` in
    ``theta`` (``W_Q`` or ``P`` start at 0; ``oK`` is 0 for full Q/K) and its length.

    ``theta_kind``: 0 no ``W_θ``, 1 headwise ``(H, d)``, 2 elementwise ``(H, d, d_v)``.
    """
    if full:
        oK = 0
        oV = H * d * d
    else:
        oK = H * d * dv
        oV = 2 * H * d * dv
    oO = oV + H * d * dv
    oT = oO + H * dv * dout
    if theta_kind == 1:
        oB = oT + H * d
    elif theta_kind == 2:
        oB = oT + H * d * dv
    else:
        oB = oT
    P = oB + dout if intercept else oB
    return oK, oV, oO, oT, oB, P


@njit(cache=True, error_model="numpy")
def _act(code, z):
    """``(φ(z), φ'(z))`` for one value; codes of ``_names.ACTIVATION_CODES`` and the formulas of
    ``kernels/activations.py`` (stable for any finite ``z``)."""
    if code == 0:  # sigmoid
        e = math.exp(-abs(z))
        q = 1.0 / (1.0 + e)
        eq = e * q
        return (q if z >= 0 else eq), eq * q
    if code == 3:  # silu
        e = math.exp(-abs(z))
        q = 1.0 / (1.0 + e)
        eq = e * q
        sig = q if z >= 0 else eq
        sig_neg = eq if z >= 0 else q
        return z * sig, sig * (1.0 + z * sig_neg)
    if code == 1:  # tanh
        th = math.tanh(z)
        return th, 1.0 - th * th
    cdf = 0.5 * (1.0 + math.erf(z * _INV_SQRT2))  # gelu
    return z * cdf, cdf + z * _INV_SQRT2PI * math.exp(-0.5 * z * z)


@njit(cache=True, error_model="numpy")
def _workspace(H, N, d, dv, dout, R):
    """Buffers of :func:`_sample`: per head ``Q̃, Q̃', K̃, K̃', ṽ, ψ', u, o, λ, m, m'`` (N×d_v)
    and the gate rows ``g`` (R×N); ``z``/``γ`` (R×d_out); per-row scratch."""
    hb = np.empty((11, H, N, dv))
    g = np.empty((H, R, N))
    zg = np.empty((2, R, dout))
    scratch = np.empty(2 * dv + d * dv + N + d)
    return hb, g, zg, scratch


@njit(cache=True, error_model="numpy")
def _sample(theta, x, H, N, d, dv, dout, full, gate, act, theta_kind, intercept, i0,
            want_jac, f, J, hb, g, zg, scratch):
    """Outputs ``f`` (R·d_out) of one sample ``x`` (N×d), and their Jacobian rows ``J``
    (R·d_out × P) when ``want_jac`` (see the module docstring)."""
    oK, oV, oO, oT, oB, P = layer_offsets(H, d, dv, dout, full, theta_kind, intercept)
    R = N - i0
    inv_r = 1.0 / math.sqrt(dv)
    Qt, Qd, Kt, Kd = hb[0], hb[1], hb[2], hb[3]
    vt, vd, u, o, lam, m, md = hb[4], hb[5], hb[6], hb[7], hb[8], hb[9], hb[10]
    z, gam = zg[0], zg[1]
    mv = mdv = 0.0
    for a in range(R):
        for c in range(dout):
            z[a, c] = 0.0
    # ---- forward, head by head
    for h in range(H):
        for j in range(N):
            for e in range(dv):
                sv = 0.0
                for p in range(d):
                    sv += x[j, p] * theta[oV + (h * d + p) * dv + e]
                if gate == _VALUE:
                    vt[h, j, e], vd[h, j, e] = _act(act, sv)
                else:
                    vt[h, j, e], vd[h, j, e] = sv, 1.0
                if not full:
                    sq = 0.0
                    sk = 0.0
                    for p in range(d):
                        sq += x[j, p] * theta[(h * d + p) * dv + e]
                        sk += x[j, p] * theta[oK + (h * d + p) * dv + e]
                    if gate == _QUERY:
                        Qt[h, j, e], Qd[h, j, e] = _act(act, sq)
                    else:
                        Qt[h, j, e], Qd[h, j, e] = sq, 1.0
                    if gate == _KEY:
                        Kt[h, j, e], Kd[h, j, e] = _act(act, sk)
                    else:
                        Kt[h, j, e], Kd[h, j, e] = sk, 1.0
        for a in range(R):
            i = i0 + a
            # scores of row i, then the stable softmax over the keys j
            smax = -np.inf
            for j in range(N):
                s = 0.0
                if full:
                    for p in range(d):
                        t = 0.0
                        for q in range(d):
                            t += theta[(h * d + p) * d + q] * x[j, q]
                        s += x[i, p] * t
                else:
                    for e in range(dv):
                        s += Qt[h, i, e] * Kt[h, j, e]
                    s *= inv_r
                g[h, a, j] = s
                if s > smax:
                    smax = s
            tot = 0.0
            for j in range(N):
                w = math.exp(g[h, a, j] - smax)
                g[h, a, j] = w
                tot += w
            for j in range(N):
                g[h, a, j] /= tot
            if theta_kind == 1:
                t = 0.0
                for p in range(d):
                    t += x[i, p] * theta[oT + h * d + p]
                mv, mdv = _act(act, t)
            for e in range(dv):
                s = 0.0
                for j in range(N):
                    s += g[h, a, j] * vt[h, j, e]
                u[h, a, e] = s
                if gate == _SDPA and theta_kind == 0:
                    o[h, a, e], lam[h, a, e] = _act(act, s)
                elif theta_kind == 1:
                    m[h, a, e], md[h, a, e] = mv, mdv
                    o[h, a, e], lam[h, a, e] = s * mv, mv
                elif theta_kind == 2:
                    t = 0.0
                    for p in range(d):
                        t += x[i, p] * theta[oT + (h * d + p) * dv + e]
                    m[h, a, e], md[h, a, e] = _act(act, t)
                    o[h, a, e], lam[h, a, e] = s * m[h, a, e], m[h, a, e]
                else:
                    o[h, a, e], lam[h, a, e] = s, 1.0
                for c in range(dout):
                    z[a, c] += o[h, a, e] * theta[oO + (h * dv + e) * dout + c]
    for a in range(R):
        for c in range(dout):
            b = theta[oB + c] if intercept else 0.0
            if gate == _OUTPUT:
                fv, gam[a, c] = _act(act, z[a, c])
                f[a * dout + c] = fv + b
            else:
                f[a * dout + c] = z[a, c] + b
                gam[a, c] = 1.0
    if not want_jac:
        return
    # ---- Jacobian rows
    for row in range(R * dout):
        for p in range(P):
            J[row, p] = 0.0
    eta = scratch[0:dv]
    GV = scratch[dv:dv + d * dv]  # Σ_j g_ij ψ'_je x_jp, (p, e) row-major
    kap = scratch[dv + d * dv:dv + d * dv + N]
    tmp = scratch[dv + d * dv + N:dv + d * dv + N + max(dv, d)]
    for h in range(H):
        for a in range(R):
            i = i0 + a
            for p in range(d):
                for e in range(dv):
                    s = 0.0
                    for j in range(N):
                        s += g[h, a, j] * vd[h, j, e] * x[j, p]
                    GV[p * dv + e] = s
            for c in range(dout):
                row = a * dout + c
                ga = gam[a, c]
                for e in range(dv):
                    wo = theta[oO + (h * dv + e) * dout + c]
                    J[row, oO + (h * dv + e) * dout + c] = ga * o[h, a, e]
                    eta[e] = ga * wo * lam[h, a, e]
                    for p in range(d):
                        J[row, oV + (h * d + p) * dv + e] = eta[e] * GV[p * dv + e]
                    if theta_kind == 1:
                        t = ga * wo * u[h, a, e] * md[h, a, 0]
                        for p in range(d):
                            J[row, oT + h * d + p] += t * x[i, p]
                    elif theta_kind == 2:
                        t = ga * wo * u[h, a, e] * md[h, a, e]
                        for p in range(d):
                            J[row, oT + (h * d + p) * dv + e] = t * x[i, p]
                for j in range(N):
                    s = 0.0
                    for e in range(dv):
                        s += eta[e] * (vt[h, j, e] - u[h, a, e])
                    kap[j] = g[h, a, j] * s
                if full:
                    for q in range(d):
                        s = 0.0
                        for j in range(N):
                            s += kap[j] * x[j, q]
                        tmp[q] = s
                    for p in range(d):
                        for q in range(d):
                            J[row, (h * d + p) * d + q] = x[i, p] * tmp[q]
                else:
                    for e in range(dv):
                        s = 0.0
                        for j in range(N):
                            s += kap[j] * Kt[h, j, e]
                        tmp[e] = s * Qd[h, i, e] * inv_r
                    for p in range(d):
                        for e in range(dv):
                            J[row, (h * d + p) * dv + e] = x[i, p] * tmp[e]
                    for e in range(dv):
                        qe = Qt[h, i, e] * inv_r
                        for p in range(d):
                            s = 0.0
                            for j in range(N):
                                s += kap[j] * Kd[h, j, e] * x[j, p]
                            J[row, oK + (h * d + p) * dv + e] = qe * s
    if intercept:
        for row in range(R * dout):
            J[row, oB + row % dout] = 1.0


@njit(cache=True, error_model="numpy")
def _forward_range(theta, X, s0, s1, H, dv, dout, full, gate, act, theta_kind, intercept,
                   last, out, heads):
    """Samples ``s0 … s1 − 1`` of :func:`layer_values` (into ``out``) or, when ``heads`` has
    rows, of :func:`layer_heads` (into ``heads``)."""
    n, N, d = X.shape
    i0 = N - 1 if last else 0
    R = N - i0
    hb, g, zg, scratch = _workspace(H, N, d, dv, dout, R)
    J = np.empty((0, 0))
    w = R * dout
    f = np.empty(w)
    want_heads = heads.shape[0] > 0
    for s in range(s0, s1):
        fs = f if want_heads else out[s * w:(s + 1) * w]
        _sample(theta, X[s], H, N, d, dv, dout, full, gate, act, theta_kind, intercept, i0,
                False, fs, J, hb, g, zg, scratch)
        if want_heads:
            for a in range(R):
                for h in range(H):
                    for e in range(dv):
                        heads[s * R + a, h * dv + e] = hb[7, h, a, e]


@njit(cache=True, parallel=True)
def _forward_parallel(theta, X, H, dv, dout, full, gate, act, theta_kind, intercept, last,
                      out, heads, nchunks):
    n = X.shape[0]
    for c in prange(nchunks):  # samples are independent: the same numbers on any thread
        _forward_range(theta, X, c * n // nchunks, (c + 1) * n // nchunks, H, dv, dout, full,
                       gate, act, theta_kind, intercept, last, out, heads)


def _forward(theta, X, args, out, heads):
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    n, N = X.shape[0], X.shape[1]
    R = 1 if args[8] else N
    nthreads = get_num_threads()
    if nthreads > 1 and n * R * args[2] >= SERIAL_SAMPLES:
        _forward_parallel(theta, X, *args, out, heads, min(n, 8 * nthreads))
    else:
        _forward_range(theta, X, 0, n, *args, out, heads)


def layer_values(theta, X, H, dv, dout, full, gate, act, theta_kind, intercept, last, out):
    """Predictions of the samples ``X`` (n×N×d) into ``out`` (n·R·d_out, row-major over
    samples, rows, columns); ``R = 1`` when ``last``, else ``N``. On Numba's threads from
    ``SERIAL_SAMPLES`` outputs on (each sample on its own: the same numbers on any number of
    threads)."""
    _forward(theta, X, (H, dv, dout, full, gate, act, theta_kind, intercept, last), out,
             np.empty((0, 0)))
    return out


@njit(cache=True, error_model="numpy")
def layer_jacobian(theta, X, H, dv, dout, full, gate, act, theta_kind, intercept, last):
    """``(f, J)``: predictions (n·R·d_out) and the Jacobian (n·R·d_out × P), for tests and
    small diagnostics (memory ``n·R·d_out·P`` doubles)."""
    n, N, d = X.shape
    i0 = N - 1 if last else 0
    R = N - i0
    P = layer_offsets(H, d, dv, dout, full, theta_kind, intercept)[5]
    hb, g, zg, scratch = _workspace(H, N, d, dv, dout, R)
    w = R * dout
    f = np.empty(n * w)
    J = np.empty((n * w, P))
    for s in range(n):
        _sample(theta, X[s], H, N, d, dv, dout, full, gate, act, theta_kind, intercept, i0,
                True, f[s * w:(s + 1) * w], J[s * w:(s + 1) * w], hb, g, zg, scratch)
    return f, J


#: Most partial sums (doubles) the chunks of :func:`layer_sums` hold at once.
_MAX_PARTIAL = 1 << 21
#: Samples per block of the chunk count (the count depends only on ``n``, as in ``objective``).
_SAMPLES_PER_BLOCK = 64
_MAX_CHUNKS = 64


def layer_chunks(n, P):
    """Chunks of ``n`` samples for the sums of ``P`` parameters: ``ceil(n / 64)`` up to 64, and
    fewer when their partial sums (``P² + 2P + 2`` each) would pass ``_MAX_PARTIAL`` doubles.
    The count depends only on ``n`` and ``P``: the sums are the same bits for any thread
    count."""
    nblocks = (int(n) + _SAMPLES_PER_BLOCK - 1) // _SAMPLES_PER_BLOCK
    width = P * P + 2 * P + 2
    return max(1, min(_MAX_CHUNKS, nblocks, _MAX_PARTIAL // width))


#: Jacobian rows per ``dsyrk`` block of :func:`layer_sums` (whole samples; at least one).
_ROWS_PER_BLOCK = 256


@njit(cache=True, error_model="numpy")
def _sums_worker(wk, nworkers, theta, X, y, offset, H, dv, dout, full, gate, act, theta_kind,
                 intercept, last, partial):
    """Chunks ``wk, wk + nworkers, …`` of :func:`layer_sums`: chunk ``c`` (samples
    ``[c·n/C, (c+1)·n/C)``) into ``partial[c] = [A (P×P, upper) | Jᵀr | Σr² | ΣJ | Σr]``.

    The Jacobian rows of consecutive samples fill a block of about ``_ROWS_PER_BLOCK`` rows;
    ``A += J_bᵀ J_b`` is one ``dsyrk`` per block (:mod:`.blas`), ``Jᵀr`` and ``ΣJ`` are
    summed row by row in the same pass over the block."""
    n, N, d = X.shape
    i0 = N - 1 if last else 0
    R = N - i0
    P = layer_offsets(H, d, dv, dout, full, theta_kind, intercept)[5]
    hb, g, zg, scratch = _workspace(H, N, d, dv, dout, R)
    w = R * dout
    B = max(1, _ROWS_PER_BLOCK // w)
    Jb = np.empty((B * w, P))
    fb = np.empty(B * w)
    ints, dbl, chars = SyrkArgs()
    nchunks = partial.shape[0]
    # the worker's own sums, copied to partial[c] per chunk: views of the shared partial in
    # the inner loops would make both threads update one reference count (a contended atomic)
    acc = np.empty(partial.shape[1])
    A = acc[:P * P].reshape((P, P))
    Jr = acc[P * P:P * P + P]
    colsum = acc[P * P + P + 1:P * P + 2 * P + 1]
    for c in range(wk, nchunks, nworkers):
        acc[:] = 0.0
        ssr = 0.0
        rsum = 0.0
        s1 = (c + 1) * n // nchunks
        s = c * n // nchunks
        while s < s1:
            nb = min(B, s1 - s)
            for t in range(nb):
                _sample(theta, X[s + t], H, N, d, dv, dout, full, gate, act, theta_kind,
                        intercept, i0, True, fb[t * w:(t + 1) * w], Jb[t * w:(t + 1) * w],
                        hb, g, zg, scratch)
            m = nb * w
            for k in range(m):
                rk = fb[k] + offset - y[s * w + k]
                ssr += rk * rk
                rsum += rk
                for p in range(P):
                    Jr[p] += Jb[k, p] * rk
                    colsum[p] += Jb[k, p]
            syrk_upper(A, Jb, m, ints, dbl, chars)
            s += nb
        acc[P * P + P] = ssr
        acc[P * P + 2 * P + 1] = rsum
        partial[c, :] = acc


@njit(cache=True)
def _head_columns(H, d, dv, full, theta_kind, oK, oV, oT):
    """``theta`` index of each parameter of the factored sums, head by head: head ``h``'s
    block ``[Q | K | V | W_θ]`` (``[P | V | W_θ]`` for full Q/K), each in ``theta``'s order."""
    qk = d * d if full else 2 * d * dv
    tb = d if theta_kind == 1 else (d * dv if theta_kind == 2 else 0)
    width = qk + d * dv + tb
    cols = np.empty(H * width, dtype=np.int64)
    for h in range(H):
        b = h * width
        if full:
            for ll in range(d * d):
                cols[b + ll] = h * d * d + ll
        else:
            for ll in range(d * dv):
                cols[b + ll] = h * d * dv + ll
                cols[b + d * dv + ll] = oK + h * d * dv + ll
        for ll in range(d * dv):
            cols[b + qk + ll] = oV + h * d * dv + ll
        for ll in range(tb):
            cols[b + qk + d * dv + ll] = oT + h * tb + ll
    return cols, width


@njit(cache=True, error_model="numpy")
def _head_derivatives(h, a, x, i0, N, d, dv, full, theta_kind, inv_r, hb, g, D, GV, kap,
                      tmp):
    """Rows ``D[h·d_v + e] = ∂o_ae/∂(head h's block)`` of row ``a`` (the module docstring's
    derivatives with ``γ W_O[e, c]`` left out), in :func:`_head_columns`' order. ``hb`` is
    indexed, not sliced: a view per call costs more than the arithmetic at these sizes."""
    # hb: 0 Q̃, 1 Q̃', 2 K̃, 3 K̃', 4 ṽ, 5 ψ', 6 u, 8 λ, 10 m'
    i = i0 + a
    qk = d * d if full else 2 * d * dv
    lv = qk
    lt = qk + d * dv
    for p in range(d):
        for e in range(dv):
            s = 0.0
            for j in range(N):
                s += g[h, a, j] * hb[5, h, j, e] * x[j, p]
            GV[p * dv + e] = s
    for e in range(dv):
        k = h * dv + e
        for ll in range(D.shape[1]):
            D[k, ll] = 0.0
        lv_e = hb[8, h, a, e]
        for p in range(d):
            D[k, lv + p * dv + e] = lv_e * GV[p * dv + e]
        ue = hb[6, h, a, e]
        for j in range(N):
            kap[j] = g[h, a, j] * (hb[4, h, j, e] - ue)
        if full:
            for q in range(d):
                s = 0.0
                for j in range(N):
                    s += kap[j] * x[j, q]
                tmp[q] = s
            for p in range(d):
                t = lv_e * x[i, p]
                for q in range(d):
                    D[k, p * d + q] = t * tmp[q]
        else:
            for e2 in range(dv):
                s = 0.0
                for j in range(N):
                    s += kap[j] * hb[2, h, j, e2]
                tmp[e2] = s * hb[1, h, i, e2] * inv_r * lv_e
            for p in range(d):
                for e2 in range(dv):
                    D[k, p * dv + e2] = x[i, p] * tmp[e2]
            for e2 in range(dv):
                qe = hb[0, h, i, e2] * inv_r * lv_e
                for p in range(d):
                    s = 0.0
                    for j in range(N):
                        s += kap[j] * hb[3, h, j, e2] * x[j, p]
                    D[k, d * dv + p * dv + e2] = qe * s
        if theta_kind == 1:
            t = ue * hb[10, h, a, 0]
            for p in range(d):
                D[k, lt + p] = t * x[i, p]
        elif theta_kind == 2:
            t = ue * hb[10, h, a, e]
            for p in range(d):
                D[k, lt + p * dv + e] = t * x[i, p]


@njit(cache=True, error_model="numpy")
def _sums_worker_wo(wk, nworkers, theta, X, y, offset, H, dv, dout, full, gate, act,
                    theta_kind, intercept, last, F, partial):
    """:func:`_sums_worker` for a layer linear in ``W_O`` (every gate but ``"output"``),
    with the same chunks and the same layout of ``partial``.

    The Jacobian row of output ``(a, c)`` is ``[W_O[:, c]ᵀ D_a | e_c ⊗ õ_a]``: ``D_a``
    (``H·d_v`` rows, :func:`_head_derivatives`) holds the derivatives of the head outputs
    ``o_a`` of row ``a``, ``õ_a = (o_a, 1)`` with the intercept. So the sums come per row
    ``a`` instead of per output: ``Σ_a D_aᵀ W_O W_Oᵀ D_a`` by ``dsyrk`` on the rows
    ``F D_a`` (``FᵀF = W_O W_Oᵀ``, ``F`` from the caller: ``min(H·d_v, d_out)`` rows), the
    ``W_O`` block from ``Σ_a õ_a õ_aᵀ`` (the same for every column ``c``), the cross block
    from ``Σ_a D_aᵀ ⊗ õ_a`` contracted with ``W_O`` once per chunk."""
    n, N, d = X.shape
    i0 = N - 1 if last else 0
    R = N - i0
    oK, oV, oO, oT, oB, P = layer_offsets(H, d, dv, dout, full, theta_kind, intercept)
    cols, Wh = _head_columns(H, d, dv, full, theta_kind, oK, oV, oT)
    Pin = H * Wh
    K = H * dv
    Kt = K + 1 if intercept else K
    r = F.shape[0]
    inv_r = 1.0 / math.sqrt(dv)
    W = np.empty((K, dout))
    for k in range(K):
        for c in range(dout):
            W[k, c] = theta[oO + k * dout + c]
    wsum = np.zeros(K)
    for k in range(K):
        for c in range(dout):
            wsum[k] += W[k, c]
    hb, g, zg, scratch = _workspace(H, N, d, dv, dout, R)
    Jnone = np.empty((0, 0))
    w = R * dout
    B = max(1, _ROWS_PER_BLOCK // max(R * r, 1))
    Rb = np.empty((B * R * r, Pin))
    fb = np.empty(w)
    D = np.empty((K, Wh))
    ot = np.empty(Kt)
    wr = np.empty(K)
    rr = np.empty(dout)
    GV = np.empty(d * dv)
    kap = np.empty(N)
    tmp = np.empty(max(d, dv))
    ints, dbl, chars = SyrkArgs()
    Ain = np.empty((Pin, Pin))
    T = np.empty((K, Kt, Wh))  # Σ_a D_a[k, l] õ_a[kk]
    Dsum = np.empty((K, Wh))
    Jin = np.empty(Pin)
    Go = np.empty((Kt, Kt))
    JrO = np.empty((Kt, dout))
    osum = np.empty(Kt)
    acc = np.empty(partial.shape[1])
    A = acc[:P * P].reshape((P, P))
    nchunks = partial.shape[0]
    for ch in range(wk, nchunks, nworkers):
        Ain[:, :] = 0.0
        T[:, :, :] = 0.0
        Dsum[:, :] = 0.0
        Jin[:] = 0.0
        Go[:, :] = 0.0
        JrO[:, :] = 0.0
        osum[:] = 0.0
        ssr = 0.0
        rsum = 0.0
        s1 = (ch + 1) * n // nchunks
        s = ch * n // nchunks
        while s < s1:
            nb = min(B, s1 - s)
            for t in range(nb):
                x = X[s + t]
                _sample(theta, x, H, N, d, dv, dout, full, gate, act, theta_kind, intercept,
                        i0, False, fb, Jnone, hb, g, zg, scratch)
                for a in range(R):
                    base = (s + t) * w + a * dout
                    for c in range(dout):
                        rk = fb[a * dout + c] + offset - y[base + c]
                        rr[c] = rk
                        ssr += rk * rk
                        rsum += rk
                    for h in range(H):
                        _head_derivatives(h, a, x, i0, N, d, dv, full, theta_kind, inv_r, hb,
                                          g, D, GV, kap, tmp)
                        for e in range(dv):
                            ot[h * dv + e] = hb[7, h, a, e]
                    if intercept:
                        ot[K] = 1.0
                    for k in range(K):
                        sw = 0.0
                        for c in range(dout):
                            sw += W[k, c] * rr[c]
                        wr[k] = sw
                    # rows F D_a of the dsyrk block; Jᵀr, ΣJ and the cross sums
                    rb = (t * R + a) * r
                    for i in range(r):
                        for h in range(H):
                            for ll in range(Wh):
                                sv = 0.0
                                for e in range(dv):
                                    sv += F[i, h * dv + e] * D[h * dv + e, ll]
                                Rb[rb + i, h * Wh + ll] = sv
                    for h in range(H):
                        for e in range(dv):
                            k = h * dv + e
                            wk_ = wr[k]
                            for ll in range(Wh):
                                Dk = D[k, ll]
                                Jin[h * Wh + ll] += wk_ * Dk
                                Dsum[k, ll] += Dk
                            for kk in range(Kt):
                                okk = ot[kk]
                                for ll in range(Wh):
                                    T[k, kk, ll] += D[k, ll] * okk
                    for kk in range(Kt):
                        okk = ot[kk]
                        osum[kk] += okk
                        for k2 in range(kk, Kt):
                            Go[kk, k2] += okk * ot[k2]
                        for c in range(dout):
                            JrO[kk, c] += rr[c] * okk
            syrk_upper(Ain, Rb, nb * R * r, ints, dbl, chars)
            s += nb
        # the chunk's sums in theta's order (upper triangle of A)
        acc[:] = 0.0
        for q1 in range(Pin):
            t1 = cols[q1]
            for q2 in range(q1, Pin):
                t2 = cols[q2]
                if t1 <= t2:
                    A[t1, t2] = Ain[q1, q2]
                else:
                    A[t2, t1] = Ain[q1, q2]
        for h in range(H):
            for ll in range(Wh):
                q = h * Wh + ll
                t1 = cols[q]
                acc[P * P + t1] = Jin[q]
                cs = 0.0
                for e in range(dv):
                    cs += wsum[h * dv + e] * Dsum[h * dv + e, ll]
                acc[P * P + P + 1 + t1] = cs
                for kk in range(Kt):
                    for c in range(dout):
                        sv = 0.0
                        for e in range(dv):
                            sv += W[h * dv + e, c] * T[h * dv + e, kk, ll]
                        t2 = oO + kk * dout + c if kk < K else oB + c
                        if t1 <= t2:
                            A[t1, t2] = sv
                        else:
                            A[t2, t1] = sv
        for c in range(dout):
            for kk in range(Kt):
                t1 = oO + kk * dout + c if kk < K else oB + c
                for k2 in range(kk, Kt):
                    t2 = oO + k2 * dout + c if k2 < K else oB + c
                    A[t1, t2] = Go[kk, k2]
                acc[P * P + t1] = JrO[kk, c]
                acc[P * P + P + 1 + t1] = osum[kk]
        acc[P * P + P] = ssr
        acc[P * P + 2 * P + 1] = rsum
        partial[ch, :] = acc


@njit(cache=True, parallel=True)
def _sums_parallel(theta, X, y, offset, H, dv, dout, full, gate, act, theta_kind, intercept,
                   last, partial, nthreads):
    nworkers = min(nthreads, partial.shape[0])
    for wk in prange(nworkers):  # one workspace per worker, chunks dealt round-robin
        _sums_worker(wk, nworkers, theta, X, y, offset, H, dv, dout, full, gate, act,
                     theta_kind, intercept, last, partial)


@njit(cache=True, parallel=True)
def _sums_parallel_wo(theta, X, y, offset, H, dv, dout, full, gate, act, theta_kind,
                      intercept, last, F, partial, nthreads):
    nworkers = min(nthreads, partial.shape[0])
    for wk in prange(nworkers):
        _sums_worker_wo(wk, nworkers, theta, X, y, offset, H, dv, dout, full, gate, act,
                        theta_kind, intercept, last, F, partial)


def _factored(X, args):
    """Whether :func:`_sums_worker_wo` serves the sums: a layer linear in ``W_O`` (every gate
    but ``"output"``) with more output columns than head channels (``d_out > H·d_v``), where
    its ``dsyrk`` takes ``H·d_v`` rows per token row instead of ``d_out``. With
    ``d_out <= H·d_v`` it takes as many rows, and forming ``D_a`` costs more than it saves."""
    H, dv, dout, gate = args[0], args[1], args[2], args[4]
    return gate != _OUTPUT and dout > H * dv


def _wo_factor(theta, X, args):
    """``F`` with ``FᵀF = W_O W_Oᵀ`` for :func:`_sums_worker_wo`: ``W_Oᵀ`` (``d_out`` rows)
    when ``d_out <= H·d_v``, else ``Λ^½ Uᵀ`` from ``W_O W_Oᵀ = U Λ Uᵀ`` (``H·d_v`` rows)."""
    H, dv, dout, full, gate, act, theta_kind, intercept, last = args
    oO = layer_offsets(H, X.shape[2], dv, dout, full, theta_kind, intercept)[2]
    K = H * dv
    W = theta[oO:oO + K * dout].reshape(K, dout)
    if dout <= K or not np.isfinite(W).all():  # non-finite: the sums say so
        return np.ascontiguousarray(W.T)
    lam, U = np.linalg.eigh(W @ W.T)
    return np.ascontiguousarray(np.sqrt(np.maximum(lam, 0.0))[:, None] * U.T)


@njit(cache=True)
def _add_chunks(partial, P):
    """The chunks' partial sums added in chunk order, ``JᵀJ``'s lower triangle filled from
    its upper one."""
    total = chunk_total(partial)
    for p in range(P):
        for q in range(p):
            total[p * P + q] = total[q * P + p]
    return total


def _sums_total(partial, P):
    """``(JᵀJ, Jᵀr, Σr², ΣJ, Σr)`` from the chunks' partial sums, added in chunk order."""
    total = _add_chunks(partial, P)
    A = total[:P * P].reshape(P, P)
    return (A, total[P * P:P * P + P], float(total[P * P + P]),
            total[P * P + P + 1:P * P + 2 * P + 1], float(total[P * P + 2 * P + 1]))


def layer_sums(theta, X, y, offset, H, dv, dout, full, gate, act, theta_kind, intercept,
               last, n_threads=None):
    """``(JᵀJ, Jᵀr, Σr², ΣJ, Σr)`` of the residuals ``r = f + offset − y`` (``y`` flat like the
    output of :func:`layer_values`).

    The samples are cut into :func:`layer_chunks` chunks (their number depends only on ``n``
    and ``P``), each summed in sample order, and the chunks added in chunk order: the same
    bits on any number of threads. ``n_threads``: Numba's thread count when ``None``; one
    thread runs the chunks serially without compiling the parallel loop.
    """
    theta = np.ascontiguousarray(theta, dtype=np.float64)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    n, N, d = X.shape
    P = layer_offsets(H, d, dv, dout, full, theta_kind, intercept)[5]
    partial = np.zeros((layer_chunks(n, P), P * P + 2 * P + 2))
    _run_sums(theta, X, y, float(offset), (H, dv, dout, full, gate, act, theta_kind,
                                            intercept, last), partial, n_threads)
    return _sums_total(partial, P)


def _run_sums(theta, X, y, offset, args, partial, n_threads):
    # below SERIAL_SAMPLES residuals (a race's subsample) threads cost more than they save;
    # the serial and the parallel loop add the same chunks in the same order
    if y.size < SERIAL_SAMPLES:
        nthreads = 1
    else:
        nthreads = get_num_threads() if n_threads is None else int(n_threads)
    nworkers = min(max(nthreads, 1), partial.shape[0])
    # dsyrk on one BLAS thread: BLAS threads started inside Numba's workers only fight them
    # for the cores (free inside the solvers' own limit)
    with single_thread_blas():
        if _factored(X, args):
            F = _wo_factor(theta, X, args)
            if nworkers <= 1:
                _sums_worker_wo(0, 1, theta, X, y, offset, *args, F, partial)
            else:
                _sums_parallel_wo(theta, X, y, offset, *args, F, partial, nworkers)
        elif nworkers <= 1:
            _sums_worker(0, 1, theta, X, y, offset, *args, partial)
        else:
            _sums_parallel(theta, X, y, offset, *args, partial, nworkers)


def layer_heads(theta, X, H, dv, dout, full, gate, act, theta_kind, intercept, last, out):
    """The head outputs ``Φ`` (``o_ie`` of the module docstring) of the samples ``X`` into
    ``out`` of shape (n·R, H·d_v): row ``s·R + a`` (sample ``s``, row ``i = i0 + a``), column
    ``h·d_v + e``. For every gate but ``"output"``, the layer's output is ``Φ W_O + b`` with
    ``W_O`` read as the ``(H·d_v) × d_out`` matrix. Threads as :func:`layer_values`."""
    _forward(theta, X, (H, dv, dout, full, gate, act, theta_kind, intercept, last),
             np.empty(0), out)
    return out


class LayerPasses:
    """The passes of a Levenberg–Marquardt iteration on one layer data set, with the protocol
    of :class:`~hmoe_estim.kernels.KernelPasses`.

    ``X`` (n×N×d) and the flat targets ``y`` (n·R·d_out, as :func:`layer_values` orders its
    output); ``args = (H, d_v, d_out, full, gate code, activation code, W_θ kind, intercept,
    last row only)``, the trailing arguments of :func:`layer_values`.

    ``n`` is the number of *residuals* ``n·R·d_out`` — what the solver's uses of it mean (the
    residual variance ``Σ r²/n``, the intercept's column of ones); ``n_samples`` is
    the number of token matrices. ``sums(theta, offset)`` returns ``(JᵀJ, Jᵀr, Σr², ΣJ, Σr,
    finite)`` for ``r = f + offset − y`` (a scalar ``offset`` added to every output);
    ``values(theta)`` the flat predictions, in a buffer that the next call overwrites.
    """

    def __init__(self, X, y, args):
        X = np.ascontiguousarray(X, dtype=np.float64)
        yc = np.ascontiguousarray(np.ravel(y), dtype=np.float64)
        n, N, d = X.shape
        H, dv, dout, full, gate, act, theta_kind, intercept, last = args
        args = (int(H), int(dv), int(dout), bool(full), int(gate), int(act), int(theta_kind),
                bool(intercept), bool(last))
        R = 1 if last else N
        if yc.size != n * R * dout:
            raise ValueError(f"y must hold n·R·d_out = {n * R * dout} targets; got {yc.size}.")
        P = layer_offsets(args[0], d, args[1], args[2], args[3], args[6], args[7])[5]
        self.n = int(yc.size)
        self.n_samples = int(n)
        self.n_params = int(P)
        self.penalty_weights = None
        self.floor = max(self.n, 1) * (
            1e-13 * (float(np.sqrt(np.mean(yc ** 2))) if yc.size else 0.0)) ** 2
        out = np.empty(yc.size)
        partial = np.zeros((layer_chunks(n, P), P * P + 2 * P + 2))
        n_threads = get_num_threads()  # read once: the caller keeps it while the starts run

        def values(theta):
            return layer_values(np.ascontiguousarray(theta, dtype=np.float64), X, *args, out)

        def sums(theta, offset):
            partial.fill(0.0)
            _run_sums(np.ascontiguousarray(theta, dtype=np.float64), X, yc, float(offset),
                      args, partial, n_threads)
            A, g, ssr, colsum, rsum = _sums_total(partial, P)
            finite = bool(math.isfinite(ssr) and np.isfinite(A).all() and np.isfinite(g).all())
            return A, g, float(ssr), colsum, float(rsum), finite

        self.values, self.sums = values, sums
        #: scratch arrays of the iterations: ``workspace(P)`` (:class:`~.lm_step.LMWorkspace`)
        self.workspace = LMWorkspace()

