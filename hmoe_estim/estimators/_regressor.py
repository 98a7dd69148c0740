"""Least-squares estimators of the HMoE models (paper eq. (3)): ``HMoERegressor`` and presets.

The estimator solves the paper's eq. (3),

    Ĝ_n ∈ argmin_G Σ_j (Y_j − f_G(X_j))²,

over the (H, K, N)-HMoE class of the chosen gate position, with ``omega >= 0`` (A.2),
``M[h, N-1] = 0`` (A.3) and a box on every parameter (A.1). ``fit`` reads as the method:
validate, scale the data to unit size, search (:class:`hmoe_estim.solvers.Search`: a race of
random starts with a local solver, moves of the best fit, rounds until the optimum is found
again), unscale. The search and its knobs live on the ``solver`` object; the estimator keeps
the model and the data options.

Options for real data, all off by default (the defaults are the paper's model, so studies do
not move): ``fit_intercept`` (a free constant added to ``f``), ``positive_weights=False``
(signed ``omega``, as an attention layer's ``W_O``) and a ridge penalty ``alpha`` on ``M`` and
``a``. After the fit a :class:`~hmoe_estim.estimators.PoorFitWarning` says when the model
predicts its training targets worse than their mean, and why.

Why one module of this size: scikit-learn reads an estimator's parameters from its ``__init__``
signature, so the presets repeat the signature of :class:`HMoERegressor`, and the parameter
documentation is long.
"""

import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._defaults import OMEGA_MAX, PARAM_BOUND, SOLVER
from .._names import GATE_LABELS
from .._validation import check_activation, check_count, check_gate, check_positive
from ..model import (
    MixingMeasure,
    check_init_measure,
    evaluate,
    make_bounds,
    n_params,
    pack,
    random_start_theta,
    unpack,
)
from ..solvers import Problem, make_search
from . import _guards
from ._warnings import PoorFitWarning, diagnose_fit

__all__ = ["HMoERegressor", "MHARegressor", "G1Regressor", "G2Regressor", "PoorFitWarning"]


def _check_flag(value, name):
    """Return ``value`` as a bool if it is one (Python or NumPy), else raise ``ValueError``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False; got {value!r}.")
    return bool(value)


class HMoERegressor(RegressorMixin, BaseEstimator):
    """Least-squares fit of an (H, K, N)-HMoE: multi-head attention, gated or not, as a regressor.

    The model (paper eq. (2), (9), (12); ``g[h, i](x) = softmax_i(xᵀ M[h, i] x)``):

    - ``gate="none"`` — MHA, eq. (2): ``f(x) = Σ_h Σ_k ω[h,k] Σ_i g[h,i](x) a[h,i,k]·x``;
    - ``gate="value"`` — G2, eq. (9): ``Σ_h Σ_k ω[h,k] Σ_i g[h,i](x) φ(a[h,i,k]·x)``;
    - ``gate="sdpa"`` — G1, eq. (12): ``Σ_h Σ_k ω[h,k] φ(Σ_i g[h,i](x) a[h,i,k]·x)``;
    - ``gate="output"`` — G5: ``φ(f_MHA(x))``.

    Parameters
    ----------
    n_heads : int, default=1
        Number of heads ``H`` (known, ``H*``).
    n_tokens : int, default=2
        Number of tokens ``N`` (known, ``N*``).
    n_experts : int, default=2
        Number of value channels ``K`` per head; over-specify (``K > K*``) when ``K*`` is
        unknown, or choose it with ``GridSearchCV``.
    gate : {"none", "value", "sdpa", "output"}, default="none"
        Gate position.
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
        The non-linearity ``φ`` of the gate (unused for ``gate="none"``).
    solver : {"lm", "lbfgs"}, LocalSolver or Search, default="lm"
        How the least-squares estimator is searched for (documentation: the solver page).
        ``"lm"``: bounded Levenberg–Marquardt (:class:`~hmoe_estim.solvers.LevenbergMarquardt`)
        inside the default :class:`~hmoe_estim.solvers.Search`: a race of many random starts,
        moves of the best fit, rounds until the optimum has been found again. ``"lbfgs"``:
        L-BFGS-B (:class:`~hmoe_estim.solvers.LBFGSB`) from ``n_starts`` random starts (the
        toolkit's earlier default, kept for comparisons). A local solver object runs inside
        the default search; a ``Search`` object sets every knob of the search, e.g.
        ``solver=Search(local=LevenbergMarquardt(max_iter=200), n_candidates=256)`` (its
        knobs are grid-searchable as ``solver__n_candidates``).
    n_starts : int or None, default=None
        Starts run to convergence per search round; the best objective is kept. ``None``:
        the search's (4).
    max_iter : int or None, default=None
        Iteration cap of each start (Levenberg–Marquardt: Jacobian passes; L-BFGS-B:
        iterations). ``None``: the local solver's (1000).
    tol : float or None, default=None
        Relative decrease of the objective below which a start has converged (L-BFGS-B: its
        ``ftol`` and ``gtol``). ``None``: the local solver's (1e-9).
    param_bound : float, default=10.0
        Every entry of ``M`` and ``a`` lies in ``[-param_bound, param_bound]`` (A.1).
    omega_max : float, default=10.0
        ``0 <= omega <= omega_max`` (A.1, A.2); ``|omega| <= omega_max`` with
        ``positive_weights=False``.
    init : "random", MixingMeasure or list of MixingMeasure, default="random"
        Starting points. Given measures (for example the fit at a smaller ``n``, or
        :func:`~hmoe_estim.model.split_heaviest_channel` of a ``K-1`` fit) are used as
        the first starts, clipped to the box; random starts fill up to the search's
        candidates.
    n_jobs : int or None, default=None
        Starts run in parallel through joblib. The result does not depend on ``n_jobs``.
    verbose : int, default=0
        When > 0, print one line per search round (the best objective so far, how many
        rounds reached it, the seconds spent) and one per finished start.
    random_state : int, RandomState instance or None, default=None
        Seeds the random starts.
    fit_intercept : bool, default=False
        Add a free constant ``c`` to the model, ``f(x) + c`` (outside every gate; not
        penalised, not boxed). The paper's model (eq. (3)) has none; real targets usually need
        it. The fitted constant is ``intercept_``.
    positive_weights : bool, default=True
        Keep ``omega >= 0`` (assumption (A.2)). ``False`` lets ``omega`` take either sign, as
        the output projection ``W_O`` of an attention layer does; a sigmoid-gated model
        (G1, G2) is positive everywhere without it.
    alpha : float, default=0.0
        Ridge penalty: the objective becomes the mean squared residual plus
        ``alpha·(‖M‖²_F + ‖a‖²)`` over the free gate matrices (Frobenius norm) and experts.
        It is added to the *mean* (not the sum) of squared residuals, so ``alpha`` does not
        scale with ``n`` (scikit-learn's ``Ridge(alpha=n·alpha)`` on the summed loss).

    Attributes
    ----------
    measure_ : MixingMeasure
        The fitted mixing measure (normalised, ``M[h, N-1] = 0``).
    intercept_ : float
        The fitted constant ``c`` (``0.0`` when ``fit_intercept=False``); ``predict(X)`` is
        ``regression_function(measure_, X, ...) + intercept_``.
    objective_ : float
        Best objective over the starts: the mean squared residual (plus the penalty when
        ``alpha > 0``).
    start_objectives_ : ndarray of shape (n_finished,)
        Final objective of every start run to convergence: ``n_starts`` per round of the
        search, round after round (``n_finished = n_starts · search_rounds_``).
    n_starts_agreeing_ : int
        How many of those starts ended within ``1 · σ̂²/n`` of the best objective
        (``σ̂²`` = the best objective, an estimate of the noise variance; ``n`` = samples),
        or at the rounding level of the targets (a noiseless fit): the optimum was found
        that many times. Starts of one round come from one race and
        are not independent: see ``n_rounds_agreeing_``.
    n_rounds_agreeing_ : int
        How many rounds of the search — independent races from fresh candidates — reached
        the best objective (within ``1 · σ̂²/n``): the evidence that the optimum was found
        more than once (documentation: the solver page, "Reading a fit"). The rounds stop
        once it reaches the search's ``agree``; with one round it is 1. When the rounds run
        out below ``agree``, the fit warns (``ConvergenceWarning``): the best start may be a
        local optimum.
    head_restart_rounds_ : int
        Rounds of the restart moves (a head redrawn) that lowered the objective.
    reassign_rounds_ : int
        Rounds of the local moves (expert reassignment, soft modes) that lowered the
        objective.
    search_rounds_ : int
        Rounds of the search that ran.
    search_stop_ : {"agreement", "starts", "rounds", "budget"}
        Why the search stopped: the optimum found by ``agree`` rounds, by most starts of
        the first round (one MHA or G5 head only: the solver page's rules), the last round, or
        the time budget of the ``Search`` (``max_seconds``; the fit warns).
    schedule_ : dict
        The settings the search ran with (every ``"auto"`` resolved).
    dropped_ : dict
        Candidates and moves left out because they gave non-finite values: reason -> count.
    search_cost_ : dict
        Where the search's work went: phase -> ``{"passes": p, "seconds": s}``, with the
        phases ``"race"`` (candidates on the race's samples), ``"converge"`` (the kept starts
        on all the data) and one per move (``"HeadRestarts"``, ...); the passes add up to
        ``n_kernel_passes_``.
    solver_ : {"lm", "lbfgs"}
        The local solver that ran.
    n_kernel_passes_ : int
        Passes over the data of the whole fit (objective/gradient, Jacobian and forward
        evaluations, abandoned race candidates included).
    start_n_iter_ : ndarray of shape (n_finished,)
        Iterations of every start.
    start_converged_ : ndarray of shape (n_finished,)
        Whether every start converged.
    n_iter_ : int
        Iterations of the best start.
    converged_ : bool
        Whether the best start converged.
    best_start_ : int
        Index of the best start.
    n_features_in_ : int
        Number of features seen during fit (``D``).
    train_r2_ : float
        ``R²`` of the fit on its training data (NaN for a constant target). Below 0 the fit
        warns with :class:`~hmoe_estim.estimators.PoorFitWarning`, naming the cause.

    Examples
    --------
    >>> import numpy as np
    >>> from hmoe_estim import HMoERegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(200, 2))
    >>> y = X[:, 0] - 2 * X[:, 1]
    >>> est = HMoERegressor(n_experts=1, n_starts=2, random_state=0).fit(X, y)
    >>> bool(est.score(X, y) > 0.99)
    True
    """

    def __init__(
        self,
        n_heads=1,
        n_tokens=2,
        n_experts=2,
        gate="none",
        activation="sigmoid",
        solver=SOLVER,
        n_starts=None,
        max_iter=None,
        tol=None,
        param_bound=PARAM_BOUND,
        omega_max=OMEGA_MAX,
        init="random",
        n_jobs=None,
        verbose=0,
        random_state=None,
        fit_intercept=False,
        positive_weights=True,
        alpha=0.0,
    ):
        self.n_heads = n_heads
        self.n_tokens = n_tokens
        self.n_experts = n_experts
        self.gate = gate
        self.activation = activation
        self.solver = solver
        self.n_starts = n_starts
        self.max_iter = max_iter
        self.tol = tol
        self.param_bound = param_bound
        self.omega_max = omega_max
        self.init = init
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.random_state = random_state
        self.fit_intercept = fit_intercept
        self.positive_weights = positive_weights
        self.alpha = alpha

    # -- validation ----------------------------------------------------------------------
    def _validate_hyperparameters(self):
        check_gate(self.gate)
        check_activation(self.activation)
        H = check_count(self.n_heads, "n_heads", 1)
        N = check_count(self.n_tokens, "n_tokens", 1)
        K = check_count(self.n_experts, "n_experts", 1)
        check_positive(self.param_bound, "param_bound")
        check_positive(self.omega_max, "omega_max")
        _check_flag(self.fit_intercept, "fit_intercept")
        _check_flag(self.positive_weights, "positive_weights")
        check_positive(self.alpha, "alpha", allow_zero=True)
        return H, N, K

    def _search(self):
        """The search of ``solver`` (a copy), with ``n_starts``, ``max_iter`` and ``tol`` set
        when given; validated (a ``ValueError`` names a knob out of range)."""
        search = clone(make_search(self.solver))
        if self.n_starts is not None:
            search.set_params(n_starts=check_count(self.n_starts, "n_starts", 1))
        if self.max_iter is not None or self.tol is not None:
            local = clone(search.local_solver())
            if self.max_iter is not None:
                local.set_params(max_iter=check_count(self.max_iter, "max_iter", 1))
            if self.tol is not None:
                local.set_params(tol=check_positive(self.tol, "tol"))
            search.set_params(local=local)
        return search.validate()

    def _init_measures(self, shape):
        init = self.init
        if isinstance(init, str):
            if init != "random":
                raise ValueError(
                    f"init must be 'random', a MixingMeasure or a list of them; got {init!r}."
                )
            return []
        if isinstance(init, MixingMeasure):
            init = [init]
        if not isinstance(init, (list, tuple)):
            raise ValueError(
                "init must be 'random', a MixingMeasure or a list of them; got "
                f"{type(init).__name__} {init!r}."
            )
        return [check_init_measure(m, shape) for m in init]

    # -- fitting -------------------------------------------------------------------------
    def fit(self, X, y):
        """Fit the HMoE by least squares: validate, scale, search, unscale.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs ``x ∈ R^D``; at least 2 samples, finite.
        y : array-like of shape (n_samples,)
            Targets.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Invalid hyper-parameters or search knobs (the message names the knob and its
            range), NaN/inf/None/strings, mismatched lengths, fewer than 2 samples, an
            ``init`` that is not a (list of) measure(s) of the right shape, a model whose fit
            would need more than 4 GiB (checked before allocating), or a ``y`` so large that
            its squared residuals overflow.

        Warns
        -----
        UserWarning
            Fewer samples than free parameters (the fit is under-determined); a fitted weight
            at ``omega_max`` or expert entry at ``param_bound`` (the box limits the fit; the
            message names the bound to raise). ``y`` and ``X`` far from unit scale are fitted
            scaled by powers of two, the box mapped alike (``estimators/_guards.py``).
        PoorFitWarning
            Training R² below 0 (the message names the cause and the option that helps), or a
            constant target.
        ConvergenceWarning
            The best start reached its iteration cap (or stopped abnormally), or the search
            stopped on its time budget.
        """
        H, N, K = self._validate_hyperparameters()
        search = self._search()
        _guards.check_target(y)
        X, y = validate_data(
            self, X, y, y_numeric=True, ensure_min_samples=2, dtype=np.float64
        )
        n, D = X.shape
        shape = (H, N, K, D)
        init_measures = self._init_measures(shape)
        P = n_params(*shape) + bool(self.fit_intercept)
        _guards.check_fit_size(shape, n, self.gate, n_threads=_n_threads())
        if n < P:
            warnings.warn(
                f"{n} samples for {P} free parameters: the least-squares fit is "
                "under-determined. Use more samples or fewer heads/tokens/channels.",
                UserWarning,
                stacklevel=2,
            )
        rng = check_random_state(self.random_state)
        problem, scaling = self._scaled_problem(X, y, shape)
        starts = [np.clip(np.concatenate([pack(m), scaling["tail"]]) * scaling["v"],
                          problem.lower, problem.upper) for m in init_measures]
        found = search.run(problem, self._draw(problem, scaling, rng), starts,
                           n_jobs=self.n_jobs, verbose=self.verbose)
        self._unscale(found, scaling, X, y, shape, search, n)
        return self

    def _scaled_problem(self, X, y, shape):
        """The problem on the data scaled to unit size: ``(y − ȳ) / s_y`` on ``X / s_x``
        (powers of two), the box mapped alike, so that tolerances are free of the data's
        units; an intercept is fitted on the centred target (``ȳ`` added back after), so that a
        shift of ``y`` shifts ``intercept_`` and nothing else."""
        fit_intercept = bool(self.fit_intercept)
        lower, upper = make_bounds(shape, omega_max=self.omega_max,
                                   param_bound=self.param_bound,
                                   positive_weights=bool(self.positive_weights))
        y_offset = float(np.mean(y)) if fit_intercept else 0.0
        s_y = _guards.target_scale(y - y_offset, self.gate)
        s_x = _guards.input_scale(X)
        # (the intercept scales like omega)
        v = np.concatenate([_guards.theta_factors(shape, s_y, s_x),
                            np.full(int(fit_intercept), 1.0 / s_y)])
        tail = np.zeros(int(fit_intercept))
        lower = np.concatenate([lower, tail - np.inf]) * v
        upper = np.concatenate([upper, tail + np.inf]) * v
        Xs, ys = X / s_x, (y - y_offset) / s_y
        # writable C-contiguous float64 copies: Numba compiles a separate specialisation for
        # read-only arrays and for integer targets, and a separately compiled kernel may sum
        # in another order (sklearn's check_regressors_int caught it)
        XT = np.require(Xs.T, requirements=["C", "W"])
        ys = np.require(ys, dtype=np.float64, requirements=["C", "W"])
        problem = Problem(XT, ys, shape, self.gate, self.activation, lower, upper,
                          fit_intercept=fit_intercept, alpha=float(self.alpha))
        x_rms = float(np.sqrt(np.mean(Xs**2)))
        y_scale = float(np.std(ys)) if np.std(ys) > 0 else float(np.mean(np.abs(ys))) + 1e-3
        return problem, dict(v=v, tail=tail, s_y=s_y, s_x=s_x, y_offset=y_offset,
                             x_rms=x_rms, y_scale=y_scale)

    def _draw(self, problem, scaling, rng):
        """``draw()``: a random packed start in the scaled box (the search's candidates)."""
        shape, tail = problem.shape, scaling["tail"]

        def draw():
            t = random_start_theta(
                shape, rng, x_rms=scaling["x_rms"], y_scale=scaling["y_scale"],
                omega_max=self.omega_max, param_bound=self.param_bound,
                positive_weights=bool(self.positive_weights),
            )
            return np.clip(np.concatenate([t, tail]), problem.lower, problem.upper)

        return draw

    def _unscale(self, found, scaling, X_raw, y_raw, shape, search, n):
        """The fitted attributes from the search's result, in the units of the data."""
        results = found.results
        s_y = scaling["s_y"]
        objectives = np.array([r.objective for r in results])
        if not np.any(np.isfinite(objectives)):
            raise ValueError(
                "Every start ended with a non-finite objective: the inputs are too large for "
                "the model (|x|² · |M| overflows). Rescale X, e.g. with StandardScaler."
            )
        with np.errstate(over="ignore"):
            objectives = objectives * (s_y * s_y)
        if not np.any(np.isfinite(objectives)):
            raise ValueError(
                f"The target y is too large (root mean square {s_y:.3g}): its squared residuals "
                "overflow float64. Rescale y to moderate values (e.g. divide it by its standard "
                "deviation)."
            )
        best = int(np.argmin(objectives))
        if self.verbose:
            for j, r in enumerate(results):
                mark = "*" if j == best else " "
                print(
                    f"[{GATE_LABELS[self.gate]}] start {j}{mark} objective={r.objective:.6g} "
                    f"iterations={r.n_iter} converged={r.converged}"
                )
        res = results[best]
        P0 = n_params(*shape)
        with np.errstate(over="ignore"):
            theta = res.theta / scaling["v"]
        if not np.all(np.isfinite(theta)):
            raise ValueError(
                f"The fitted parameters overflow when mapped back to the units of y (root mean "
                f"square {s_y:.3g}) and X ({scaling['s_x']:.3g}); rescale y and X to moderate "
                "values."
            )
        fit_intercept = bool(self.fit_intercept)
        self.measure_ = unpack(theta[:P0], shape)
        self.intercept_ = float(theta[P0]) + scaling["y_offset"] if fit_intercept else 0.0
        self.theta_ = theta
        if fit_intercept:  # the intercept of y itself, not of the centred target
            self.theta_[P0] = self.intercept_
        self.objective_ = float(objectives[best])
        self.start_objectives_ = objectives
        self.n_starts_agreeing_ = int(found.starts_agreeing)
        self.n_kernel_passes_ = int(found.n_passes)
        self.start_n_iter_ = np.array([r.n_iter for r in results])
        self.start_converged_ = np.array([r.converged for r in results])
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.best_start_ = best
        local = search.local_solver()
        self.solver_ = local.name
        self.search_rounds_ = int(found.rounds)
        self.search_stop_ = found.stop
        self.n_rounds_agreeing_ = int(found.rounds_agreeing)
        self.head_restart_rounds_ = int(found.move_rounds["restart"])
        self.reassign_rounds_ = int(found.move_rounds["local"])
        self.schedule_ = found.schedule.to_dict()
        self.dropped_ = dict(found.dropped)
        self.search_cost_ = {k: dict(v) for k, v in found.cost.items()}
        if not res.converged:
            warnings.warn(
                f"{local.label} did not converge for the best start ({res.message}) "
                f"after {res.n_iter} iterations. Increase max_iter (now {local.max_iter}) or "
                f"tol (now {local.tol}).",
                ConvergenceWarning,
                stacklevel=3,
            )
        for notice in found.notices(search.max_seconds):  # budget; rounds unconfirmed
            warnings.warn(notice, ConvergenceWarning, stacklevel=3)
        y_pred = evaluate(theta[:P0], X_raw, shape, self.gate, self.activation) + self.intercept_
        self.train_r2_ = diagnose_fit(self, y_raw, y_pred, n_params(*shape) + fit_intercept,
                                      stacklevel=4)
        _guards.warn_if_at_bound(self.measure_, self.omega_max, self.param_bound, X_raw,
                                 y_raw, self.gate, self.objective_, stacklevel=4)

    def predict(self, X):
        """Evaluate the fitted regression function ``f_Ĝ(X)`` (plus ``intercept_``).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        check_is_fitted(self, "measure_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        P0 = n_params(*self.measure_.shape)
        f = evaluate(self.theta_[:P0], X, self.measure_.shape, self.gate, self.activation)
        return f + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        # With omega >= 0 (A.2) a gated model's range is that of φ scaled by Σ omega: sigmoid
        # gates give f > 0, so the model cannot follow an arbitrary centred target such as
        # scikit-learn's generic regression check. That is the model, not a fitting failure.
        tags.regressor_tags.poor_score = self.gate != "none"
        return tags


def _n_threads():
    import numba

    return numba.get_num_threads()


class _PresetRegressor(HMoERegressor):
    """An :class:`HMoERegressor` whose gate position is fixed by the class.

    scikit-learn reads an estimator's parameters from its ``__init__`` signature and forbids
    setting anything else there, so the presets repeat :class:`HMoERegressor`'s signature
    without ``gate`` (a class attribute) rather than forwarding to it.
    """

    gate = "none"

    def __init__(
        self,
        n_heads=1,
        n_tokens=2,
        n_experts=2,
        activation="sigmoid",
        solver=SOLVER,
        n_starts=None,
        max_iter=None,
        tol=None,
        param_bound=PARAM_BOUND,
        omega_max=OMEGA_MAX,
        init="random",
        n_jobs=None,
        verbose=0,
        random_state=None,
        fit_intercept=False,
        positive_weights=True,
        alpha=0.0,
    ):
        self.n_heads = n_heads
        self.n_tokens = n_tokens
        self.n_experts = n_experts
        self.activation = activation
        self.solver = solver
        self.n_starts = n_starts
        self.max_iter = max_iter
        self.tol = tol
        self.param_bound = param_bound
        self.omega_max = omega_max
        self.init = init
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.random_state = random_state
        self.fit_intercept = fit_intercept
        self.positive_weights = positive_weights
        self.alpha = alpha


class MHARegressor(_PresetRegressor):
    """:class:`HMoERegressor` with ``gate="none"``: plain multi-head attention, eq. (2).

    Same parameters as :class:`HMoERegressor` except ``gate``; ``activation`` is unused.
    """

    gate = "none"


class G2Regressor(_PresetRegressor):
    """:class:`HMoERegressor` with ``gate="value"``: G2, gate after the value projection (9).

    Same parameters as :class:`HMoERegressor` except ``gate``.
    """

    gate = "value"


class G1Regressor(_PresetRegressor):
    """:class:`HMoERegressor` with ``gate="sdpa"``: G1, gate after the SDPA output (12).

    Same parameters as :class:`HMoERegressor` except ``gate``.
    """

    gate = "sdpa"
