"""Independent plain-NumPy evaluations of the paper's formulas, written loop by loop for tests.

Nothing here imports the package's kernels: these are the yardsticks the kernels are checked
against.
"""

import math

import numpy as np


def phi_ref(name, z):
    z = np.asarray(z, dtype=float)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-z))
    if name == "tanh":
        return np.tanh(z)
    if name == "gelu":
        erf = np.vectorize(math.erf)
        return 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))
    if name == "silu":
        return z / (1.0 + np.exp(-z))
    raise KeyError(name)


def gate_ref(M_h, x):
    """softmax_i(x^T M[h, i] x) for one head and one sample."""
    s = np.array([x @ M_h[i] @ x for i in range(M_h.shape[0])])
    s = s - s.max()
    w = np.exp(s)
    return w / w.sum()


def f_ref(omega, M, a, X, gate="none", activation="sigmoid"):
    """Paper eq. (2), (9), (12) and G5, one sample at a time."""
    H, N, K, D = a.shape
    out = np.empty(len(X))
    for j, x in enumerate(X):
        total = 0.0
        for h in range(H):
            g = gate_ref(M[h], x)
            for k in range(K):
                if gate in ("none", "output"):
                    total += omega[h, k] * sum(g[i] * (a[h, i, k] @ x) for i in range(N))
                elif gate == "value":
                    total += omega[h, k] * sum(
                        g[i] * phi_ref(activation, a[h, i, k] @ x) for i in range(N)
                    )
                elif gate == "sdpa":
                    u = sum(g[i] * (a[h, i, k] @ x) for i in range(N))
                    total += omega[h, k] * phi_ref(activation, u)
        if gate == "output":
            total = phi_ref(activation, total)
        out[j] = total
    return out


def random_arrays(H, N, K, D, rng, scale=1.0):
    omega = rng.uniform(0.2, 1.5, size=(H, K))
    M = rng.normal(scale=scale, size=(H, N, D, D))
    M = 0.5 * (M + M.transpose(0, 1, 3, 2))
    a = rng.normal(scale=scale, size=(H, N, K, D))
    return omega, M, a


def fd_gradient(fun, theta, rel=1e-6):
    """Central finite-difference gradient of ``fun`` at ``theta`` (step ``rel·max(1, |θ_p|)``)."""
    grad = np.empty_like(theta)
    for p in range(theta.size):
        h = rel * max(1.0, abs(theta[p]))
        e = np.zeros_like(theta)
        e[p] = h
        grad[p] = (fun(theta + e) - fun(theta - e)) / (2 * h)
    return grad
