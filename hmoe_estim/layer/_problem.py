"""The least-squares problem of a layer fit, for the package's search and local solvers.

Minimise ``S(θ)/m = Σ r² / m`` over the packed layer vector ``θ`` (:class:`LayerLayout`) on a
box, with the residuals ``r = f_θ(X) − Y`` of every output entry (``m = n·R·d_out`` of them:
``R = N`` rows, or the last one). A :class:`LayerProblem` answers what
:class:`hmoe_estim.solvers.Search` and the local solvers ask of a problem (``n_samples``,
``subsample``, the box, ``passes()``, …), so that a layer plugs into the search the per-entry
fits use. Its intercept, when the layout has one, is a block of ``θ`` (one per output column)
handled by the layer kernel: for the solvers, ``fit_intercept`` is False (no scalar offset).

The ridge penalty ``alpha·‖w‖²`` (``w``: every weight, not the intercept) is added to the
mean squared residual, as :class:`~hmoe_estim.HMoERegressor`'s ``alpha`` (there on the gate
matrices and experts; a layer has no ``ω ≥ 0`` in a box, and a penalty on only one factor of
``P_h = W_Q W_Kᵀ/√d_v`` or ``C_h = W_V W_O`` would shrink it and grow the other along the
gauge): the solvers' Levenberg–Marquardt adds it to ``JᵀJ`` and ``Jᵀr`` exactly
(``penalty_weights`` of the passes). Over a gauge orbit ``‖W_Q‖² + ‖W_K‖²`` is smallest
(``2√d_v ‖P_h‖_*``) at equal singular-value shares, and likewise ``‖W_V‖² + ‖W_O‖²``
(``2‖C_h‖_*``), so the penalty acts on nuclear norms of the identified matrices.

Not here: signed weights and sign folding (a layer's ``W_O`` is signed already;
``sign_symmetric`` is False), moves that need per-entry experts. The variable projection of
``W_O`` is :class:`~hmoe_estim.layer._varpro.VarProLayerProblem`.
"""

import numpy as np

from ..solvers import subsample_indices
from ._parameters import LayerLayout, check_form

__all__ = ["LayerProblem"]


class LayerProblem:
    """A layer fit (see the module docstring).

    Parameters
    ----------
    X : ndarray of shape (n, N, d)
    Y : ndarray of shape (n, N, d_out), or (n, d_out) with ``rows="last"``
    layout : LayerLayout
    gate, activation : str
    lower, upper : ndarray of shape (layout.n_params,)
        The box.
    rows : {"all", "last"}
    gate_form : {"activation", "multiplicative"} or None
        ``None``: multiplicative when the layout has a granularity.
    alpha : float
        Ridge penalty on every weight (module docstring), ``>= 0``.
    """

    fit_intercept = False  # the layer's intercept is part of theta, not the solvers' offset
    sign_symmetric = False

    def __init__(self, X, Y, layout, gate, activation, lower, upper, *, rows="all",
                 gate_form=None, alpha=0.0):
        if not isinstance(layout, LayerLayout):
            raise ValueError(f"layout must be a LayerLayout; got {type(layout).__name__}.")
        check_form(layout, gate, activation, gate_form, rows)
        alpha = float(alpha)
        if not alpha >= 0.0 or not np.isfinite(alpha):
            raise ValueError(f"alpha must be a finite number >= 0; got {alpha!r}.")
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 3 or X.shape[2] != layout.d:
            raise ValueError(f"X must have shape (n, N, d) with d = {layout.d}; got {X.shape}.")
        n, N, _ = X.shape
        R = 1 if rows == "last" else N
        want = (n, layout.d_out) if rows == "last" else (n, N, layout.d_out)
        Y = np.asarray(Y, dtype=np.float64)
        if Y.shape != want:
            raise ValueError(f"Y must have shape {want} (rows={rows!r}); got {Y.shape}.")
        self.X = X
        self.y = np.ascontiguousarray(Y.reshape(n * R * layout.d_out))
        self.layout = layout
        self.gate, self.activation, self.rows = gate, activation, rows
        self.alpha = alpha
        self.n_params = layout.n_params
        lower = np.asarray(lower, dtype=np.float64)
        upper = np.asarray(upper, dtype=np.float64)
        if lower.shape != (self.n_params,) or upper.shape != (self.n_params,):
            raise ValueError(f"the box has {lower.shape} and {upper.shape} entries; the "
                             f"layer has {self.n_params} parameters.")
        self.lower, self.upper = lower, upper
        # (H, N, K, D) for the search's schedule table: heads, tokens, channels, features
        self.shape = (layout.n_heads, N, layout.head_dim, layout.d)
        # the sizes random starts are scaled to (of the data the problem is built on)
        y_cols = Y.reshape(-1, layout.d_out)
        self.start_scales = dict(x_rms=float(np.sqrt(np.mean(X * X))) or 1.0,
                                 y_std=float(np.std(y_cols)) or 1.0,
                                 y_mean=y_cols.mean(axis=0))

    # -- data ----------------------------------------------------------------------------
    @property
    def n_samples(self):
        """Token matrices (the unit of :meth:`subsample`)."""
        return self.X.shape[0]

    @property
    def n_residuals(self):
        return self.y.size

    @property
    def serial_below(self):
        """Residuals below which the solvers run the kernels on one thread: the layer kernel's
        own threshold (``kernels.objective.SERIAL_SAMPLES``). A residual of a layer costs tens
        of times one of an HMoE entry, so a race's subsample already pays for a thread."""
        from ..kernels import SERIAL_SAMPLES

        return SERIAL_SAMPLES

    def _copy(self, **changes):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    def subsample(self, m, part=0):
        """The problem on at most ``m`` token matrices: evenly spaced for ``part`` 0, a random
        draw seeded by ``part`` otherwise (as :meth:`hmoe_estim.solvers.Problem.subsample`)."""
        n = self.n_samples
        idx = subsample_indices(n, m, part)
        if idx is None:
            return self
        y = self.y[:self.n_residuals].reshape(n, self.n_residuals // n)[idx].reshape(-1)
        return self._with_data(np.ascontiguousarray(self.X[idx]), np.ascontiguousarray(y))

    def _with_data(self, X, y):
        """The problem on other token matrices ``X`` and their flat targets ``y``."""
        return self._copy(X=X, y=y)

    def with_bounds(self, lower, upper):
        return self._copy(lower=lower, upper=upper)

    def signed(self):
        """The same problem (``W_O`` is signed already)."""
        return self

    def fold(self, theta):
        return np.array(theta, dtype=np.float64)

    # -- layout --------------------------------------------------------------------------
    def kernel_args(self):
        return self.layout.kernel_args(self.gate, self.activation, self.rows)

    def head_blocks(self):
        """For each head: the indices of its blocks of ``W_Q, W_K`` (or ``P``), ``W_V``,
        ``W_O`` and ``W_θ``."""
        lay = self.layout
        H, d, dv, dout = lay.n_heads, lay.d, lay.head_dim, lay.d_out
        oK, oV, oO, oT, oB, _ = lay.offsets()
        out = []
        for h in range(H):
            if lay.qk == "full":
                parts = [np.arange(h * d * d, (h + 1) * d * d)]
            else:
                parts = [np.arange(h * d * dv, (h + 1) * d * dv),
                         oK + np.arange(h * d * dv, (h + 1) * d * dv)]
            parts += [oV + np.arange(h * d * dv, (h + 1) * d * dv),
                      oO + np.arange(h * dv * dout, (h + 1) * dv * dout)]
            per = (oB - oT) // H
            parts.append(oT + np.arange(h * per, (h + 1) * per))
            out.append(np.concatenate(parts))
        return out

    # -- kernels -------------------------------------------------------------------------
    def passes(self):
        """The kernel passes of a Levenberg–Marquardt iteration on this data
        (``hmoe_estim.kernels.LayerPasses``)."""
        from ..kernels import LayerPasses

        passes = LayerPasses(self.X, self.y, self.kernel_args())
        passes.penalty_weights = self.penalty_weights()
        return passes

    def penalty_weights(self):
        """``w`` of the penalty ``alpha·Σ_p w_p θ_p²``: 1 on the weights, 0 on the
        intercept."""
        w = np.ones(self.layout.n_params)
        w[self.layout.offsets()[4]:] = 0.0
        return w

    def objective_and_gradient(self, theta):
        """``Σ r² / m + alpha·‖w‖²`` and its gradient ``2 Jᵀr / m + 2 alpha·w`` (``m``
        residuals)."""
        from ..kernels import layer_sums

        theta = np.ascontiguousarray(theta, dtype=np.float64)
        _, g, ssr, _, _ = layer_sums(theta, self.X, self.y, 0.0, *self.kernel_args())
        m = max(self.y.size, 1)
        w = self.alpha * self.penalty_weights()
        return ssr / m + float(w.dot(theta * theta)), 2.0 * g / m + 2.0 * w * theta

    def gauss_newton_matrix(self, theta):
        """``JᵀJ`` at ``theta``."""
        from ..kernels import layer_sums

        theta = np.ascontiguousarray(theta, dtype=np.float64)
        return layer_sums(theta, self.X, self.y, 0.0, *self.kernel_args())[0]

    def random_start(self, rng, scale=1.0):
        """A random ``theta`` inside the box, scaled to the data: a
        :func:`~hmoe_estim.layer.random_attention_layer` draw (``scale``) with the input
        weights divided by the root mean square of ``X`` (``P`` by its square), ``W_O``
        multiplied by the standard deviation of ``Y`` (not for G5, whose output is ``φ``'s),
        the intercept at the mean of ``Y``."""
        from ._data import random_attention_layer

        lay, s = self.layout, self.start_scales
        layer = random_attention_layer(
            lay.n_heads, lay.d, lay.head_dim, lay.d_out, qk=lay.qk,
            gate_form="activation" if lay.granularity is None else "multiplicative",
            granularity=lay.granularity or "headwise", fit_intercept=lay.fit_intercept,
            scale=scale, random_state=rng)
        x_rms = s["x_rms"]
        if layer.P is not None:
            layer.P /= x_rms * x_rms
        else:
            layer.W_Q /= x_rms
            layer.W_K /= x_rms
        layer.W_V /= x_rms
        layer.W_O *= 1.0 if self.gate == "output" else s["y_std"]
        if layer.W_theta is not None:
            layer.W_theta /= x_rms
        if lay.fit_intercept:
            layer.intercept[:] = s["y_mean"]
        return np.clip(lay.pack(layer), self.lower, self.upper)

    @classmethod
    def default_box(cls, layout, bound=10.0):
        """``±bound`` on every weight, ``±inf`` on the intercept."""
        P = layout.n_params
        lower, upper = np.full(P, -float(bound)), np.full(P, float(bound))
        if layout.fit_intercept:
            oB = layout.offsets()[4]
            lower[oB:], upper[oB:] = -np.inf, np.inf
        return lower, upper
