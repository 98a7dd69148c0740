"""Branch functions and gauge-aware token matching: the building blocks of the metrics
(docs: Theory to code, "Voronoi cells and losses").

A *branch* of a mixing measure is one value channel ``(h, k)`` without its weight:

``f_G^{h,k}(x) = Σ_i g[h,i](x) · expert[h,i,k](x)``,  ``g[h,i](x) = softmax_i(xᵀ M[h,i] x)``,

where the *expert* is the function the token gate mixes: ``a[h,i,k]·x`` (``"linear"``, the
reading for the gates ``"none"`` (MHA), ``"sdpa"`` (G1) and ``"output"`` (G5)) or
``φ(a[h,i,k]·x)`` (``"activated"``, the reading for ``"value"`` (G2)).

Tokens of a fitted channel are matched to the tokens of a true channel by the permutation that
minimises the parameter distance *up to the softmax translation gauge*: adding one matrix to
every ``M[h, i]`` of a head leaves ``f`` unchanged, so for a permutation ``π`` (fitted token
``π(i)`` matched to true token ``i``) the fitted matrices are re-normalised against the fitted
token matched to the true last token, ``M'_i = M[π(i)] − M[π(N-1)]``, and compared with the
normalised true matrices ``M*_i − M*_{N-1}`` (the softmax translation gauge, assumption (A.3)).

Everything here is vectorised NumPy: the metrics are not the hot loop.
"""

import itertools
from functools import lru_cache

import numpy as np
from scipy.optimize import linear_sum_assignment

from .._validation import check_gate
from ..kernels import phi
from ..model import MixingMeasure, check_inputs

__all__ = [
    "DEFAULT_N_REF",
    "MAX_ENUMERATE_TOKENS",
    "EXPERT_READINGS",
    "resolve_expert",
    "check_measure_pair",
    "reference_sample",
    "phi",
    "token_gate",
    "expert_values",
    "branch_functions",
    "branch_distances",
    "token_cost_tables",
    "match_tokens",
]

#: Default size of the seeded uniform reference sample on ``[-1, 1]^D``.
DEFAULT_N_REF = 4096
#: Token matching enumerates all ``N!`` permutations up to this ``N``; Hungarian above it.
MAX_ENUMERATE_TOKENS = 6
#: The two readings of "expert" (paper eq. (7)): ``a·x`` and ``φ(a·x)``.
EXPERT_READINGS = ("linear", "activated")


def resolve_expert(gate, expert="auto"):
    """Return the expert reading ``"linear"`` or ``"activated"`` for ``gate``.

    ``expert="auto"`` picks the function the token gate mixes: ``φ(a·x)`` for
    ``gate="value"`` (G2), ``a·x`` for ``"none"``, ``"sdpa"`` and ``"output"``.

    Raises
    ------
    ValueError
        Unknown ``gate`` or ``expert``.
    """
    check_gate(gate)
    if expert is None or expert == "auto":
        return "activated" if gate == "value" else "linear"
    if expert not in EXPERT_READINGS:
        raise ValueError(
            f"Unknown expert reading {expert!r}. Use 'auto' (the function the gate mixes), "
            "'linear' (a·x) or 'activated' (φ(a·x))."
        )
    return expert


def check_measure_pair(measure, true_measure, *, same_tokens=True):
    """Check that two measures can be compared; raise a ``ValueError`` saying what to change.

    Both must be :class:`~hmoe_estim.MixingMeasure` on the same input dimension ``D``; with
    ``same_tokens`` also with the same number of tokens ``N`` (the Voronoi loss matches tokens
    one to one; the paper takes ``N*`` as known). ``H`` and ``K`` may differ.
    """
    for name, m in (("measure", measure), ("true_measure", true_measure)):
        if not isinstance(m, MixingMeasure):
            raise ValueError(
                f"{name} must be a MixingMeasure; got {type(m).__name__}. Build one with "
                "MixingMeasure(omega, M, a) or take a fitted estimator's measure_."
            )
    if measure.n_features != true_measure.n_features:
        raise ValueError(
            f"measure has D = {measure.n_features} input features but true_measure has "
            f"D = {true_measure.n_features}: fit the model on data with "
            f"{true_measure.n_features} features (the true measure's input dimension)."
        )
    if same_tokens and measure.n_tokens != true_measure.n_tokens:
        raise ValueError(
            f"measure has N = {measure.n_tokens} tokens but true_measure has "
            f"N = {true_measure.n_tokens}: the Voronoi loss matches tokens one to one, so fit "
            f"with n_tokens={true_measure.n_tokens} (N* is assumed known, as in the paper)."
        )


def reference_sample(n_features, X_ref=None, *, n_ref=DEFAULT_N_REF, random_state=0):
    """The reference sample on which L2 and sup norms over ``x`` are estimated.

    Parameters
    ----------
    n_features : int
        Input dimension ``D``.
    X_ref : array-like of shape (n_ref, D), optional
        Use these points. Default: ``n_ref`` points drawn uniformly on ``[-1, 1]^D`` (the
        default covariate distribution, assumption (A.1)) with
        ``numpy.random.default_rng(random_state)``.
    n_ref : int, default=4096
        Size of the default sample (ignored when ``X_ref`` is given).
    random_state : int or numpy.random.Generator, default=0
        Seed of the default sample.

    Returns
    -------
    ndarray of shape (n_ref, D)

    Raises
    ------
    ValueError
        ``X_ref`` not 2-D, of another width than ``D``, empty or not finite; ``n_ref < 1``.
    """
    if X_ref is not None:
        try:
            X_ref = check_inputs(X_ref, n_features, name="X_ref")
        except ValueError as exc:
            raise ValueError(
                f"{exc} Pass X_ref of shape (n_ref, {n_features}), or X_ref=None for a "
                "uniform sample on [-1, 1]^D."
            ) from None
        if X_ref.shape[0] < 1:
            raise ValueError("X_ref is empty: pass at least one reference point.")
        return X_ref
    if isinstance(n_ref, bool) or not isinstance(n_ref, (int, np.integer)) or n_ref < 1:
        raise ValueError(f"n_ref must be a positive integer; got {n_ref!r}.")
    rng = np.random.default_rng(random_state)
    return rng.uniform(-1.0, 1.0, size=(int(n_ref), n_features))


def token_gate(measure, X):
    """Token gate ``g[h, i](x) = softmax_i(xᵀ M[h,i] x)`` (paper eq. (2)), shape ``(n, H, N)``.

    Stable: the row maximum is subtracted before ``exp``.
    """
    s = np.einsum("nd,hide,ne->nhi", X, measure.M, X, optimize=True)
    s -= s.max(axis=2, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=2, keepdims=True)
    return s


def expert_values(measure, X, *, activation="sigmoid", reading="linear"):
    """Experts ``a[h,i,k]·x`` or ``φ(a[h,i,k]·x)`` at every row of ``X``, shape ``(n, H, N, K)``."""
    z = np.einsum("nd,hikd->nhik", X, measure.a, optimize=True)
    if reading == "activated":
        return phi(activation, z)
    return z


def branch_functions(measure, X, *, gate="none", activation="sigmoid", expert="auto"):
    """Branch functions ``f_G^{h,k}(x) = Σ_i g[h,i](x) · expert[h,i,k](x)`` (Voronoi cells).

    Parameters
    ----------
    measure : MixingMeasure
    X : ndarray of shape (n, D)
        Validated inputs.
    gate, activation : str
        Model; only used to choose the expert reading when ``expert="auto"``.
    expert : {"auto", "linear", "activated"}, default="auto"

    Returns
    -------
    ndarray of shape (n, H, K)
        The branch values; the channel weight ``omega[h, k]`` is *not* included.
    """
    reading = resolve_expert(gate, expert)
    g = token_gate(measure, X)
    e = expert_values(measure, X, activation=activation, reading=reading)
    return np.einsum("nhi,nhik->nhk", g, e)


def branch_distances(B, B_star):
    """L2(reference) distances between branches, shape ``(H, K, H*, K*)``.

    ``dist[h', k', h, k] = sqrt(mean_x (B[x, h', k'] − B*[x, h, k])²)``. Differences are formed
    directly (no ``|u|² + |v|² − 2u·v`` cancellation), so equal branches give exactly 0.
    """
    n, H, K = B.shape
    _, Hs, Ks = B_star.shape
    b = B.reshape(n, H * K)
    bs = B_star.reshape(n, Hs * Ks)
    d2 = np.empty((H * K, Hs * Ks))
    for j in range(H * K):  # at most H*K columns; each step is one (n, H*K*) array
        diff = bs - b[:, j : j + 1]
        d2[j] = np.einsum("nm,nm->m", diff, diff) / n
    return np.sqrt(d2).reshape(H, K, Hs, Ks)


def token_cost_tables(M_fit, a_fit, M_true, a_true, exponent):
    """Per-token costs of matching one fitted channel to one true channel.

    Parameters
    ----------
    M_fit : ndarray (N, D, D)
        Gate matrices of the fitted head (any gauge).
    a_fit : ndarray (N, D)
        Experts of the fitted channel.
    M_true : ndarray (N, D, D)
        Gate matrices of the true head, **normalised** (``M_true[N-1] = 0``).
    a_true : ndarray (N, D)
        Experts of the true channel.
    exponent : int
        ``r`` in ``‖ΔM‖_F^r + ‖Δa‖^r``.

    Returns
    -------
    cost_M : ndarray (N, N, N)
        ``cost_M[j0, j, i] = ‖(M_fit[j] − M_fit[j0]) − M_true[i]‖_F^r``: fitted token ``j``
        matched to true token ``i`` when fitted token ``j0`` is matched to the last true token.
    cost_a : ndarray (N, N)
        ``cost_a[j, i] = ‖a_fit[j] − a_true[i]‖^r``.
    """
    Mg = M_fit[None, :, :, :] - M_fit[:, None, :, :]  # (j0, j, D, D)
    dM = Mg[:, :, None, :, :] - M_true[None, None, :, :, :]  # (j0, j, i, D, D)
    cost_M = np.sqrt(np.einsum("abcde,abcde->abc", dM, dM)) ** exponent
    da = a_fit[:, None, :] - a_true[None, :, :]
    cost_a = np.sqrt(np.einsum("jid,jid->ji", da, da)) ** exponent
    return cost_M, cost_a


@lru_cache(maxsize=None)
def _all_permutations(N):
    return np.array(list(itertools.permutations(range(N))), dtype=np.intp).reshape(-1, N)


def match_tokens(cost_M, cost_a, *, method="auto"):
    """Gauge-aware token permutation minimising ``Σ_i cost_M[π(N-1), π(i), i] + cost_a[π(i), i]``.

    Parameters
    ----------
    cost_M, cost_a : ndarray
        From :func:`token_cost_tables`.
    method : {"auto", "enumerate", "hungarian"}, default="auto"
        ``"enumerate"`` tries all ``N!`` permutations (ties: the first in lexicographic order,
        so the identity wins a tie). ``"hungarian"`` fixes the fitted token ``j0`` matched to the
        last true token — which fixes the gauge and makes the cost separable — solves the
        remaining ``(N-1)×(N-1)`` assignment with :func:`scipy.optimize.linear_sum_assignment`,
        and keeps the best ``j0``: exact, in ``O(N⁴)``. ``"auto"`` enumerates for
        ``N <= 6`` and uses Hungarian above.

    Returns
    -------
    perm : ndarray of shape (N,)
        ``perm[i]`` = fitted token matched to true token ``i``.
    cost : float
        The minimal cost.
    """
    N = cost_a.shape[0]
    if method == "auto":
        method = "enumerate" if N <= MAX_ENUMERATE_TOKENS else "hungarian"
    if method == "enumerate":
        P = _all_permutations(N)
        idx = np.arange(N)
        costs = cost_M[P[:, -1:], P, idx].sum(axis=1) + cost_a[P, idx].sum(axis=1)
        best = int(np.argmin(costs))
        return P[best].copy(), float(costs[best])
    if method != "hungarian":
        raise ValueError(
            f"Unknown token matching method {method!r}; use 'auto', 'enumerate' or 'hungarian'."
        )
    best_perm, best_cost = None, np.inf
    for j0 in range(N):
        rest = np.array([j for j in range(N) if j != j0], dtype=np.intp)
        fixed = cost_M[j0, j0, N - 1] + cost_a[j0, N - 1]
        if N > 1:
            # rows: true tokens 0..N-2; columns: the remaining fitted tokens
            C = cost_M[j0][rest][:, : N - 1].T + cost_a[rest][:, : N - 1].T
            rows, cols = linear_sum_assignment(C)
            total = fixed + C[rows, cols].sum()
            perm = np.empty(N, dtype=np.intp)
            perm[rows] = rest[cols]
        else:
            total = fixed
            perm = np.empty(1, dtype=np.intp)
        perm[N - 1] = j0
        if total < best_cost:
            best_cost, best_perm = float(total), perm
    return best_perm, best_cost
