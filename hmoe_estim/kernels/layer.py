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
result does not depend on the thread count. :func:`layer_heads` returns the head outputs
``Φ`` (the variable projection of ``hmoe_estim.layer`` solves ``W_O`` from them).
:class:`LayerPasses` sets these passes up once per data set for the solvers, with the
protocol of :class:`~hmoe_estim.kernels.KernelPasses`.
"""

import math

import numpy as np
from numba import get_num_threads, njit, prange

from .blas import SyrkArgs, syrk_upper
from .lm_step import LMWorkspace
from .objective import SERIAL_SAMPLES
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
def layer_values(theta, X, H, dv, dout, full, gate, act, theta_kind, intercept, last, out):
    """Predictions of the samples ``X`` (n×N×d) into ``out`` (n·R·d_out, row-major over
    samples, rows, columns); ``R = 1`` when ``last``, else ``N``."""
    n, N, d = X.shape
    i0 = N - 1 if last else 0
    R = N - i0
    hb, g, zg, scratch = _workspace(H, N, d, dv, dout, R)
    J = np.empty((0, 0))
    w = R * dout
    for s in range(n):
        _sample(theta, X[s], H, N, d, dv, dout, full, gate, act, theta_kind, intercept, i0,
                False, out[s * w:(s + 1) * w], J, hb, g, zg, scratch)
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


@njit(cache=True, parallel=True)
def _sums_parallel(theta, X, y, offset, H, dv, dout, full, gate, act, theta_kind, intercept,
                   last, partial, nthreads):
    nworkers = min(nthreads, partial.shape[0])
    for wk in prange(nworkers):  # one workspace per worker, chunks dealt round-robin
        _sums_worker(wk, nworkers, theta, X, y, offset, H, dv, dout, full, gate, act,
                     theta_kind, intercept, last, partial)


def _sums_total(partial, P):
    """``(JᵀJ, Jᵀr, Σr², ΣJ, Σr)`` from the chunks' partial sums, added in chunk order."""
    total = partial[0].copy()
    for c in range(1, partial.shape[0]):
        total += partial[c]
    A = total[:P * P].reshape(P, P)
    A = np.triu(A) + np.triu(A, 1).T
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
        if nworkers <= 1:
            _sums_worker(0, 1, theta, X, y, offset, *args, partial)
        else:
            _sums_parallel(theta, X, y, offset, *args, partial, nworkers)


@njit(cache=True, error_model="numpy")
def layer_heads(theta, X, H, dv, dout, full, gate, act, theta_kind, intercept, last, out):
    """The head outputs ``Φ`` (``o_ie`` of the module docstring) of the samples ``X`` into
    ``out`` of shape (n·R, H·d_v): row ``s·R + a`` (sample ``s``, row ``i = i0 + a``), column
    ``h·d_v + e``. For every gate but ``"output"``, the layer's output is ``Φ W_O + b`` with
    ``W_O`` read as the ``(H·d_v) × d_out`` matrix."""
    n, N, d = X.shape
    i0 = N - 1 if last else 0
    R = N - i0
    hb, g, zg, scratch = _workspace(H, N, d, dv, dout, R)
    J = np.empty((0, 0))
    f = np.empty(R * dout)
    o = hb[7]
    for s in range(n):
        _sample(theta, X[s], H, N, d, dv, dout, full, gate, act, theta_kind, intercept, i0,
                False, f, J, hb, g, zg, scratch)
        for a in range(R):
            for h in range(H):
                for e in range(dv):
                    out[s * R + a, h * dv + e] = o[h, a, e]
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

