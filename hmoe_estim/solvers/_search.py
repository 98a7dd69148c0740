"""The global search for the least-squares estimator of eq. (3).

The loss is non-convex; the theory is about its global minimiser. :class:`Search` looks for
it with no oracle (nothing about the truth), only the data and random starts:

- **The race** (successive halving): ``n_candidates`` random starts each run
  ``race_iter // 2`` iterations of the local solver on a subsample (a quarter of
  ``race_samples``, at least 1024), the best quarter of them the other half on
  ``race_samples`` samples; the ``n_starts`` best then run to convergence on all the data,
  the others are abandoned. A few Gauss–Newton steps already sort most hopeless basins out,
  and on a subsample they cost a fraction of a pass over the data.
- **Signed weights** where the model has the symmetry ``(ω, a) ≡ (−ω, −a)`` (the linear
  gates; the value and SDPA gates with tanh): the search runs over ``ω ∈ [−ω_max, ω_max]``
  — the same set of functions — and folds every channel with ``ω < 0`` back at the end, so a
  channel whose experts point the wrong way need not pass through ``ω = 0`` to turn round.
- **Moves** of the best fit (``solvers/_moves.py``): candidates proposed from the incumbent,
  raced the same way (2 kept), the best kept when it lowers the objective by more than
  ``1 · σ̂²/n``, for up to ``move_rounds`` rounds per move while it improves. The restart moves
  (a head redrawn) alternate with the local ones (experts reassigned, soft modes) while
  either improves.
- **Rounds**: race and moves again from fresh candidates, each round's race on its own
  samples, until the best objective has been reached by ``agree`` rounds (within
  ``1 · σ̂²/n``), or ``rounds`` rounds; the best start of all rounds is kept. Agreement is
  counted between rounds, which are independent races, and not between the starts of one
  race: those can all come from one basin. Only where the schedule allows it
  (``first_round_agree``: one MHA or G5 head) do agreeing starts end the first round.

Every ``"auto"`` is resolved by :func:`hmoe_estim.solvers._schedule.resolve`, from one table.
"""

import time
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import BaseEstimator

from .._defaults import N_STARTS, SOLVERS
from .._names import LAYER_GATE_LABELS
from .._validation import check_count, check_positive
from ..kernels import single_thread_blas
from ._agreement import AGREE_TOL, count_agreeing
from ._local import LocalSolver, make_local_solver
from ._moves import Move
from ._schedule import resolve

__all__ = ["Search", "SearchResult"]

#: Objectives below ``ROUNDING · mean(y²)`` are at the rounding level of the targets.
ROUNDING = 1e-26


@dataclass
class SearchResult:
    """What a search found.

    ``results``: every finished start (:class:`~hmoe_estim.solvers.SolveResult`), round after
    round; ``best``: the index of the lowest objective; ``n_passes``: passes over the data of
    the whole search (abandoned race candidates included, in units of full passes);
    ``rounds``: rounds run; ``move_rounds``: rounds that improved, per move family
    (``{"restart": r, "local": l}``); ``stop``: why the search stopped (``"agreement"`` of
    rounds, ``"starts"`` of the first round's starts, ``"rounds"``, or ``"budget"``: the
    time budget left out a round or a move); ``dropped``: reason → number of candidates or
    moves left out because they gave non-finite values;
    ``schedule``: the resolved settings; ``rounds_agreeing``: rounds whose best start reached
    the best objective; ``starts_agreeing``: finished starts that did (both within
    ``σ̂²/n`` in residuals, or at the rounding level of a noiseless fit); ``cost``: where the
    work went, ``{phase: {"passes": p, "seconds": s}}``
    with phases ``"race"`` (the candidates on the race's samples), ``"converge"`` (the kept
    starts on all the data) and one per move class (its proposals, races and convergence);
    passes are in passes over the full data and add up to ``n_passes``. (The signed search is
    no phase: it widens the box the same starts run in.)
    """

    results: list
    n_passes: float
    rounds: int
    move_rounds: dict
    stop: str
    schedule: object
    dropped: dict = field(default_factory=dict)
    rounds_agreeing: int = 0
    starts_agreeing: int = 0
    cost: dict = field(default_factory=dict)

    @property
    def best(self):
        objs = np.array([r.objective for r in self.results])
        return int(np.argmin(objs))

    @property
    def confirmed(self):
        """Whether the search confirmed its best objective: ``False`` when it ran its last
        round before ``agree`` rounds reached that objective (a one-round schedule claims
        no confirmation; a budget-stopped search has its own notice)."""
        return not (self.stop == "rounds" and self.rounds > 1
                    and self.rounds_agreeing < self.schedule.agree)

    def notices(self, max_seconds=None):
        """What the estimators tell their user as a ``ConvergenceWarning``: a search cut by
        its time budget (``max_seconds``), or rounds that ran out unconfirmed (the best
        start may be a local optimum: found once in ``rounds`` independent races)."""
        if self.stop == "budget":
            return [f"The search stopped on its time budget (max_seconds={max_seconds}) "
                    f"after {self.rounds} round(s); it kept its best start, which "
                    f"{self.starts_agreeing} start(s) reached. Raise max_seconds for a search "
                    "that runs its rounds to the end."]
        if not self.confirmed:
            return [f"The search's best objective was reached by {self.rounds_agreeing} of "
                    f"its {self.rounds} rounds (independent races from fresh candidates; "
                    f"it stops when {self.schedule.agree} agree within 1 sigma^2/n): the fit "
                    "may be a local optimum. Search longer (solver=Search(rounds="
                    f"{2 * self.rounds})) or refit with other random_state values and keep "
                    "the lowest objective_."]
        return []


def _check_auto(value, name, minimum):
    if isinstance(value, str) and value == "auto":
        return
    try:
        check_count(value, name, minimum)
    except ValueError:
        raise ValueError(f"{name} must be 'auto' or an integer >= {minimum}; got "
                         f"{value!r}.") from None


class Search(BaseEstimator):
    """Racing multi-start search with moves and rounds (see the module docstring).

    Parameters
    ----------
    local : {"lm", "lbfgs"} or LocalSolver, default="lm"
        The local solver of every start: :class:`LevenbergMarquardt` (``"lm"``) or
        :class:`LBFGSB` (``"lbfgs"``), with its own knobs (``max_iter``, ``tol``).
    n_starts : int, default=4
        Starts run to convergence per round (the best of the race).
    n_candidates : int or "auto", default="auto"
        Random starts raced per round; ``>= n_starts`` (``= n_starts``: no race).
    race_iter : int or "auto", default="auto"
        Iterations of the race (the first half for every candidate, the second for the best
        quarter).
    race_samples : int or "auto", default="auto"
        Samples of the race (evenly spaced; all of them when there are fewer).
    rounds : int or "auto", default="auto"
        Most rounds of the search (``"auto"``: 12; one MHA or G5 head stops after the first
        round when most of its starts agree; one value/SDPA head with ``N = 2`` and no
        tanh: 1).
    agree : int or "auto", default="auto"
        Rounds (independent races) whose best start must reach the best objective (within
        ``1 · σ̂²/n``) for the rounds to stop.
    moves : "auto" or list of Move, default="auto"
        Moves of the best fit (:class:`HeadRestarts`, :class:`ExpertReassignment`,
        :class:`SoftModes`, or your own :class:`Move`); ``[]``: none.
    signed : bool or "auto", default="auto"
        Search over signed weights where the model is sign-symmetric.
    max_seconds : float or None, default=None
        A time budget: once spent, the search runs no further round or move and keeps its
        best start (the fit says so). ``None``: no budget (the result is then reproducible
        bit for bit).

    The ``"auto"`` values depend on the model and the local solver; the table is in
    :func:`hmoe_estim.solvers._schedule.resolve` and on the documentation's solver page.
    """

    def __init__(self, local="lm", n_starts=N_STARTS, n_candidates="auto", race_iter="auto",
                 race_samples="auto", rounds="auto", agree="auto", moves="auto",
                 signed="auto", max_seconds=None):
        self.local = local
        self.n_starts = n_starts
        self.n_candidates = n_candidates
        self.race_iter = race_iter
        self.race_samples = race_samples
        self.rounds = rounds
        self.agree = agree
        self.moves = moves
        self.signed = signed
        self.max_seconds = max_seconds

    # -- validation ----------------------------------------------------------------------
    def local_solver(self):
        """The local solver object (``local`` resolved and validated)."""
        return make_local_solver(self.local, "local").validate()

    def validate(self):
        """Raise a ``ValueError`` naming any knob out of its range; return ``self``."""
        self.local_solver()
        check_count(self.n_starts, "n_starts", 1)
        _check_auto(self.n_candidates, "n_candidates", 1)
        if not isinstance(self.n_candidates, str) and self.n_candidates < self.n_starts:
            raise ValueError(
                f"n_candidates={self.n_candidates} is smaller than n_starts={self.n_starts}: "
                "the race keeps n_starts of the candidates. Raise n_candidates or lower "
                "n_starts.")
        _check_auto(self.race_iter, "race_iter", 1)
        _check_auto(self.race_samples, "race_samples", 16)
        _check_auto(self.rounds, "rounds", 1)
        _check_auto(self.agree, "agree", 1)
        if not (isinstance(self.signed, str) and self.signed == "auto") \
                and not isinstance(self.signed, (bool, np.bool_)):
            raise ValueError(f"signed must be 'auto', True or False; got {self.signed!r}.")
        if not (isinstance(self.moves, str) and self.moves == "auto"):
            if isinstance(self.moves, (str, Move)) or not hasattr(self.moves, "__iter__"):
                raise ValueError("moves must be 'auto' or a list of Move objects "
                                 f"(HeadRestarts, ExpertReassignment, SoftModes); got "
                                 f"{self.moves!r}.")
            for m in self.moves:
                if not isinstance(m, Move):
                    raise ValueError(f"moves must hold Move objects; got {m!r}.")
                m.validate()
        if self.max_seconds is not None:
            check_positive(self.max_seconds, "max_seconds")
        return self

    def schedule(self, problem):
        """The resolved settings of this search on ``problem``."""
        return resolve(self, problem, self.local_solver())

    # -- the search ----------------------------------------------------------------------
    def run(self, problem, draw, starts=(), *, n_jobs=None, verbose=0):
        """Search ``problem``; returns a :class:`SearchResult`.

        ``draw()`` returns a random packed start (inside the box); ``starts``: given first
        starts (a ``init`` of the estimator), the rest are drawn.
        """
        self.validate()
        local = self.local_solver()
        sched = resolve(self, problem, local)
        run = _Run(self, sched, local, problem, draw, n_jobs, verbose)
        return run.search(list(starts))


class _Run:
    """The state of one search: the problem, the schedule, counters and the clock."""

    def __init__(self, search, sched, local, problem, draw, n_jobs, verbose):
        self.sched, self.local, self.draw = sched, local, draw
        self.problem = problem.signed() if sched.signed else problem
        self.n_jobs, self.verbose = n_jobs, verbose
        self.max_seconds = search.max_seconds
        self.t0 = time.perf_counter()
        self.passes = 0.0
        self.dropped = {}
        # σ̂²/n counts residuals (a layer has several per sample); below the rounding level
        # of the targets (a noiseless fit) objectives agree whatever their ratio
        self.n_res = int(getattr(self.problem, "n_residuals", self.problem.n_samples))
        y = np.asarray(self.problem.y)
        self.floor = ROUNDING * float(np.mean(y * y)) if y.size else 0.0
        self.cut = False  # the budget left out a round or a move
        self.round = 0
        self.phase = None  # a move's class name while it runs (its work is booked to it)
        self.cost = {}

    def book(self, phase, passes, seconds):
        """Add ``passes`` and ``seconds`` to ``phase`` (a move's work to the move)."""
        c = self.cost.setdefault(self.phase or phase, {"passes": 0.0, "seconds": 0.0})
        c["passes"] += passes
        c["seconds"] += seconds
        self.passes += passes

    def over_budget(self):
        """Whether the time budget is spent (noted: the search then says it was cut)."""
        over = self.max_seconds is not None and \
            time.perf_counter() - self.t0 > float(self.max_seconds)
        self.cut = self.cut or over
        return over

    def drop(self, reason, count=1):
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    # -- race ----------------------------------------------------------------------------
    def race(self, starts, n_keep):
        """Race ``starts`` and run the ``n_keep`` best to convergence; returns their results
        (folded back to ``ω >= 0`` when signed). Passes are added to ``self.passes``."""
        with single_thread_blas():
            results = self._race(starts, n_keep)
        if self.sched.signed:
            for r in results:
                r.theta = self.problem.fold(r.theta)
        return results

    def _race(self, starts, n_keep):
        s, local, problem = self.sched, self.local, self.problem
        kw = dict(n_jobs=self.n_jobs, verbose=self.verbose)
        n_keep = min(n_keep, len(starts))
        race_iter = s.race_iter
        t0 = time.perf_counter()
        if not (len(starts) > n_keep and race_iter > 0):
            results = local.solve(problem, starts, **kw)
            self.book("converge", sum(r.n_passes for r in results), time.perf_counter() - t0)
            return results
        # each round races on its own samples, so that rounds are independent draws
        sub = problem.subsample(s.race_samples, part=self.round)
        # successive halving: every candidate runs r1 iterations, the best 1/race_fraction
        # of them the rest (one round when that would keep too few); the first half on
        # race_samples_first samples, the second on race_samples
        r1 = race_iter // 2
        halving = r1 > 0 and len(starts) > s.race_fraction * n_keep
        sub1 = problem.subsample(s.race_samples_first, part=self.round) if halving else sub
        first = list(local.solve(sub1, starts, max_iter=r1 if halving else race_iter, **kw))
        n_full = max(problem.n_samples, 1)
        race_passes = sum(r.n_passes for r in first) * sub1.n_samples / n_full
        objs = np.array([r.objective for r in first])
        n_bad = int(np.sum(~np.isfinite(objs)))
        if n_bad:
            self.drop("race candidate not finite", n_bad)
        if halving:
            mid = np.argsort(objs, kind="stable")[:-(-len(starts) // s.race_fraction)]
            cont = local.resume(sub, [first[j] for j in mid], max_iter=race_iter - r1,
                                keep_counts=False, **kw)
            for j, r in zip(mid, cont):
                first[j] = r
            race_passes += sum(r.n_passes for r in cont) * sub.n_samples / n_full
            objs = np.full(len(first), np.inf)  # the others are out of the race
            objs[mid] = [r.objective for r in cont]
        kept = [int(j) for j in np.argsort(objs, kind="stable")[:n_keep]]
        t1 = time.perf_counter()
        self.book("race", race_passes, t1 - t0)  # in passes over the full data
        results = local.resume(problem, [first[j] for j in kept],
                               max_iter=max(1, local.max_iter - race_iter), keep_counts=False,
                               **kw)
        self.book("converge", sum(r.n_passes for r in results), time.perf_counter() - t1)
        return results

    # -- moves ---------------------------------------------------------------------------
    def improve(self, best, move):
        """Rounds of ``race(move.propose(best))`` while they lower the objective by more
        than ``1 · σ̂²/n`` (at most ``move_rounds``); returns ``(best, rounds_improved)``."""
        self.phase = type(move).__name__  # the move's work is booked to it
        try:
            return self._improve(best, move)
        finally:
            self.phase = None

    def _improve(self, best, move):
        n = self.n_res
        rounds = 0
        for _ in range(self.sched.move_rounds):
            if self.over_budget():
                break
            t0 = time.perf_counter()
            try:
                cands = move.propose(self.problem, best.theta, self.draw)
            except (FloatingPointError, np.linalg.LinAlgError) as exc:
                self.drop(f"{type(move).__name__}: {exc}")
                break
            finally:
                self.book("propose", 0.0, time.perf_counter() - t0)
            finite = [c for c in cands if np.all(np.isfinite(c))]
            if len(finite) < len(cands):
                self.drop(f"{type(move).__name__}: candidate not finite",
                          len(cands) - len(finite))
            if not finite:
                break
            results = self.race(finite, 2)
            cand = min(results, key=lambda r: r.objective)
            if not cand.objective < best.objective - max(best.objective, 0.0) / max(n, 1):
                break
            best = cand
            rounds += 1
        return best, rounds

    def improve_best(self, best):
        """The move families in turn — restarts, then local moves — while they improve:
        after the first, the search stops at a family that does not improve; one family
        runs once. Returns ``(best, {family: rounds_improved})``."""
        families = [[m for m in self.sched.moves if m.kind == kind]
                    for kind in ("restart", "local")]
        kinds = [k for k, f in zip(("restart", "local"), families) if f]
        families = [f for f in families if f]
        improved = {"restart": 0, "local": 0}
        i, first = 0, True
        while families and not self.over_budget():
            gained = 0
            for move in families[i]:
                best, r = self.improve(best, move)
                gained += r
            improved[kinds[i]] += gained
            if len(families) == 1 or (not first and not gained):
                break
            first = False
            i = (i + 1) % len(families)
        return best, improved

    # -- rounds --------------------------------------------------------------------------
    def search(self, starts):
        s, draw = self.sched, self.draw
        starts = starts[:s.n_candidates]
        while len(starts) < s.n_candidates:
            starts.append(draw())
        results, improved, stop = [], {"restart": 0, "local": 0}, "rounds"
        round_best = []  # the best objective of each round (independent races)
        r = 0
        for r in range(s.rounds):
            self.round = r
            if r > 0:  # a fresh search: new candidates, raced, then the moves
                starts = [draw() for _ in range(s.n_candidates)]
            found = list(self.race(starts, s.n_starts))
            objs = np.array([f.objective for f in found])
            if s.moves and np.isfinite(objs).any():
                ib = int(np.argmin(objs))
                found[ib], gained = self.improve_best(found[ib])
                for k in gained:
                    improved[k] += gained[k]
            results += found
            round_best.append(min(f.objective for f in found))
            agreeing = count_agreeing(round_best, self.n_res, AGREE_TOL, self.floor)
            if self.verbose:
                label = LAYER_GATE_LABELS.get(self.problem.gate, self.problem.gate)
                print(f"[{label}] search round {r + 1} of at most {s.rounds}: best objective "
                      f"{min(round_best):.6g}, reached by {agreeing} round(s) "
                      f"({time.perf_counter() - self.t0:.1f} s)", flush=True)
            if agreeing >= s.agree and s.rounds > 1:
                stop = "agreement"
                break
            if r == 0 and s.first_round_agree and count_agreeing(
                    [f.objective for f in found], self.n_res, AGREE_TOL,
                    self.floor) >= s.first_round_agree:
                stop = "starts"
                break
            if r + 1 < s.rounds and self.over_budget():
                break
        if self.cut:
            stop = "budget"
        return SearchResult(results=results, n_passes=self.passes, rounds=r + 1,
                            move_rounds=improved, stop=stop, schedule=s, dropped=self.dropped,
                            rounds_agreeing=count_agreeing(round_best, self.n_res, AGREE_TOL,
                                                           self.floor),
                            starts_agreeing=count_agreeing(
                                [x.objective for x in results], self.n_res, AGREE_TOL,
                                self.floor),
                            cost=self.cost)


def make_search(solver):
    """A :class:`Search` from the estimators' ``solver``: a name, a local solver (the default
    search around it) or a search; a ``ValueError`` naming the choices otherwise."""
    if isinstance(solver, Search):
        return solver
    if isinstance(solver, LocalSolver) or (isinstance(solver, str) and solver in SOLVERS):
        return Search(local=solver)
    make_local_solver(solver)  # raises the error that lists the choices
    raise AssertionError  # pragma: no cover
