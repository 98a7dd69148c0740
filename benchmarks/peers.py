"""Peer implementations of the least-squares objective and its gradient, for benchmarking.

Every peer computes exactly what :func:`hmoe_estim.kernels.objective.objective_and_gradient`
computes (paper eq. (3) divided by ``n``)::

    L(theta) = (1/n) Σ_j (f_theta(x_j) − y_j)²

with ``theta`` in the layout of :mod:`hmoe_estim.model`::

    theta = [ omega (H*K) | upper triangles of M[h, i], i < N-1 (H*(N-1)*T) | a (H*N*K*D) ]

``M[h, N-1] = 0`` and ``xᵀ M x = Σ_{p<=q} c_pq M[p,q] x_p x_q`` with ``c_pq = 1`` on the
diagonal and 2 off it. The gates are ``"none"`` (MHA), ``"value"`` (G2), ``"sdpa"`` (G1) and
``"output"`` (G5); the activations ``sigmoid``, ``tanh``, ``gelu``, ``silu``.

Peers
-----
``numpy``
    Plain vectorised NumPy with a hand-written analytic gradient (the reverse pass written
    out), samples on the last axis so that element-wise work runs over long contiguous rows
    and the contractions over samples are BLAS matrix products.
``torch``
    PyTorch on CPU, float64, forward pass written with tensor operations, gradient by autograd.
``jax``
    JAX ``jit(value_and_grad(loss))`` with ``jax_enable_x64``.

All peers are built by ``make_<peer>(X, y, shape, gate, activation)`` and return a function
``fg(theta) -> (float, ndarray (P,))`` taking and returning NumPy float64, as
``scipy.optimize.minimize(jac=True)`` calls it. Data-only quantities (the pair products
``c_pq x_p x_q`` of shape (T, n), the transposed inputs, the tensors on the peer's device) are
prepared once when the function is built and are *not* part of the timed evaluation; the
Numba kernel recomputes the pair products on every call. This favours the peers.

torch and jax are imported lazily: :func:`available_peers` reports a peer whose library is
missing with the reason instead of failing.
"""

import math

import numpy as np

__all__ = [
    "GATES", "ACTIVATIONS", "PEER_NAMES", "available_peers", "make_peer",
    "make_hmoe", "make_numpy", "make_torch", "torch_loss", "make_jax", "make_case",
    "pair_products",
]

GATES = ("none", "value", "sdpa", "output")
ACTIVATIONS = ("sigmoid", "tanh", "gelu", "silu")
PEER_NAMES = ("numpy", "torch", "jax")


# ----------------------------------------------------------------------------- shared helpers


def _layout(shape):
    H, N, K, D = shape
    T = D * (D + 1) // 2
    o1 = H * K
    o2 = o1 + H * (N - 1) * T
    P = o2 + H * N * K * D
    return T, o1, o2, P


def _check(shape, gate, activation):
    if gate not in GATES:
        raise ValueError(f"Unknown gate {gate!r}; use one of {GATES}.")
    if activation not in ACTIVATIONS:
        raise ValueError(f"Unknown activation {activation!r}; use one of {ACTIVATIONS}.")
    H, N, K, D = shape
    if min(H, N, K, D) < 1:
        raise ValueError(f"shape (H, N, K, D) must be positive; got {shape}.")


def pair_products(X):
    """``xx[pq, j] = c_pq X[j, p] X[j, q]`` for ``p <= q`` row-major; shape (T, n)."""
    X = np.asarray(X, dtype=np.float64)
    D = X.shape[1]
    p, q = np.triu_indices(D)
    c = np.where(p == q, 1.0, 2.0)
    return np.ascontiguousarray((X[:, p] * X[:, q] * c).T)


def make_case(shape, n, *, seed=0, noise=0.1, perturb=0.3):
    """A reproducible benchmark case ``(X, y, theta)``.

    ``X ~ U[-1, 1]^D`` of shape (n, D); ``y = f_{theta*}(X) + noise·ε`` under the MHA
    function of a random ``theta*`` (the value of ``y`` does not change the cost);
    ``theta = theta* + perturb·ε'`` with ``omega`` kept positive. Uses only NumPy.
    """
    H, N, K, D = shape
    T, o1, o2, P = _layout(shape)
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, D))
    theta_star = np.concatenate([
        rng.uniform(0.2, 1.5, size=o1),
        rng.normal(scale=1.0, size=o2 - o1),
        rng.normal(scale=1.0, size=P - o2),
    ])
    f = _numpy_forward(theta_star, X.T.copy(), pair_products(X), shape, "none", "sigmoid")[0]
    y = f + noise * rng.normal(size=n)
    theta = theta_star + perturb * rng.normal(size=P)
    theta[:o1] = np.abs(theta[:o1])
    return X, y, theta


# ----------------------------------------------------------------------------- numpy peer


def _np_phi(activation, z):
    """``(φ(z), φ'(z))`` element-wise, stable for any finite ``z``."""
    if activation == "sigmoid":
        s = 0.5 + 0.5 * np.tanh(0.5 * z)
        return s, s * (1.0 - s)
    if activation == "tanh":
        t = np.tanh(z)
        return t, 1.0 - t * t
    if activation == "gelu":
        from scipy.special import erf

        cdf = 0.5 * (1.0 + erf(z * (1.0 / math.sqrt(2.0))))
        return z * cdf, cdf + z * (1.0 / math.sqrt(2.0 * math.pi)) * np.exp(-0.5 * z * z)
    s = 0.5 + 0.5 * np.tanh(0.5 * z)  # silu
    return z * s, s * (1.0 + z * (1.0 - s))


def _numpy_forward(theta, XT, xxT, shape, gate, activation):
    """Forward pass with every intermediate the reverse pass needs. Samples on the last axis."""
    H, N, K, D = shape
    T, o1, o2, P = _layout(shape)
    n = XT.shape[1]
    omega = theta[:o1].reshape(H, K)
    tri = theta[o1:o2].reshape(H * (N - 1), T)
    a = theta[o2:].reshape(H * N * K, D)
    # gate: s[h, i] = xᵀ M[h, i] x, s[h, N-1] = 0; stable softmax over i
    s = np.zeros((H, N, n))
    if N > 1:
        s[:, : N - 1] = (tri @ xxT).reshape(H, N - 1, n)
    s -= s.max(axis=1, keepdims=True)
    g = np.exp(s)
    g /= g.sum(axis=1, keepdims=True)
    z = (a @ XT).reshape(H, N, K, n)  # a[h,i,k]·x
    cache = {"omega": omega, "g": g, "z": z}
    if gate == "sdpa":
        u = np.einsum("hin,hikn->hkn", g, z)  # Σ_i g_i z_ik
        pu, dpu = _np_phi(activation, u)
        f = np.einsum("hk,hkn->n", omega, pu)
        cache.update(u=u, pu=pu, dpu=dpu)
    else:
        if gate == "value":
            psi, dpsi = _np_phi(activation, z)
            cache["dpsi"] = dpsi
        else:
            psi = z
        v = np.einsum("hk,hikn->hin", omega, psi)  # Σ_k ω_k ψ(z_ik)
        fh = np.einsum("hin,hin->hn", g, v)
        f = fh.sum(axis=0)
        cache.update(psi=psi, v=v, fh=fh)
        if gate == "output":
            cache["fm"] = f
            f, cache["dfo"] = _np_phi(activation, f)
    return f, cache


def _numpy_fg(theta, X, XT, xx, xxT, y, shape, gate, activation):
    H, N, K, D = shape
    T, o1, o2, P = _layout(shape)
    n = XT.shape[1]
    theta = np.asarray(theta, dtype=np.float64)
    f, c = _numpy_forward(theta, XT, xxT, shape, gate, activation)
    r = f - y
    value = float(r @ r) / n
    e = (2.0 / n) * r
    if gate == "output":
        e = e * c["dfo"]
    omega, g, z = c["omega"], c["g"], c["z"]
    if gate == "sdpa":
        gomega = c["pu"] @ e  # (H, K)
        du = (e * c["dpu"]) * omega[:, :, None]  # dL/du, (H, K, n)
        w = np.einsum("hkn,hikn->hin", du, z) - np.einsum("hkn,hkn->hn", du, c["u"])[:, None]
        ds = g * w
        coef = g[:, :, None, :] * du[:, None, :, :]  # dL/dz, (H, N, K, n)
    else:
        ge = g * e  # (H, N, n)
        gomega = np.einsum("hin,hikn->hk", ge, c["psi"])
        coef = ge[:, :, None, :] * omega[:, None, :, None]
        if gate == "value":
            coef *= c["dpsi"]
        ds = ge * (c["v"] - c["fh"][:, None, :])
    ga = coef.reshape(H * N * K, n) @ X  # (HNK, D)
    grad = np.empty(P)
    grad[:o1] = gomega.ravel()
    if N > 1:
        grad[o1:o2] = (ds[:, : N - 1].reshape(H * (N - 1), n) @ xx).ravel()
    grad[o2:] = ga.ravel()
    return value, grad


def make_numpy(X, y, shape, gate="none", activation="sigmoid"):
    """Vectorised-NumPy objective and hand-written gradient: ``fg(theta) -> (L, grad)``."""
    _check(shape, gate, activation)
    X = np.ascontiguousarray(X, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    XT = np.ascontiguousarray(X.T)
    xxT = pair_products(X)
    xx = xxT.T  # (n, T) view, BLAS takes it transposed

    def fg(theta):
        return _numpy_fg(theta, X, XT, xx, xxT, y, shape, gate, activation)

    return fg


# ----------------------------------------------------------------------------- torch peer


def _torch():
    import torch

    return torch


def torch_loss(X, y, shape, gate="none", activation="sigmoid"):
    """The PyTorch forward pass: ``loss(theta) -> L`` on a float64 tensor ``theta`` (P,).

    The data-only tensors are built once here; ``loss`` is differentiable by autograd
    (:func:`make_torch` wraps it as ``fg``; ``bench_peers_fit.py`` optimises it with
    ``torch.optim.LBFGS``).
    """
    _check(shape, gate, activation)
    torch = _torch()
    H, N, K, D = shape
    T, o1, o2, P = _layout(shape)
    n = len(y)
    XT = torch.from_numpy(np.ascontiguousarray(np.asarray(X, dtype=np.float64).T))
    xxT = torch.from_numpy(pair_products(X))
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.float64))
    act = {
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "gelu": torch.nn.functional.gelu,
        "silu": torch.nn.functional.silu,
    }[activation]

    def loss(theta):
        omega = theta[:o1].reshape(H, K)
        a = theta[o2:].reshape(H * N * K, D)
        if N > 1:
            s_free = (theta[o1:o2].reshape(H * (N - 1), T) @ xxT).reshape(H, N - 1, n)
            s = torch.cat([s_free, torch.zeros((H, 1, n), dtype=theta.dtype)], dim=1)
        else:
            s = torch.zeros((H, 1, n), dtype=theta.dtype)
        g = torch.softmax(s, dim=1)  # (H, N, n)
        z = (a @ XT).reshape(H, N, K, n)
        if gate == "sdpa":
            u = (g.unsqueeze(2) * z).sum(dim=1)  # (H, K, n)
            f = (omega.unsqueeze(2) * act(u)).sum(dim=(0, 1))
        else:
            psi = act(z) if gate == "value" else z
            v = (omega[:, None, :, None] * psi).sum(dim=2)  # (H, N, n)
            f = (g * v).sum(dim=(0, 1))
            if gate == "output":
                f = act(f)
        r = f - yt
        return (r * r).mean()

    return loss


def make_torch(X, y, shape, gate="none", activation="sigmoid"):
    """PyTorch (CPU, float64, autograd) objective and gradient: ``fg(theta) -> (L, grad)``."""
    loss = torch_loss(X, y, shape, gate, activation)
    torch = _torch()

    def fg(theta):
        t = torch.tensor(np.asarray(theta, dtype=np.float64), requires_grad=True)
        val = loss(t)
        val.backward()
        return float(val.detach()), t.grad.numpy().copy()

    return fg


# ----------------------------------------------------------------------------- jax peer


def _jax():
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def make_jax(X, y, shape, gate="none", activation="sigmoid"):
    """JAX ``jit(value_and_grad)`` objective (x64): ``fg(theta) -> (L, grad)``."""
    _check(shape, gate, activation)
    jax = _jax()
    jnp = jax.numpy
    H, N, K, D = shape
    T, o1, o2, P = _layout(shape)
    n = len(y)
    XT = jnp.asarray(np.ascontiguousarray(np.asarray(X, dtype=np.float64).T))
    xxT = jnp.asarray(pair_products(X))
    yj = jnp.asarray(np.asarray(y, dtype=np.float64))
    act = {
        "sigmoid": jax.nn.sigmoid,
        "tanh": jnp.tanh,
        "gelu": lambda v: jax.nn.gelu(v, approximate=False),
        "silu": jax.nn.silu,
    }[activation]

    def loss(theta, XT, xxT, y):
        omega = theta[:o1].reshape(H, K)
        a = theta[o2:].reshape(H * N * K, D)
        if N > 1:
            s_free = (theta[o1:o2].reshape(H * (N - 1), T) @ xxT).reshape(H, N - 1, n)
            s = jnp.concatenate([s_free, jnp.zeros((H, 1, n), dtype=theta.dtype)], axis=1)
        else:
            s = jnp.zeros((H, 1, n), dtype=theta.dtype)
        g = jax.nn.softmax(s, axis=1)
        z = (a @ XT).reshape(H, N, K, n)
        if gate == "sdpa":
            u = (g[:, :, None, :] * z).sum(axis=1)
            f = (omega[:, :, None] * act(u)).sum(axis=(0, 1))
        else:
            psi = act(z) if gate == "value" else z
            v = (omega[:, None, :, None] * psi).sum(axis=2)
            f = (g * v).sum(axis=(0, 1))
            if gate == "output":
                f = act(f)
        r = f - y
        return jnp.mean(r * r)

    vg = jax.jit(jax.value_and_grad(loss))

    def fg(theta):
        val, grad = vg(jnp.asarray(np.asarray(theta, dtype=np.float64)), XT, xxT, yj)
        return float(val), np.asarray(grad)

    return fg


# ----------------------------------------------------------------------------- hmoe kernel


def make_hmoe(X, y, shape, gate="none", activation="sigmoid"):
    """hmoe-estim's Numba kernel with the same signature as the peers."""
    _check(shape, gate, activation)
    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels.objective import objective_and_gradient

    H, N, K, D = shape
    XT = np.ascontiguousarray(np.asarray(X, dtype=np.float64).T)
    y = np.ascontiguousarray(y, dtype=np.float64)
    gc, ac = GATE_CODES[gate], ACTIVATION_CODES[activation]

    def fg(theta):
        v, g = objective_and_gradient(np.asarray(theta, dtype=np.float64), XT, y,
                                      H, N, K, D, gc, ac)
        return float(v), g

    return fg


# ----------------------------------------------------------------------------- registry

_MAKERS = {"hmoe": make_hmoe, "numpy": make_numpy, "torch": make_torch, "jax": make_jax}


def available_peers(names=PEER_NAMES):
    """``(available, skipped)``: peer names whose library imports, and ``{name: reason}``."""
    ok, skipped = [], {}
    for name in names:
        try:
            if name == "torch":
                _torch()
            elif name == "jax":
                _jax()
            elif name not in _MAKERS:
                raise ValueError(f"unknown peer {name!r}; use one of {tuple(_MAKERS)}")
            ok.append(name)
        except ImportError as exc:
            skipped[name] = f"not installed ({exc})"
    return ok, skipped


def make_peer(name, X, y, shape, gate="none", activation="sigmoid"):
    """``fg(theta) -> (L, grad)`` of the named implementation (``hmoe`` or a peer)."""
    if name not in _MAKERS:
        raise ValueError(f"Unknown implementation {name!r}; use one of {tuple(_MAKERS)}.")
    return _MAKERS[name](X, y, shape, gate, activation)
