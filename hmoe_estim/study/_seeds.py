"""Seeds of a study's fits, stable across sessions, machines and the order fits run in.

Each fit ``(model, n, rep)`` gets its own seed from the study's master seed through
:class:`numpy.random.SeedSequence`; the model enters by a SHA-256 of ``"gate/activation"``,
never Python's randomised ``hash``. From a fit's seed come a data seed, an estimator seed and
a split seed.
"""

import hashlib

import numpy as np

__all__ = ["fit_seed"]


def _name_key(text):
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "little")


def fit_seed(seed, model_key, n, rep):
    """The seed of fit ``(model, n, rep)``: an int in ``[0, 2**31)``.

    ``SeedSequence(entropy=seed, spawn_key=(sha256(model_key)[:4], n, rep))`` — stable across
    Python sessions, machines and the order in which fits run.

    Parameters
    ----------
    seed : int
        The study's master seed (``config.seed``).
    model_key : str
        ``"gate/activation"`` (:attr:`ModelSpec.key`).
    n, rep : int
        Sample size and replication index.
    """
    ss = np.random.SeedSequence(entropy=int(seed),
                                spawn_key=(_name_key(model_key), int(n), int(rep)))
    return int(ss.generate_state(1, dtype=np.uint32)[0] >> 1)


def _child_seeds(seed):
    """(data seed, estimator seed, split seed) from a fit seed, each in ``[0, 2**31)``."""
    state = np.random.SeedSequence(int(seed)).generate_state(3, dtype=np.uint32) >> 1
    return tuple(int(s) for s in state)
