"""The solver objects (:mod:`hmoe_estim.solvers`): :class:`Search` and its knobs inside the
estimator (grid search, clone, pickle), the validation of every knob, the time budget, moves
that fail, the status table of :class:`SolveResult`, and the local solvers' life cycle."""

import inspect
import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV

from hmoe_estim import (
    G1Regressor,
    HMoERegressor,
    MHARegressor,
    make_hmoe_regression,
)
from hmoe_estim.model import n_params, pack
from hmoe_estim.solvers import (
    LBFGSB,
    MESSAGES,
    ExpertReassignment,
    HeadRestarts,
    LevenbergMarquardt,
    Move,
    Search,
    SoftModes,
    SolveResult,
    levenberg_marquardt,
)
from hmoe_estim.solvers._result import message

from .problems import make_draw, make_problem


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


@pytest.fixture(scope="module")
def tiny():
    """A small one-head MHA data set: fits in milliseconds."""
    return make_hmoe_regression(80, n_features=2, n_experts=1, gate="none", noise=0.05,
                                random_state=0)


@pytest.fixture(scope="module")
def two_heads():
    """A small two-head value-gate data set (the "auto" search runs head restarts)."""
    return make_hmoe_regression(150, n_features=2, n_heads=2, n_experts=1, gate="value",
                                noise=0.05, random_state=1)


def _plain(params):
    """``get_params(deep=True)`` without the estimator objects (compared by their own
    parameters, which are in the dict too); lists of estimators by type and parameters."""
    out = {}
    for k, v in params.items():
        if isinstance(v, BaseEstimator):
            out[k] = type(v).__name__
        elif isinstance(v, list):
            out[k] = [(type(m).__name__, m.get_params()) if isinstance(m, BaseEstimator) else m
                      for m in v]
        else:
            out[k] = v
    return out


# -- the estimator and scikit-learn ----------------------------------------------------------

def _searched():
    return HMoERegressor(n_experts=1, n_starts=2, random_state=0,
                         solver=Search(local=LevenbergMarquardt(max_iter=50), n_candidates=16))


def test_grid_search_over_the_search_knobs(tiny):
    X, y = tiny
    grid = GridSearchCV(_searched(), {"solver__n_candidates": [2, 4]}, cv=2)
    _fit(grid, X, y)
    assert grid.best_params_["solver__n_candidates"] in (2, 4)
    best = grid.best_estimator_
    assert best.schedule_["n_candidates"] == grid.best_params_["solver__n_candidates"]
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))


def test_grid_search_over_the_local_solver_knobs(tiny):
    X, y = tiny
    grid = GridSearchCV(_searched(), {"solver__local__max_iter": [1, 50]}, cv=2)
    _fit(grid, X, y)
    best = grid.best_estimator_
    max_iter = grid.best_params_["solver__local__max_iter"]
    assert best.solver.local.max_iter == max_iter
    # a raced start runs the race's iterations, then at least one on all the data
    assert best.start_n_iter_.max() <= max(max_iter, best.schedule_["race_iter"] + 1)
    assert [p["solver__local__max_iter"] for p in grid.cv_results_["params"]] == [1, 50]
    assert np.all(np.isfinite(grid.cv_results_["mean_test_score"]))


def test_set_params_reaches_the_nested_knobs():
    est = _searched()
    est.set_params(solver__n_candidates=8, solver__local__tol=1e-6, solver__rounds=2)
    assert (est.solver.n_candidates, est.solver.local.tol, est.solver.rounds) == (8, 1e-6, 2)
    keys = est.get_params(deep=True)
    assert {"solver__n_candidates", "solver__local__max_iter", "solver__moves",
            "solver__max_seconds"} <= set(keys)


def test_clone_copies_the_solver_objects():
    est = HMoERegressor(n_starts=2, solver=Search(local=LevenbergMarquardt(max_iter=50),
                                                  n_candidates=16,
                                                  moves=[HeadRestarts(per_head=3)]))
    c = clone(est)
    assert _plain(c.get_params(deep=True)) == _plain(est.get_params(deep=True))
    assert c.solver is not est.solver and c.solver.local is not est.solver.local
    assert c.solver.moves is not est.solver.moves
    assert c.solver.moves[0] is not est.solver.moves[0]
    assert c.solver.moves[0].per_head == 3


def test_pickle_round_trip_predicts_the_same(tiny):
    X, y = tiny
    est = _fit(_searched(), X, y)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    assert isinstance(back.solver, Search) and back.solver.n_candidates == 16
    assert back.solver.local.max_iter == 50 and back.schedule_ == est.schedule_


def test_the_estimators_have_at_most_18_parameters():
    for cls in (HMoERegressor, MHARegressor, G1Regressor):
        names = list(inspect.signature(cls.__init__).parameters)[1:]
        assert len(names) <= 18, names
        assert set(names) == set(cls().get_params(deep=False))
    assert len(HMoERegressor().get_params(deep=False)) == 18
    removed = {"n_candidates", "race_iter", "head_restarts", "reassign_experts", "search_rounds"}
    assert not removed & set(HMoERegressor().get_params(deep=False))


def test_the_estimator_knobs_override_the_solver_s_without_changing_it(tiny):
    X, y = tiny
    # (two candidates for two starts: no race, so max_iter caps every start; one round)
    search = Search(local=LevenbergMarquardt(max_iter=50, tol=1e-6), n_starts=1,
                    n_candidates=2, rounds=1)
    est = _fit(HMoERegressor(n_experts=1, solver=search, n_starts=2, max_iter=3,
                             random_state=0), X, y)
    assert est.schedule_["n_starts"] == 2 and est.start_objectives_.shape == (2,)
    assert est.start_n_iter_.max() <= 3
    # the solver object given is not modified (the estimator works on a copy)
    assert (search.n_starts, search.local.max_iter, search.local.tol) == (1, 50, 1e-6)
    assert est.solver is search
    # None: the solver's own (4 starts, 1000 iterations, tol 1e-9)
    default = HMoERegressor(n_experts=1, n_starts=None, max_iter=None, tol=None)
    s = default._search()
    assert (s.n_starts, s.local_solver().max_iter, s.local_solver().tol) == (4, 1000, 1e-9)


@pytest.mark.parametrize("solver,name", [("lm", "lm"), (LevenbergMarquardt(max_iter=5), "lm"),
                                         ("lbfgs", "lbfgs"), (LBFGSB(max_iter=5), "lbfgs"),
                                         (Search(local="lbfgs", n_candidates=2), "lbfgs")])
def test_every_form_of_solver_fits(tiny, solver, name):
    X, y = tiny
    est = _fit(HMoERegressor(n_experts=1, n_starts=2, solver=solver, random_state=0), X, y)
    assert est.solver_ == name and np.isfinite(est.objective_)


# -- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("params,match", [
    (dict(solver="newton"), r"Unknown solver 'newton'.*'lm'.*'lbfgs'"),
    (dict(solver=object()), r"Unknown solver <object .*'lm'.*'lbfgs'.*Search"),
    (dict(solver=GridSearchCV), r"Unknown solver <class .*GridSearchCV'>.*'lm'"),
    (dict(solver=Search(local="newton")), r"Unknown local 'newton'.*'lm'.*'lbfgs'"),
    (dict(solver=Search(local=Search())), r"Unknown local Search"),
    (dict(solver=Search(n_candidates=2, n_starts=4)),
     r"n_candidates=2 is smaller than n_starts=4"),
    (dict(solver=Search(n_candidates=0)), r"n_candidates must be 'auto' or an integer >= 1"),
    (dict(solver=Search(race_iter=-1)), r"race_iter must be 'auto' or an integer >= 1"),
    (dict(solver=Search(race_samples=8)), r"race_samples must be 'auto' or an integer >= 16"),
    (dict(solver=Search(rounds=0)), r"rounds must be 'auto' or an integer >= 1"),
    (dict(solver=Search(agree=0)), r"agree must be 'auto' or an integer >= 1"),
    (dict(solver=Search(signed="yes")), r"signed must be 'auto', True or False"),
    (dict(solver=Search(moves=["x"])), r"moves must hold Move objects; got 'x'"),
    (dict(solver=Search(moves="x")), r"moves must be 'auto' or a list of Move objects"),
    (dict(solver=Search(max_seconds=0)), r"max_seconds must be a finite number > 0"),
    (dict(solver=Search(max_seconds=np.inf)), r"max_seconds must be a finite number > 0"),
    (dict(solver=LevenbergMarquardt(max_iter=0)), r"max_iter must be an integer >= 1"),
    (dict(solver=LevenbergMarquardt(tol=-1.0)), r"tol must be a finite number > 0"),
    (dict(solver=LevenbergMarquardt(stat_tol=0)), r"stat_tol must be a finite number > 0"),
    (dict(solver=LBFGSB(max_iter=1.5)), r"max_iter must be an integer >= 1"),
    (dict(solver=Search(moves=[SoftModes(steps=[])])),
     r"steps must be a non-empty sequence of finite numbers > 0"),
    (dict(solver=Search(moves=[SoftModes(n_modes=0)])), r"n_modes must be an integer >= 1"),
    (dict(solver=Search(moves=[HeadRestarts(per_head=0)])),
     r"per_head must be an integer >= 1"),
    (dict(solver=Search(moves=[ExpertReassignment(all_permutations_up_to=0)])),
     r"all_permutations_up_to must be an integer >= 1"),
    (dict(n_starts=0), r"n_starts must be an integer >= 1"),
    (dict(max_iter=0), r"max_iter must be an integer >= 1"),
    (dict(tol=0.0), r"tol must be a finite number > 0"),
])
def test_bad_knobs_raise_a_value_error_naming_them(params, match):
    X, y = make_hmoe_regression(30, random_state=0)
    with pytest.raises(ValueError, match=match):
        HMoERegressor(**params).fit(X, y)


@pytest.mark.parametrize("obj,match", [
    (Search(n_candidates=2, n_starts=4), "n_candidates=2 is smaller than n_starts=4"),
    (Search(race_iter=-1), "race_iter must be 'auto' or an integer >= 1"),
    (Search(rounds=0), "rounds must be 'auto' or an integer >= 1"),
    (Search(moves=["x"]), "moves must hold Move objects"),
    (Search(max_seconds=0), "max_seconds must be a finite number > 0"),
    (LevenbergMarquardt(max_iter=0), "max_iter must be an integer >= 1"),
    (SoftModes(steps=[]), "steps must be a non-empty sequence"),
    (HeadRestarts(per_head=0), "per_head must be an integer >= 1"),
])
def test_the_objects_validate_themselves(obj, match):
    with pytest.raises(ValueError, match=match):
        obj.validate()


def test_valid_objects_validate_to_themselves():
    for obj in (Search(), Search(n_candidates=4, race_iter=2, moves=[], max_seconds=2.5),
                LevenbergMarquardt(), LBFGSB(), HeadRestarts(), ExpertReassignment(),
                SoftModes(steps=(1.0,))):
        assert obj.validate() is obj


# -- L-BFGS-B, the time budget, failing moves ------------------------------------------------

def test_lbfgs_runs_one_round_without_race(two_heads):
    X, y = two_heads
    est = _fit(HMoERegressor(n_heads=2, n_experts=1, gate="value", solver="lbfgs", n_starts=3,
                             max_iter=50, random_state=0), X, y)
    assert est.solver_ == "lbfgs" and est.search_rounds_ == 1
    assert est.schedule_["n_candidates"] == est.schedule_["n_starts"] == 3
    assert est.schedule_["moves"] == [] and est.schedule_["signed"] is False
    assert est.start_objectives_.shape == (3,)
    assert est.head_restart_rounds_ == est.reassign_rounds_ == 0


def test_a_spent_time_budget_stops_the_search_and_keeps_the_best_start(two_heads):
    X, y = two_heads
    # two heads: twelve rounds and head restarts were planned; the budget stops them
    search = Search(n_candidates=4, max_seconds=1e-9, agree=5)
    est = HMoERegressor(n_heads=2, n_experts=1, gate="value", n_starts=2, solver=search,
                        random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    assert est.search_stop_ == "budget" and est.search_rounds_ == 1
    assert est.schedule_["rounds"] > 1 and est.schedule_["moves"] == ["HeadRestarts"]
    assert est.head_restart_rounds_ == 0
    budget = [w for w in caught if issubclass(w.category, ConvergenceWarning)
              and "time budget" in str(w.message)]
    assert len(budget) == 1 and "max_seconds=1e-09" in str(budget[0].message)
    assert np.isfinite(est.objective_) and np.all(np.isfinite(est.theta_))
    assert est.start_objectives_.shape == (2,)
    assert np.isfinite(est.start_objectives_[est.best_start_])


def test_without_a_budget_the_search_does_not_stop_on_it(two_heads):
    X, y = two_heads
    est = _fit(HMoERegressor(n_heads=2, n_experts=1, gate="value", n_starts=2, random_state=0,
                             solver=Search(n_candidates=4, rounds=2, moves=[])), X, y)
    assert est.search_stop_ in ("agreement", "rounds")


def _convergence_warnings(est, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]


def test_rounds_that_run_out_unconfirmed_warn_and_keep_the_best(two_heads):
    X, y = two_heads
    # agree=3 with two rounds: the rounds cannot confirm the optimum, whatever they find
    est = HMoERegressor(n_heads=2, n_experts=1, gate="value", n_starts=2, random_state=0,
                        solver=Search(n_candidates=4, race_iter=2, rounds=2, agree=3,
                                      moves=[]))
    caught = [m for m in _convergence_warnings(est, X, y) if "local optimum" in m]
    assert est.search_stop_ == "rounds" and est.search_rounds_ == 2
    assert len(caught) == 1
    assert f"reached by {est.n_rounds_agreeing_} of its 2 rounds" in caught[0]
    assert "Search(rounds=4)" in caught[0] and "random_state" in caught[0]
    assert est.objective_ == est.start_objectives_.min()


def test_verbose_prints_each_round_of_the_cap_with_its_seconds_and_each_start(two_heads, capsys):
    # a long multi-head fit shows its progress: round r of at most R, the best objective so
    # far, how many rounds reached it, the seconds spent; then one line per kept start
    X, y = two_heads
    est = HMoERegressor(n_heads=2, n_experts=1, gate="value", n_starts=2, random_state=0,
                        verbose=1, solver=Search(n_candidates=4, race_iter=2, rounds=2, agree=3,
                                                 moves=[]))
    _fit(est, X, y)
    lines = capsys.readouterr().out.splitlines()
    rounds = [ln for ln in lines if "search round" in ln]
    assert [ln.split("search round ")[1].split(":")[0] for ln in rounds] == \
        ["1 of at most 2", "2 of at most 2"], lines
    assert all(ln.rstrip().endswith(" s)") and "reached by" in ln for ln in rounds), rounds
    assert sum("start" in ln and "objective=" in ln for ln in lines) == len(est.start_objectives_)


def test_confirmed_or_single_round_searches_do_not_warn_about_rounds(two_heads):
    X, y = two_heads
    one_round = HMoERegressor(n_heads=2, n_experts=1, gate="value", n_starts=2,
                              random_state=0,
                              solver=Search(n_candidates=4, race_iter=2, rounds=1, moves=[]))
    assert not [m for m in _convergence_warnings(one_round, X, y) if "local optimum" in m]
    assert one_round.search_stop_ == "rounds" and one_round.search_rounds_ == 1
    agreed = HMoERegressor(n_heads=2, n_experts=1, gate="value", n_starts=2, random_state=0,
                           solver=Search(n_candidates=4, race_iter=2, rounds=3, agree=1,
                                         moves=[]))
    assert not [m for m in _convergence_warnings(agreed, X, y) if "local optimum" in m]
    assert agreed.search_stop_ == "agreement" and agreed.search_rounds_ == 1


@pytest.mark.parametrize("stop, rounds, agreeing, agree, confirmed", [
    ("rounds", 6, 1, 2, False),
    ("rounds", 6, 2, 2, True),    # the last round brought the second agreeing one
    ("rounds", 1, 1, 2, True),    # one round claims no confirmation
    ("agreement", 2, 2, 2, True),
    ("starts", 1, 1, 2, True),
    ("budget", 3, 1, 2, True),    # the budget has its own notice
])
def test_search_result_confirmed(stop, rounds, agreeing, agree, confirmed):
    from hmoe_estim.solvers import SearchResult
    from hmoe_estim.solvers._schedule import Schedule

    sched = Schedule(n_starts=4, n_candidates=128, race_iter=30, race_samples=4096,
                     race_samples_first=1024, rounds=6, agree=agree, signed=False)
    found = SearchResult(results=[], n_passes=0.0, rounds=rounds, move_rounds={},
                         stop=stop, schedule=sched, rounds_agreeing=agreeing)
    assert found.confirmed is confirmed
    notices = found.notices(max_seconds=5.0)
    if stop == "budget":
        assert len(notices) == 1 and "max_seconds=5.0" in notices[0]
    else:
        assert (len(notices) == 1) is (not confirmed)


class NonFiniteMove(Move):
    """Proposes the incumbent with a NaN and with an inf entry (and, with ``finite``, the
    incumbent itself too)."""

    def __init__(self, finite=False):
        self.finite = finite

    def propose(self, problem, theta, draw):
        nan, inf = theta.copy(), theta.copy()
        nan[0], inf[-1] = np.nan, np.inf
        return [nan, inf] + ([theta.copy()] if self.finite else [])


class RaisingMove(Move):
    """A move whose proposal fails in floating point."""

    def propose(self, problem, theta, draw):
        raise FloatingPointError("the Hessian overflowed")


@pytest.fixture(scope="module")
def no_moves(tiny):
    X, y = tiny
    return _fit(HMoERegressor(n_experts=1, n_starts=2, random_state=0,
                              solver=Search(n_candidates=4, moves=[])), X, y)


def _with_moves(tiny, moves):
    X, y = tiny
    return _fit(HMoERegressor(n_experts=1, n_starts=2, random_state=0,
                              solver=Search(n_candidates=4, moves=moves)), X, y)


@pytest.mark.parametrize("move,reason,count", [
    (NonFiniteMove(), "NonFiniteMove: candidate not finite", 2),
    (RaisingMove(), "RaisingMove: the Hessian overflowed", 1),
])
def test_a_failing_move_is_dropped_and_recorded(tiny, no_moves, move, reason, count):
    est = _with_moves(tiny, [move])
    assert est.dropped_ == {reason: count}
    assert no_moves.dropped_ == {}
    # nothing else changed: the same fit, the same work
    np.testing.assert_array_equal(est.theta_, no_moves.theta_)
    np.testing.assert_array_equal(est.start_objectives_, no_moves.start_objectives_)
    assert est.n_kernel_passes_ == no_moves.n_kernel_passes_
    assert est.reassign_rounds_ == 0


def test_the_finite_candidates_of_a_move_still_run(tiny, no_moves):
    est = _with_moves(tiny, [NonFiniteMove(finite=True)])
    assert est.dropped_ == {"NonFiniteMove: candidate not finite": 2}
    assert est.n_kernel_passes_ > no_moves.n_kernel_passes_  # the incumbent was re-run
    assert est.objective_ <= no_moves.objective_ and np.all(np.isfinite(est.theta_))


# -- moves -----------------------------------------------------------------------------------

class CountingMove(Move):
    """Counts its calls (on the class: the estimator works on a copy of its moves) and
    proposes the incumbent itself (no improvement: one round per call)."""

    calls = []

    def __init__(self, kind="local"):
        self.kind = kind

    def propose(self, problem, theta, draw):
        type(self).calls.append((self.kind, problem.shape, theta.shape, draw().shape))
        return [theta.copy()]


def test_no_moves_runs_no_move_and_less_work(two_heads):
    X, y = two_heads
    kw = dict(n_heads=2, n_experts=1, gate="value", n_starts=2, random_state=0)
    auto = _fit(HMoERegressor(solver=Search(n_candidates=8, rounds=1), **kw), X, y)
    none = _fit(HMoERegressor(solver=Search(n_candidates=8, rounds=1, moves=[]), **kw), X, y)
    assert auto.schedule_["moves"] == ["HeadRestarts"] and none.schedule_["moves"] == []
    assert none.head_restart_rounds_ == 0 and none.reassign_rounds_ == 0
    assert none.n_kernel_passes_ < auto.n_kernel_passes_
    # the same race: only the best start's result may differ
    np.testing.assert_array_equal(np.delete(auto.start_objectives_, auto.best_start_),
                                  np.delete(none.start_objectives_, auto.best_start_))


def test_a_custom_move_is_called(two_heads):
    X, y = two_heads
    CountingMove.calls = []
    est = _fit(HMoERegressor(n_heads=2, n_experts=1, gate="value", n_starts=2, random_state=0,
                             solver=Search(n_candidates=8, rounds=2, agree=5,
                                           moves=[CountingMove()])), X, y)
    P = n_params(2, 2, 1, 2)
    assert est.schedule_["moves"] == ["CountingMove"] and est.search_rounds_ == 2
    # once per round: it never improves, so its family stops after one round of it
    assert CountingMove.calls == [("local", (2, 2, 1, 2), (P,), (P,))] * 2
    assert est.reassign_rounds_ == est.head_restart_rounds_ == 0


def test_the_move_families_alternate_until_neither_improves(two_heads):
    # a restart move and a local move that never improve: the restarts run, then the local
    # moves (the second family always runs once), then the search stops
    X, y = two_heads
    CountingMove.calls = []
    _fit(HMoERegressor(n_heads=2, n_experts=1, gate="value", n_starts=2, random_state=0,
                       solver=Search(n_candidates=8, rounds=1,
                                     moves=[CountingMove("local"), CountingMove("restart")])),
         X, y)
    assert [kind for kind, *_ in CountingMove.calls] == ["restart", "local"]


def test_a_search_runs_on_a_problem_directly():
    X, y = make_hmoe_regression(200, n_features=2, n_heads=2, n_experts=1, gate="value",
                                noise=0.05, random_state=2)
    problem = make_problem(X, y, (2, 2, 1, 2), "value")
    search = Search(local=LevenbergMarquardt(max_iter=50), n_starts=2, n_candidates=8,
                    rounds=2, agree=5, moves=[HeadRestarts(per_head=2)])
    found = search.run(problem, make_draw(problem, seed=0))
    again = search.run(problem, make_draw(problem, seed=0))
    assert found.rounds == 2 and found.stop == "rounds" and len(found.results) == 4
    assert found.best == int(np.argmin([r.objective for r in found.results]))
    assert set(found.move_rounds) == {"restart", "local"} and found.move_rounds["local"] == 0
    assert found.schedule.n_candidates == 8 and found.dropped == {}
    assert found.n_passes > sum(r.n_passes for r in found.results)  # the race's passes
    for r in found.results:
        assert np.all(r.theta >= problem.lower) and np.all(r.theta <= problem.upper)
    # reproducible: the same draws give the same search
    assert [r.objective for r in found.results] == [r.objective for r in again.results]
    assert found.n_passes == again.n_passes
    # the cost breakdown: race, convergence and the move, adding up to the passes
    assert set(found.cost) == {"race", "converge", "HeadRestarts"}
    assert sum(c["passes"] for c in found.cost.values()) == pytest.approx(found.n_passes)
    assert all(c["seconds"] >= 0 for c in found.cost.values())


# -- the status table ------------------------------------------------------------------------

def _check_status(r):
    assert isinstance(r, SolveResult)
    assert r.status in MESSAGES, r.status
    assert r.converged == (r.status > 0)
    return r.status


def _data(gate="value", noise=0.05, n=300, seed=0):
    X, y, G = make_hmoe_regression(n, n_features=2, gate=gate, noise=noise, random_state=seed,
                                   return_measure=True)
    return X, y, G


def test_the_statuses_of_the_local_solvers_are_in_the_message_table():
    seen = set()
    # Levenberg-Marquardt: converged (decrement), at the iteration cap, at rounding level
    X, y, G = _data()
    problem = make_problem(X, y, G.shape, "value")
    near = np.clip(pack(G) + 0.05, problem.lower, problem.upper)
    draw = make_draw(problem, seed=1)
    lm = LevenbergMarquardt(max_iter=300)
    for r in lm.solve(problem, [near, draw(), draw()]):
        seen.add(_check_status(r))
    capped = lm.solve(problem, [draw()], max_iter=1)[0]
    assert _check_status(capped) == 0 and capped.message == message(
        0, max_iter=1, unit="Jacobian passes")
    X0, y0, G0 = _data(noise=0.0)
    exact = make_problem(X0, y0, G0.shape, "value")
    r = lm.solve(exact, [pack(G0)])[0]
    assert _check_status(r) == 3
    seen |= {0, 3}
    # every parameter held at a bound: a box of one point (not the optimum) holds them all
    point = near.copy()
    r = lm.solve(problem.with_bounds(point, point), [draw()])[0]
    assert _check_status(r) == 4 and r.n_iter == 0
    np.testing.assert_array_equal(r.theta, point)
    seen.add(4)
    # L-BFGS-B: converged, at the iteration cap
    lb = LBFGSB(tol=1e-6)
    for r in lb.solve(problem, [near, draw()]):
        seen.add(_check_status(r))
    capped = lb.solve(problem, [draw()], max_iter=1)[0]
    assert _check_status(capped) == 0
    assert capped.message == message(0, max_iter=1, unit="iterations")
    assert {0, 1, 3, 6} <= seen
    # the messages are those of the table, their fields filled in
    r = levenberg_marquardt(near, problem.XT, problem.y, problem.shape, "value", "sigmoid",
                            problem.lower, problem.upper, max_iter=300)
    assert r.status == 1 and r.message == MESSAGES[1]


def _overflowing():
    shape = (1, 2, 1, 2)
    return make_problem(np.full((2, 10), 1e200), np.zeros(10), shape, "none", transposed=True)


def test_a_start_with_a_non_finite_objective_has_status_minus_one():
    problem = _overflowing()
    r = LevenbergMarquardt().solve(problem, [np.ones(problem.n_params)])[0]
    assert _check_status(r) == -1 and not r.converged
    assert r.objective == np.inf and r.message == MESSAGES[-1]
    assert np.all(np.isfinite(r.theta))
    # the estimator on such data says why it cannot fit
    X = np.full((10, 2), 1e200)
    with pytest.raises(ValueError, match="overflow|non-finite"):
        _fit(HMoERegressor(n_starts=1, solver=Search(n_candidates=1)), X, np.zeros(10))


def test_lbfgs_start_with_a_non_finite_objective_has_status_minus_one():
    problem = _overflowing()
    r = LBFGSB().solve(problem, [np.ones(problem.n_params)])[0]
    assert r.objective == np.inf and r.status == -1


def test_converged_is_the_sign_of_the_status():
    for status in MESSAGES:
        r = SolveResult(theta=np.zeros(1), objective=1.0, n_iter=0, status=status, message="")
        assert r.converged == (status > 0)


# -- the local solvers' life cycle -----------------------------------------------------------

@pytest.mark.parametrize("local", [LevenbergMarquardt(max_iter=50), LBFGSB(max_iter=50)])
@pytest.mark.parametrize("intercept", [False, True])
def test_resume_continues_a_start_and_counts_as_asked(local, intercept):
    X, y, G = _data(gate="sdpa", seed=3)
    problem = make_problem(X, y + 0.5 * intercept, G.shape, "sdpa", fit_intercept=intercept,
                           alpha=1e-4 * intercept)
    draw = make_draw(problem, seed=4)
    first = local.solve(problem, [draw(), draw()], max_iter=2)
    kept = local.resume(problem, first, max_iter=5, keep_counts=True)
    fresh = local.resume(problem, first, max_iter=5, keep_counts=False)
    for a, b, c in zip(first, kept, fresh):
        _check_status(b)
        assert b.theta.shape == (problem.n_params,)
        np.testing.assert_array_equal(b.theta, c.theta)  # the counts only differ
        assert b.objective <= a.objective
        assert b.n_iter == c.n_iter > a.n_iter
        assert b.n_passes == c.n_passes + a.n_passes
    # the local solver's max_iter is the default of solve()
    full = local.solve(problem, [draw()])[0]
    assert full.n_iter <= local.max_iter


def test_rounds_race_on_their_own_samples():
    # round 0 races on the evenly spaced grid; later rounds on a draw of their own, the same
    # draw for the same round (reproducible), so that rounds are independent draws
    X, y = make_hmoe_regression(5000, n_features=2, gate="value", noise=0.05, random_state=0)
    problem = make_problem(X, y, (1, 2, 1, 2), "value")
    grid = problem.subsample(1024)
    np.testing.assert_array_equal(
        grid.y, problem.y[np.linspace(0, 4999, 1024).round().astype(int)])
    one, again, two = (problem.subsample(1024, part=p) for p in (1, 1, 2))
    assert one.n_samples == two.n_samples == 1024
    np.testing.assert_array_equal(one.XT, again.XT)
    assert not np.array_equal(one.y, grid.y) and not np.array_equal(one.y, two.y)
    assert problem.subsample(8000, part=3) is problem  # fewer samples than asked: all


def test_noiseless_rounds_agree_at_the_rounding_level():
    """Noiseless data: the rounds' best objectives sit at the rounding level, where
    ``best / n`` is no unit; they agree, and the search stops on agreement."""
    from hmoe_estim.solvers import count_agreeing

    assert count_agreeing([1e-32, 3e-31], 100) == 1
    assert count_agreeing([1e-32, 3e-31], 100, floor=1e-26) == 2
    X, y = make_hmoe_regression(400, n_features=2, n_experts=1, gate="sdpa", noise=0.0,
                                random_state=3)
    problem = make_problem(X, y, (1, 2, 1, 2), "sdpa")
    search = Search(local=LevenbergMarquardt(max_iter=200), n_starts=2, n_candidates=8,
                    rounds=4, agree=2, moves=[])
    found = search.run(problem, make_draw(problem, seed=0))
    assert min(r.objective for r in found.results) < 1e-20
    assert found.stop == "agreement" and found.rounds == 2 and found.rounds_agreeing == 2
    # the starts that reached the rounding level agree too (no count of 1 beside 2 rounds)
    floor = 1e-26 * float(np.mean(problem.y ** 2))
    at_floor = sum(r.objective <= floor for r in found.results)
    assert found.starts_agreeing >= max(at_floor, found.rounds_agreeing)
