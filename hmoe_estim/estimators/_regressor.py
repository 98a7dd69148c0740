"""Least-squares estimators of the HMoE models (paper eq. (3)): ``HMoERegressor`` and presets.

The estimator solves the paper's eq. (3),

    Ĝ_n ∈ argmin_G Σ_j (Y_j − f_G(X_j))²,

over the (H, K, N)-HMoE class of the chosen gate position, with ``omega >= 0`` (A.2),
``M[h, N-1] = 0`` (A.3) and a box on every parameter (A.1). The loss is non-convex: by default
many random starts are raced with a bounded Levenberg–Marquardt solver
(``solvers/_gauss_newton.py``, ``solvers/_search.py``), ``n_starts`` of them run to
convergence and the best objective is kept; ``solver="lbfgs"`` runs L-BFGS-B from ``n_starts``
starts instead.

Options for real data, all off by default (the defaults are the paper's model, so studies do
not move): ``fit_intercept`` (a free constant added to ``f``), ``positive_weights=False``
(signed ``omega``, as an attention layer's ``W_O``) and a ridge penalty ``alpha`` on ``M`` and
``a``. After the fit a :class:`~hmoe_estim.estimators.PoorFitWarning` says when the model
predicts its training targets worse than their mean, and why.

Why one module of this size: scikit-learn reads an estimator's parameters from its ``__init__``
signature, so the presets repeat the signature of :class:`HMoERegressor`, and the parameter
documentation is long; the fit itself is delegated to the solvers, the guards and the warnings
modules.
"""

import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._names import GATE_LABELS
from .._validation import check_activation, check_count, check_gate, check_positive
from ..model._measure import MixingMeasure
from ..model._parameters import make_bounds, n_params, pack, unpack
from ..model._regression import evaluate
from ..model._starts import check_init_measure, random_start_theta
from ..solvers._multistart import run_starts
from ..solvers._search import (
    AGREE_TOL,
    HEAD_RESTART_ROUNDS,
    candidates_schedule,
    count_agreeing,
    has_sign_symmetry,
    head_restarts_schedule,
    race,
    race_schedule,
    reassign_experts,
    reassign_schedule,
    restart_heads,
    search_rounds_schedule,
    soft_mode_moves,
    starts_to_stop,
)
from . import _guards
from ._warnings import PoorFitWarning, diagnose_fit

__all__ = ["HMoERegressor", "MHARegressor", "G1Regressor", "G2Regressor", "PoorFitWarning"]


def _check_flag(value, name):
    """Return ``value`` as a bool if it is one (Python or NumPy), else raise ``ValueError``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False; got {value!r}.")
    return bool(value)


def _check_auto_count(value, name, minimum, least=None):
    """``None`` for ``"auto"``, else the integer ``value >= minimum``; a ``ValueError`` naming
    both choices otherwise (``least`` words the lower bound in the message)."""
    if isinstance(value, str) and value == "auto":
        return None
    try:
        return check_count(value, name, minimum)
    except ValueError:
        raise ValueError(
            f"{name} must be 'auto' or an integer >= {least or minimum}; got {value!r}."
        ) from None


#: Local solvers: name -> label in messages.
SOLVERS = {"lm": "Levenberg-Marquardt", "lbfgs": "L-BFGS-B"}


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
    n_starts : int, default=4
        Number of starts run to convergence; the best objective is kept.
    max_iter : int, default=1000
        Iteration cap of each start (L-BFGS-B iterations, or Levenberg–Marquardt
        iterations, i.e. Jacobian passes). Gated fits need hundreds of L-BFGS-B iterations,
        and tens of Levenberg–Marquardt ones.
    tol : float, default=1e-9
        ``ftol`` and ``gtol`` of L-BFGS-B; for ``solver="lm"``, the relative decrease of the
        objective below which a start has converged (it also stops once a Gauss–Newton step
        would lower the objective by less than 1% of ``σ̂²/n``,
        ``solvers/_gauss_newton.py``).
    solver : {"lm", "lbfgs"}, default="lm"
        Local solver of each start. ``"lm"``: bounded Levenberg–Marquardt on the fused
        ``JᵀJ`` / ``Jᵀr`` kernel (``solvers/_gauss_newton.py``), with the racing and
        signed-weight search of ``solvers/_search.py``. ``"lbfgs"``: L-BFGS-B on the
        objective and gradient, from ``n_starts`` random starts (the toolkit's earlier
        default; kept for comparisons). Both minimise the same objective, with the
        intercept and the penalty when asked (``fit_intercept``, ``alpha``).
    n_candidates : int or "auto", default="auto"
        ``solver="lm"`` only: random starts raced for ``race_iter`` iterations before the
        best ``n_starts`` run to convergence (``"auto"``: ``32 · n_starts``; for the ungated
        MHA, ``gate="none"``, ``16 · n_starts`` per head). Must be
        ``>= n_starts``; ``n_candidates = n_starts`` switches racing off. On the solver
        benchmark's two-head truths the defaults end above the truth's objective in 1 of 864
        fits (one head: none of 936); with several heads, raising it can help (before the
        head restarts, 512 candidates fixed 9 of 13 such fits at 4× the time; documentation:
        the solver page).
    race_iter : int or "auto", default="auto"
        ``solver="lm"`` only: iterations of the race — the first half for every candidate,
        the second for the best quarter of them (successive halving). ``"auto"``: 10, and 30
        for the value and SDPA gates with several heads (their race then runs on 1024
        samples instead of 4096: no more work at ``n >= 4096``, three times the race's work
        below 1024 samples). An integer: that many iterations on the default subsample
        (4096 samples; 1024 for the linear gates).
    head_restarts : int or "auto", default="auto"
        ``solver="lm"`` only: after the race, restart one whole head of the best fit at a
        time (its weights, gate matrices and experts redrawn at random, the other heads
        kept): ``head_restarts`` candidates per head and round are raced and the best
        replaces the fit when it lowers the objective by more than ``1 · σ̂²/n``; up to 10
        rounds, stopping after a round without improvement. ``"auto"``: 32 with several
        heads, 0 (off) with one head. On the solver benchmark's two-head truths this
        lowered the certified failures from 57 to 26 of 432 fits (11 with the longer race of
        ``race_iter="auto"``; documentation: the
        solver page).
    reassign_experts : bool or "auto", default="auto"
        ``solver="lm"`` only: after the head restarts (or the race, with one head), try
        moves that keep the best fit's gates and experts but change which token each
        expert serves — a head's experts ``a[h, i]`` permuted over its tokens, one
        channel's ``a[h, :, k]`` permuted, two channels' swapped at one token — then
        soft-mode moves, long steps (2, 4, 8, both signs) from the best fit along the 12
        directions in which it changes the function least (the softest eigenvectors of the
        scaled Gauss–Newton matrix ``JᵀJ``). Each family is raced like the head restarts;
        they alternate with the head restarts while any lowers the objective by more than
        ``1 · σ̂²/n`` (``solvers/_search.py``). ``"auto"``: on for the value and SDPA gates
        with ``activation="tanh"`` and several heads, off otherwise. On the solver
        benchmark's 192 two-head value/SDPA tanh fits: certified failures 3 → 1, at ×1.71
        their time (documentation: the solver page).
    search_rounds : int or "auto", default="auto"
        ``solver="lm"`` only: most rounds of the whole search (race, then head restarts),
        each from fresh random candidates; the search stops after a round once the best
        objective has been reached by two starts (``n_starts_agreeing_ >= 2``, of one round or
        of several; three for the value and SDPA gates with ``activation="tanh"``, whose
        search runs over signed weights), and keeps the best start of all rounds. ``"auto"``:
        6 for those tanh models and for the value and SDPA gates with several heads, 1
        otherwise. On the solver benchmark's truths three rounds lowered the certified
        failures of two-head value/SDPA fits from 11 to 5 of 384 and of one-head tanh fits
        from 2 to 0 of 104, at about twice their total time; on its design with 1800 fits,
        six rounds for tanh left 8, and three agreeing starts to stop them 5 (3 of 100
        value/tanh ``K = 2`` fits), at 1.33 times the passes of the tanh fits, and six
        rounds for the other two-head value/SDPA fits 3 (those value/tanh fits), at 1.51
        times the time of the two-head sigmoid, GELU and SiLU fits (documentation: the
        solver page). With one head and sigmoid, GELU or SiLU (no certified failure there)
        the over-specified fits' starts rarely agree to ``1 · σ̂²/n``, so the rule would run
        every round for nothing.
    param_bound : float, default=10.0
        Every entry of ``M`` and ``a`` lies in ``[-param_bound, param_bound]`` (A.1).
    omega_max : float, default=10.0
        ``0 <= omega <= omega_max`` (A.1, A.2); ``|omega| <= omega_max`` with
        ``positive_weights=False``.
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
    init : "random", MixingMeasure or list of MixingMeasure, default="random"
        Starting points. Given measures (for example the fit at a smaller ``n``, or
        :func:`~hmoe_estim.model.split_heaviest_channel` of a ``K-1`` fit) are used as
        the first starts, clipped to the box; random starts fill up to ``n_starts``.
    n_jobs : int or None, default=None
        Starts run in parallel through joblib. The result does not depend on ``n_jobs``.
    verbose : int, default=0
        Print one line per start when > 0.
    random_state : int, RandomState instance or None, default=None
        Seeds the random starts.

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
        (``σ̂²`` = the best objective, an estimate of the noise variance; ``n`` = samples):
        the optimum was found that many times. 1 means it was found once only — more
        starts or ``n_candidates`` may find a lower one.
    head_restart_rounds_ : int
        Rounds of ``head_restarts`` that lowered the objective (0 when off or when none did).
    reassign_rounds_ : int
        Rounds of the moves (``reassign_experts``: expert reassignment and soft-mode
        steps) that lowered the objective (0 when off or when none did).
    search_rounds_ : int
        Rounds of the search that ran (``search_rounds``; 1 for ``solver="lbfgs"``).
    solver_ : {"lm", "lbfgs"}
        The solver that ran (``solver``).
    n_kernel_passes_ : int
        Passes over the data of the whole fit (objective/gradient, Jacobian and forward
        evaluations, abandoned race candidates included).
    start_n_iter_ : ndarray of shape (n_starts,)
        Iterations of every start.
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
        n_starts=4,
        max_iter=1000,
        tol=1e-9,
        solver="lm",
        n_candidates="auto",
        race_iter="auto",
        head_restarts="auto",
        reassign_experts="auto",
        search_rounds="auto",
        param_bound=10.0,
        omega_max=10.0,
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
        self.n_starts = n_starts
        self.max_iter = max_iter
        self.tol = tol
        self.solver = solver
        self.n_candidates = n_candidates
        self.race_iter = race_iter
        self.head_restarts = head_restarts
        self.reassign_experts = reassign_experts
        self.search_rounds = search_rounds
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
        check_count(self.n_starts, "n_starts", 1)
        check_count(self.max_iter, "max_iter", 1)
        check_positive(self.tol, "tol")
        check_positive(self.param_bound, "param_bound")
        check_positive(self.omega_max, "omega_max")
        _check_flag(self.fit_intercept, "fit_intercept")
        _check_flag(self.positive_weights, "positive_weights")
        check_positive(self.alpha, "alpha", allow_zero=True)
        if not isinstance(self.solver, str) or self.solver not in SOLVERS:
            raise ValueError(
                f"Unknown solver {self.solver!r}. Use one of {list(SOLVERS)}: 'lm' (bounded "
                "Levenberg-Marquardt with racing starts) or 'lbfgs' (L-BFGS-B)."
            )
        _check_auto_count(self.race_iter, "race_iter", 1)
        m = _check_auto_count(self.n_candidates, "n_candidates", 1, "n_starts")
        if m is not None and m < self.n_starts:
            raise ValueError(
                f"n_candidates={m} is smaller than n_starts={self.n_starts}: the race keeps "
                "n_starts of the candidates. Raise n_candidates or lower n_starts."
            )
        _check_auto_count(self.head_restarts, "head_restarts", 0, "0 (0: off)")
        _check_auto_count(self.search_rounds, "search_rounds", 1)
        if not (isinstance(self.reassign_experts, str) and self.reassign_experts == "auto"):
            if not isinstance(self.reassign_experts, (bool, np.bool_)):
                raise ValueError("reassign_experts must be 'auto', True or False; got "
                                 f"{self.reassign_experts!r}.")
        return H, N, K

    def _head_restarts(self, H):
        """Candidates per head and round of the head restarts (0: none; always 0 with one
        head, where a restarted head is a fresh start)."""
        if H == 1:
            return 0
        if isinstance(self.head_restarts, str):
            return head_restarts_schedule(H)
        return int(self.head_restarts)

    def _reassign(self, H):
        """Whether the expert reassignment moves run: ``"auto"`` is ``reassign_schedule`` of
        ``solvers/_search.py`` (the value and SDPA gates with tanh and several heads)."""
        if isinstance(self.reassign_experts, str):
            return reassign_schedule(self.gate, self.activation, H)
        return bool(self.reassign_experts)

    def _search_rounds(self, H):
        """Most rounds of the whole search: ``"auto"`` is ``search_rounds_schedule`` of
        ``solvers/_search.py`` (6 for the value and SDPA gates with tanh or with several heads,
        1 otherwise); an integer is the count itself."""
        if isinstance(self.search_rounds, str):
            return search_rounds_schedule(self.gate, self.activation, H)
        return int(self.search_rounds)

    def _race_schedule(self, H):
        """``(race_iter, race_samples)`` of the race: ``"auto"`` is ``race_schedule`` of
        ``solvers/_search.py`` (10 iterations; 30 on a smaller subsample for the value and SDPA
        gates with several heads), an integer the iterations on the default subsample."""
        if isinstance(self.race_iter, str):
            return race_schedule(self.gate, H)
        return int(self.race_iter), None

    def _improve_best(self, best, XT, y, shape, bounds, draw, n_restart, reassign, search):
        """The head restarts (``n_restart`` candidates per head; 0: off), then, when
        ``reassign``, the expert reassignment and the soft-mode moves, alternating with the
        head restarts while any improves. Returns
        ``(best, passes, head_restart_rounds, reassign_rounds)``."""
        args = (XT, y, shape, self.gate, self.activation, bounds)
        passes, rounds, moves = 0.0, 0, 0
        if n_restart > 0:
            best, extra, rounds = restart_heads(
                best, *args, draw, n_per_head=n_restart, max_rounds=HEAD_RESTART_ROUNDS,
                **search)
            passes += extra
        while reassign:
            moved = 0
            for move in (reassign_experts, soft_mode_moves):
                best, extra, improved = move(best, *args, max_rounds=HEAD_RESTART_ROUNDS,
                                             **search)
                passes, moved = passes + extra, moved + improved
            moves += moved
            if not moved or n_restart == 0:
                break
            best, extra, improved = restart_heads(
                best, *args, draw, n_per_head=n_restart, max_rounds=HEAD_RESTART_ROUNDS,
                **search)
            passes, rounds = passes + extra, rounds + improved
            if not improved:
                break
        return best, passes, rounds, moves

    def _n_candidates(self, H):
        """Random starts drawn per search round: ``"auto"`` is ``candidates_schedule`` of
        ``solvers/_search.py`` (128 for 4 starts kept; 64 per head for the ungated MHA), an
        integer the count itself; ``n_starts`` for ``solver="lbfgs"`` (no race)."""
        if self.solver != "lm":
            return self.n_starts
        if isinstance(self.n_candidates, str):
            return candidates_schedule(self.gate, self.n_starts, H)
        return int(self.n_candidates)

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
        """Fit the HMoE by multi-start least squares (``solver``: Levenberg–Marquardt or L-BFGS-B).

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
            Invalid hyper-parameters, NaN/inf/None/strings, mismatched lengths, fewer than 2
            samples, an ``init`` that is not a (list of) measure(s) of the right shape, a model
            whose fit would need more than 4 GiB (checked before allocating), or a ``y`` so
            large that its squared residuals overflow.

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
            The best start reached ``max_iter`` (or stopped abnormally).
        """
        H, N, K = self._validate_hyperparameters()
        _guards.check_target(y)
        X, y = validate_data(
            self, X, y, y_numeric=True, ensure_min_samples=2, dtype=np.float64
        )
        n, D = X.shape
        shape = (H, N, K, D)
        init_measures = self._init_measures(shape)
        fit_intercept = bool(self.fit_intercept)
        positive = bool(self.positive_weights)
        alpha = float(self.alpha)
        P = n_params(*shape) + fit_intercept
        _guards.check_fit_size(shape, n, self.gate, n_threads=_n_threads())
        if n < P:
            warnings.warn(
                f"{n} samples for {P} free parameters: the least-squares fit is "
                "under-determined. Use more samples or fewer heads/tokens/channels.",
                UserWarning,
                stacklevel=2,
            )
        rng = check_random_state(self.random_state)
        lower, upper = make_bounds(
            shape, omega_max=self.omega_max, param_bound=self.param_bound,
            positive_weights=positive,
        )
        # the intercept: unbounded, fitted on the centred target (y_offset added back after),
        # so that a shift of y shifts intercept_ and nothing else
        y_offset = float(np.mean(y)) if fit_intercept else 0.0
        # fit (y - y_offset) / s_y on X / s_x, the box mapped alike: tolerances free of the
        # data's units (the intercept scales like omega)
        y_raw, X_raw = y, X
        s_y = _guards.target_scale(y - y_offset, self.gate)
        s_x = _guards.input_scale(X)
        v = np.concatenate([_guards.theta_factors(shape, s_y, s_x),
                            np.full(int(fit_intercept), 1.0 / s_y)])
        tail = np.zeros(int(fit_intercept))
        lower = np.concatenate([lower, tail - np.inf]) * v
        upper = np.concatenate([upper, tail + np.inf]) * v
        X, y = X / s_x, (y - y_offset) / s_y
        x_rms = float(np.sqrt(np.mean(X**2)))
        y_scale = float(np.std(y)) if np.std(y) > 0 else float(np.mean(np.abs(y))) + 1e-3
        solver = self.solver
        n_cand = self._n_candidates(H)
        starts = [
            np.clip(np.concatenate([pack(m), tail]) * v, lower, upper)
            for m in init_measures[:n_cand]
        ]

        def draw():  # a random start, packed (the candidates, then the head restarts)
            t = random_start_theta(
                shape, rng, x_rms=x_rms, y_scale=y_scale, omega_max=self.omega_max,
                param_bound=self.param_bound, positive_weights=positive,
            )
            return np.clip(np.concatenate([t, tail]), lower, upper)

        while len(starts) < n_cand:
            starts.append(draw())
        # writable C-contiguous float64 copies: Numba compiles a separate specialisation for
        # read-only arrays (a memory-mapped X would otherwise cost a fresh compilation) and for
        # integer targets, and a separately compiled kernel may sum in another order: an
        # integer y then fitted differently from the same y as floats (sklearn's
        # check_regressors_int caught it)
        XT = np.require(X.T, requirements=["C", "W"])
        y = np.require(y, dtype=np.float64, requirements=["C", "W"])
        if solver == "lm":
            race_iter, race_samples = self._race_schedule(H)
            search = dict(
                race_iter=race_iter, race_samples=race_samples, max_iter=self.max_iter,
                tol=self.tol, signed=has_sign_symmetry(self.gate, self.activation),
                n_jobs=self.n_jobs,
                verbose=self.verbose, fit_intercept=fit_intercept, alpha=alpha,
            )
            n_restart = self._head_restarts(H)
            reassign = self._reassign(H)
            results, abandoned, rounds, moves = [], 0, 0, 0
            to_stop = starts_to_stop(self.gate, self.activation)
            for r in range(self._search_rounds(H)):
                if r > 0:  # a fresh search: new candidates, raced, then the head restarts
                    starts = [draw() for _ in range(n_cand)]
                found, _, spent = race(
                    starts, XT, y, shape, self.gate, self.activation, (lower, upper),
                    n_keep=self.n_starts, **search,
                )
                found, abandoned = list(found), abandoned + spent
                # (objectives are finite or inf; with none finite the error below says why)
                objs = np.array([f.objective for f in found])
                if (n_restart > 0 or reassign) and np.isfinite(objs).any():
                    ib = int(np.argmin(objs))
                    found[ib], extra, improved, moved = self._improve_best(
                        found[ib], XT, y, shape, (lower, upper), draw, n_restart, reassign,
                        search)
                    abandoned, rounds, moves = abandoned + extra, rounds + improved, moves + moved
                results += found
                # the optimum found twice (three times with signed weights), by starts of one
                # round or of several: done
                agreeing = count_agreeing([f.objective for f in results], n, AGREE_TOL)
                if self.verbose:
                    print(f"[{GATE_LABELS[self.gate]}] search round {r + 1}: best objective "
                          f"{min(f.objective for f in results):.6g}, reached by "
                          f"{agreeing} start(s)")
                if agreeing >= to_stop:
                    break
            self.search_rounds_ = r + 1
            self.head_restart_rounds_ = rounds
            self.reassign_rounds_ = moves
        else:
            self.head_restart_rounds_ = 0
            self.reassign_rounds_ = 0
            self.search_rounds_ = 1
            results = run_starts(
                starts, XT, y, shape, self.gate, self.activation,
                (lower, upper), max_iter=self.max_iter, tol=self.tol,
                n_jobs=self.n_jobs, verbose=self.verbose,
                fit_intercept=fit_intercept, alpha=alpha,
            )
            abandoned = 0
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
            theta = res.theta / v
        if not np.all(np.isfinite(theta)):
            raise ValueError(
                f"The fitted parameters overflow when mapped back to the units of y (root mean "
                f"square {s_y:.3g}) and X ({s_x:.3g}); rescale y and X to moderate values."
            )
        self.measure_ = unpack(theta[:P0], shape)
        self.intercept_ = float(theta[P0]) + y_offset if fit_intercept else 0.0
        self.theta_ = theta
        if fit_intercept:  # the intercept of y itself, not of the centred target
            self.theta_[P0] = self.intercept_
        self.objective_ = float(objectives[best])
        self.start_objectives_ = objectives
        self.n_starts_agreeing_ = count_agreeing(objectives, n, AGREE_TOL)
        self.n_kernel_passes_ = int(sum(r.n_passes for r in results) + abandoned)
        self.start_n_iter_ = np.array([r.n_iter for r in results])
        self.start_converged_ = np.array([r.converged for r in results])
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.best_start_ = best
        self.solver_ = solver
        if not res.converged:
            warnings.warn(
                f"{SOLVERS[solver]} did not converge for the best start ({res.message}) "
                f"after {res.n_iter} iterations. Increase max_iter (now {self.max_iter}) or tol "
                f"(now {self.tol}).",
                ConvergenceWarning,
                stacklevel=2,
            )
        y_pred = evaluate(theta[:P0], X_raw, shape, self.gate, self.activation) + self.intercept_
        self.train_r2_ = diagnose_fit(self, y_raw, y_pred, P, stacklevel=3)
        _guards.warn_if_at_bound(self.measure_, self.omega_max, self.param_bound, X_raw,
                                 y_raw, self.gate, self.objective_)
        return self

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
        n_starts=4,
        max_iter=1000,
        tol=1e-9,
        solver="lm",
        n_candidates="auto",
        race_iter="auto",
        head_restarts="auto",
        reassign_experts="auto",
        search_rounds="auto",
        param_bound=10.0,
        omega_max=10.0,
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
        self.n_starts = n_starts
        self.max_iter = max_iter
        self.tol = tol
        self.solver = solver
        self.n_candidates = n_candidates
        self.race_iter = race_iter
        self.head_restarts = head_restarts
        self.reassign_experts = reassign_experts
        self.search_rounds = search_rounds
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
