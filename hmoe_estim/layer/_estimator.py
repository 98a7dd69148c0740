"""``AttentionLayerRegressor``: the least-squares fit of a whole (gated) attention layer.

The per-entry estimators (:class:`hmoe_estim.HMoERegressor`) fit one output entry of a layer
as an HMoE with its own parameters. Here every entry of the output shares the layer's weights
(``W_Q, W_K`` or ``P``, ``W_V``, ``W_O``, the multiplicative gate's ``W_θ``), and the fit
minimises the mean squared residual over all of them at once:

    θ̂ ∈ argmin_θ Σ_{samples, rows, columns} (Y − f_θ(X))² / m  +  alpha·‖weights‖²

with ``f_θ`` the layer's output (``hmoe_estim.layer.attention_layer_output``) and ``θ``
its packed vector (``hmoe_estim.layer.LayerLayout``). ``fit`` reads as the method:
validate, check the memory, scale the data, build the problem (``W_O`` solved in closed form
where a gated layer is linear in it: ``hmoe_estim.layer._varpro.VarProLayerProblem``; else a
``hmoe_estim.layer.LayerProblem``), run the package's :class:`~hmoe_estim.solvers.Search`
with Levenberg–Marquardt on the layer kernel's analytic Jacobian, complete and rebalance every
start, unscale, keep the best.
"""

import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._defaults import PARAM_BOUND
from .._names import GATE_FORMS, GRANULARITIES, QK_FORMS, ROWS
from .._validation import check_activation, check_count, check_positive
from ..kernels import layer_values
from ._forward import attention_layer_output, check_tokens
from ._gauge import rebalance
from ._parameters import LayerLayout, check_choice, check_form, check_layer_gate
from ._problem import LayerProblem
from ._scaling import check_layer_fit_size, scale_factors
from ._varpro import VarProLayerProblem

__all__ = ["AttentionLayerRegressor", "LAYER_SEARCH", "layer_search_size"]

#: The knobs of the layer's default search that do not depend on the layer (class docstring).
LAYER_SEARCH = dict(race_iter=10, race_samples=256, rounds=4, agree=2)


def layer_search_size(n_heads, gate):
    """``(n_starts, candidates per start)`` of the layer's default search: ``(2, 2)`` for one
    head or two ungated heads, else ``(4, 8)`` — each head, and each head's gate, adds basins
    that a small race can miss (class docstring)."""
    small = n_heads == 1 or (n_heads == 2 and gate == "none")
    return (2, 2) if small else (4, 8)

#: Gates whose entries are per-entry HMoEs (:func:`hmoe_estim.attention.attention_to_measure`).
_MEASURE_GATES = ("none", "value", "sdpa", "output")


class AttentionLayerRegressor(RegressorMixin, BaseEstimator):
    """Least-squares fit of a whole (gated) multi-head attention layer.

    The model is the layer of ``hmoe_estim.layer.attention_layer_output`` (conventions of
    :func:`~hmoe_estim.attention.multihead_attention`): on a token matrix ``X ∈ R^{N×d}``,
    head ``h`` outputs ``softmax(s) X W_V,h`` (scores ``s_ij = x_iᵀ P_h x_j``,
    ``P_h = W_Q,h W_K,hᵀ / sqrt(d_v)``), gated at the chosen position, and the layer outputs
    ``Σ_h head_h W_O,h`` (plus an intercept). All output entries share the weights.

    Parameters
    ----------
    n_heads : int, default=1
        Heads ``H`` (known).
    head_dim : int or None, default=None
        Width ``d_v`` of a head; ``None``: ``d`` (the token dimension of ``X``). With
        ``qk="factored"`` it must be ``<= d``.
    gate : {"none", "value", "sdpa", "output", "key", "query"}, default="none"
        Gate position: MHA, G2, G1, G5, G3 (φ after the key projection), G4 (after the query
        projection).
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
        ``φ`` (unused for ``gate="none"``); the gate function of the multiplicative form.
    gate_form : {"activation", "multiplicative"}, default="activation"
        ``"activation"``: φ applied to the signal (the paper). ``"multiplicative"``: the gate
        of Qiu et al. (2025), ``(S X W_V) ⊙ φ(X W_θ)`` at the SDPA output (needs
        ``gate="sdpa"``).
    granularity : {"headwise", "elementwise"}, default="headwise"
        Of the multiplicative gate (one factor per head and row, or per head, row and
        channel); ignored for ``gate_form="activation"``.
    qk : {"factored", "full"}, default="factored"
        Fit ``W_Q, W_K`` or one free ``d×d`` matrix ``P_h`` per head (bilinear gates only:
        not with ``"key"`` or ``"query"``).
    rows : {"all", "last"}, default="all"
        Fit every row of the output (``Y`` of shape ``(n, N, d_out)``) or only the last one
        (``Y`` of shape ``(n, d_out)``; e.g. next-token prediction).
    fit_intercept : bool, default=False
        Add a free intercept ``b ∈ R^{d_out}`` to every row (after every gate; not boxed).
    alpha : float, default=0.0
        Ridge penalty ``alpha·‖w‖²`` on every weight (``W_Q, W_K`` or ``P``, ``W_V``,
        ``W_O``, ``W_θ``; not the intercept), added to the *mean* squared residual as
        :class:`~hmoe_estim.HMoERegressor`'s ``alpha`` (so it does not scale with ``n``), on
        the weights of the scaled data (Notes).
    varpro : {"auto", True, False}, default="auto"
        Variable projection: solve ``W_O`` (and the intercept) in closed form for each value
        of the other weights and search over those only (Notes). ``"auto"``: for the gated
        layers that are linear in ``W_O`` (every gate but ``"none"`` and ``"output"``);
        ``True`` refuses G5.
    solver : {"lm", "lbfgs"}, LocalSolver or Search, default="lm"
        ``"lm"`` (or a local solver object) runs inside the layer's default search (below);
        a :class:`~hmoe_estim.solvers.Search` sets every knob itself (give them all: its
        ``"auto"`` values are resolved by the per-entry models' table).
    n_starts : int or None, default=None
        Starts run to convergence per round; ``None``: 2 for one head or two ungated heads,
        else 4 (Notes), or the given ``Search``'s.
    max_iter : int or None, default=None
        Levenberg–Marquardt iterations (Jacobian passes) per start; ``None``: the local
        solver's (1000).
    random_state : int, RandomState instance or None, default=None
        Seeds the random starts; with a fixed value the fit is reproducible bit for bit.

    Notes
    -----
    **The search.** The layer's default search is a :class:`~hmoe_estim.solvers.Search` with
    every knob given (its ``"auto"`` table is tuned for the per-entry models), sized by the
    layer (``layer_search_size``): ``n_starts = 2`` and ``n_candidates = 2·n_starts``
    for one head or two ungated heads, else ``n_starts = 4`` and ``n_candidates =
    8·n_starts`` (each head, and each head's gate, adds basins that a small race can miss;
    the measurements are in the release notes); the candidates race for ``race_iter = 10``
    Levenberg–Marquardt iterations on ``race_samples = 256`` token matrices (each holds
    ``N·d_out`` residuals, so 256 of them already pin a small layer down while a race step
    stays cheap), the ``n_starts`` best run to convergence on all the data; up to
    ``rounds = 4`` rounds, stopping once ``agree = 2`` independent rounds reach the best
    objective (within ``σ̂²/m``); no moves (the moves of the search redraw or reassign the
    experts of one entry's measure, which a layer does not have); ``signed=False`` (``W_O``
    is signed already). Starts (``LayerProblem.random_start``) are random layers scaled to
    the data: the input weights divided by the root mean square of ``X`` (``P``
    by its square), ``W_O`` multiplied by the standard deviation of ``Y`` (not for G5,
    whose output is ``φ``'s), the intercept at the mean of ``Y``. Every searched weight lies
    in ``[-10, 10]`` (in the units of the data).

    **Variable projection.** For every gate but G5 the output is ``Φ(β) W_O + b``, with
    ``Φ`` the concatenated head outputs (``n·R × H·d_v``, shared by the ``d_out`` columns) and
    ``β`` the other weights. For fixed ``β`` the best ``W_O`` and ``b`` solve one
    least-squares problem with ``d_out`` right-hand sides; the search runs Levenberg–Marquardt
    on the reduced problem in ``β``, with the partial gradient ``J_βᵀr`` at that solution and
    Kaufman's Gauss–Newton matrix, the Schur complement ``J_βᵀJ_β − J_βᵀJ_W (J_WᵀJ_W)⁻¹
    J_WᵀJ_β`` of the full one (both from the kernel's full sums at ``(β, Ŵ_O(β))``). ``W_O``
    is then not boxed. The solve carries a ridge of ``1e-14`` (on the mean-squared-residual
    scale, on the scaled data; the same on ``W_V``, which keeps the V/O gauge balanced) so that
    it stays well-posed when head outputs are collinear or vanish; it moves the fit by about
    ``1e-14`` relative and is left out of ``objective_``. ``varpro=False`` (and G5) runs
    Levenberg–Marquardt on all weights; so does ``"auto"`` for MHA (``gate="none"``), where
    the projection does not pay and can creep along flat directions (release notes).

    **Scaling.** As :class:`~hmoe_estim.HMoERegressor`: the fit works on ``X / s_x`` and
    ``(Y − Ȳ) / s_y`` (``Ȳ``: the column means with an intercept, else 0), ``s_x`` and
    ``s_y`` the powers of two nearest to the root mean squares when those lie outside
    ``[1/16, 16]`` (else 1; ``s_y = 1`` for G5, whose output is ``φ``'s). The layer of the
    scaled data maps back exactly: ``W_Q, W_K, W_V, W_θ`` divided by ``s_x``, ``P`` by
    ``s_x²``, ``W_O`` multiplied by ``s_y``, the intercept by ``s_y`` plus ``Ȳ``; the box and
    ``objective_`` (times ``s_y²``) likewise. So fitting ``X·c``, ``Y·s`` (powers of two
    outside that range) gives the transformed layer. ``alpha`` acts on the weights of the
    scaled data, as the per-entry estimator's.

    **Gauges.** ``W_Q, W_K`` are determined only up to ``W_Q A, W_K A⁻ᵀ`` and, where nothing
    non-linear sits between them (MHA, G5, G3, G4, the headwise multiplicative gate),
    ``W_V, W_O`` up to ``W_V B, B⁻¹ W_O`` (``B`` diagonal for the elementwise gate). Every
    start's result is moved, without changing its function, to the balanced point of its
    orbit (``hmoe_estim.layer._gauge.rebalance``): per head, ``W_Q`` and ``W_K`` share the
    singular values of ``√d_v P_h`` equally, ``W_V`` and ``W_O`` those of ``C_h = W_V W_O``
    (for the diagonal gauge, each channel's two norms are equal). That point also has the
    smallest penalty ``‖W_Q‖² + ‖W_K‖² + ‖W_V‖² + ‖W_O‖²`` of its orbit (twice the nuclear
    norms of ``√d_v P_h`` and ``C_h``), so the ridge acts on the identified matrices. Compare
    fits through ``P_`` and ``VO_``.

    **Memory.** A fit's buffers (the data and their scaled copies, the head outputs of the
    variable projection, the kernel's per-worker sums) are estimated before anything is
    allocated (``hmoe_estim.layer._scaling.layer_fit_memory_bytes``); above 4 GiB
    (``hmoe_estim.estimators._guards.MAX_FIT_BYTES``) the fit is refused with the size and
    how to reduce it.

    **Kernel.** The Gauss–Newton sums run over samples in chunks whose number depends only
    on ``n``, on Numba's threads, and add the chunks in order: the fit is the same bits for
    any thread count.

    **Score.** :meth:`score` is scikit-learn's ``r2_score`` on the outputs flattened to
    ``(n, R·d_out)`` (``R`` rows): the mean over output entries of each entry's R².

    Attributes
    ----------
    layer_ : AttentionLayer
        The fitted layer.
    W_Q_, W_K_ : ndarray of shape (H, d, d_v)
        Query and key weights (``qk="factored"`` only).
    W_V_ : ndarray of shape (H, d, d_v)
    W_O_ : ndarray of shape (H, d_v, d_out)
    W_theta_ : ndarray of shape (H, d) or (H, d, d_v)
        The multiplicative gate's weights (``gate_form="multiplicative"`` only).
    intercept_ : ndarray of shape (d_out,)
        Zeros when ``fit_intercept=False``.
    P_ : ndarray of shape (H, d, d)
        ``P_h = W_Q,h W_K,hᵀ / sqrt(d_v)`` (gauge-invariant).
    VO_ : ndarray of shape (H, d, d_out)
        ``W_V,h W_O,h`` (invariant under the V/O gauge).
    objective_ : float
        Mean squared residual of the best start plus the ridge ``alpha·‖w‖²`` (of the
        scaled weights, times ``s_y²``), in the units of ``Y``.
    start_objectives_ : ndarray
        Final objective of every start run to convergence, round after round.
    varpro_ : bool
        Whether ``W_O`` was solved in closed form (variable projection).
    x_scale_, y_scale_ : float
        ``s_x`` and ``s_y`` of the fit (Notes: Scaling).
    n_starts_agreeing_ : int
        Starts within ``σ̂²/m`` of the best objective (``m`` residuals), or at the rounding level
        of the targets (a noiseless fit).
    n_rounds_agreeing_ : int
        Independent rounds of the search that reached the best objective (the fit warns
        when its rounds ran out below the search's ``agree``).
    search_rounds_ : int
    search_stop_ : {"agreement", "starts", "rounds", "budget"}
    search_cost_ : dict
        Phase -> ``{"passes": p, "seconds": s}`` (as :class:`~hmoe_estim.HMoERegressor`).
    n_iter_ : int
        Iterations of the best start.
    converged_ : bool
        Whether the best start converged.
    train_r2_ : float
        :meth:`score` on the training data.
    n_features_in_ : int
        Token dimension ``d``.
    n_tokens_ : int
        Sequence length ``N`` seen in fit (``predict`` accepts another ``N``).
    d_out_ : int
        Output columns.

    Examples
    --------
    >>> from hmoe_estim.layer import (AttentionLayerRegressor, make_attention_regression,
    ...                               random_attention_layer)
    >>> truth = random_attention_layer(1, 2, 2, random_state=0)
    >>> X, Y = make_attention_regression(100, truth, n_tokens=3, random_state=1)
    >>> est = AttentionLayerRegressor(n_starts=1, random_state=0).fit(X, Y)
    >>> est.P_.shape, est.VO_.shape, est.predict(X).shape
    ((1, 2, 2), (1, 2, 2), (100, 3, 2))
    """

    def __init__(self, n_heads=1, head_dim=None, gate="none", activation="sigmoid",
                 gate_form="activation", granularity="headwise", qk="factored", rows="all",
                 fit_intercept=False, alpha=0.0, varpro="auto", solver="lm", n_starts=None,
                 max_iter=None, random_state=None):
        self.n_heads = n_heads
        self.head_dim = head_dim
        self.gate = gate
        self.activation = activation
        self.gate_form = gate_form
        self.granularity = granularity
        self.qk = qk
        self.rows = rows
        self.fit_intercept = fit_intercept
        self.alpha = alpha
        self.varpro = varpro
        self.solver = solver
        self.n_starts = n_starts
        self.max_iter = max_iter
        self.random_state = random_state

    # -- validation ----------------------------------------------------------------------
    def _layout(self, d, d_out):
        """The :class:`LayerLayout` of the hyper-parameters on ``d`` and ``d_out``, with
        every name and combination checked."""
        check_layer_gate(self.gate)
        check_activation(self.activation)
        check_choice(self.gate_form, "gate_form", GATE_FORMS)
        check_choice(self.granularity, "granularity", GRANULARITIES)
        check_choice(self.qk, "qk", QK_FORMS)
        check_choice(self.rows, "rows", ROWS)
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise ValueError(f"fit_intercept must be True or False; got {self.fit_intercept!r}.")
        check_positive(self.alpha, "alpha", allow_zero=True)
        if not (isinstance(self.varpro, str) and self.varpro == "auto") \
                and not isinstance(self.varpro, (bool, np.bool_)):
            raise ValueError(f"varpro must be 'auto', True or False; got {self.varpro!r}.")
        if self.varpro is True and self.gate == "output":
            raise ValueError("varpro=True needs a layer linear in W_O; gate='output' (G5) is "
                             "not: use varpro='auto' or False.")
        H = check_count(self.n_heads, "n_heads")
        dv = d if self.head_dim is None else check_count(self.head_dim, "head_dim")
        if self.qk == "factored" and dv > d:
            raise ValueError(
                f"head_dim={dv} > d={d} (the token dimension of X) with qk='factored': "
                "W_Q W_Kᵀ has rank at most d, so the extra columns only add gauge directions; "
                "use head_dim <= d or qk='full'.")
        multiplicative = self.gate_form == "multiplicative"
        layout = LayerLayout(H, d, dv, d_out, qk=self.qk,
                             granularity=self.granularity if multiplicative else None,
                             fit_intercept=bool(self.fit_intercept))
        check_form(layout, self.gate, self.activation, self.gate_form, self.rows)
        return layout

    def _search(self):
        """The search of ``solver`` with the layer's knobs (class docstring), ``n_starts``
        and ``max_iter`` applied; validated."""
        from ..solvers import Search, make_search

        given = isinstance(self.solver, Search)
        search = clone(make_search(self.solver))
        if not given:
            starts, per_start = layer_search_size(self.n_heads, self.gate)
            n_starts = starts if self.n_starts is None else self.n_starts
            n_starts = check_count(n_starts, "n_starts")
            k = LAYER_SEARCH
            search.set_params(n_starts=n_starts, n_candidates=per_start * n_starts,
                              race_iter=k["race_iter"], race_samples=k["race_samples"],
                              rounds=k["rounds"], agree=k["agree"], moves=[], signed=False)
        elif self.n_starts is not None:
            search.set_params(n_starts=check_count(self.n_starts, "n_starts"))
        if self.max_iter is not None:
            local = clone(search.local_solver())
            local.set_params(max_iter=check_count(self.max_iter, "max_iter"))
            search.set_params(local=local)
        return search.validate()

    def _check_data(self, X, Y):
        try:
            X = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"X must be a numeric array; got {type(X).__name__}.") from exc
        if X.ndim != 3:
            raise ValueError(
                f"X must have shape (n, N, d): n samples, each a matrix of N tokens of "
                f"dimension d; got shape {X.shape}.")
        X = check_tokens(X, X.shape[2])
        n, N, d = X.shape
        try:
            Y = np.asarray(Y, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"Y must be a numeric array; got {type(Y).__name__}.") from exc
        if self.rows == "last":
            if Y.ndim != 2 or Y.shape[0] != n:
                raise ValueError(f"Y must have shape (n, d_out) = ({n}, d_out) with "
                                 f"rows='last' (X has n = {n}); got {Y.shape}.")
        elif Y.ndim != 3 or Y.shape[:2] != (n, N):
            raise ValueError(f"Y must have shape (n, N, d_out) = ({n}, {N}, d_out) like X "
                             f"(rows='all'); got {Y.shape}.")
        if Y.shape[-1] < 1:
            raise ValueError(f"Y must have at least one output column; got {Y.shape}.")
        if not np.all(np.isfinite(Y)):
            raise ValueError("Y contains NaN or infinite values.")
        if n < 2:
            raise ValueError(f"at least 2 samples (token matrices) are needed; got n = {n}.")
        return X, np.ascontiguousarray(Y)

    # -- fitting -------------------------------------------------------------------------
    def fit(self, X, Y):
        """Fit the layer by least squares: validate, search, keep the best start.

        Parameters
        ----------
        X : array-like of shape (n, N, d)
            ``n`` token matrices of ``N`` tokens of dimension ``d``; finite; ``n >= 2``.
        Y : array-like of shape (n, N, d_out), or (n, d_out) with ``rows="last"``
            Targets; finite.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            ``X`` not 3-D, ``Y`` of another ``n`` or ``N``, NaN or infinite values, fewer
            residuals (``n·R·d_out``) than parameters, ``head_dim > d`` with factored Q/K,
            an unknown gate, activation, form, granularity, ``qk`` or ``rows``, a combination
            the layer cannot hold, ``alpha < 0``, ``varpro=True`` with G5, a search knob out
            of range, a fit whose buffers would pass the memory limit (the message gives
            the size and how to reduce it).

        Warns
        -----
        ConvergenceWarning
            The best start did not converge, or the search stopped on its time budget.
        PoorFitWarning
            Training R² below 0 (the message names the likely cause).
        UserWarning
            A fitted weight at the box ``[-10, 10]``.
        """
        X, Y = self._check_data(X, Y)
        n, N, d = X.shape
        layout = self._layout(d, Y.shape[-1])
        search = self._search()
        R = 1 if self.rows == "last" else N
        m = n * R * layout.d_out
        if m < layout.n_params:
            raise ValueError(
                f"{n} samples give {m} output entries for {layout.n_params} parameters: the "
                "least-squares fit is under-determined. Use more samples, or fewer heads or "
                "a smaller head_dim.")
        check_layer_fit_size(n, N, R, layout, self._use_varpro())
        problem, scaling = self._scaled_problem(X, Y, layout)
        rng = check_random_state(self.random_state)
        found = search.run(problem, lambda: problem.random_start(rng))
        self._record(found, problem, scaling, search, X, Y)
        return self

    def _use_varpro(self):
        """Whether the fit solves ``W_O`` in closed form (``varpro``; not for G5)."""
        if isinstance(self.varpro, str):
            return self.gate not in ("none", "output")
        return bool(self.varpro)

    def _scaled_problem(self, X, Y, layout):
        """The problem on the data scaled to unit size, and the scaling: ``(Y − Ȳ) / s_y`` on
        ``X / s_x`` (powers of two; ``Ȳ`` the column means with an intercept, else 0;
        ``s_y = 1`` for G5), the box mapped alike (class docstring)."""
        from ..estimators import input_scale, target_scale

        lay = layout
        d_out = lay.d_out
        y_offset = Y.reshape(-1, d_out).mean(axis=0) if lay.fit_intercept else np.zeros(d_out)
        Yc = Y - y_offset
        s_y = target_scale(Yc, "none") if self.gate != "output" else 1.0
        s_x = input_scale(X)
        v = scale_factors(lay, s_x, s_y)
        lower, upper = LayerProblem.default_box(lay, PARAM_BOUND)
        lower, upper = lower * v, upper * v
        Xs = np.ascontiguousarray(X / s_x)
        Ys = np.ascontiguousarray(Yc / s_y)
        kind = VarProLayerProblem if self._use_varpro() else LayerProblem
        problem = kind(Xs, Ys, lay, self.gate, self.activation, lower, upper, rows=self.rows,
                       gate_form=self.gate_form, alpha=float(self.alpha))
        return problem, dict(v=v, s_x=s_x, s_y=s_y, y_offset=y_offset, Xs=Xs, Ys=Ys)

    def _record(self, found, problem, scaling, search, X, Y):
        """The fitted attributes from the search's result, in the units of the data."""
        results = found.results
        s_y = scaling["s_y"]
        lay = problem.layout
        varpro = isinstance(problem, VarProLayerProblem)
        # every start's full theta at the balanced point of its gauge orbit (the same
        # function), in the scaled units, and its objective: the mean squared residual plus
        # the ridge (not the solve's tiny ridge of the variable projection)
        thetas, objectives = [], []
        y = problem.data_y if varpro else problem.y
        weights = float(self.alpha) * problem.penalty_weights()
        for r in results:
            theta = problem.complete(r.theta) if varpro else np.array(r.theta)
            if np.all(np.isfinite(theta)):
                theta = lay.pack(rebalance(lay.unpack(theta), self.gate))
            thetas.append(theta)
            with np.errstate(over="ignore", invalid="ignore"):
                res = layer_values(theta, problem.X, *problem.kernel_args(),
                                   np.empty(y.size)) - y
                obj = float(np.mean(res * res)) + float(weights.dot(theta * theta))
            objectives.append(obj * s_y * s_y if np.isfinite(obj) else np.inf)
        objectives = np.array(objectives)
        if not np.any(np.isfinite(objectives)):
            raise ValueError("every start ended with a non-finite objective: X or Y is too "
                             "large for the layer; standardise them.")
        best = int(np.nanargmin(np.where(np.isfinite(objectives), objectives, np.nan)))
        res = results[best]
        theta = thetas[best]
        with np.errstate(over="ignore"):
            theta = theta / scaling["v"]
        if not np.all(np.isfinite(theta)):
            raise ValueError(
                f"the fitted weights overflow when mapped back to the units of Y (scale "
                f"{s_y:.3g}) and X ({scaling['s_x']:.3g}); rescale Y and X to moderate values.")
        if lay.fit_intercept:
            theta[lay.offsets()[4]:] += scaling["y_offset"]
        layer = lay.unpack(theta)
        self.layer_ = layer
        if layer.qk == "factored":
            self.W_Q_, self.W_K_ = layer.W_Q.copy(), layer.W_K.copy()
        self.W_V_, self.W_O_ = layer.W_V.copy(), layer.W_O.copy()
        if layer.W_theta is not None:
            self.W_theta_ = layer.W_theta.copy()
        self.intercept_ = (layer.intercept.copy() if layer.intercept is not None
                           else np.zeros(lay.d_out))
        self.P_, self.VO_ = layer.P_, layer.VO_
        self.theta_ = theta
        self.varpro_ = varpro
        self.x_scale_, self.y_scale_ = float(scaling["s_x"]), float(s_y)
        self.objective_ = float(objectives[best])
        self.start_objectives_ = objectives
        self.n_starts_agreeing_ = int(found.starts_agreeing)  # the search's count and floor
        self.n_rounds_agreeing_ = int(found.rounds_agreeing)
        self.search_rounds_ = int(found.rounds)
        self.search_stop_ = found.stop
        self.search_cost_ = {k: dict(v) for k, v in found.cost.items()}
        self.schedule_ = found.schedule.to_dict()
        self.n_kernel_passes_ = int(found.n_passes)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.best_start_ = best
        self.n_features_in_ = lay.d
        self.n_tokens_ = X.shape[1]
        self.d_out_ = lay.d_out
        local = search.local_solver()
        if not res.converged:
            warnings.warn(
                f"{local.label} did not converge for the best start ({res.message}) after "
                f"{res.n_iter} iterations. Increase max_iter (now {local.max_iter}).",
                ConvergenceWarning, stacklevel=3)
        for notice in found.notices(search.max_seconds):  # budget; rounds unconfirmed
            warnings.warn(notice, ConvergenceWarning, stacklevel=3)
        bounded = np.isfinite(LayerProblem.default_box(lay, PARAM_BOUND)[1])
        if self.varpro_:  # W_O is solved, not boxed
            oO, oT = lay.offsets()[2:4]
            bounded[oO:oT] = False
        if np.any(np.abs(self.theta_[bounded]) >= PARAM_BOUND * (1 - 1e-9)):
            warnings.warn(
                f"a fitted weight lies at the box [-{PARAM_BOUND:g}, {PARAM_BOUND:g}]: the box "
                "limits the fit. Standardise X and Y.", UserWarning, stacklevel=3)
        self.train_r2_ = self._diagnose(X, Y)

    def _diagnose(self, X, Y):
        """Training R²; a :class:`~hmoe_estim.estimators.PoorFitWarning` below 0."""
        from ..estimators import PoorFitWarning

        flat = Y.reshape(Y.shape[0], -1)
        if np.ptp(flat) == 0:
            warnings.warn("The target is constant: R² is undefined and the fit only matches "
                          "that constant.", PoorFitWarning, stacklevel=4)
            return float("nan")
        r2 = self.score(X, Y)
        if r2 < 0:
            causes = []
            if not self.fit_intercept and np.any(
                    np.abs(flat.mean(axis=0)) > 0.1 * flat.std(axis=0) + 1e-300):
                causes.append("no intercept while Y's columns have non-zero means: set "
                              "fit_intercept=True or centre Y")
            if self.gate == "output":
                causes.append(f"bounded output: G5 returns φ(·) with φ = {self.activation}; "
                              "scale Y into φ's range or use another gate")
            if not causes:
                causes.append("the search may have missed the least-squares optimum, or the "
                              "data's scale does not suit the box: standardise X and Y, try "
                              "more n_starts or max_iter")
            warnings.warn(f"The fitted layer predicts its own training targets worse than "
                          f"their mean (training R² = {r2:.3g}). Causes: "
                          + "; ".join(causes) + ".", PoorFitWarning, stacklevel=4)
        return r2

    # -- prediction ----------------------------------------------------------------------
    def predict(self, X):
        """The fitted layer's output on ``X``.

        Parameters
        ----------
        X : array-like of shape (n, N, d)
            Any number ``N`` of tokens (the weights do not depend on it).

        Returns
        -------
        ndarray of shape (n, N, d_out), or (n, d_out) with ``rows="last"``
        """
        check_is_fitted(self, "layer_")
        X = check_tokens(X, self.n_features_in_)
        return attention_layer_output(X, self.layer_, gate=self.gate,
                                      activation=self.activation, gate_form=self.gate_form,
                                      rows=self.rows)

    def to_torch(self, *, mha=False, dtype=None):
        """The fitted layer as a PyTorch module whose forward pass on ``X`` is
        :meth:`predict` (optional extra ``torch``).

        :func:`hmoe_estim.layer.layer_to_torch` of ``layer_`` with the estimator's gate,
        activation, gate form and rows; ``mha=True`` gives a ``torch.nn.MultiheadAttention``
        where it can hold the fit (ungated, factored Q/K, ``d_out = d``, ``H·d_v = d``).
        """
        from ._torch import layer_to_torch

        check_is_fitted(self, "layer_")
        return layer_to_torch(self.layer_, gate=self.gate, activation=self.activation,
                              gate_form=self.gate_form, rows=self.rows, mha=mha, dtype=dtype)

    def score(self, X, Y, sample_weight=None):
        """``r2_score`` of the predictions, the outputs flattened to ``(n, R·d_out)``: the
        mean over output entries of each entry's R² (scikit-learn's ``uniform_average``)."""
        from sklearn.metrics import r2_score

        pred = self.predict(X)
        Y = np.asarray(Y, dtype=np.float64)
        if Y.shape != pred.shape:
            raise ValueError(f"Y must have shape {pred.shape}; got {Y.shape}.")
        n = pred.shape[0]
        return float(r2_score(Y.reshape(n, -1), pred.reshape(n, -1),
                              sample_weight=sample_weight))

    def entry_measure(self, row, column):
        """The mixing measure of output entry ``(row, column)``: an HMoE on ``vec(X)``.

        By :func:`hmoe_estim.attention.attention_to_measure` (``K = d_v`` channels,
        ``N = n_tokens_`` tokens, ``D = N·d`` features, weights ``W_O[:, :, column]``), so
        that ``regression_function(G, X.reshape(n, -1), gate=gate, activation=activation)
        + intercept_[column]`` equals ``predict(X)[:, row, column]`` (``[:, column]`` with
        ``rows="last"``, where ``row`` is ``N - 1``) for ``X`` of ``n_tokens_`` tokens.

        Parameters
        ----------
        row : int
            Output token in ``[0, n_tokens_)``.
        column : int
            Output column in ``[0, d_out)``.

        Returns
        -------
        MixingMeasure

        Raises
        ------
        ValueError
            Gates ``"key"`` and ``"query"`` (G3, G4: their scores are not quadratic forms in
            ``vec(X)``, so an entry is no HMoE) or ``gate_form="multiplicative"`` (its gate
            has weights of its own); ``row`` or ``column`` out of range.
        """
        check_is_fitted(self, "layer_")
        if self.gate not in _MEASURE_GATES or self.gate_form != "activation":
            raise ValueError(
                f"an entry of the layer is an HMoE (a mixing measure) for gate in "
                f"{list(_MEASURE_GATES)} with gate_form='activation' only; this layer has "
                f"gate={self.gate!r}, gate_form={self.gate_form!r}.")
        N, lay = self.n_tokens_, self.layer_
        for name, v, top in (("row", row, N), ("column", column, lay.d_out)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) \
                    or not 0 <= v < top:
                raise ValueError(f"{name} must be an integer in [0, {top}); got {v!r}.")
        return lay.entry_measure(row, column, n_tokens=N)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.two_d_array = False
        tags.input_tags.three_d_array = True
        tags.target_tags.multi_output = True
        return tags
