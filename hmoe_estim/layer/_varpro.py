"""Variable projection of a layer fit: ``W_O`` (and the intercept) solved in closed form.

For every gate but ``"output"`` (G5) the layer's output is linear in the output projection:
``F = Φ(β) W_O + 1 bᵀ`` with ``Φ`` the concatenated head outputs (``n·R × H·d_v``, the same
for every output column) and ``β`` the non-linear parameters (``W_Q, W_K`` or ``P``, ``W_V``,
the multiplicative gate's ``W_θ``). For fixed ``β`` the optimal ``W̃ = [W_O; bᵀ]`` solves one
ridge least-squares problem with ``d_out`` right-hand sides,

    (Φ̃ᵀΦ̃ + Λ) W̃ = Φ̃ᵀ Y,        Φ̃ = [Φ 1],   Λ = λ_W · diag(1, …, 1, 0),

and the search runs over ``β`` alone on the reduced sum of squares

    S(β) = ‖F(β, W̃(β)) − Y‖² + λ_W ‖W_O(β)‖² + Σ_p pen_p β_p².

Its gradient is the partial gradient ``J_βᵀ r`` at ``W̃(β)`` (the ``W`` part vanishes at the
optimum), and its Gauss–Newton matrix is Kaufman's: the Schur complement of the full one,
``A_ββ − A_βW (A_WW + Λ)⁻¹ A_Wβ`` — the Gauss–Newton matrix of the residuals projected off the
span of ``J_W``. Both come from the full sums of :func:`hmoe_estim.kernels.layer_sums` at
``(β, W̃(β))``; the gradient is taken as the Schur complement of the full gradient too
(``g_β − A_βW (A_WW + Λ)⁻¹ g_W``, equal to ``g_β`` at the exact solve), which keeps the
Gauss–Newton model exact when the solve carries rounding.

Ridges (on the mean-squared-residual scale, as ``alpha``; ``m = n·R·d_out`` residuals):
``λ_W = m·(alpha + VARPRO_RIDGE)`` on ``W_O`` and ``pen = m·alpha`` on the weights of ``β``,
plus ``m·VARPRO_RIDGE`` on ``W_V``. ``VARPRO_RIDGE = 1e-14`` keeps the ``W_O`` solve
well-posed when ``Φ`` is rank-deficient (a head whose output vanishes, collinear heads): on
data scaled to unit size (as the estimator fits them) ``Φ̃ᵀΦ̃/m`` is of order one, so the
system's condition number stays below about ``1e14`` (the Cholesky solve keeps a few digits
in the worst direction, which hardly moves the fit), while the fitted values move by about
``1e-14`` relative: a noiseless fit reaches a mean squared residual of about ``1e-24``
instead of the rounding level. The same ridge on ``W_V`` balances it: a ridge on ``W_O``
alone would reward growing ``W_V`` along the V/O gauge (``W_V B, B⁻¹ W_O``) towards the box.

The penalty terms are residuals of their own (``√λ_W W_O``, ``√pen_p β_p``) appended to the
data's, so the solvers' forward pass (``values``) and sums see one sum of squares; the
problem's targets ``y`` end with as many zeros. ``W_O`` and the intercept are not parameters
of the search and are not boxed.
"""

import math

import numpy as np
from scipy.linalg.lapack import dpotrf, dpotrs

from ._problem import LayerProblem

__all__ = ["VarProLayerProblem", "VARPRO_RIDGE"]

#: Ridge of the ``W_O`` solve (and on ``W_V``) in units of the mean squared residual (module
#: docstring).
VARPRO_RIDGE = 1e-14


def _linear_index(layout):
    """Indices in ``theta`` of ``W̃ = [W_O; bᵀ]`` flattened row-major (``W_O`` then ``b``), and
    of ``β`` (the rest, in ``theta``'s order)."""
    oK, oV, oO, oT, oB, P = layout.offsets()
    lin = np.concatenate([np.arange(oO, oT), np.arange(oB, P)])
    beta = np.concatenate([np.arange(0, oO), np.arange(oT, oB)])
    return lin, beta


class VarProLayerProblem(LayerProblem):
    """A layer fit over the non-linear parameters ``β``, ``W_O`` solved in closed form (see
    the module docstring); what :class:`hmoe_estim.solvers.Search` and
    :class:`~hmoe_estim.solvers.LevenbergMarquardt` take, like :class:`LayerProblem`.

    Parameters
    ----------
    X, Y, layout, gate, activation, rows, gate_form
        As :class:`LayerProblem` (``gate`` not ``"output"``: G5 is not linear in ``W_O``).
    lower, upper : ndarray of shape (layout.n_params,)
        The box of the full ``theta``; its ``W_O`` and intercept entries are ignored.
    alpha : float, default=0.0
        Ridge ``alpha·‖weights‖²`` added to the mean squared residual (the weights: every
        entry of ``theta`` but the intercept).

    ``theta`` of this problem is ``β`` (``n_params`` entries); :meth:`complete` returns the
    full packed vector with ``W̃(β)``. ``y`` holds the data's targets followed by zeros (the
    penalty's residuals); ``n_residuals`` counts the data's.
    """

    def __init__(self, X, Y, layout, gate, activation, lower, upper, *, rows="all",
                 gate_form=None, alpha=0.0):
        if gate == "output":
            raise ValueError("gate='output' (G5) is not linear in W_O: no variable projection; "
                             "use LayerProblem.")
        super().__init__(X, Y, layout, gate, activation, lower, upper, rows=rows,
                         gate_form=gate_form, alpha=alpha)
        self.ridge = float(alpha)
        self.alpha = 0.0  # the penalty is in the passes' residuals, not the solver's ridge
        self.lin, self.beta_index = _linear_index(layout)
        self.full_lower, self.full_upper = self.lower, self.upper
        self.lower = self.full_lower[self.beta_index].copy()
        self.upper = self.full_upper[self.beta_index].copy()
        self.n_params = self.beta_index.size
        self.data_y = self.y
        self.y = np.concatenate([self.data_y, np.zeros(self._n_penalty_rows())])

    def _n_penalty_rows(self):
        lay = self.layout
        oO, oT = lay.offsets()[2:4]
        return (oT - oO) + self.n_params

    def _weights(self, m):
        """``(λ_W, pen)``: the ridge of the ``W_O`` solve and the penalty on ``β`` (sums)."""
        lay = self.layout
        oK, oV, oO, oT, oB, P = lay.offsets()
        full = np.zeros(P)
        full[:oB] = self.ridge
        full[oV:oO] += VARPRO_RIDGE
        return m * (self.ridge + VARPRO_RIDGE), m * full[self.beta_index]

    # -- data ----------------------------------------------------------------------------
    @property
    def n_residuals(self):
        return self.data_y.size

    def _with_data(self, X, y):
        return self._copy(X=X, data_y=y, y=np.concatenate([y, np.zeros(self._n_penalty_rows())]))

    def with_bounds(self, lower, upper):
        return self._copy(lower=lower, upper=upper)

    # -- layout --------------------------------------------------------------------------
    def head_blocks(self):
        """For each head: the indices in ``β`` of its blocks (as :class:`LayerProblem`'s,
        without ``W_O``)."""
        pos = np.full(self.layout.n_params, -1)
        pos[self.beta_index] = np.arange(self.beta_index.size)
        out = []
        for block in super().head_blocks():
            b = pos[block]
            out.append(b[b >= 0])
        return out

    def beta(self, theta):
        """``β`` of a full packed ``theta``."""
        return np.asarray(theta, dtype=np.float64)[self.beta_index].copy()

    def complete(self, beta):
        """The full packed ``theta``: ``β`` with ``W̃(β)`` solved on this problem's data."""
        return self.passes().complete(beta)

    def random_start(self, rng, scale=1.0):
        """``β`` of :meth:`LayerProblem.random_start` (in the box)."""
        full = self._copy(lower=self.full_lower, upper=self.full_upper)
        return self.beta(LayerProblem.random_start(full, rng, scale))

    # -- kernels -------------------------------------------------------------------------
    def passes(self):
        """The passes of a Levenberg–Marquardt iteration on ``β`` (``VarProPasses``)."""
        return VarProPasses(self)

    def objective_and_gradient(self, beta):
        """``S(β) / m`` and its gradient ``2 g / m`` (``m`` data residuals)."""
        _, g, ssr, *_ = self.passes().sums(beta, 0.0)
        m = max(self.n_residuals, 1)
        return ssr / m, 2.0 * g / m

    def gauss_newton_matrix(self, beta):
        """Kaufman's reduced ``JᵀJ`` at ``β`` (with the penalty's diagonal)."""
        return self.passes().sums(beta, 0.0)[0]


def _cholesky(A):
    """The upper Cholesky factor of ``A`` (LAPACK ``dpotrf``, as ``scipy.linalg.cho_factor``
    computes it, without its checks: these solves run once per iteration);
    ``LinAlgError`` when ``A`` is not positive definite in floating point."""
    c, info = dpotrf(A, lower=0, clean=0)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotrf: info {info}")
    return c


def _solve(c, b):
    """``A⁻¹ b`` from the factor of :func:`_cholesky` (``dpotrs``)."""
    x, info = dpotrs(c, b, lower=0)
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotrs: info {info}")
    return x


class VarProPasses:
    """The passes of a Levenberg–Marquardt iteration on the reduced problem, with the
    protocol of :class:`~hmoe_estim.kernels.LayerPasses`: ``n`` (data residuals), ``floor``,
    ``penalty_weights`` (``None``: the penalty is in the residuals), ``workspace``,
    ``sums(β, offset)`` (``offset`` must be 0) and ``values(β)`` (the data's predictions
    followed by the penalty's residuals). The solve ``W̃(β)`` of the last ``β`` is kept."""

    def __init__(self, problem):
        from ..kernels import LayerPasses, LMWorkspace, layer_heads

        lay = problem.layout
        self.layout = lay
        self.full = LayerPasses(problem.X, problem.data_y, problem.kernel_args())
        self.n = self.full.n
        self.n_samples = self.full.n_samples
        self.n_params = problem.n_params
        self.penalty_weights = None
        self.floor = self.full.floor
        self.workspace = LMWorkspace()
        self.lin, self.bidx = problem.lin, problem.beta_index
        self.lam, self.pen = problem._weights(max(self.n, 1))
        self.sqrt_pen = np.sqrt(self.pen)
        H, dv, dout = lay.n_heads, lay.head_dim, lay.d_out
        self.K = H * dv
        self.Kt = self.K + int(lay.fit_intercept)
        X, args = problem.X, problem.kernel_args()
        n, N, _ = X.shape
        rows = n * (1 if problem.rows == "last" else N)
        self.Yd = problem.data_y.reshape(rows, dout)
        Phi = np.empty((rows, self.Kt))
        if lay.fit_intercept:
            Phi[:, self.K] = 1.0
        heads = np.empty((rows, self.K))
        # Λ: λ_W on the rows of W_O, none on the intercept's
        self.ridge_rows = np.zeros(self.Kt)
        self.ridge_rows[:self.K] = self.lam
        self.ridge_flat = np.repeat(self.ridge_rows, dout)
        theta = np.zeros(lay.n_params)
        nW = self.K * dout
        out = np.empty(self.n + nW + self.n_params)
        last = {"beta": None}
        # index arrays of the blocks, made once (each iteration takes the blocks)
        ix_ww, ix_bw, ix_bb = (np.ix_(self.lin, self.lin), np.ix_(self.bidx, self.lin),
                               np.ix_(self.bidx, self.bidx))
        diag_t, diag_w, diag_b = (np.arange(self.Kt), np.arange(self.lin.size),
                                  np.arange(self.bidx.size))

        def solve(beta):
            """``theta`` with ``W̃(β)`` (cached for the last ``β``)."""
            beta = np.asarray(beta, dtype=np.float64)
            if last["beta"] is not None and np.array_equal(beta, last["beta"]):
                return theta
            theta[self.bidx] = beta
            layer_heads(theta, X, *args, heads)
            Phi[:, :self.K] = heads
            G = Phi.T @ Phi
            G[diag_t, diag_t] += self.ridge_rows
            B = Phi.T @ self.Yd
            if not (np.isfinite(G).all() and np.isfinite(B).all()):
                W = np.full(B.shape, np.nan)  # the solvers reject the point
            else:
                try:
                    W = _solve(_cholesky(G), B)
                except np.linalg.LinAlgError:  # singular in rounding despite the ridge
                    W = np.linalg.lstsq(G, B, rcond=None)[0]
            theta[self.lin] = W.ravel()
            self.F = Phi @ W
            last["beta"] = beta.copy()
            return theta

        def values(beta):
            t = solve(beta)
            out[:self.n] = self.F.ravel()
            out[self.n:self.n + nW] = math.sqrt(self.lam) * t[self.lin[:nW]]
            out[self.n + nW:] = self.sqrt_pen * beta
            return out

        def sums(beta, offset):
            if offset != 0.0:
                raise ValueError("the variable projection fits the intercept itself: offset "
                                 "must be 0.")
            beta = np.asarray(beta, dtype=np.float64)
            t = solve(beta)
            A, g, ssr, _, _, finite = self.full.sums(t, 0.0)
            lin, bidx = self.lin, self.bidx
            Wf = t[lin]
            Aww = A[ix_ww]
            Aww[diag_w, diag_w] += self.ridge_flat
            gw = g[lin] + self.ridge_flat * Wf
            Abw = A[ix_bw]
            ssr = ssr + float(self.ridge_flat.dot(Wf * Wf)) + float(self.pen.dot(beta * beta))
            if not (finite and math.isfinite(ssr)):  # the solver rejects the point
                P = bidx.size
                return np.zeros((P, P)), np.zeros(P), ssr, np.zeros(P), 0.0, False
            try:
                c = _cholesky(Aww)
                T = _solve(c, Abw.T)
                u = _solve(c, gw)
            except (np.linalg.LinAlgError, ValueError):
                T = np.linalg.lstsq(Aww, Abw.T, rcond=None)[0]
                u = np.linalg.lstsq(Aww, gw, rcond=None)[0]
            Ar = A[ix_bb] - Abw @ T
            Ar = 0.5 * (Ar + Ar.T)
            Ar[diag_b, diag_b] += self.pen
            gr = g[bidx] - Abw @ u + self.pen * beta
            finite = bool(finite and math.isfinite(ssr) and np.isfinite(Ar).all()
                          and np.isfinite(gr).all())
            return Ar, gr, ssr, np.zeros(bidx.size), 0.0, finite

        def complete(beta):
            return solve(beta).copy()

        self.values, self.sums, self.complete = values, sums, complete
