"""Global search for the least-squares estimator of eq. (3): racing, signed weights, agreement.

The loss is non-convex; the theory is about its global minimiser. The search here uses no
oracle (nothing about the truth), only the data and ordinary random starts:

- **Racing** (successive halving in two rounds): ``n_candidates`` random starts each run
  ``race_iter // 2`` Levenberg–Marquardt iterations (:mod:`hmoe_estim.solvers._gauss_newton`),
  the best quarter the other half; the ``n_starts`` with the lowest objective then run to
  convergence on all the data, the others are abandoned. The race runs on at most
  ``RACE_SAMPLES`` evenly spaced samples (``RACE_SAMPLES_LINEAR`` for the linear gates).
  A start's objective after a few Gauss–Newton steps already sorts most hopeless basins out.
  The estimator's defaults (128 candidates for 4 starts, 64 for one-head MHA; 10
  iterations, 30 on ``RACE_SAMPLES_HEADS`` samples for gated models with several heads:
  :func:`race_schedule`) are
  measured in ``benchmarks/bench_solver.py``: on its full design (one and two heads, 1800
  fits, four truths per shape and ``n``), with the estimator's search rounds and moves, 1
  certified failure, a value/tanh fit with two heads and ``K = K*`` (see the user guide's
  solver page).
- **Signed weights** where the model has the symmetry ``(ω, a) ≡ (−ω, −a)``: for the linear
  gates (``"none"``, ``"output"``: ``f`` depends on ``ω a`` only) and for an odd activation
  (``tanh``) with the value or SDPA gate (``ω φ(−a·x) = −ω φ(a·x)``), the search runs over
  ``ω ∈ [−ω_max, ω_max]`` — the same set of functions, so the same least-squares value —
  and maps every channel with ``ω < 0`` back to ``(−ω, −a)`` at the end
  (:func:`fold_signs`). A channel whose experts point the wrong way need not pass through
  ``ω = 0`` (a bound where its gradient in ``a`` vanishes) to turn round.
- **Head restarts** (:func:`restart_heads`, the default with several heads): redraw one
  whole head of the best fit — its weights, gate matrices ``M[h]`` and experts — the other
  heads kept, race such candidates and keep an improvement; repeat while it improves. A
  two-head fit with one head right and the other in a wrong basin of its gate is repaired
  without redrawing the right head, which a fresh start would. On the two-head truths of
  ``benchmarks/bench_solver.py``, with the two-round race, the certified failures fell from
  57 to 26 of 432 fits (13% to 6.0%; 11 with the longer race of several gated heads).
- **Expert reassignment** (:func:`reassign_experts`, the default for the value and SDPA gates
  with tanh and several heads): moves of the incumbent that keep its gates and its set of
  experts but change which token an expert serves — the experts ``a[h, i]`` of a head
  permuted over its tokens, one channel's experts ``a[h, :, k]`` permuted, or two channels'
  experts swapped at one token — raced like the head restarts, alternating with them while
  either improves. A mixture of experts often stops with a gate region served by another
  region's expert; a gradient method cannot swap them, a move can. On the 192 two-head
  value/SDPA tanh fits of ``benchmarks/bench_solver.py``'s design: certified failures 3 → 2,
  at ×1.46 their time (see the solver page).
- **Soft-mode moves** (:func:`soft_mode_moves`, with the reassignment moves): long steps from
  the incumbent along the softest eigenvectors of its scaled Gauss–Newton matrix ``JᵀJ``,
  raced the same way. Two heads can share out almost the same function differently (for
  linear experts exactly: ``Σ_i g_{h,i} = 1``, so a linear function added to every expert of
  one head and taken from another's changes nothing); such a local optimum lies in a valley
  that is nearly flat along directions mixing both heads' experts, and a long step along
  them reaches the next basin where the gradient stops. Added to the reassignment moves, on
  the same 192 fits: certified failures 2 → 1, at ×1.18 their time.
- **Perturb-and-refit** (:func:`hop`, not a default): redraw or negate one channel of the
  incumbent at a time and race the candidates. Measured on 12 fits of hard tanh truths, it
  improved none; more raced candidates fixed them (see the user guide's solver page).
- **Agreement**: :func:`count_agreeing` counts the finished starts whose objective is within
  ``agree_tol · σ̂²/n`` of the best (``σ̂²`` = best objective, the residual variance), so a
  user without a truth sees whether the optimum was found more than once. The search rounds
  stop once :func:`starts_to_stop` starts agree (2; 3 with signed weights, where two starts
  often agree on a local optimum).
"""

import itertools

import numpy as np

from .._validation import check_activation, check_gate

__all__ = ["has_sign_symmetry", "fold_signs", "signed_bounds", "count_agreeing", "race", "hop",
           "restart_heads", "reassign_experts", "reassignments", "candidates_schedule",
           "head_restarts_schedule", "race_schedule", "search_rounds_schedule",
           "reassign_schedule", "soft_mode_steps", "soft_mode_moves", "starts_to_stop"]

#: Candidates raced per start kept (the estimator's ``n_candidates="auto"``,
#: :func:`candidates_schedule`) ...
AUTO_CANDIDATES = 32
#: ... and, for the ungated MHA (``gate="none"``, ``f`` depends on ``(ω, a)`` only through
#: ``b = Σ_k ω_k a_k``: the basins are those of the gate matrices), this many per start and
#: head. Measured on ``benchmarks/bench_solver.py``'s MHA truths: with one head 64
#: candidates left no certified failure (as 128 did) at about half the time of a fit at
#: ``n = 10⁴``; with two heads 64 left one, so two heads keep 128.
AUTO_CANDIDATES_MHA = 16
#: Candidates per head and round of the head restarts with several heads (the estimator's
#: ``head_restarts="auto"``, :func:`head_restarts_schedule`; none with one head, where a
#: restarted head is a fresh start) ...
AUTO_HEAD_RESTARTS = 32
#: ... for at most this many rounds.
HEAD_RESTART_ROUNDS = 10
#: Starts within ``AGREE_TOL · σ̂²/n`` of the best objective count as agreeing with it
#: (:func:`count_agreeing`).
AGREE_TOL = 1.0

#: The race runs on at most this many (evenly spaced) samples: a few Gauss–Newton steps
#: sort the basins as well on a subsample, at a fraction of the cost when ``n`` is large.
RACE_SAMPLES = 4096
#: ... and on at most this many for the linear gates (``"none"``, ``"output"``: ``f`` depends on
#: ``(ω, a)`` only through ``b = Σ_k ω_k a_k``). Their candidates have nearly converged after
#: the race's iterations (the kept ones need 1–2 more on all the data), so the race ranks
#: almost final objectives, which 1024 samples resolve: on MHA truths (``H = 1, 2``,
#: ``N = 2, 3``, ``n = 10⁴``) and output-gate ones, the same certified failures (none on
#: ``bench_solver.py``'s suite) as with 4096, at a quarter of the race's cost.
#: Gated candidates are far from converged after the race; 1024 samples there let 3 of 432
#: fits of ``benchmarks/bench_solver.py`` fail the certificate (0 with 4096).
RACE_SAMPLES_LINEAR = 1024
#: ... and, in the race of ``race_schedule`` for the gated models (``"value"``, ``"sdpa"``)
#: with several heads, on at most this many, for ``RACE_ITER_HEADS`` iterations. Their
#: candidates sort slowly: on a two-head tanh truth 3 of 64 candidates reach the global
#: optimum, and after 10 iterations they ranked 35th, 48th and 54th. On the 26 two-head
#: fits of ``benchmarks/bench_solver.py`` that failed the certificate with the one-head race
#: (10 iterations on 4096 samples), refitted with a new random stream, 30 iterations on 1024
#: samples left 6 failures, the one-head race 17, in the same total time.
RACE_SAMPLES_HEADS = 1024
#: Iterations of the race (the estimator's ``race_iter="auto"``) ...
RACE_ITER = 10
#: ... and for the gated models with several heads (on ``RACE_SAMPLES_HEADS`` samples: no
#: more work than ``RACE_ITER`` on ``RACE_SAMPLES`` at ``n >= 4096``, three times as much
#: below 1024 samples). The same race for one head left 4 certified failures in the 416
#: one-head value/SDPA fits of ``benchmarks/bench_solver.py``, against 2.
RACE_ITER_HEADS = 30

#: Successive halving in the race: every candidate runs ``race_iter // 2`` iterations, the
#: best ``1 / RACE_FRACTION`` of them the other half; the ``n_keep`` best of those are kept.
#: With the defaults (128 candidates, 10 iterations) 800 iterations instead of 1280: the
#: race, most of a fit at ``n = 10⁴``, costs 37% less. On the one-head truths of
#: ``benchmarks/bench_solver.py`` at ``n = 10³`` (216 fits) no certified failure, as before;
#: with a first rung of 3 iterations, one.
RACE_FRACTION = 4

#: Rounds of the whole search (the estimator's ``search_rounds="auto"``, see
#: :func:`search_rounds_schedule`): at most this many for the value and SDPA gates with several
#: heads, each round fresh candidates, raced, then the head restarts, until the best objective
#: has been reached by two finished starts (:func:`starts_to_stop`). Measured on
#: ``benchmarks/bench_solver.py``'s design: three rounds lowered the certified failures of
#: two-head value/SDPA fits from 11 to 5 of 384. Six: on the design with 1800 fits, the two
#: certified failures of three rounds with a sigmoid (value and SDPA gates, ``K = 3``, both
#: ended unagreed) pass with six; rounds 4–6 run only on fits whose first three did not find
#: their best objective twice, so no fit gets worse (see the solver page for the cost).
SEARCH_ROUNDS = 6
#: ... and at most this many with signed weights (value and SDPA gates with an odd ``φ``:
#: tanh), one head or several. The design's 5 failures left by three rounds were all
#: two-head tanh fits; six rounds repaired 4 of them and made no fit worse (rounds 4–6 run only
#: on fits whose first three rounds did not find their best objective twice: 79 of its 200
#: value/SDPA tanh fits, at about twice their kernel passes, ×1.54 over the 200).
SEARCH_ROUNDS_SIGNED = 6

#: The search rounds stop once this many finished starts reach the best objective ...
AGREE_TO_STOP = 2
#: ... and this many with signed weights (value and SDPA gates with tanh), where two starts
#: often agree on a local optimum: on ``benchmarks/bench_solver.py``'s design (1800 fits),
#: 3 of its 8 certified failures were tanh fits stopped early by two agreeing starts, two of
#: them after the optimum's second start came from another round. With three all 3 pass, and
#: no fit got worse (the 196 tanh fits that had stopped with two re-fitted; ×1.93 their
#: kernel passes, ×1.33 over the design's 400 value/SDPA tanh fits).
AGREE_TO_STOP_SIGNED = 3

#: Soft-mode moves (:func:`soft_mode_moves`): steps along this many eigenvectors of the
#: scaled Gauss–Newton matrix with the smallest eigenvalues ...
SOFT_MODES = 12
#: ... each of these lengths (the largest entry of the step; both signs). Steps of 0.5–2
#: fell back into the local optimum they left on the hard corner of the solver page.
SOFT_STEPS = (2.0, 4.0, 8.0)

#: Odd activations: ``φ(−z) = −φ(z)``.
ODD_ACTIVATIONS = ("tanh",)


def has_sign_symmetry(gate, activation):
    """True when ``(ω, a) → (−ω, −a)`` on one channel leaves ``f`` unchanged."""
    check_gate(gate)
    check_activation(activation)
    return gate in ("none", "output") or activation in ODD_ACTIVATIONS


def candidates_schedule(gate, n_starts, n_heads):
    """Candidates raced for the estimator's ``n_candidates="auto"``: ``AUTO_CANDIDATES``
    per start kept, or ``AUTO_CANDIDATES_MHA`` per start kept and head for ``gate="none"``."""
    check_gate(gate)
    if gate == "none":
        return AUTO_CANDIDATES_MHA * n_starts * n_heads
    return AUTO_CANDIDATES * n_starts


def head_restarts_schedule(n_heads):
    """Candidates per head and round of the head restarts for the estimator's
    ``head_restarts="auto"``: ``AUTO_HEAD_RESTARTS`` with several heads, 0 (off) with one."""
    return AUTO_HEAD_RESTARTS if n_heads > 1 else 0


def race_schedule(gate, n_heads):
    """``(race_iter, race_samples)`` of the estimator's ``race_iter="auto"``: ``RACE_ITER``
    iterations on the default subsample of :func:`race`, or ``RACE_ITER_HEADS`` on
    ``RACE_SAMPLES_HEADS`` samples for the value and SDPA gates with several heads."""
    check_gate(gate)
    if n_heads > 1 and gate in ("value", "sdpa"):
        return RACE_ITER_HEADS, RACE_SAMPLES_HEADS
    return RACE_ITER, None


def _signed_gated(gate, activation):
    """True for the value and SDPA gates with signed weights (an odd ``φ``: tanh), the models
    whose search runs several rounds with one head too and stops on more agreeing starts;
    ``gate`` and ``activation`` checked."""
    check_gate(gate)
    check_activation(activation)
    return gate in ("value", "sdpa") and activation in ODD_ACTIVATIONS


def search_rounds_schedule(gate, activation, n_heads):
    """Most rounds of the whole search for the estimator's ``search_rounds="auto"``:
    ``SEARCH_ROUNDS_SIGNED`` for the value and SDPA gates with signed weights (tanh),
    ``SEARCH_ROUNDS`` for them with several heads, 1 otherwise (the linear gates, and one
    head with a sigmoid, GELU or SiLU: none of their fits on the design failed with one round,
    and their starts rarely agree to ``1 · σ̂²/n``, so every round would run)."""
    if _signed_gated(gate, activation):
        return SEARCH_ROUNDS_SIGNED
    return SEARCH_ROUNDS if gate in ("value", "sdpa") and n_heads > 1 else 1


def reassign_schedule(gate, activation, n_heads):
    """Whether the estimator's ``reassign_experts="auto"`` runs the expert reassignment moves
    (:func:`reassign_experts`): for the value and SDPA gates with signed weights (tanh) and
    several heads, the group whose certified failures they repaired; elsewhere the design
    had none left to repair."""
    return n_heads > 1 and _signed_gated(gate, activation)


def starts_to_stop(gate, activation):
    """Finished starts that must reach the best objective (within ``1 · σ̂²/n``) for the search
    rounds to stop before their cap: ``AGREE_TO_STOP_SIGNED`` for the value and SDPA gates with
    signed weights (tanh), ``AGREE_TO_STOP`` otherwise."""
    return AGREE_TO_STOP_SIGNED if _signed_gated(gate, activation) else AGREE_TO_STOP


def signed_bounds(bounds, shape):
    """The box with ``ω ∈ [−ω_max, ω_max]`` instead of ``[0, ω_max]``."""
    lower, upper = bounds
    H, N, K, D = shape
    lower = lower.copy()
    lower[: H * K] = -upper[: H * K]
    return lower, upper


def _offsets(shape):
    """``(T, o1, o2)``: triangle size and the offsets of ``M`` and ``a`` in ``theta`` (the
    packing of :func:`hmoe_estim.model.pack`: ``ω`` (H·K), ``M`` triangles (H·(N−1)·T), ``a``)."""
    H, N, K, D = shape
    T = D * (D + 1) // 2
    o1 = H * K
    return T, o1, o1 + H * (N - 1) * T


def fold_signs(theta, shape):
    """Map every channel with ``ω < 0`` to ``(−ω, −a)`` (same ``f`` under the symmetry).

    Entries after the measure's (an intercept) are kept as they are.
    """
    H, N, K, D = shape
    theta = np.array(theta, dtype=np.float64)
    _, _, o2 = _offsets(shape)
    a = theta[o2:o2 + H * N * K * D].reshape(H, N, K, D)
    for h in range(H):
        for k in range(K):
            if theta[h * K + k] < 0:
                theta[h * K + k] = -theta[h * K + k]
                a[h, :, k, :] *= -1.0
    return theta


def count_agreeing(objectives, n_samples, agree_tol=1.0):
    """Starts whose objective is within ``agree_tol · best / n`` of the best one.

    The objective is the mean squared residual; at the optimum it estimates ``σ²``, so
    ``best / n`` is the natural unit ``σ̂²/n`` of differences between objectives (the gap
    between the truth's objective and the least-squares optimum is a few of these units).
    """
    obj = np.asarray(objectives, dtype=float)
    finite = obj[np.isfinite(obj)]
    if finite.size == 0:
        return 0
    best = float(finite.min())
    return int(np.sum(finite <= best + agree_tol * max(best, 0.0) / max(int(n_samples), 1)))


def race(starts, XT, y, shape, gate, activation, bounds, *, n_keep, race_iter, max_iter, tol,
         signed, race_samples=None, n_jobs=None, verbose=0, fit_intercept=False, alpha=0.0):
    """Racing Levenberg–Marquardt from ``starts``; returns ``(results, kept, race_passes)``.

    With ``fit_intercept`` the starts, the bounds and the results' ``theta`` end with the
    intercept ``c``; ``alpha`` is the ridge penalty of
    ``kernels.objective.objective_and_gradient`` (the race's objectives, on the
    subsample, are that objective there too).

    Every start runs ``race_iter // 2`` iterations on at most ``race_samples`` evenly spaced
    samples (``None``: ``RACE_SAMPLES``, ``RACE_SAMPLES_LINEAR`` for the gates ``"none"`` and
    ``"output"``; ``race_schedule`` gives both for the estimator's defaults), the best
    ``1 / RACE_FRACTION`` of them (when that leaves more than ``n_keep``) the rest of the
    ``race_iter``; the ``n_keep`` lowest objectives (ties by start order) are resumed on all
    the data, up to
    ``max_iter`` iterations in all. ``results`` are the finished starts
    (``LMResult``, parameters folded back to ``ω >= 0`` when ``signed``; their ``n_passes``
    count the passes after the race), ``kept`` their indices in ``starts``, ``race_passes``
    the race's passes in units of passes over the full data.
    """
    from ._gauss_newton import _single_thread_blas

    options = {"fit_intercept": True} if fit_intercept else {}
    if alpha > 0:
        options["alpha"] = float(alpha)
    with _single_thread_blas():
        return _race(starts, XT, y, shape, gate, activation, bounds, n_keep=n_keep,
                     race_iter=race_iter, max_iter=max_iter, tol=tol, signed=signed,
                     race_samples=race_samples, n_jobs=n_jobs, verbose=verbose,
                     options=options)


def _race(starts, XT, y, shape, gate, activation, bounds, *, n_keep, race_iter, max_iter, tol,
          signed, race_samples, n_jobs, verbose, options):
    from ._gauss_newton import run_lm_starts

    if signed:
        bounds = signed_bounds(bounds, shape)
    n_keep = min(n_keep, len(starts))
    if len(starts) > n_keep and race_iter > 0:
        n = XT.shape[1]
        m = race_samples
        if m is None:
            m = RACE_SAMPLES_LINEAR if gate in ("none", "output") else RACE_SAMPLES
        if n > m:  # race on evenly spaced samples (sorted data stay covered)
            idx = np.linspace(0, n - 1, m).round().astype(np.int64)
            XT_r, y_r = np.ascontiguousarray(XT[:, idx]), np.ascontiguousarray(y[idx])
        else:
            XT_r, y_r = XT, y
        # successive halving: every candidate runs r1 iterations, the best 1/RACE_FRACTION
        # of them the rest of the race_iter (one round when that would keep too few)
        r1 = race_iter // 2
        halving = r1 > 0 and len(starts) > RACE_FRACTION * n_keep
        first = list(run_lm_starts(starts, XT_r, y_r, shape, gate, activation, bounds,
                                   n_jobs=n_jobs, verbose=verbose, tol=tol,
                                   max_iter=r1 if halving else race_iter, **options))
        objs = np.array([r.objective for r in first])
        if halving:
            mid = np.argsort(objs, kind="stable")[:-(-len(starts) // RACE_FRACTION)]
            cont = run_lm_starts(
                [first[j].theta for j in mid], XT_r, y_r, shape, gate, activation, bounds,
                n_jobs=n_jobs, verbose=verbose, max_iter=race_iter - r1, tol=tol,
                mu0s=[first[j].damping for j in mid],
                counts=[(first[j].n_jac, first[j].n_fev, first[j].n_iter) for j in mid],
                **options)
            for j, r in zip(mid, cont):
                first[j] = r  # its passes and iterations include the first round's
            objs = np.full(len(first), np.inf)  # the others are out of the race
            objs[mid] = [r.objective for r in cont]
        kept = [int(j) for j in np.argsort(objs, kind="stable")[:n_keep]]
        resumed = run_lm_starts(
            [first[j].theta for j in kept], XT, y, shape, gate, activation, bounds,
            n_jobs=n_jobs, verbose=verbose, max_iter=max(1, max_iter - race_iter), tol=tol,
            mu0s=[first[j].damping for j in kept],
            counts=[(0, 0, first[j].n_iter) for j in kept], **options,
        )
        results = list(resumed)
        # the race's passes, in passes over the full data
        race_passes = sum(r.n_passes for r in first) * XT_r.shape[1] / max(n, 1)
    else:
        kept = list(range(len(starts)))
        results = run_lm_starts(starts, XT, y, shape, gate, activation, bounds, n_jobs=n_jobs,
                                verbose=verbose, max_iter=max_iter, tol=tol, **options)
        race_passes = 0
    if signed:
        for r in results:
            r.theta = fold_signs(r.theta, shape)
    return results, kept, race_passes


def _channel_slices(shape):
    """For each channel ``(h, k)``: index of ``ω[h, k]`` and the indices of ``a[h, :, k, :]``."""
    H, N, K, D = shape
    _, _, o2 = _offsets(shape)
    out = []
    for h in range(H):
        for k in range(K):
            idx = [o2 + ((h * N + i) * K + k) * D + d for i in range(N) for d in range(D)]
            out.append((h * K + k, np.array(idx)))
    return out


def _head_indices(shape):
    """For each head ``h``: the indices of ``ω[h, :]``, ``M[h, :N-1]`` and ``a[h]`` in
    ``theta``."""
    H, N, K, D = shape
    T, o1, o2 = _offsets(shape)
    return [
        np.concatenate([
            np.arange(h * K, (h + 1) * K),
            np.arange(o1 + h * (N - 1) * T, o1 + (h + 1) * (N - 1) * T),
            np.arange(o2 + h * N * K * D, o2 + (h + 1) * N * K * D),
        ])
        for h in range(H)
    ]


def _improve(best, candidates, XT, y, shape, gate, activation, bounds, *, max_rounds,
             n_keep, **race_kw):
    """Rounds of ``race(candidates(best.theta))``; the best result replaces ``best`` when it
    lowers the objective by more than ``1 · σ̂²/n``, and the search stops after a round
    without that or after ``max_rounds``. Returns ``(best, passes, rounds_improved)``."""
    n = XT.shape[1]
    passes = 0.0
    rounds = 0
    for _ in range(max_rounds):
        results, _, rp = race(candidates(best.theta), XT, y, shape, gate, activation, bounds,
                              n_keep=n_keep, **race_kw)
        passes += rp + sum(r.n_passes for r in results)
        cand = min(results, key=lambda r: r.objective)
        if not cand.objective < best.objective - max(best.objective, 0.0) / max(n, 1):
            break
        best = cand
        rounds += 1
    return best, passes, rounds


def hop(best, XT, y, shape, gate, activation, bounds, draw, *, n_rounds, race_iter, max_iter,
        tol, signed, n_jobs=None, verbose=0):
    """Perturb-and-refit of the incumbent, one channel at a time (basin hopping).

    Each round makes ``2·H·K`` candidates from the incumbent ``best`` (an ``LMResult``):
    for every channel ``(h, k)``, one with the channel's weight and experts redrawn
    (``draw()`` returns a random packed start; the channel is copied from it) and one with
    the channel's experts negated (``a[h, :, k] → −a[h, :, k]``: for an odd ``φ`` the channel's
    contribution changes sign, for the others a different function). The candidates are
    raced (:func:`race`, 2 kept) and the best replaces the incumbent when it lowers the
    objective by more than ``1 · σ̂²/n``; the search stops after a round without that.
    Returns ``(best, passes, rounds_improved)``.
    """
    slices = _channel_slices(shape)

    def candidates(theta):
        cands = []
        for io, ia in slices:
            t = theta.copy()
            fresh = draw()
            t[io] = fresh[io]
            t[ia] = fresh[ia]
            cands.append(t)
            t = theta.copy()
            t[ia] = -t[ia]
            cands.append(t)
        return cands

    return _improve(best, candidates, XT, y, shape, gate, activation, bounds,
                    max_rounds=n_rounds, n_keep=2, race_iter=race_iter, max_iter=max_iter,
                    tol=tol, signed=signed, n_jobs=n_jobs, verbose=verbose)


def restart_heads(best, XT, y, shape, gate, activation, bounds, draw, *, n_per_head, max_rounds,
                  race_iter, max_iter, tol, signed, race_samples=None, n_keep=2, n_jobs=None,
                  verbose=0, fit_intercept=False, alpha=0.0):
    """Restart one whole head of the incumbent at a time; returns ``(best, passes, rounds)``.

    Each round makes ``n_per_head`` candidates per head ``h``: the incumbent ``best`` (an
    ``LMResult``) with head ``h`` — ``ω[h]``, ``M[h]``, ``a[h]`` — copied from a fresh random
    start ``draw()`` and every other parameter (other heads, an intercept) kept. The
    candidates are raced (:func:`race`, ``n_keep`` kept and run to convergence; all parameters
    free) and the best replaces the incumbent when it lowers the objective by more than
    ``1 · σ̂²/n``; the search stops after a round without that, or after ``max_rounds``.
    ``rounds`` counts the rounds that improved, ``passes`` the kernel passes in units of
    passes over the full data. The objective of the result is never above ``best``'s.
    """
    heads = _head_indices(shape)

    def candidates(theta):
        cands = []
        for idx in heads:
            for _ in range(n_per_head):
                t = theta.copy()
                t[idx] = draw()[idx]
                cands.append(t)
        return cands

    return _improve(best, candidates, XT, y, shape, gate, activation, bounds,
                    max_rounds=max_rounds, n_keep=n_keep, race_iter=race_iter,
                    max_iter=max_iter, tol=tol, signed=signed, race_samples=race_samples,
                    n_jobs=n_jobs, verbose=verbose, fit_intercept=fit_intercept, alpha=alpha)


#: With more tokens than this, the reassignment moves permute tokens by transpositions only
#: (``N (N − 1) / 2`` per head instead of ``N! − 1``).
REASSIGN_ALL_PERMUTATIONS = 4


def reassignments(theta, shape):
    """The candidates of :func:`reassign_experts`: ``theta`` with its experts reassigned.

    For every head ``h`` (``a`` of shape ``(H, N, K, D)``; ``ω``, ``M`` and an intercept kept):

    - every channel's experts permuted over the tokens, ``a'[h, i] = a[h, π(i)]``;
    - one channel's experts permuted, ``a'[h, i, k] = a[h, π(i), k]`` (``K >= 2``);
    - two channels' experts swapped at one token, ``a'[h, i, k] = a[h, i, l]`` and back
      (``K >= 2``, ``N >= 2``; at every token at once it would be a relabelling).

    ``π`` runs over the permutations of the ``N`` tokens other than the identity (only the
    transpositions when ``N > REASSIGN_ALL_PERMUTATIONS``). Permuting ``M`` with the experts
    would leave ``f`` unchanged (the softmax gauge of the docs' Voronoi loss); permuting
    the experts alone moves each one to another gate region.
    """
    H, N, K, D = shape
    _, _, o2 = _offsets(shape)
    theta = np.asarray(theta, dtype=np.float64)
    a = theta[o2:o2 + H * N * K * D].reshape(H, N, K, D)
    identity = tuple(range(N))
    if N <= REASSIGN_ALL_PERMUTATIONS:
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
        return t, t[o2:o2 + H * N * K * D].reshape(H, N, K, D)

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


def soft_mode_steps(theta, XT, y, shape, gate, activation, *, n_modes=SOFT_MODES,
                    steps=SOFT_STEPS):
    """The candidates of :func:`soft_mode_moves`: long steps from ``theta`` along its softest
    directions.

    ``JᵀJ`` (:func:`hmoe_estim.kernels.jacobian.gauss_newton_sums`, at ``theta``; an
    intercept after the measure's parameters is the offset and is not moved) is scaled to
    unit diagonal, ``S = D⁻¹ JᵀJ D⁻¹``; for each of its ``n_modes`` eigenvectors ``v`` with the
    smallest eigenvalues the direction ``u = D⁻¹ v``, scaled to a largest entry of one, gives
    the candidates ``theta ± s u`` for ``s`` in ``steps``. A soft direction changes the
    function least per unit of parameter change: along it lie the near-flat valleys between
    representations of almost the same function (for linear experts an exact one: a linear
    function added to every expert of one head and taken from another's, ``Σ_i g_{h,i} = 1``).
    """
    from .._names import ACTIVATION_CODES, GATE_CODES
    from ..kernels.jacobian import gauss_newton_sums
    from ..model import n_params

    H, N, K, D = shape
    theta = np.asarray(theta, dtype=np.float64)
    P = n_params(H, N, K, D)
    offset = float(theta[P]) if theta.shape[0] > P else 0.0
    JtJ = gauss_newton_sums(theta[:P], XT, y, H, N, K, D, GATE_CODES[gate],
                            ACTIVATION_CODES[activation], offset)[0]
    d = np.sqrt(np.diag(JtJ))
    d = np.where(d > 0, d, 1.0)
    _, V = np.linalg.eigh(JtJ / np.outer(d, d))
    out = []
    for j in range(min(n_modes, P)):
        u = V[:, j] / d
        u /= np.max(np.abs(u))
        for s in steps:
            for sign in (1.0, -1.0):
                t = theta.copy()
                t[:P] += sign * s * u
                out.append(t)
    return out


def soft_mode_moves(best, XT, y, shape, gate, activation, bounds, *, max_rounds, race_iter,
                    max_iter, tol, signed, race_samples=None, n_keep=2, n_jobs=None,
                    verbose=0, fit_intercept=False, alpha=0.0):
    """Soft-mode moves of the incumbent; returns ``(best, passes, rounds)``.

    Each round races the candidates of :func:`soft_mode_steps` of ``best`` (clipped to the
    box; signed weights when ``signed``) like :func:`reassign_experts`, and keeps the best when
    it lowers the objective by more than ``1 · σ̂²/n``. Two heads that share out almost the
    same function differently sit in a valley that is nearly flat along a direction mixing
    both heads' experts; the gradient stops on its floor, a long step along the softest
    directions of ``JᵀJ`` reaches the next basin.
    """
    lower, upper = signed_bounds(bounds, shape) if signed else bounds

    def candidates(theta):
        return [np.clip(t, lower, upper)
                for t in soft_mode_steps(theta, XT, y, shape, gate, activation)]

    return _improve(best, candidates, XT, y, shape, gate, activation, bounds,
                    max_rounds=max_rounds, n_keep=n_keep, race_iter=race_iter,
                    max_iter=max_iter, tol=tol, signed=signed, race_samples=race_samples,
                    n_jobs=n_jobs, verbose=verbose, fit_intercept=fit_intercept, alpha=alpha)


def reassign_experts(best, XT, y, shape, gate, activation, bounds, *, max_rounds, race_iter,
                     max_iter, tol, signed, race_samples=None, n_keep=2, n_jobs=None, verbose=0,
                     fit_intercept=False, alpha=0.0):
    """Expert reassignment moves of the incumbent; returns ``(best, passes, rounds)``.

    Each round races the candidates of :func:`reassignments` of ``best`` (an ``LMResult``;
    :func:`race`, ``n_keep`` kept and run to convergence, all parameters free) and keeps the
    best when it lowers the objective by more than ``1 · σ̂²/n``; it stops after a round
    without that, or after ``max_rounds``. A mixture of experts often stops with an expert
    in another token's gate region; a local solver cannot swap experts, a move can.
    ``rounds`` counts the rounds that improved, ``passes`` the kernel passes in units of
    passes over the full data. The objective of the result is never above ``best``'s.
    """
    return _improve(best, lambda theta: reassignments(theta, shape), XT, y, shape, gate,
                    activation, bounds, max_rounds=max_rounds, n_keep=n_keep,
                    race_iter=race_iter, max_iter=max_iter, tol=tol, signed=signed,
                    race_samples=race_samples, n_jobs=n_jobs, verbose=verbose,
                    fit_intercept=fit_intercept, alpha=alpha)
