"""Fused least-squares objective and analytic gradient of the HMoE models (paper eq. (2), (3),
(9), (12)).

One pass over the samples computes, for ``theta`` in the layout of
``hmoe_estim/model/_parameters.py``,

    objective(theta) = (1/n) Σ_j (f_theta(x_j) − y_j)²          (eq. (3), divided by n)

and its gradient with respect to ``omega``, the free triangles of ``M`` and ``a`` — and, for the
estimator options, an intercept ``c`` (a trailing entry of ``theta``) and a ridge penalty
(see :func:`objective_and_gradient`).

Layout for speed: the inputs come transposed, ``XT`` of shape (D, n), and samples
are processed in blocks of ``BLOCK`` with the block index innermost in every loop, so that
LLVM vectorises across samples. The products ``c_pq x_p x_q`` are formed once per block and
shared by every ``M[h, i]``; the gate, the expert values and the activations are computed once
and reused by the objective and the gradient. Temporaries are per worker thread, 2-D arrays
indexed by row — ``(H·N·K, BLOCK)`` at most — so memory is O(n·D) for the data plus
O(parameters); the loops index rows instead of taking row views (a view costs two atomic
reference-count updates per row per block in compiled code).

Fewer operations for linear experts (gates ``none`` and ``output``): inside head ``h`` every
channel shares the gate, so ``f`` depends on ``(omega, a)`` only through
``b[h, i] = Σ_k omega[h, k] a[h, i, k]`` (the degeneracy behind eq. (5)). The kernel evaluates
``b[h, i]·x`` — H·N
dot products per sample instead of H·N·K — and accumulates ``G[h, i] = Σ_j e_j g[h, i](x_j)
x_j``, from which ``∂/∂a[h, i, k] = omega[h, k] G[h, i]`` and
``∂/∂omega[h, k] = Σ_i a[h, i, k]·G[h, i]`` follow once per call.

Determinism: the blocks are grouped into at most ``MAX_CHUNKS`` chunks whose number depends
only on ``n``; each chunk's partial sums are added in chunk order. The result is therefore the
same for any number of threads. The parallel loop runs over workers (one per thread), each
allocating its temporaries once and taking chunks round-robin, so the number of allocations
per call does not grow with the number of chunks (a fixed cost that would break linear scaling
in ``n``).

Serial and parallel variants: below ``SERIAL_SAMPLES`` samples, or on one thread, the
compiled per-worker function is called straight from Python for all chunks; otherwise a small
compiled wrapper runs the workers in a ``prange``. Both deal the same chunks and add them in
the same order, so they give the same bits. The split is for start-up time: Numba compiles the
machine code of every callee again into each compiled caller, and a parallel loop costs
seconds of compilation on top of that, so a first small fit should compile neither (timings:
the documentation's performance page). For the same reason the internal functions carry no
CPython wrapper (``target.INTERNAL``) and take row indices as ``int64`` variables, never as
literal constants, which Numba would compile as separate signatures.

``fastmath`` is limited to ``reassoc`` and ``contract`` (re-association for vectorised sums,
fused multiply-add): the ``nnan``/``ninf`` flags are *not* set, so NaN and inf propagate.

Why one module of this size: the forward and backward block passes share their row conventions
and temporaries line by line; split, the two halves could no longer be read against each other.
"""

import numba
import numpy as np
from numba import get_num_threads, njit, prange

from .activations import activation_rows
from .gate import gate_softmax, pair_products
from .layout import offsets as _py_offsets
from .layout import theta_offsets as _offsets
from .rows import accumulate_dots, combine_rows, gated_sum
from .target import FASTMATH, INTERNAL, wide_vectors

BLOCK = 256
MAX_CHUNKS = 64
#: Below this many samples the kernels run serially whatever the thread count (eight blocks:
#: too little work to share between threads).
SERIAL_SAMPLES = 2048
_FM = FASTMATH
# Only the explicit ``prange`` over workers is parallel: with ``parallel=True`` Numba would also
# turn the ``np.zeros`` of the partial sums into parallel regions, each of which wakes the
# worker threads (a wake-up each when they sleep at once).
_PARALLEL = {
    "prange": True, "numpy": False, "reduction": False, "setitem": False, "stencil": False,
    "comprehension": False, "fusion": False, "inplace_binop": False,
}

GATE_NONE, GATE_VALUE, GATE_SDPA, GATE_OUTPUT = 0, 1, 2, 3


@njit(cache=True)
def _linear(gate):
    """True for the gates whose experts enter linearly (MHA and the output gate)."""
    return gate == GATE_NONE or gate == GATE_OUTPUT


def mixed_values(theta, H, N, K, D, gate):
    """``b[h, i] = Σ_k omega[h, k] a[h, i, k]``, flattened (H·N·D,); empty unless linear.

    Plain NumPy (called once per kernel call, before the compiled pass).
    """
    if gate != GATE_NONE and gate != GATE_OUTPUT:
        return np.zeros(0)
    o2 = _py_offsets(H, N, K, D)[2]
    omega = theta[:H * K].reshape(H, 1, K, 1)
    a = theta[o2:o2 + H * N * K * D].reshape(H, N, K, D)
    # NumPy adds along the short k axis in order, k = 0, 1, …: the sum of the kernels' loop
    return (omega * a).sum(axis=2).ravel()


@njit(cache=True)
def chunk_total(partial):
    """``Σ_c partial[c]``, added in chunk order (the same bits for any number of threads).

    Compiled: NumPy would make one call per chunk (40 at 10⁴ samples), a large share of a
    short pass."""
    total = partial[0].copy()
    for c in range(1, partial.shape[0]):
        for k in range(total.shape[0]):
            total[k] += partial[c, k]
    return total


if numba.config.DISABLE_JIT:  # interpreted kernels (tests): the same additions by NumPy

    def chunk_total(partial):  # noqa: F811
        """:func:`chunk_total` without the compiler."""
        total = partial[0].copy()
        for c in range(1, partial.shape[0]):
            total += partial[c]
        return total


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def _temporaries(H, N, K, D, gate, extra):
    """Per-worker scratch, rows × samples of a block.

    x (D), xx (T), s (N), g (H·N), z (H·N: ``b[h, i]·x`` for the linear gates; H·N·K:
    ``a[h, i, k]·x`` for the SDPA gate; 1 row of scratch for the value gate), φ(z)/φ'(z)
    (H·N·K, value gate), vv (H·N, value gate: ``Σ_k ω φ(z_ik)``), u/φ(u)/φ'(u) (H·K, SDPA
    gate), v (N: ``∂/∂s_i``), du (K), fo (3: f_MHA, φ(f_MHA), φ'(f_MHA)), e (1), coef (1),
    work (2), ones (1); f and fh (B,); and ``extra`` rows for the caller (``J``).

    Every array is a 2-D ``np.empty`` (1-D ones are rows of one), made here and in the compiler
    flags of the callers: one ``np.empty`` signature compiles once on a cold start, where
    ``np.ones``, 1-D shapes and allocations in functions of other flags compiled five.
    """
    T = D * (D + 1) // 2
    if gate == GATE_NONE or gate == GATE_OUTPUT:
        nz = H * N
    elif gate == GATE_SDPA:
        nz = H * N * K
    else:
        nz = 1
    nphi = H * N * K if gate == GATE_VALUE else 1
    nvv = H * N if gate == GATE_VALUE else 1
    nu = H * K if gate == GATE_SDPA else 1
    ones = np.empty((1, BLOCK))
    for t in range(BLOCK):
        ones[0, t] = 1.0
    ffh = np.empty((2, BLOCK))
    return (
        np.empty((D, BLOCK)), np.empty((T, BLOCK)), np.empty((N, BLOCK)),
        np.empty((H * N, BLOCK)), np.empty((nz, BLOCK)),
        np.empty((nphi, BLOCK)), np.empty((nphi, BLOCK)), np.empty((nvv, BLOCK)),
        np.empty((nu, BLOCK)), np.empty((nu, BLOCK)), np.empty((nu, BLOCK)),
        np.empty((N, BLOCK)), np.empty((K, BLOCK)), np.empty((3, BLOCK)),
        np.empty((1, BLOCK)), np.empty((1, BLOCK)), np.empty((2, BLOCK)), ones,
        ffh[0], ffh[1], np.empty((extra, BLOCK)),
    )


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def _forward_block(
    XT, j0, b, theta, bv, H, N, K, gate, act,
    x, xx, s, g, z, phz, dphz, vv, u, phu, dphu, fo, f, work,
):
    """Forward pass on samples ``j0 .. j0+b``: fills the temporaries and ``f``.

    Row conventions: ``g[h*N + i]``; ``z[h*N + i]`` (linear gates, ``b[h, i]·x``) or
    ``z[(h*N + i)*K + k]`` (SDPA gate, ``a[h, i, k]·x``); ``phz[(h*N + i)*K + k]`` and
    ``vv[h*N + i]`` (value gate); ``u[h*K + k]``; for the output gate ``fo[0] = f_MHA``,
    ``fo[1] = φ(f_MHA)``, ``fo[2] = φ'(f_MHA)``.
    """
    wide_vectors()
    zero = np.int64(0)  # row 0 as an int64, not a literal: one compiled signature per helper
    D = x.shape[0]
    T, o1, o2, P = _offsets(H, N, K, D)
    for d in range(D):
        for t in range(b):
            x[d, t] = XT[d, j0 + t]
    pair_products(x, xx, b)
    for t in range(b):
        f[t] = 0.0
    for h in range(H):
        # gate: s_i = xᵀ M[h, i] x from the triangles of M and the pair products, then softmax
        for i in range(N - 1):
            combine_rows(theta, o1 + (h * (N - 1) + i) * T, T, xx, s, i, b)
        gate_softmax(h, N, s, g, work, b)
        if gate == GATE_NONE or gate == GATE_OUTPUT:  # f += Σ_i g_i b_i·x
            for i in range(N):
                r = h * N + i
                combine_rows(bv, r * D, D, x, z, r, b)
                for t in range(b):
                    f[t] += g[r, t] * z[r, t]
        elif gate == GATE_SDPA:  # f += Σ_k ω_k φ(u_k),  u_k = Σ_i g_i a_ik·x
            for i in range(N):
                for k in range(K):
                    r = (h * N + i) * K + k
                    combine_rows(theta, o2 + r * D, D, x, z, r, b)
            for k in range(K):
                rk = h * K + k
                for t in range(b):
                    u[rk, t] = g[h * N, t] * z[h * N * K + k, t]
                for i in range(1, N):
                    ri = h * N + i
                    r = ri * K + k
                    for t in range(b):
                        u[rk, t] += g[ri, t] * z[r, t]
                activation_rows(act, u, rk, phu, rk, dphu, rk, b)
                w = theta[rk]
                for t in range(b):
                    f[t] += w * phu[rk, t]
        else:  # value gate: f += Σ_i g_i vv_i,  vv_i = Σ_k ω_k φ(a_ik·x)
            for i in range(N):
                ri = h * N + i
                for k in range(K):
                    r = ri * K + k
                    combine_rows(theta, o2 + r * D, D, x, z, zero, b)
                    activation_rows(act, z, zero, phz, r, dphz, r, b)
                    w = theta[h * K + k]
                    if k == 0:
                        for t in range(b):
                            vv[ri, t] = w * phz[r, t]
                    else:
                        for t in range(b):
                            vv[ri, t] += w * phz[r, t]
                for t in range(b):
                    f[t] += g[ri, t] * vv[ri, t]
    if gate == GATE_OUTPUT:
        for t in range(b):
            fo[0, t] = f[t]
        activation_rows(act, fo, zero, fo, zero + 1, fo, zero + 2, b)
        for t in range(b):
            f[t] = fo[1, t]


@njit(cache=True, error_model="numpy", fastmath=_FM, **INTERNAL)
def _backward_block(
    b, theta, H, N, K, gate, acc, oG, e, x, xx, g, z, phz, dphz, vv, u, phu, dphu,
    v, du, coef, ones, fh,
):
    """Add the block's gradient to ``acc`` given ``e[0] = ∂(objective)/∂f`` per sample.

    ``acc`` has the layout of ``theta``; for the linear gates the ``a``/``omega`` part is
    accumulated as ``G[h, i]`` at ``acc[oG:]`` instead (see the module docstring).
    ``v[i]`` receives ``∂/∂s_i`` (``s_i = xᵀ M[h, i] x``) for the free tokens ``i < N-1``.
    """
    wide_vectors()
    zero = np.int64(0)  # as in _forward_block
    D = x.shape[0]
    T, o1, o2, P = _offsets(H, N, K, D)
    for h in range(H):
        r0 = h * N
        if _linear(gate):
            # f_h = Σ_i g_i z_i;  G[h,i] += Σ_t e g_i x;  ∂/∂s_i = e g_i (z_i − f_h)
            gated_sum(g, z, r0, N, fh, b)
            for i in range(N):
                r = r0 + i
                accumulate_dots(e, zero, g, r, 1.0, x, D, acc, oG + r * D, b)
                if i < N - 1:
                    for t in range(b):
                        v[i, t] = e[0, t] * g[r, t] * (z[r, t] - fh[t])
        elif gate == GATE_SDPA:
            # f = Σ_k ω_k φ(u_k), u_k = Σ_i g_i z_ik:  du_k = e ω_k φ'(u_k)
            for k in range(K):
                rk = h * K + k
                w = theta[rk]
                sacc = 0.0
                for t in range(b):
                    sacc += e[0, t] * phu[rk, t]
                    du[k, t] = e[0, t] * w * dphu[rk, t]
                acc[rk] += sacc
            # Σ_k du_k u_k, then ∂/∂s_i = g_i (Σ_k du_k z_ik − Σ_k du_k u_k)
            for t in range(b):
                fh[t] = du[0, t] * u[h * K, t]
            for k in range(1, K):
                for t in range(b):
                    fh[t] += du[k, t] * u[h * K + k, t]
            for i in range(N):
                ri = r0 + i
                # ∂/∂a_ik = Σ_t du_k g_i x
                for k in range(K):
                    r = ri * K + k
                    accumulate_dots(du, k, g, ri, 1.0, x, D, acc, o2 + r * D, b)
                if i < N - 1:
                    for t in range(b):
                        v[i, t] = du[0, t] * z[ri * K, t]
                    for k in range(1, K):
                        r = ri * K + k
                        for t in range(b):
                            v[i, t] += du[k, t] * z[r, t]
                    for t in range(b):
                        v[i, t] = g[ri, t] * (v[i, t] - fh[t])
        else:  # value gate: f_h = Σ_i g_i vv_i
            gated_sum(g, vv, r0, N, fh, b)
            for i in range(N):
                ri = r0 + i
                for t in range(b):
                    coef[0, t] = e[0, t] * g[ri, t]
                for k in range(K):
                    r = ri * K + k
                    # ∂/∂ω_k += Σ_t e g_i φ(z_ik);  ∂/∂a_ik = ω_k Σ_t e g_i φ'(z_ik) x
                    sacc = 0.0
                    for t in range(b):
                        sacc += coef[0, t] * phz[r, t]
                    acc[h * K + k] += sacc
                    accumulate_dots(coef, zero, dphz, r, theta[h * K + k], x, D, acc,
                                    o2 + r * D, b)
                # ∂/∂s_i = e g_i (vv_i − f_h)
                if i < N - 1:
                    for t in range(b):
                        v[i, t] = coef[0, t] * (vv[ri, t] - fh[t])
        # ∂/∂M_i[pq] = Σ_t (∂/∂s_i) c_pq x_p x_q, only for the free tokens i < N-1
        for i in range(N - 1):
            accumulate_dots(v, i, ones, zero, 1.0, xx, T, acc, o1 + (h * (N - 1) + i) * T, b)


def kernel_threads(n):
    """Threads a kernel call on ``n`` samples uses; ``1`` means its serial variant.

    Below ``SERIAL_SAMPLES`` always 1 (without asking Numba, which costs microseconds per call),
    otherwise Numba's thread count. The serial and the parallel variants deal the same chunks
    to workers and add the chunks' sums in the same order, so they return the same bits. The
    serial ones exist for start-up: a first small fit compiles no parallel region (a parallel
    loop costs seconds of compilation on top of its body; timings: the documentation's
    performance page).
    """
    return 1 if n < SERIAL_SAMPLES else get_num_threads()


def _chunks(n):
    """Blocks and chunks of ``n`` samples; the chunk count depends only on ``n``."""
    nblocks = (n + BLOCK - 1) // BLOCK
    return nblocks, max(1, min(MAX_CHUNKS, nblocks))


def objective_and_gradient(theta, XT, y, H, N, K, D, gate, act, fit_intercept=False, alpha=0.0):
    """Mean squared error of the HMoE ``theta`` on ``(XT.T, y)`` and its gradient.

    With the estimator options: ``fit_intercept`` adds a free constant ``c`` (the last entry
    of ``theta``) to ``f``; ``alpha`` adds the ridge penalty ``alpha·(‖M‖²_F + ‖a‖²)`` over
    the free gate matrices ``M[h, i]``, ``i < N-1`` (Frobenius norm: an off-diagonal entry of
    the stored triangle counts twice) and the experts ``a``, to the *mean* squared error::

        objective = (1/n) Σ_j (f_theta(x_j) + c − y_j)² + alpha·(‖M‖²_F + ‖a‖²)

    so ``∂/∂c = (2/n) Σ_j (f + c − y_j)``; neither ``c`` nor ``omega`` is penalised.

    Parameters
    ----------
    theta : ndarray of shape (P,) or (P + 1,)
        Parameters in the layout of ``hmoe_estim/model/_parameters.py``, followed by the intercept
        ``c`` when ``fit_intercept``.
    XT : ndarray of shape (D, n), C-contiguous
        Inputs, transposed.
    y : ndarray of shape (n,)
    H, N, K, D : int
        Heads, tokens, channels, input dimension.
    gate, act : int
        Gate and activation codes (:mod:`hmoe_estim._names`).
    fit_intercept : bool, default=False
        Whether ``theta`` ends with the intercept ``c``.
    alpha : float, default=0.0
        Ridge penalty (``>= 0``).

    Returns
    -------
    value : float
    grad : ndarray of shape like ``theta``
    """
    P = _py_offsets(H, N, K, D)[3] + (1 if fit_intercept else 0)
    if theta.shape[0] != P:
        raise ValueError(
            f"theta has {theta.shape[0]} entries; (H, N, K, D) = {(H, N, K, D)} with "
            f"fit_intercept={bool(fit_intercept)} needs {P}."
        )
    n = XT.shape[1]
    bv = mixed_values(theta, H, N, K, D, gate)
    # per chunk: [gradient of the measure's entries | loss | Σ r | G[h, i] (linear gates)]
    Pm = _py_offsets(H, N, K, D)[3]
    partial = np.zeros((_chunks(n)[1], Pm + 2 + bv.shape[0]))
    c0 = float(theta[Pm]) if fit_intercept else 0.0
    nthreads = kernel_threads(n)
    if nthreads <= 1:
        _objective_worker(0, 1, theta, XT, y, bv, H, N, K, gate, act, c0, partial)
    else:
        _objective_and_gradient(theta, XT, y, bv, H, N, K, gate, act, c0, partial, nthreads)
    value, grad = _objective_total(chunk_total(partial), theta, n, H, N, K, D, gate,
                                   bool(fit_intercept))
    if alpha > 0.0:  # alpha·Σ_p w_p theta_p² over the measure's entries
        w = penalty_weights((H, N, K, D))
        tm = theta[:Pm]
        value += float(alpha) * float(w @ (tm * tm))
        grad[:Pm] += 2.0 * float(alpha) * w * tm
    return value, grad


def penalty_weights(shape):
    """``w`` with ``‖M‖²_F + ‖a‖² = Σ_p w_p theta_p²`` over the free ``M[h, i]`` and ``a``.

    0 on ``omega``; 1 on a diagonal and 2 on an off-diagonal entry of a stored triangle of
    ``M`` (row-major ``p <= q``, ``model/_parameters.py``); 1 on ``a``. The one definition of
    the ridge penalty, for :func:`objective_and_gradient` and the Levenberg–Marquardt solver.
    """
    H, N, K, D = shape
    tri = np.array([1.0 if p == q else 2.0 for p in range(D) for q in range(p, D)])
    return np.concatenate([np.zeros(H * K), np.tile(tri, H * (N - 1)), np.ones(H * N * K * D)])


@njit(cache=True, error_model="numpy", fastmath=_FM)
def _objective_worker(wk, nworkers, theta, XT, y, bv, H, N, K, gate, act, c0, partial):
    """Chunks ``wk, wk + nworkers, …`` of the fused pass: loss, Σ r and gradient sums per chunk.

    ``partial[c]`` receives chunk ``c``'s sums (layout: :func:`objective_and_gradient`).
    The parallel and the serial variant both call this, so they add the same numbers in the
    same order.
    """
    wide_vectors()
    D, n = XT.shape
    P = _offsets(H, N, K, D)[3]
    oG = P + 2  # loss, Σ residuals, then G[h, i] (linear gates) after the gradient
    nblocks = (n + BLOCK - 1) // BLOCK
    nchunks = partial.shape[0]
    scale = 2.0 / n
    (x, xx, s, g, z, phz, dphz, vv, u, phu, dphu, v, du, fo, e, coef, work, ones, f,
     fh, _) = _temporaries(H, N, K, D, gate, np.int64(0))
    for c in range(wk, nchunks, nworkers):
        acc = partial[c]
        for blk in range(c * nblocks // nchunks, (c + 1) * nblocks // nchunks):
            j0 = blk * BLOCK
            b = min(BLOCK, n - j0)
            _forward_block(
                XT, j0, b, theta, bv, H, N, K, gate, act,
                x, xx, s, g, z, phz, dphz, vv, u, phu, dphu, fo, f, work,
            )
            loss = 0.0
            rsum = 0.0
            for t in range(b):
                r = f[t] + c0 - y[j0 + t]
                loss += r * r
                rsum += r
                e[0, t] = scale * r
            acc[P] += loss
            acc[P + 1] += rsum
            if gate == GATE_OUTPUT:
                for t in range(b):
                    e[0, t] *= fo[2, t]
            _backward_block(
                b, theta, H, N, K, gate, acc, oG, e, x, xx, g, z, phz, dphz, vv, u, phu,
                dphu, v, du, coef, ones, fh,
            )


@njit(cache=True, parallel=_PARALLEL)
def _objective_and_gradient(theta, XT, y, bv, H, N, K, gate, act, c0, partial, nthreads):
    nworkers = min(nthreads, partial.shape[0])
    for wk in prange(nworkers):  # one set of temporaries per worker, chunks dealt round-robin
        _objective_worker(wk, nworkers, theta, XT, y, bv, H, N, K, gate, act, c0, partial)


@njit(cache=True, error_model="numpy", fastmath=_FM)
def _objective_total(total, theta, n, H, N, K, D, gate, fit_intercept):
    """The value and gradient (without the penalty) from the summed chunks ``total``."""
    wide_vectors()
    T, o1, o2, P = _offsets(H, N, K, D)
    oG = P + 2
    scale = 2.0 / n
    grad = np.empty(P + 1 if fit_intercept else P)
    grad[:P] = total[:P]
    if fit_intercept:
        grad[P] = scale * total[P + 1]
    if _linear(gate):  # ∂/∂a_ik = ω_k G_i,  ∂/∂ω_k = Σ_i a_ik·G_i
        for h in range(H):
            for i in range(N):
                r = h * N + i
                for k in range(K):
                    w = theta[h * K + k]
                    oa = o2 + (r * K + k) * D
                    sacc = 0.0
                    for d in range(D):
                        G = total[oG + r * D + d]
                        grad[oa + d] = w * G
                        sacc += theta[oa + d] * G
                    grad[h * K + k] += sacc
    value = total[P] / n
    return value, grad


def predict(theta, XT, H, N, K, D, gate, act):
    """``f_theta(x_j)`` for every column of ``XT`` (shape (D, n)).

    The pass is :func:`hmoe_estim.kernels.jacobian.forward_values`, which the Gauss–Newton
    sums share: one compiled pass for both.
    """
    from .jacobian import forward_values  # jacobian.py imports this module

    return forward_values(theta, XT, H, N, K, D, gate, act)
