"""Moves of the search: functions of the incumbent that propose candidates.

A move takes the best fit so far and proposes candidate parameter vectors; the search races
them like random starts and keeps the best when it lowers the objective by more than
``1 · σ̂²/n`` (:class:`~hmoe_estim.solvers.Search`). A move knows nothing of racing, and
nothing of the layout of ``theta`` beyond what the :class:`~hmoe_estim.solvers.Problem`
answers (the blocks of a head, the experts, the Gauss–Newton matrix). ``kind`` says how
the search schedules it: ``"restart"`` moves alternate with the ``"local"`` ones.

- :class:`HeadRestarts` — one whole head redrawn at random, the other heads kept. A
  two-head fit with one head right and the other in a wrong basin of its gate is repaired
  without redrawing the right head, which a fresh start would.
- :class:`ExpertReassignment` — the gates and the set of experts kept, which token an expert
  serves changed. A mixture of experts often stops with a gate region served by another
  region's expert; a gradient method cannot swap them, a move can.
- :class:`SoftModes` — long steps along the softest directions of the scaled Gauss–Newton
  matrix. Two heads can share out almost the same function differently; such a local optimum
  lies in a valley that is nearly flat along directions mixing both heads' experts, and a
  long step along them reaches the next basin.
"""

import itertools

import numpy as np
from sklearn.base import BaseEstimator

from .._validation import check_count
from ..kernels import single_thread_blas

__all__ = ["Move", "HeadRestarts", "ExpertReassignment", "SoftModes"]


class Move(BaseEstimator):
    """Base class of the moves: :meth:`Move.propose` returns candidate parameter vectors."""

    #: ``"restart"`` or ``"local"``: the search alternates the two families.
    kind = "local"

    def validate(self):
        """Raise a ``ValueError`` naming a knob out of its range; return ``self``."""
        return self

    def propose(self, problem, theta, draw):
        """Candidates from the incumbent ``theta`` (``draw()``: a random packed start)."""
        raise NotImplementedError


class HeadRestarts(Move):
    """``per_head`` candidates per head ``h``: the incumbent with head ``h`` — ``ω[h]``,
    ``M[h]``, ``a[h]`` — copied from a fresh random start, every other parameter kept.
    Nothing to propose with one head (a restarted head is a fresh start)."""

    kind = "restart"

    def __init__(self, per_head=32):
        self.per_head = per_head

    def validate(self):
        check_count(self.per_head, "per_head", 1)
        return self

    def propose(self, problem, theta, draw):
        blocks = problem.head_blocks()
        if len(blocks) < 2:
            return []
        cands = []
        for idx in blocks:
            for _ in range(self.per_head):
                t = theta.copy()
                t[idx] = draw()[idx]
                cands.append(t)
        return cands


class ExpertReassignment(Move):
    """The incumbent with its experts reassigned, for every head ``h`` (``a`` of shape
    ``(H, N, K, D)``; ``ω``, ``M`` and an intercept kept):

    - every channel's experts permuted over the tokens, ``a'[h, i] = a[h, π(i)]``;
    - one channel's experts permuted, ``a'[h, i, k] = a[h, π(i), k]`` (``K >= 2``);
    - two channels' experts swapped at one token, ``a'[h, i, k] = a[h, i, l]`` and back
      (``K >= 2``, ``N >= 2``; at every token at once it would be a relabelling).

    ``π`` runs over the permutations of the ``N`` tokens other than the identity (only the
    transpositions when ``N > all_permutations_up_to``). Permuting ``M`` with the experts would
    leave ``f`` unchanged (the softmax gauge); permuting the experts alone moves each one to
    another gate region.
    """

    def __init__(self, all_permutations_up_to=4):
        self.all_permutations_up_to = all_permutations_up_to

    def validate(self):
        check_count(self.all_permutations_up_to, "all_permutations_up_to", 1)
        return self

    def propose(self, problem, theta, draw):
        H, N, K, D = problem.shape
        theta = np.asarray(theta, dtype=np.float64)
        a = problem.experts(theta)
        identity = tuple(range(N))
        if N <= self.all_permutations_up_to:
            perms = [list(p) for p in itertools.permutations(range(N)) if p != identity]
        else:
            perms = []
            for i, j in itertools.combinations(range(N), 2):
                p = list(identity)
                p[i], p[j] = j, i
                perms.append(p)
        out = []

        def new():
            t = theta.copy()
            return t, problem.experts(t)

        for h in range(H):
            for p in perms:
                t, ta = new()
                ta[h] = a[h, p]
                out.append(t)
            if K >= 2:
                for k in range(K):
                    for p in perms:
                        t, ta = new()
                        ta[h, :, k] = a[h, p, k]
                        out.append(t)
                if N >= 2:
                    for i in range(N):
                        for k, m in itertools.combinations(range(K), 2):
                            t, ta = new()
                            ta[h, i, k], ta[h, i, m] = a[h, i, m], a[h, i, k]
                            out.append(t)
        return out


class SoftModes(Move):
    """Long steps from the incumbent along its softest directions, clipped to the box.

    ``JᵀJ`` at ``theta`` (the measure's parameters; an intercept is the offset and is not
    moved) is scaled to unit diagonal, ``S = D⁻¹ JᵀJ D⁻¹``; for each of its ``n_modes``
    eigenvectors ``v`` with the smallest eigenvalues the direction ``u = D⁻¹ v``, scaled to a
    largest entry of one, gives the candidates ``theta ± s u`` for ``s`` in ``steps``. A soft
    direction changes the function least per unit of parameter change (for linear experts an
    exact one: a linear function added to every expert of one head and taken from another's,
    ``Σ_i g_{h,i} = 1``). Shorter steps fall back into the optimum they left.
    """

    def __init__(self, n_modes=12, steps=(2.0, 4.0, 8.0)):
        self.n_modes = n_modes
        self.steps = steps

    def validate(self):
        check_count(self.n_modes, "n_modes", 1)
        steps = np.asarray(self.steps, dtype=float) if np.ndim(self.steps) == 1 else None
        if steps is None or steps.size == 0 or not np.all(np.isfinite(steps) & (steps > 0)):
            raise ValueError(f"steps must be a non-empty sequence of finite numbers > 0; got "
                             f"{self.steps!r}.")
        return self

    def propose(self, problem, theta, draw):
        theta = np.asarray(theta, dtype=np.float64)
        P = problem.n_measure_params
        JtJ = problem.gauss_newton_matrix(theta)
        if not np.all(np.isfinite(JtJ)):
            raise FloatingPointError("JᵀJ is not finite at the incumbent")
        d = np.sqrt(np.diag(JtJ))
        d = np.where(d > 0, d, 1.0)
        # LAPACK on one thread: with several, the eigenvectors change in their last bits with
        # the BLAS thread count, and so would the candidates and the fit
        with single_thread_blas():
            _, V = np.linalg.eigh(JtJ / np.outer(d, d))
        out = []
        for j in range(min(self.n_modes, P)):
            u = V[:, j] / d
            u /= np.max(np.abs(u))
            for s in self.steps:
                for sign in (1.0, -1.0):
                    t = theta.copy()
                    t[:P] += sign * s * u
                    out.append(np.clip(t, problem.lower, problem.upper))
        return out
