"""The least-squares problem of one fit: data, parameter layout, box, gate, options.

A :class:`Problem` is what the local solvers, the search and its moves work on. It is the one
owner of the layout of ``theta`` (through :func:`hmoe_estim.kernels.offsets`) and of the box,
and it answers the few questions about the layout that the moves ask (the blocks of a head,
the experts, the Gauss–Newton matrix), so that the search itself knows no layout: another
parameter layout plugs in by providing the same methods.
"""

import numpy as np

from .._names import ACTIVATION_CODES, GATE_CODES, ODD_ACTIVATIONS
from .._validation import check_activation, check_gate
from ..kernels import (
    KernelPasses,
    gauss_newton_sums,
    objective_and_gradient,
    offsets,
    penalty_weights,
)

__all__ = ["Problem", "has_sign_symmetry", "subsample_indices"]


def has_sign_symmetry(gate, activation):
    """True when ``(ω, a) → (−ω, −a)`` on one channel leaves ``f`` unchanged: the linear
    gates (``f`` depends on ``ω a`` only) and an odd ``φ`` with the value or SDPA gate."""
    check_gate(gate)
    check_activation(activation)
    return gate in ("none", "output") or activation in ODD_ACTIVATIONS


def subsample_indices(n, m, part=0):
    """The samples of a subsample of at most ``m`` of ``n``: evenly spaced for ``part`` 0 (sorted
    data stay covered), a sorted random draw seeded by ``part`` otherwise (so that the rounds
    of a search race on different samples, reproducibly); ``None`` when ``n <= m`` (all)."""
    if n <= m:
        return None
    if part:
        return np.sort(np.random.default_rng(int(part)).choice(n, m, replace=False))
    return np.linspace(0, n - 1, m).round().astype(np.int64)


class Problem:
    """Minimise ``S(θ)/n = Σ_j (f_θ(x_j) + c − y_j)²/n + alpha·(‖M‖²_F + ‖a‖²)`` on a box
    (paper eq. (3); an intercept ``c`` only with ``fit_intercept``).

    Parameters
    ----------
    XT : ndarray of shape (D, n), C-contiguous float64
        Inputs, transposed.
    y : ndarray of shape (n,), C-contiguous float64
    shape : tuple (H, N, K, D)
    gate, activation : str
    lower, upper : ndarray of shape (n_params,)
        The box of (A.1) (and the intercept's ``±inf`` last with ``fit_intercept``).
    fit_intercept : bool
    alpha : float
        Ridge penalty on ``M`` and ``a``.
    """

    def __init__(self, XT, y, shape, gate, activation, lower, upper, *, fit_intercept=False,
                 alpha=0.0):
        self.XT, self.y = XT, y
        self.shape = tuple(int(v) for v in shape)
        self.gate, self.activation = check_gate(gate), check_activation(activation)
        self.lower, self.upper = lower, upper
        self.fit_intercept = bool(fit_intercept)
        self.alpha = float(alpha)
        self.n_measure_params = offsets(*self.shape)[3]
        self.n_params = self.n_measure_params + int(self.fit_intercept)
        if lower.shape != (self.n_params,) or upper.shape != (self.n_params,):
            raise ValueError(f"the box has {lower.shape} and {upper.shape} entries; the "
                             f"problem has {self.n_params} parameters.")

    # -- data ----------------------------------------------------------------------------
    @property
    def n_samples(self):
        return self.XT.shape[1]

    @property
    def codes(self):
        """The kernels' integer codes of the gate and the activation."""
        return GATE_CODES[self.gate], ACTIVATION_CODES[self.activation]

    @property
    def linear(self):
        """True for the gates whose experts enter linearly (``"none"``, ``"output"``)."""
        return self.gate in ("none", "output")

    def _copy(self, **changes):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def subsample(self, m, part=0):
        """The problem on at most ``m`` samples: evenly spaced for ``part`` 0 (sorted data stay
        covered), a random draw seeded by ``part`` otherwise (so that the rounds of a search
        race on different samples, reproducibly)."""
        idx = subsample_indices(self.n_samples, m, part)
        if idx is None:
            return self
        return self._copy(XT=np.ascontiguousarray(self.XT[:, idx]),
                          y=np.ascontiguousarray(self.y[idx]))

    def with_bounds(self, lower, upper):
        """The same problem on another box."""
        return self._copy(lower=lower, upper=upper)

    # -- signs ---------------------------------------------------------------------------
    @property
    def sign_symmetric(self):
        """Whether ``(ω, a) → (−ω, −a)`` on one channel leaves ``f`` unchanged."""
        return has_sign_symmetry(self.gate, self.activation)

    def signed(self):
        """The problem with ``ω ∈ [−ω_max, ω_max]`` instead of ``[0, ω_max]``."""
        H, _, K, _ = self.shape
        lower = self.lower.copy()
        lower[: H * K] = -self.upper[: H * K]
        return self.with_bounds(lower, self.upper)

    def fold(self, theta):
        """Map every channel with ``ω < 0`` to ``(−ω, −a)`` (the same ``f`` when
        :attr:`sign_symmetric`); entries after the measure's (an intercept) are kept."""
        H, N, K, D = self.shape
        theta = np.array(theta, dtype=np.float64)
        a = self.experts(theta)
        for h in range(H):
            for k in range(K):
                if theta[h * K + k] < 0:
                    theta[h * K + k] = -theta[h * K + k]
                    a[h, :, k, :] *= -1.0
        return theta

    # -- layout --------------------------------------------------------------------------
    def experts(self, theta):
        """The experts ``a`` of ``theta`` as a view of shape (H, N, K, D)."""
        H, N, K, D = self.shape
        o2 = offsets(H, N, K, D)[2]
        return theta[o2:o2 + H * N * K * D].reshape(H, N, K, D)

    def head_blocks(self):
        """For each head ``h``: the indices of ``ω[h, :]``, ``M[h, :N-1]`` and ``a[h]``."""
        H, N, K, D = self.shape
        T, o1, o2, _ = offsets(H, N, K, D)
        return [
            np.concatenate([
                np.arange(h * K, (h + 1) * K),
                np.arange(o1 + h * (N - 1) * T, o1 + (h + 1) * (N - 1) * T),
                np.arange(o2 + h * N * K * D, o2 + (h + 1) * N * K * D),
            ])
            for h in range(H)
        ]

    # -- kernels -------------------------------------------------------------------------
    def passes(self):
        """The kernel passes of a Levenberg–Marquardt iteration on this data (set up now:
        the caller keeps Numba's thread count fixed while it uses them)."""
        passes = KernelPasses(self.XT, self.y, self.shape, *self.codes)
        if self.alpha > 0:
            passes.penalty_weights = penalty_weights(self.shape)
        return passes

    def objective_and_gradient(self, theta):
        """The objective (mean squared residual plus penalty) and its gradient."""
        H, N, K, D = self.shape
        return objective_and_gradient(theta, self.XT, self.y, H, N, K, D, *self.codes,
                                      self.fit_intercept, self.alpha)

    def gauss_newton_matrix(self, theta):
        """``JᵀJ`` of the measure's parameters at ``theta`` (an intercept is the offset)."""
        H, N, K, D = self.shape
        P = self.n_measure_params
        theta = np.asarray(theta, dtype=np.float64)
        offset = float(theta[P]) if theta.shape[0] > P else 0.0
        return gauss_newton_sums(theta[:P], self.XT, self.y, H, N, K, D, *self.codes,
                                 offset)[0]
