"""Synthetic data from a known mixing measure ``G*`` (paper eq. (1)).

:func:`random_measure` draws a true measure that satisfies the paper's assumptions
(A.2)–(A.5); :func:`make_hmoe_regression` draws ``X ~ Uniform([-box, box]^D)`` and
``y = f_{G*}(X) + ε``, ``ε ~ N(0, noise²)`` (paper eq. (1)), in the style of
:func:`sklearn.datasets.make_regression`.
"""


import numpy as np
from sklearn.utils import check_random_state

from .._validation import check_activation, check_count, check_gate, check_positive
from ..model import MixingMeasure, regression_function

__all__ = ["random_measure", "make_hmoe_regression"]

#: Fraction of ``scale`` used as the default minimal distance between two experts.
DEFAULT_SEPARATION_FRACTION = 0.25

# Reject-and-redraw budget of random_measure: draws per expert before a restart, restarts.
_TRIES_PER_EXPERT = 200
_RESTARTS = 50


def _signed_magnitudes(rng, size, scale):
    """Entries ``s·u`` with a random sign ``s`` and ``u ~ Uniform[scale/2, scale]``."""
    sign = np.where(rng.random_sample(size) < 0.5, -1.0, 1.0)
    return sign * rng.uniform(0.5 * scale, scale, size=size)


def _draw_experts(rng, n_total, D, scale, min_separation):
    """``n_total`` vectors of R^D, pairwise at Euclidean distance >= ``min_separation``.

    Sequential reject-and-redraw: each new vector is redrawn until it is far enough from the
    accepted ones; after ``_TRIES_PER_EXPERT`` failures the whole set is started over, at most
    ``_RESTARTS`` times. Returns ``None`` if the budget runs out.
    """
    for _ in range(_RESTARTS):
        accepted = np.empty((n_total, D))
        count = 0
        while count < n_total:
            for _ in range(_TRIES_PER_EXPERT):
                cand = _signed_magnitudes(rng, D, scale)
                if (count == 0 or np.min(np.linalg.norm(accepted[:count] - cand, axis=1))
                        >= min_separation):
                    accepted[count] = cand
                    count += 1
                    break
            else:
                break  # this expert could not be placed: restart the whole set
        if count == n_total:
            return accepted
    return None


def random_measure(
    n_heads=1,
    n_tokens=2,
    n_experts=2,
    n_features=2,
    *,
    scale=2.0,
    min_separation=None,
    omega_range=(0.5, 1.5),
    random_state=None,
):
    """Draw a true mixing measure ``G*`` that satisfies assumptions (A.2)–(A.5).

    - ``omega[h, k] ~ Uniform(omega_range)``, so every weight is ``> 0`` (A.2);
    - ``M[h, i]`` for ``i < N-1`` is symmetric, its upper-triangle entries (diagonal included)
      have a random sign and magnitude ``~ Uniform[scale/2, scale]``; ``M[h, N-1] = 0``
      (A.3). Every ``M[h, i]``, ``i < N-1``, is therefore non-zero (A.4);
    - every coordinate of ``a[h, i, k]`` has a random sign and magnitude
      ``~ Uniform[scale/2, scale]``; the ``H·N·K`` experts are pairwise at Euclidean distance
      ``>= min_separation`` across all heads, tokens and channels (A.5), by reject-and-redraw.

    All entries of ``M`` and ``a`` thus lie in ``[-scale, scale]`` with magnitude at least
    ``scale/2`` (entries of size ~2 show the MHA / gated separation clearly; docs: Theory to
    code, "The experiment template").

    Parameters
    ----------
    n_heads, n_tokens, n_experts, n_features : int, default=1, 2, 2, 2
        ``H``, ``N``, ``K`` and ``D``. ``n_tokens >= 2`` because (A.4) needs a non-zero gate
        matrix ``M[h, i]`` with ``i < N-1``.
    scale : float, default=2.0
        Size of the entries of ``M`` and ``a`` (magnitudes in ``[scale/2, scale]``).
    min_separation : float or None, default=None
        Minimal Euclidean distance between any two experts ``a[h, i, k]``.
        ``None`` means ``0.25 * scale`` (0.5 at the default scale); ``0`` only asks for
        distinct experts.
    omega_range : (float, float), default=(0.5, 1.5)
        ``0 < low <= high``; the weights are uniform on ``[low, high]``.
    random_state : int, RandomState instance or None, default=None
        Passed to :func:`sklearn.utils.check_random_state`. An int gives a reproducible draw.

    Returns
    -------
    MixingMeasure
        With ``omega`` of shape (H, K), ``M`` of shape (H, N, D, D) (normalised:
        ``M[h, N-1] = 0``) and ``a`` of shape (H, N, K, D).

    Raises
    ------
    ValueError
        Non-integer or too small sizes, ``scale <= 0``, negative ``min_separation``, a bad
        ``omega_range``, or a separation that cannot be reached: ``H·N·K`` experts at distance
        ``>= min_separation`` do not fit in the drawing region (lower ``min_separation``,
        raise ``scale`` or ``n_features``).

    Examples
    --------
    >>> from hmoe_estim import random_measure
    >>> G = random_measure(n_heads=1, n_tokens=2, n_experts=2, n_features=3, random_state=0)
    >>> G.shape, G.is_normalized()
    ((1, 2, 2, 3), True)
    """
    H = check_count(n_heads, "n_heads")
    N = check_count(n_tokens, "n_tokens", minimum=2)
    K = check_count(n_experts, "n_experts")
    D = check_count(n_features, "n_features")
    scale = check_positive(scale, "scale")
    if min_separation is None:
        min_separation = DEFAULT_SEPARATION_FRACTION * scale
    min_separation = check_positive(min_separation, "min_separation", allow_zero=True)
    try:
        low, high = (float(v) for v in omega_range)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"omega_range must be a pair (low, high) of numbers; got {omega_range!r}."
        ) from exc
    if not (np.isfinite(low) and np.isfinite(high) and 0 < low <= high):
        raise ValueError(
            f"omega_range must satisfy 0 < low <= high (assumption (A.2) needs positive "
            f"weights); got {omega_range!r}."
        )
    # The largest distance two experts can have is 2·scale·sqrt(D).
    if min_separation > 2.0 * scale * np.sqrt(D) and H * N * K > 1:
        raise ValueError(
            f"min_separation={min_separation:g} exceeds the diameter 2·scale·sqrt(D) = "
            f"{2 * scale * np.sqrt(D):g} of the region the experts are drawn from; lower it "
            "or raise scale."
        )
    rng = check_random_state(random_state)

    omega = rng.uniform(low, high, size=(H, K))

    M = np.zeros((H, N, D, D))
    iu = np.triu_indices(D)
    for h in range(H):
        for i in range(N - 1):
            upper = np.zeros((D, D))
            upper[iu] = _signed_magnitudes(rng, len(iu[0]), scale)
            M[h, i] = upper + np.triu(upper, 1).T

    # Distinct experts: with min_separation = 0 ask for a tiny positive gap instead.
    gap = min_separation if min_separation > 0 else 1e-12 * scale
    experts = _draw_experts(rng, H * N * K, D, scale, gap)
    if experts is None:
        raise ValueError(
            f"Could not draw {H * N * K} experts (H·N·K = {H}·{N}·{K}) in R^{D} pairwise at "
            f"distance >= {min_separation:g} with entries of magnitude in "
            f"[{scale / 2:g}, {scale:g}] after {_RESTARTS} restarts. Lower min_separation, "
            "raise scale, or use more features."
        )
    a = experts.reshape(H, N, K, D)
    return MixingMeasure(omega, M, a)


def make_hmoe_regression(
    n_samples,
    *,
    measure=None,
    n_heads=1,
    n_tokens=2,
    n_experts=2,
    n_features=2,
    gate="none",
    activation="sigmoid",
    noise=0.1,
    box=1.0,
    return_measure=False,
    random_state=None,
):
    """Draw a regression data set ``y = f_{G*}(X) + ε`` from a hierarchical MoE.

    ``X ~ Uniform([-box, box]^D)`` i.i.d. rows, ``y = regression_function(G*, X, gate=gate,
    activation=activation) + ε`` with ``ε ~ N(0, noise²)`` i.i.d. (paper eq. (1)).

    Randomness: ``check_random_state(random_state)`` gives a master stream, from which three
    seeds are drawn: one for the measure (when ``measure`` is None), one for ``X``, one for
    the noise. Hence, for an int ``random_state``:

    - the data are reproducible;
    - the data are **nested**: the first ``m`` rows of ``X`` and ``y`` for ``n_samples = n``
      equal those for ``n_samples = m < n`` (X and noise are read sequentially from their own
      streams), which allows warm starts along an ``n`` grid;
    - ``X`` and the noise do not depend on whether ``measure`` is given, and the drawn measure
      does not depend on ``n_samples``.

    Parameters
    ----------
    n_samples : int
        Number of samples, ``>= 1``.
    measure : MixingMeasure or None, default=None
        The true measure ``G*``. ``None`` draws one with :func:`random_measure` of sizes
        ``n_heads, n_tokens, n_experts, n_features`` (which are ignored otherwise).
    n_heads, n_tokens, n_experts, n_features : int, default=1, 2, 2, 2
        ``H*``, ``N*``, ``K*``, ``D`` of the drawn measure.
    gate : {"none", "value", "sdpa", "output"}, default="none"
        Regression function (paper eq. (2), (9), (12)): MHA, G2, G1 or G5.
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
        ``φ`` of the gated forms.
    noise : float, default=0.1
        Standard deviation ``σ >= 0`` of the Gaussian noise.
    box : float, default=1.0
        Half-width ``> 0`` of the input box (assumption (A.1): bounded inputs).
    return_measure : bool, default=False
        Also return the true measure.
    random_state : int, RandomState instance or None, default=None
        See above.

    Returns
    -------
    X : ndarray of shape (n_samples, D)
    y : ndarray of shape (n_samples,)
    measure : MixingMeasure
        Only if ``return_measure`` is True.

    Raises
    ------
    ValueError
        ``n_samples`` not an integer ``>= 1``, ``noise < 0``, ``box <= 0``, ``measure`` not a
        MixingMeasure, an unknown ``gate`` or ``activation``, or invalid sizes for
        :func:`random_measure`.

    Examples
    --------
    >>> from hmoe_estim import make_hmoe_regression
    >>> X, y, G = make_hmoe_regression(100, n_features=3, gate="value", return_measure=True,
    ...                                random_state=0)
    >>> X.shape, y.shape, G.shape
    ((100, 3), (100,), (1, 2, 2, 3))
    """
    n_samples = check_count(n_samples, "n_samples")
    noise = check_positive(noise, "noise", allow_zero=True)
    box = check_positive(box, "box")
    check_gate(gate)
    check_activation(activation)
    if measure is not None and not isinstance(measure, MixingMeasure):
        raise ValueError(
            f"measure must be a MixingMeasure or None; got {type(measure).__name__}. "
            "Draw one with random_measure(...) or build MixingMeasure(omega, M, a)."
        )

    master = check_random_state(random_state)
    measure_seed, x_seed, noise_seed = master.randint(0, 2**31 - 1, size=3)

    if measure is None:
        measure = random_measure(
            n_heads, n_tokens, n_experts, n_features, random_state=int(measure_seed)
        )
    D = measure.n_features

    X = np.random.RandomState(x_seed).uniform(-box, box, size=(n_samples, D))
    y = regression_function(measure, X, gate=gate, activation=activation)
    if noise > 0:
        y = y + noise * np.random.RandomState(noise_seed).standard_normal(n_samples)
    if return_measure:
        return X, y, measure
    return X, y
