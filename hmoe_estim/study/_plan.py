"""What a study fits: the true measure ``G*``, the metrics' reference sample, the oracle
near-truth starts, and the list of fits still to run.
"""

import functools

import numpy as np

from ._seeds import fit_seed

__all__ = ["true_measure", "reference_sample_for", "near_truth_starts", "plan_fits"]


def true_measure(config):
    """The study's ``G*``: the given measure, or ``random_measure`` of the truth section."""
    from ..model import MixingMeasure

    t = config.truth
    if t.measure is not None:
        return MixingMeasure.from_dict(t.measure)
    from ..datasets import random_measure

    return random_measure(
        t.n_heads, t.n_tokens, t.n_experts, t.n_features, scale=t.scale, random_state=t.seed
    )


@functools.lru_cache(maxsize=4)
def _reference_sample(D, box, n_ref, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-box, box, size=(n_ref, D))
    X.setflags(write=False)
    return X


def reference_sample_for(config):
    """The fixed reference sample of the metrics: ``n_ref`` points ``~ U([-box, box]^D)``."""
    return _reference_sample(
        config.truth.n_features, config.data.box, config.metrics.n_ref, config.metrics.ref_seed
    )


def near_truth_starts(truth, n_experts, n_starts, noise, rng, *, param_bound, omega_max):
    """ORACLE starting points near ``G*``, as published studies use (an oracle: it uses the truth).

    Channels ``k < K*`` copy the true channels; each extra channel ``k >= K*`` copies true
    channel ``k mod K*`` and the copies share that channel's weight equally (so the start has
    the true regression function before the perturbation). With ``K < K*`` the ``K`` heaviest
    true channels are kept. Every entry of ``omega``, ``M`` (symmetrically) and ``a`` then gets
    independent ``N(0, noise²)`` perturbations, clipped to the box.

    Returns
    -------
    list of MixingMeasure
        ``n_starts`` measures of shape ``(H*, N*, K, D)``.
    """
    from ..model import MixingMeasure

    G = truth.normalized()
    H, N, Ks, D = G.shape
    K = int(n_experts)
    if K >= Ks:
        src = [k % Ks for k in range(K)]
    else:
        src = sorted(np.argsort(-G.omega.sum(axis=0))[:K].tolist())
    counts = np.bincount(src, minlength=Ks)
    omega = G.omega[:, src] / counts[src][None, :]
    a = G.a[:, :, src, :]
    starts = []
    lim = 0.99 * param_bound
    for _ in range(int(n_starts)):
        dM = rng.normal(scale=noise, size=G.M.shape)
        dM = 0.5 * (dM + np.swapaxes(dM, 2, 3))
        dM[:, -1] = 0.0
        starts.append(
            MixingMeasure(
                np.clip(omega + rng.normal(scale=noise, size=omega.shape), 0.0, 0.99 * omega_max),
                np.clip(G.M + dM, -lim, lim),
                np.clip(a + rng.normal(scale=noise, size=a.shape), -lim, lim),
            )
        )
    return starts


# -- planning ------------------------------------------------------------------------------
def plan_fits(config, done=()):
    """The fits still to run: list of ``(model_name, n, rep, seed)``.

    Ordered by decreasing ``n`` (longest first balances parallel workers), then replication,
    then model. ``done`` holds the ``(model, n, rep)`` keys already in the results file.
    """
    done = set(done)
    tasks = []
    for n in sorted(config.grid.n, reverse=True):
        for rep in range(config.grid.reps):
            for m in config.models:
                if (m.name, n, rep) in done:
                    continue
                tasks.append((m.name, n, rep, fit_seed(config.seed, m.key, n, rep)))
    return tasks
