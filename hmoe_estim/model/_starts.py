"""Starting points of the least-squares fit (docs: Theory to code, "Least-squares estimation").

- :func:`random_start` — an ordinary random start scaled to the data (the default);
- :func:`split_heaviest_channel` — a ``K+1``-channel start from a ``K``-channel fit, made by
  splitting its heaviest channel in two halves (an aid that does not use the truth);
- warm starts from the fit at a smaller ``n`` are simply that fit's ``measure_`` passed as
  ``init``.

Starting near the true measure is an oracle: the study runner labels it as such.
"""

from functools import lru_cache

import numpy as np

from .._defaults import OMEGA_MAX, PARAM_BOUND
from ._measure import MixingMeasure
from ._parameters import triangle_indices

__all__ = ["random_start", "split_heaviest_channel", "check_init_measure"]


@lru_cache(maxsize=16)
def _triangle(D):
    """:func:`triangle_indices`, made once per ``D`` (read-only): the estimator draws hundreds
    of starts per fit, and ``np.triu_indices`` costs half a draw."""
    p, q = triangle_indices(D)
    p.setflags(write=False)
    q.setflags(write=False)
    return p, q


def random_start(
    shape, rng, *, x_rms=1.0, y_scale=1.0, omega_max=OMEGA_MAX, param_bound=PARAM_BOUND,
    positive_weights=True,
):
    """Draw a random :class:`MixingMeasure` of ``shape = (H, N, K, D)``, scaled to the data.

    ``omega ~ U(0.5, 1.5)`` (times a random sign when ``positive_weights=False``, drawn after
    everything else so that the default stream is unchanged); entries of ``M[h, i]``
    (``i < N-1``) ``~ N(0, s_M²)`` with
    ``s_M = 1 / (x_rms² √D)``, so that the quadratic forms ``xᵀ M x`` are of order one;
    entries of ``a ~ N(0, s_a²)`` with ``s_a = y_scale / (x_rms √(D H K))``. Everything is
    clipped inside the box of (A.1).

    Parameters
    ----------
    shape : tuple of int
        ``(H, N, K, D)``.
    rng : numpy.random.RandomState
    x_rms, y_scale : float
        Root-mean-square of the inputs and spread of the targets.
    omega_max, param_bound : float
        The box.
    """
    return MixingMeasure(*_draw(shape, rng, x_rms, y_scale, omega_max, param_bound,
                                positive_weights))


def random_start_theta(
    shape, rng, *, x_rms=1.0, y_scale=1.0, omega_max=OMEGA_MAX, param_bound=PARAM_BOUND,
    positive_weights=True,
):
    """``pack(random_start(...))`` with the same draws, without building the measure.

    The estimator draws hundreds of candidates per fit; the measure's validation would cost
    more than a Levenberg–Marquardt iteration of the linear gates.
    """
    omega, M, a = _draw(shape, rng, x_rms, y_scale, omega_max, param_bound, positive_weights)
    H, N, K, D = shape
    p, q = _triangle(D)
    return np.concatenate([omega.ravel(), M[:, : N - 1][..., p, q].ravel(), a.ravel()])


def _draw(shape, rng, x_rms, y_scale, omega_max, param_bound, positive_weights):
    """The arrays ``(omega, M, a)`` of :func:`random_start` (``M[:, N-1] = 0``)."""
    H, N, K, D = shape
    x_rms = max(float(x_rms), 1e-12)
    s_m = 1.0 / (x_rms**2 * np.sqrt(D))
    s_a = max(float(y_scale), 1e-3) / (x_rms * np.sqrt(D * H * K))
    omega = rng.uniform(0.5, 1.5, size=(H, K))
    M = rng.normal(scale=s_m, size=(H, N, D, D))
    M = 0.5 * (M + np.swapaxes(M, 2, 3))
    M[:, -1] = 0.0
    a = rng.normal(scale=s_a, size=(H, N, K, D))
    lim = 0.99 * param_bound
    omega_low = 0.0
    if not positive_weights:
        omega = omega * rng.choice([-1.0, 1.0], size=(H, K))
        omega_low = -0.99 * omega_max
    # ndarray.clip: np.clip without its dispatch layer (hundreds of draws per fit)
    return omega.clip(omega_low, 0.99 * omega_max), M.clip(-lim, lim), a.clip(-lim, lim)


def split_heaviest_channel(measure, *, random_state=None, jitter=1e-2):
    """A ``K+1``-channel start: the heaviest channel of ``measure`` split into two halves.

    The channel ``(h, k)`` with the largest ``omega`` is duplicated; both copies get weight
    ``omega[h, k] / 2`` and the copy's experts are perturbed by ``jitter`` times their norm so
    that the halves can separate. The regression function of MHA and G2 is unchanged up to the
    jitter (for G1 too: the two copies have the same ``φ(u)``).

    Parameters
    ----------
    measure : MixingMeasure
        A fit with ``K`` channels.
    random_state : int, RandomState or None
    jitter : float, default=1e-2

    Returns
    -------
    MixingMeasure with ``K + 1`` channels.
    """
    from sklearn.utils import check_random_state

    rng = check_random_state(random_state)
    omega, a = measure.omega.copy(), measure.a.copy()
    h, k = np.unravel_index(np.argmax(omega), omega.shape)
    new_omega = np.zeros((omega.shape[0], 1))
    new_omega[h, 0] = omega[h, k] / 2.0
    omega[h, k] /= 2.0
    new_a = a[:, :, k : k + 1, :].copy()
    scale = np.linalg.norm(new_a[h]) / np.sqrt(new_a[h].size) + 1e-12
    new_a[h] += jitter * scale * rng.standard_normal(new_a[h].shape)
    return MixingMeasure(
        np.concatenate([omega, new_omega], axis=1),
        measure.M.copy(),
        np.concatenate([a, new_a], axis=2),
    )


def check_init_measure(measure, shape):
    """Raise a ``ValueError`` unless ``measure`` is a MixingMeasure of ``shape`` (H, N, K, D)."""
    if not isinstance(measure, MixingMeasure):
        raise ValueError(
            "init must be 'random', a MixingMeasure or a list of MixingMeasures; got "
            f"{type(measure).__name__}."
        )
    if measure.shape != tuple(shape):
        raise ValueError(
            f"init measure has shape (H, N, K, D) = {measure.shape} but the estimator fits "
            f"{tuple(shape)}; set n_heads, n_tokens, n_experts to match or pass another measure."
        )
    return measure
