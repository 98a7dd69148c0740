"""Fused least-squares objective and analytic gradient of the HMoE models (SPEC §2–3).

One pass over the samples computes, for ``theta`` in the layout of
:mod:`hmoe_estim.parameters`,

    objective(theta) = (1/n) Σ_j (f_theta(x_j) − y_j)²          (eq. (3), divided by n)

and its gradient with respect to ``omega``, the free triangles of ``M`` and ``a``.

Layout for speed (SPEC §7): the inputs come transposed, ``XT`` of shape (D, n), and samples
are processed in blocks of ``BLOCK`` with the block index innermost in every loop, so that
LLVM vectorises across samples. The products ``c_pq x_p x_q`` are formed once per block and
shared by every ``M[h, i]``; the gate, the expert values and the activations are computed once
and reused by the objective and the gradient. Temporaries are per block — ``(H, N, K, BLOCK)``
at most — so memory is O(n·D) for the data plus O(parameters).

Determinism: the blocks are grouped into at most ``MAX_CHUNKS`` chunks whose number depends
only on ``n``; each chunk's partial sums are added in chunk order. The result is therefore the
same for any number of threads.

``fastmath`` is limited to ``reassoc`` and ``contract`` (re-association for vectorised sums,
fused multiply-add): the ``nnan``/``ninf`` flags are *not* set, so NaN and inf propagate.
"""

import numpy as np
from numba import njit, prange

from .activations import activation_block
from .gate import gate_block, pair_products
from .rows import combine_rows

BLOCK = 128
MAX_CHUNKS = 64
_FM = {"reassoc", "contract"}
# Only the explicit ``prange`` over chunks is parallel: with ``parallel=True`` Numba would also
# turn the ``np.zeros`` of the partial sums into parallel regions, each of which wakes the
# sleeping worker threads (~80 µs apiece with OMP_WAIT_POLICY=PASSIVE).
_PARALLEL = {
    "prange": True, "numpy": False, "reduction": False, "setitem": False, "stencil": False,
    "comprehension": False, "fusion": False, "inplace_binop": False,
}

GATE_NONE, GATE_VALUE, GATE_SDPA, GATE_OUTPUT = 0, 1, 2, 3


@njit(cache=True, fastmath=_FM)
def _forward_block(
    XT, j0, b, omega, tri, a, gate, act, x, xx, s, g, z, phz, dphz, u, phu, dphu, f, fm, dfo, work
):
    """Forward pass on samples ``j0 .. j0+b``; fills the block temporaries and ``f``.

    ``fm`` is the MHA output (used by the output gate); ``dfo`` its ``φ'`` (output gate only).
    """
    H, K = omega.shape
    N = a.shape[1]
    D = a.shape[3]
    for d in range(D):
        for t in range(b):
            x[d, t] = XT[d, j0 + t]
    pair_products(x, xx, b)
    for t in range(b):
        f[t] = 0.0
    for h in range(H):
        gate_block(tri[h], xx, s, g[h], work, b)
        for i in range(N):
            for k in range(K):
                combine_rows(a[h, i, k], x, z[h, i, k], b)
        if gate == GATE_SDPA:
            for k in range(K):
                uu = u[h, k]
                for t in range(b):
                    uu[t] = 0.0
                for i in range(N):
                    gi = g[h, i]
                    zz = z[h, i, k]
                    for t in range(b):
                        uu[t] += gi[t] * zz[t]
                activation_block(act, uu, phu[h, k], dphu[h, k], work, b)
                w = omega[h, k]
                pu = phu[h, k]
                for t in range(b):
                    f[t] += w * pu[t]
        else:  # f += Σ_i g_i Σ_k ω_k ψ(z_ik), ψ = φ (value gate) or the identity
            if gate == GATE_VALUE:
                for i in range(N):
                    for k in range(K):
                        activation_block(act, z[h, i, k], phz[h, i, k], dphz[h, i, k], work, b)
            ex = phz[h] if gate == GATE_VALUE else z[h]
            for i in range(N):
                gi = g[h, i]
                for k in range(K):
                    w = omega[h, k]
                    ek = ex[i, k]
                    for t in range(b):
                        f[t] += w * gi[t] * ek[t]
    if gate == GATE_OUTPUT:
        for t in range(b):
            fm[t] = f[t]
        activation_block(act, fm, f, dfo, work, b)


@njit(cache=True)
def _block_temporaries(H, N, K, D):
    """Per-block scratch of the forward pass: x (D,B), xx (T,B), s (N,B), g (H,N,B),
    z/φ(z)/φ'(z) (H,N,K,B), u/φ(u)/φ'(u) (H,K,B), f, f_MHA, φ'(f_MHA), work (B,)."""
    T = D * (D + 1) // 2
    return (
        np.empty((D, BLOCK)), np.empty((T, BLOCK)), np.empty((N, BLOCK)), np.empty((H, N, BLOCK)),
        np.empty((H, N, K, BLOCK)), np.empty((H, N, K, BLOCK)), np.empty((H, N, K, BLOCK)),
        np.empty((H, K, BLOCK)), np.empty((H, K, BLOCK)), np.empty((H, K, BLOCK)),
        np.empty(BLOCK), np.empty(BLOCK), np.empty(BLOCK), np.empty(BLOCK),
    )


@njit(cache=True)
def _unpack(theta, H, N, K, D):
    T = D * (D + 1) // 2
    o1 = H * K
    o2 = o1 + H * (N - 1) * T
    omega = theta[:o1].reshape((H, K))
    tri = theta[o1:o2].reshape((H, N - 1, T))
    a = theta[o2:].reshape((H, N, K, D))
    return omega, tri, a, o1, o2


@njit(cache=True)
def _chunks(n):
    nblocks = (n + BLOCK - 1) // BLOCK
    nchunks = min(MAX_CHUNKS, nblocks)
    return nblocks, nchunks


@njit(cache=True, parallel=_PARALLEL, fastmath=_FM)
def objective_and_gradient(theta, XT, y, H, N, K, D, gate, act):
    """Mean squared error of the HMoE ``theta`` on ``(XT.T, y)`` and its gradient.

    Parameters
    ----------
    theta : ndarray of shape (P,)
        Parameters in the layout of :mod:`hmoe_estim.parameters`.
    XT : ndarray of shape (D, n), C-contiguous
        Inputs, transposed.
    y : ndarray of shape (n,)
    H, N, K, D : int
        Heads, tokens, channels, input dimension.
    gate, act : int
        Gate and activation codes (:mod:`hmoe_estim._names`).

    Returns
    -------
    value : float
    grad : ndarray of shape (P,)
    """
    n = XT.shape[1]
    P = theta.shape[0]
    T = D * (D + 1) // 2
    omega, tri, a, o1, o2 = _unpack(theta, H, N, K, D)
    nblocks, nchunks = _chunks(n)
    partial = np.zeros((nchunks, P + 1))
    scale = 2.0 / n
    for c in prange(nchunks):
        x, xx, s, g, z, phz, dphz, u, phu, dphu, f, fm, dfo, work = _block_temporaries(H, N, K, D)
        e = np.empty(BLOCK)
        v = np.empty((N, BLOCK))
        fh = np.empty(BLOCK)
        du = np.empty((K, BLOCK))
        acc = partial[c]
        gomega = acc[:o1].reshape((H, K))
        gtri = acc[o1:o2].reshape((H, N - 1, T))
        ga = acc[o2:P].reshape((H, N, K, D))
        for blk in range(c * nblocks // nchunks, (c + 1) * nblocks // nchunks):
            j0 = blk * BLOCK
            b = min(BLOCK, n - j0)
            _forward_block(
                XT, j0, b, omega, tri, a, gate, act,
                x, xx, s, g, z, phz, dphz, u, phu, dphu, f, fm, dfo, work,
            )
            loss = 0.0
            for t in range(b):
                r = f[t] - y[j0 + t]
                loss += r * r
                e[t] = scale * r
            acc[P] += loss
            if gate == GATE_OUTPUT:
                for t in range(b):
                    e[t] *= dfo[t]
            for h in range(H):
                # v[i] = value mixed by token i; fh = head output before omega-mixing of G1
                if gate == GATE_SDPA:
                    # f = Σ_k ω φ(u_k),  u_k = Σ_i g_i z_ik
                    for k in range(K):
                        w = omega[h, k]
                        pu = phu[h, k]
                        dpu = dphu[h, k]
                        sacc = 0.0
                        for t in range(b):
                            sacc += e[t] * pu[t]
                            du[k, t] = e[t] * w * dpu[t]
                        gomega[h, k] += sacc
                    # ds_i = g_i Σ_k du_k (z_ik − u_k)
                    for i in range(N):
                        vi = v[i]
                        for t in range(b):
                            vi[t] = 0.0
                        for k in range(K):
                            zz = z[h, i, k]
                            uu = u[h, k]
                            duk = du[k]
                            for t in range(b):
                                vi[t] += duk[t] * (zz[t] - uu[t])
                        gi = g[h, i]
                        for t in range(b):
                            vi[t] *= gi[t]
                    # da_ik = du_k g_i x
                    for i in range(N):
                        gi = g[h, i]
                        for k in range(K):
                            duk = du[k]
                            for t in range(b):
                                fh[t] = duk[t] * gi[t]
                            for d in range(D):
                                xd = x[d]
                                sacc = 0.0
                                for t in range(b):
                                    sacc += fh[t] * xd[t]
                                ga[h, i, k, d] += sacc
                else:
                    # f_h = Σ_i g_i v_i with v_i = Σ_k ω_k ψ(z_ik), ψ = id or φ
                    ex = z[h] if gate != GATE_VALUE else phz[h]
                    for t in range(b):
                        fh[t] = 0.0
                    for i in range(N):
                        vi = v[i]
                        for t in range(b):
                            vi[t] = 0.0
                        for k in range(K):
                            w = omega[h, k]
                            ek = ex[i, k]
                            for t in range(b):
                                vi[t] += w * ek[t]
                        gi = g[h, i]
                        for t in range(b):
                            fh[t] += gi[t] * vi[t]
                    for i in range(N):
                        gi = g[h, i]
                        for k in range(K):
                            ek = ex[i, k]
                            sacc = 0.0
                            for t in range(b):
                                sacc += e[t] * gi[t] * ek[t]
                            gomega[h, k] += sacc
                    # da_ik = e ω_k g_i ψ'(z_ik) x
                    for i in range(N):
                        gi = g[h, i]
                        for k in range(K):
                            w = omega[h, k]
                            coef = du[0]
                            if gate == GATE_VALUE:
                                dz = dphz[h, i, k]
                                for t in range(b):
                                    coef[t] = e[t] * w * gi[t] * dz[t]
                            else:
                                for t in range(b):
                                    coef[t] = e[t] * w * gi[t]
                            for d in range(D):
                                xd = x[d]
                                sacc = 0.0
                                for t in range(b):
                                    sacc += coef[t] * xd[t]
                                ga[h, i, k, d] += sacc
                    # ds_i = e g_i (v_i − f_h)
                    for i in range(N):
                        vi = v[i]
                        gi = g[h, i]
                        for t in range(b):
                            vi[t] = e[t] * gi[t] * (vi[t] - fh[t])
                # dM_i[pq] = Σ_t ds_i c_pq x_p x_q, only for free tokens i < N-1
                for i in range(N - 1):
                    vi = v[i]
                    for pq in range(T):
                        xq = xx[pq]
                        sacc = 0.0
                        for t in range(b):
                            sacc += vi[t] * xq[t]
                        gtri[h, i, pq] += sacc
    total = np.zeros(P + 1)
    for c in range(nchunks):
        for p in range(P + 1):
            total[p] += partial[c, p]
    return total[P] / n, total[:P].copy()


@njit(cache=True, parallel=_PARALLEL, fastmath=_FM)
def predict(theta, XT, H, N, K, D, gate, act):
    """``f_theta(x_j)`` for every column of ``XT`` (shape (D, n))."""
    n = XT.shape[1]
    omega, tri, a, o1, o2 = _unpack(theta, H, N, K, D)
    nblocks, nchunks = _chunks(n)
    out = np.empty(n)
    for c in prange(nchunks):
        x, xx, s, g, z, phz, dphz, u, phu, dphu, f, fm, dfo, work = _block_temporaries(H, N, K, D)
        for blk in range(c * nblocks // nchunks, (c + 1) * nblocks // nchunks):
            j0 = blk * BLOCK
            b = min(BLOCK, n - j0)
            _forward_block(
                XT, j0, b, omega, tri, a, gate, act,
                x, xx, s, g, z, phz, dphz, u, phu, dphu, f, fm, dfo, work,
            )
            for t in range(b):
                out[j0 + t] = f[t]
    return out
