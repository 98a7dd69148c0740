"""Multi-head (gated) self-attention and its HMoE representation (paper, Section 2).

:func:`multihead_attention` computes the attention layer directly on a token matrix
``X ∈ R^{N×d}``:

``Σ_h softmax(X W_Q,h W_K,hᵀ Xᵀ / sqrt(d_v)) X W_V,h W_O,h``

with an optional non-linearity ``φ`` at one of the gate positions of the paper's eq. (9) and (12).
:func:`attention_to_measure` converts the weights into the :class:`MixingMeasure` of one output
entry ``(row, column)``, on the input ``x = vec(X) = X.reshape(-1)`` (tokens one after the
other, ``D = N·d``), so that

``regression_function(G, X.reshape(1, -1), gate=g)``
``== multihead_attention(X, ..., gate=g)[row, column]``

for every gate ``g``: the identity "gated attention meets HMoE" made executable.
"""

import numbers

import numpy as np

from .._validation import check_activation, check_gate
from ..kernels import phi as _phi
from ..model import MixingMeasure

__all__ = ["multihead_attention", "attention_to_measure"]


def _weights(W, name):
    try:
        arr = np.asarray(W, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array; got {type(W).__name__}.") from exc
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values.")
    return arr


def _check_weights(W_Q, W_K, W_V, W_O):
    """Validate the four weight arrays; return them as float64 and ``(H, d, d_v)``."""
    W_Q = _weights(W_Q, "W_Q")
    W_K = _weights(W_K, "W_K")
    W_V = _weights(W_V, "W_V")
    W_O = _weights(W_O, "W_O")
    if W_Q.ndim != 3:
        raise ValueError(
            f"W_Q must have shape (H, d, d_v) (one d×d_v matrix per head); got {W_Q.shape}. "
            "For one head use W_Q[None]."
        )
    H, d, d_v = W_Q.shape
    if H < 1 or d < 1 or d_v < 1:
        raise ValueError(f"W_Q must have shape (H, d, d_v) with H, d, d_v >= 1; got {W_Q.shape}.")
    for name, W in (("W_K", W_K), ("W_V", W_V)):
        if W.shape != (H, d, d_v):
            raise ValueError(
                f"{name} must have shape (H, d, d_v) = {(H, d, d_v)} like W_Q; got {W.shape}."
            )
    if W_O.shape != (H, d_v, d):
        raise ValueError(
            f"W_O must have shape (H, d_v, d) = {(H, d_v, d)} (the head blocks W_O,h of the "
            f"(H·d_v)×d output projection); got {W_O.shape}."
        )
    return W_Q, W_K, W_V, W_O, (H, d, d_v)


def multihead_attention(X, W_Q, W_K, W_V, W_O, *, gate="none", activation="sigmoid"):
    """Multi-head self-attention, optionally gated, computed directly.

    With the scores ``S_h = softmax(X W_Q,h W_K,hᵀ Xᵀ / sqrt(d_v))`` (softmax over each row,
    computed stably):

    - ``gate="none"`` (MHA, paper Section 2): ``Σ_h S_h X W_V,h W_O,h``;
    - ``gate="value"`` (G2): ``Σ_h S_h φ(X W_V,h) W_O,h``;
    - ``gate="sdpa"`` (G1): ``Σ_h φ(S_h X W_V,h) W_O,h``;
    - ``gate="output"`` (G5): ``φ(Σ_h S_h X W_V,h W_O,h)``.

    ``W_O,h`` is the ``h``-th block of ``d_v`` rows of the ``(H·d_v)×d`` output projection,
    so ``Concat(head_1, …, head_H) W_O = Σ_h head_h W_O,h``.

    Parameters
    ----------
    X : array-like of shape (N, d) or (B, N, d)
        Token matrix (rows are tokens), or a batch of them.
    W_Q, W_K, W_V : array-like of shape (H, d, d_v)
        Query, key and value projections of each head.
    W_O : array-like of shape (H, d_v, d)
        Output projection, per head.
    gate : {"none", "value", "sdpa", "output"}, default="none"
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
        ``φ`` (ignored for ``gate="none"``).

    Returns
    -------
    ndarray of shape (N, d) or (B, N, d)

    Raises
    ------
    ValueError
        Shapes that do not fit together (the message names the expected shapes), non-finite
        values, an unknown gate or activation.

    Examples
    --------
    >>> import numpy as np
    >>> from hmoe_estim.attention import multihead_attention
    >>> rng = np.random.default_rng(0)
    >>> W_Q, W_K, W_V = rng.normal(size=(3, 2, 4, 3))   # H=2 heads, d=4, d_v=3
    >>> W_O = rng.normal(size=(2, 3, 4))
    >>> multihead_attention(rng.normal(size=(5, 4)), W_Q, W_K, W_V, W_O, gate="value").shape
    (5, 4)
    """
    check_gate(gate)
    check_activation(activation)
    W_Q, W_K, W_V, W_O, (H, d, d_v) = _check_weights(W_Q, W_K, W_V, W_O)
    X = _weights(X, "X")
    if X.ndim not in (2, 3) or X.shape[-1] != d or X.shape[-2] < 1:
        raise ValueError(
            f"X must have shape (N, d) or (B, N, d) with d = {d} (the rows of W_Q) and N >= 1; "
            f"got {X.shape}."
        )
    Q = np.einsum("...nd,hde->...hne", X, W_Q)
    Kmat = np.einsum("...nd,hde->...hne", X, W_K)
    V = np.einsum("...nd,hde->...hne", X, W_V)
    scores = np.einsum("...hne,...hme->...hnm", Q, Kmat) / np.sqrt(d_v)
    if not np.all(np.isfinite(scores)):
        raise ValueError(
            "the attention scores X W_Q W_Kᵀ Xᵀ / sqrt(d_v) overflow float64 (|X| up to "
            f"{np.max(np.abs(X)):.3g}); rescale X or the weights to moderate values."
        )
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights /= weights.sum(axis=-1, keepdims=True)
    if gate == "value":
        V = _phi(activation, V)
    heads = np.einsum("...hnm,...hme->...hne", weights, V)
    if gate == "sdpa":
        heads = _phi(activation, heads)
    out = np.einsum("...hne,hef->...nf", heads, W_O)
    if gate == "output":
        out = _phi(activation, out)
    if not np.all(np.isfinite(out)):
        raise ValueError(
            f"the attention output overflows float64 (|X| up to {np.max(np.abs(X)):.3g}); "
            "rescale X or the weights to moderate values."
        )
    return out


def _check_index(value, name, size, what):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer in [0, {size - 1}] ({what}); got {value!r}.")
    if not 0 <= value < size:
        raise ValueError(f"{name} must be in [0, {size - 1}] ({what}); got {value}.")
    return int(value)


def attention_to_measure(W_Q, W_K, W_V, W_O, *, n_tokens, row, column):
    """The HMoE mixing measure of one entry of a multi-head attention output.

    Follows the paper's Section 2 ("Gated Attention meets Hierarchical Mixture of Experts"):
    on the input
    ``x = vec(X) = X.reshape(-1)`` (``D = N·d``, token ``j`` in coordinates
    ``j·d … (j+1)·d - 1``), with ``J_j = e_jᵀ ⊗ I_d`` (so ``J_j x = x_j``),
    ``P_h = W_Q,h W_K,hᵀ / sqrt(d_v)``:

    - gate matrices ``M[h, j] = J_rowᵀ P_h J_j``, symmetrised to ``(M + Mᵀ)/2`` (the quadratic
      form ``xᵀ M x`` is unchanged) and normalised to ``M[h, N-1] = 0`` (assumption (A.3); the
      token softmax is translation invariant);
    - experts ``a[h, j, k]`` = column ``k`` of ``A_{h,j} = J_jᵀ W_V,h``, i.e. ``W_V,h[:, k]``
      placed in the block of token ``j``;
    - weights ``omega[h, k] = W_O[h, k, column]`` (signed: an attention layer need not satisfy
      (A.2)).

    So ``H`` heads, ``K = d_v`` channels, ``N`` tokens, ``D = N·d`` features, and for every gate
    ``g`` (G5 included: it applies ``φ`` to the output entry)::

        regression_function(G, X.reshape(1, -1), gate=g, activation=φ)[0]
            == multihead_attention(X, W_Q, W_K, W_V, W_O, gate=g, activation=φ)[row, column]

    Parameters
    ----------
    W_Q, W_K, W_V : array-like of shape (H, d, d_v)
    W_O : array-like of shape (H, d_v, d)
        As in :func:`multihead_attention`.
    n_tokens : int
        Sequence length ``N >= 1`` (the weights do not determine it).
    row : int
        Output token ``i ∈ [0, N)`` (the query whose softmax row gates the experts).
    column : int
        Output feature ``i' ∈ [0, d)`` (selects the column of ``W_O``).

    Returns
    -------
    MixingMeasure
        ``omega`` (H, d_v), ``M`` (H, N, N·d, N·d), ``a`` (H, N, d_v, N·d).

    Raises
    ------
    ValueError
        Shapes that do not fit together, ``n_tokens < 1``, ``row`` or ``column`` out of range.

    Examples
    --------
    >>> import numpy as np
    >>> from hmoe_estim import regression_function
    >>> from hmoe_estim.attention import attention_to_measure, multihead_attention
    >>> rng = np.random.default_rng(0)
    >>> W_Q, W_K, W_V = rng.normal(size=(3, 2, 4, 3))
    >>> W_O = rng.normal(size=(2, 3, 4))
    >>> X = rng.normal(size=(5, 4))
    >>> G = attention_to_measure(W_Q, W_K, W_V, W_O, n_tokens=5, row=1, column=2)
    >>> G.shape
    (2, 5, 3, 20)
    >>> direct = multihead_attention(X, W_Q, W_K, W_V, W_O, gate="sdpa")[1, 2]
    >>> bool(np.isclose(regression_function(G, X.reshape(1, -1), gate="sdpa")[0], direct))
    True
    """
    W_Q, W_K, W_V, W_O, (H, d, d_v) = _check_weights(W_Q, W_K, W_V, W_O)
    if isinstance(n_tokens, (bool, np.bool_)) or not isinstance(n_tokens, numbers.Integral) \
            or n_tokens < 1:
        raise ValueError(f"n_tokens must be an integer >= 1 (sequence length N); got {n_tokens!r}.")
    N = int(n_tokens)
    row = _check_index(row, "row", N, "an output token, N = n_tokens")
    column = _check_index(column, "column", d, "an output feature, d = W_Q.shape[1]")
    D = N * d

    P = np.einsum("hde,hfe->hdf", W_Q, W_K) / np.sqrt(d_v)  # (H, d, d)
    M = np.zeros((H, N, D, D))
    rs = slice(row * d, (row + 1) * d)
    for j in range(N):
        js = slice(j * d, (j + 1) * d)
        M[:, j, rs, js] = P  # J_rowᵀ P_h J_j
    M = 0.5 * (M + np.swapaxes(M, 2, 3))

    a = np.zeros((H, N, d_v, D))
    for j in range(N):
        # column k of J_jᵀ W_V,h is W_V,h[:, k] in the block of token j
        a[:, j, :, j * d:(j + 1) * d] = np.swapaxes(W_V, 1, 2)

    omega = W_O[:, :, column].copy()
    return MixingMeasure(omega, M, a).normalized()

