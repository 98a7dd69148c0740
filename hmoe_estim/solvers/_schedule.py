"""Every ``"auto"`` of the search, resolved in one place from one table.

:func:`resolve` turns a :class:`~hmoe_estim.solvers.Search` and a
:class:`~hmoe_estim.solvers.Problem` into a :class:`Schedule`: the numbers the search runs
with. Each rule below has its one-line reason; the measurements behind them are on the
documentation's solver page.
"""

from dataclasses import dataclass, field

from .._names import ODD_ACTIVATIONS
from ._local import LevenbergMarquardt
from ._moves import ExpertReassignment, HeadRestarts, SoftModes

__all__ = ["Schedule", "resolve"]

#: Rounds of each move while it improves (the moves stop earlier after a round without).
MOVE_ROUNDS = 10
#: Independent rounds that must reach the best objective for the rounds to stop.
AGREE_ROUNDS = 2
#: Most rounds of a search whose rounds must agree (each round is a fresh draw of the basin).
MAX_ROUNDS = 12
#: Share of the race's candidates that run its second half (successive halving).
RACE_FRACTION = 4
#: Fewest samples of the race's first half (it runs on a quarter of the race's samples).
FIRST_HALF_SAMPLES = 1024


@dataclass
class Schedule:
    """The resolved settings of one search (see :class:`~hmoe_estim.solvers.Search`)."""

    n_starts: int
    n_candidates: int
    race_iter: int
    race_samples: int
    race_samples_first: int
    rounds: int
    agree: int
    signed: bool
    first_round_agree: int = 0
    moves: list = field(default_factory=list)
    move_rounds: int = MOVE_ROUNDS
    race_fraction: int = RACE_FRACTION

    def to_dict(self):
        d = dict(self.__dict__)
        d["moves"] = [type(m).__name__ for m in self.moves]
        return d


def _auto(value):
    return isinstance(value, str) and value == "auto"


def resolve(search, problem, local):
    """The :class:`Schedule` of ``search`` on ``problem`` with the local solver ``local``.

    The table, for the Levenberg–Marquardt solver (``L-BFGS-B``: no race, one round, no
    moves, unsigned weights — multi-start L-BFGS-B as it always ran):

    ============== ====================================================================
    knob           rule
    ============== ====================================================================
    signed         the model's sign symmetry ``(ω, a) ≡ (−ω, −a)`` (linear gates; tanh):
                   search over signed weights, fold back at the end
    n_candidates   ``32 · n_starts``; MHA: ``16 · n_starts · H`` (its basins are the gate
                   matrices', one set per head)
    race_iter      10; 30 for ``H > 1`` or value/SDPA gates with tanh or
                   ``N >= 3`` (their candidates sort slowly: after 10 steps a wrong basin
                   still looks best, and a head restart that reaches the optimum does not
                   yet)
    race_samples   4096; MHA: 1024 (its candidates have nearly converged after the race);
                   each round races on its own grid of samples
    race_samples   a quarter of ``race_samples``, at least 1024: the first half only sorts
    (first half)   out the hopeless three quarters of the candidates
    rounds         12, until ``agree`` rounds reach the best objective (a round is an
                   independent draw of the basin; where six disagree, later rounds still
                   find deeper optima); one MHA or G5 head: also stop after the first
                   round when a majority of its starts agree (``first_round_agree``,
                   at least 2; 3 of 4): its race's starts disagree when it misses, which
                   it does more often as P grows, and two can share a wrong basin; one
                   value/SDPA head with N = 2 and no tanh: 1 (its race does not miss)
    agree          2 independent rounds (the starts of one race can all fall in one wrong
                   basin: agreement counts between independent races only)
    moves          ``H > 1``: head restarts (32 per head); value/SDPA with tanh and
                   ``H > 1``: also expert reassignment and soft modes
    ============== ====================================================================
    """
    H, N, K, D = problem.shape
    gate, act = problem.gate, problem.activation
    n_starts = int(search.n_starts)
    lm = isinstance(local, LevenbergMarquardt)
    gated = gate in ("value", "sdpa")
    signed_gated = gated and act in ODD_ACTIVATIONS
    several = H > 1
    # one head whose race sorts its candidates in 10 iterations; the others' (several heads,
    # tanh or N >= 3 behind a value/SDPA gate) sort slowly, and their starts can all settle
    # in one wrong basin
    simple = not (several or (gated and (signed_gated or N >= 3)))

    if _auto(search.n_candidates):
        if not lm:
            n_cand = n_starts
        elif gate == "none":
            n_cand = 16 * n_starts * H
        else:
            n_cand = 32 * n_starts
    else:
        n_cand = int(search.n_candidates)
    if _auto(search.race_iter):
        race_iter = 10 if simple else 30
    else:
        race_iter = int(search.race_iter)
    if _auto(search.race_samples):
        race_samples = 1024 if gate == "none" else 4096
    else:
        race_samples = int(search.race_samples)
    race_first = min(race_samples, max(FIRST_HALF_SAMPLES, race_samples // 4))
    first_agree = 0
    if _auto(search.rounds):
        rounds = 1 if not lm or (simple and gated) else MAX_ROUNDS
        if lm and simple and not gated:
            first_agree = max(2, n_starts // 2 + 1)  # a majority: two can share a wrong basin
    else:
        rounds = int(search.rounds)
    if _auto(search.agree):
        agree = AGREE_ROUNDS
    else:
        agree = int(search.agree)
    if _auto(search.signed):
        signed = lm and problem.sign_symmetric
    else:
        signed = bool(search.signed)
    if _auto(search.moves):
        moves = []
        if lm and several:
            moves.append(HeadRestarts(per_head=32))
            if signed_gated:
                moves += [ExpertReassignment(), SoftModes()]
    else:
        moves = list(search.moves)
    return Schedule(n_starts=n_starts, n_candidates=n_cand, race_iter=race_iter,
                    race_samples=race_samples, race_samples_first=race_first, rounds=rounds,
                    agree=agree, signed=signed, moves=moves, first_round_agree=first_agree)
