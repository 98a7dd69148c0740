"""The mixing measure ``G`` of an (H, K, N)-HMoE: the parameters of the model
(docs: Theory to code, "Parameters: the mixing measure").

``G = Σ_h Σ_k ω[h,k] Σ_i δ_(M[h,i], a[h,i,k])`` (paper, after eq. (2)).
"""

import numpy as np

__all__ = ["MixingMeasure"]


def _as_float_array(value, name, ndim):
    try:
        is_complex = np.iscomplexobj(value)
    except (TypeError, ValueError):  # ragged lists: reported below
        is_complex = False
    if is_complex:
        raise ValueError(
            f"{name} must be real; got complex values. Pass the real part explicitly "
            "(the imaginary part would be dropped)."
        )
    try:
        arr = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array; got {type(value).__name__}.") from exc
    if arr.ndim != ndim:
        raise ValueError(
            f"{name} must be a {ndim}-D array; got shape {arr.shape}. "
            "Expected shapes: omega (H, K), M (H, N, D, D), a (H, N, K, D)."
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values; all parameters must be finite.")
    return arr


def _check_permutation(value, size, name, what):
    """``value`` as an int array if it is a permutation of ``range(size)``, else ValueError."""
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.shape[0] != size or arr.dtype.kind not in "iu" \
            or not np.array_equal(np.sort(arr), np.arange(size)):
        raise ValueError(
            f"{name} must be a permutation of range({size}) (the {size} {what}); got "
            f"{np.asarray(value).tolist()!r}."
        )
    return arr


class MixingMeasure:
    """Parameters of a three-level hierarchical mixture of experts.

    Heads ``h ∈ [H]``, tokens ``i ∈ [N]`` and value channels ``k ∈ [K]`` on inputs
    ``x ∈ R^D`` (the paper's ``d̄``).

    Parameters
    ----------
    omega : array-like of shape (H, K)
        Channel weights ``ω[h, k]`` (first level). The estimators keep them ``>= 0``
        (assumption (A.2)); signed weights are accepted here because an attention layer's
        ``W_O`` is signed.
    M : array-like of shape (H, N, D, D)
        Symmetric gate matrices ``M[h, i]`` of the token softmax ``softmax_i(xᵀ M[h,i] x)``.
    a : array-like of shape (H, N, K, D)
        Expert vectors ``a[h, i, k]``; the expert is ``a·x`` (or ``φ(a·x)`` under the value gate).
    atol : float, default=1e-10
        Tolerance of the symmetry check, relative to the largest entry of ``M``.

    Raises
    ------
    ValueError
        If an array has the wrong number of dimensions, the shapes disagree with each other,
        an ``M[h, i]`` is not symmetric, or a value is NaN or infinite.

    Examples
    --------
    >>> import numpy as np
    >>> from hmoe_estim import MixingMeasure
    >>> G = MixingMeasure(np.ones((1, 2)), np.zeros((1, 3, 2, 2)), np.ones((1, 3, 2, 2)))
    >>> G.n_heads, G.n_tokens, G.n_experts, G.n_features
    (1, 3, 2, 2)
    """

    def __init__(self, omega, M, a, *, atol=1e-10):
        omega = _as_float_array(omega, "omega", 2)
        M = _as_float_array(M, "M", 4)
        a = _as_float_array(a, "a", 4)
        H, K = omega.shape
        if H < 1 or K < 1:
            raise ValueError("omega must have at least one head and one channel; got shape "
                             f"{omega.shape}.")
        if M.shape[0] != H:
            raise ValueError(
                f"M has {M.shape[0]} heads but omega has {H}: M must have shape (H, N, D, D) "
                f"= ({H}, N, D, D)."
            )
        N, D = M.shape[1], M.shape[2]
        if N < 1 or D < 1 or M.shape[3] != D:
            raise ValueError(f"M must have shape (H, N, D, D) with N, D >= 1; got {M.shape}.")
        expected_a = (H, N, K, D)
        if a.shape != expected_a:
            raise ValueError(
                f"a must have shape (H, N, K, D) = {expected_a} to match omega {omega.shape} "
                f"and M {M.shape}; got {a.shape}."
            )
        scale = max(1.0, float(np.max(np.abs(M))) if M.size else 1.0)
        asym = np.abs(M - np.swapaxes(M, 2, 3))
        if asym.size and asym.max() > atol * scale:
            h, i = np.unravel_index(np.argmax(asym.max(axis=(2, 3))), (H, N))
            raise ValueError(
                f"M[{h}, {i}] is not symmetric (largest |M - M^T| = {asym.max():.3g}). The gate "
                "only sees the symmetric part: pass (M + M^T) / 2."
            )
        # halves first: (M + Mᵀ) / 2 would overflow for entries near the float64 maximum
        M = 0.5 * M + 0.5 * np.swapaxes(M, 2, 3)
        with np.errstate(over="ignore", invalid="ignore"):
            gauge_ok = bool(np.all(np.isfinite(M - M[:, -1:])))
        if not gauge_ok:
            raise ValueError(
                f"M has entries as large as {np.max(np.abs(M)):.3g}: their differences (the "
                "gate's gauge M[h, i] - M[h, N-1]) overflow float64. Rescale the parameters "
                "to moderate values."
            )
        self.omega = omega
        self.M = M
        self.a = a

    # -- shapes -------------------------------------------------------------------------
    @property
    def n_heads(self):
        """Number of heads ``H``."""
        return self.omega.shape[0]

    @property
    def n_experts(self):
        """Number of value channels ``K`` per head."""
        return self.omega.shape[1]

    @property
    def n_tokens(self):
        """Number of tokens ``N`` (experts per channel)."""
        return self.M.shape[1]

    @property
    def n_features(self):
        """Input dimension ``D``."""
        return self.M.shape[2]

    @property
    def shape(self):
        """``(H, N, K, D)``."""
        return (self.n_heads, self.n_tokens, self.n_experts, self.n_features)

    # -- transformations ----------------------------------------------------------------
    def normalized(self):
        """Return the equivalent measure with ``M[h, N-1] = 0`` (assumption (A.3)).

        The token softmax is invariant to adding one matrix to every ``M[h, i]``; subtracting
        ``M[h, N-1]`` fixes that gauge without changing the regression function.
        """
        M = self.M - self.M[:, -1:, :, :]
        return MixingMeasure(self.omega.copy(), M, self.a.copy())

    def is_normalized(self, atol=1e-12):
        """Whether ``M[h, N-1] = 0`` for every head."""
        return bool(np.all(np.abs(self.M[:, -1]) <= atol))

    def copy(self):
        """A deep copy."""
        return MixingMeasure(self.omega.copy(), self.M.copy(), self.a.copy())

    def permuted(self, heads=None, channels=None, tokens=None):
        """Relabel heads, channels (per head the same permutation) and tokens.

        ``tokens`` may be one permutation of ``range(N)`` or one per head (shape (H, N)).
        The regression function is unchanged; the result is not re-normalised.
        """
        H, N, K, D = self.shape
        heads = np.arange(H) if heads is None else _check_permutation(heads, H, "heads", "heads")
        channels = np.arange(K) if channels is None else _check_permutation(
            channels, K, "channels", "value channels")
        tok = np.tile(np.arange(N), (H, 1)) if tokens is None else np.asarray(tokens)
        if tok.ndim == 1:
            tok = np.tile(tok, (H, 1))
        if tok.shape != (H, N):
            raise ValueError(
                f"tokens must be a permutation of range({N}) or one per head, shape ({H}, {N}); "
                f"got shape {tok.shape}."
            )
        tok = np.stack([_check_permutation(t, N, "tokens", "tokens") for t in tok])
        omega = self.omega[heads][:, channels]
        M = np.stack([self.M[heads[h], tok[h]] for h in range(H)])
        a = np.stack([self.a[heads[h]][tok[h]][:, channels] for h in range(H)])
        return MixingMeasure(omega, M, a)

    def to_dict(self):
        """Plain-list form (JSON-serialisable)."""
        return {"omega": self.omega.tolist(), "M": self.M.tolist(), "a": self.a.tolist()}

    @classmethod
    def from_dict(cls, d):
        """Inverse of :meth:`to_dict`."""
        if not isinstance(d, dict):
            raise ValueError(
                f"a measure must be a dict with keys 'omega', 'M' and 'a'; got {type(d).__name__}."
            )
        missing = [k for k in ("omega", "M", "a") if k not in d]
        if missing:
            raise ValueError(
                f"the measure dict is missing {missing}; it needs 'omega' (H, K), "
                "'M' (H, N, D, D) and 'a' (H, N, K, D), as written by to_dict()."
            )
        return cls(d["omega"], d["M"], d["a"])

    def __repr__(self):
        H, N, K, D = self.shape
        return f"MixingMeasure(H={H}, N={N}, K={K}, D={D})"

    def __eq__(self, other):
        if not isinstance(other, MixingMeasure):
            return NotImplemented
        return (
            self.shape == other.shape
            and np.array_equal(self.omega, other.omega)
            and np.array_equal(self.M, other.M)
            and np.array_equal(self.a, other.a)
        )

    __hash__ = None
