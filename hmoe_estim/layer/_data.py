"""Synthetic data from a known attention layer: ``Y = f_layer(X) + ε``.

:func:`random_attention_layer` draws a truth with i.i.d. Gaussian weights scaled so that the
projections of standard normal tokens have variance ``scale²`` (``W_Q``, ``W_K``, ``W_V``,
``W_θ``: entries ``N(0, scale²/d)``; ``W_O``: ``N(0, scale²/d_v)``; intercept ``N(0,
scale²)``); with full Q/K, ``P_h = W_Q,h W_K,hᵀ / sqrt(d_v)`` of such a draw.
:func:`make_attention_regression` draws ``n`` token matrices (i.i.d. tokens, standard normal
by default or uniform on ``[-1, 1]^d``) and the outputs of the layer with i.i.d. Gaussian noise
of standard deviation ``noise`` on every entry (the regression model of the paper's eq. (1),
one output entry at a time).
"""

import numpy as np
from sklearn.utils import check_random_state

from .._validation import check_count, check_positive
from ._forward import attention_layer_output
from ._parameters import AttentionLayer, LayerLayout, check_choice, check_form

__all__ = ["random_attention_layer", "make_attention_regression"]

#: Doubles of ``X`` and ``Y`` together at most (2 GB): checked before allocating.
MAX_DATA_DOUBLES = 1 << 28


def random_attention_layer(n_heads=1, d=3, head_dim=2, d_out=None, *, qk="factored",
                           gate_form="activation", granularity="headwise",
                           fit_intercept=False, scale=1.0, random_state=None):
    """A random :class:`AttentionLayer` (see the module docstring).

    Parameters
    ----------
    n_heads, d, head_dim : int
        ``H``, token dimension, ``d_v``.
    d_out : int or None
        Output columns; ``None``: ``d`` (as in multi-head attention).
    qk : {"factored", "full"}
    gate_form : {"activation", "multiplicative"}
        ``"multiplicative"`` draws the gate's ``W_theta`` too.
    granularity : {"headwise", "elementwise"}
        Of the multiplicative gate (ignored otherwise).
    fit_intercept : bool
        Draw an intercept.
    scale : float > 0
    random_state : int, RandomState instance or None

    Examples
    --------
    >>> from hmoe_estim.layer import random_attention_layer
    >>> layer = random_attention_layer(2, 4, 2, random_state=0)
    >>> layer.W_Q.shape, layer.W_O.shape, layer.P_.shape
    ((2, 4, 2), (2, 2, 4), (2, 4, 4))
    """
    H = check_count(n_heads, "n_heads")
    d = check_count(d, "d")
    dv = check_count(head_dim, "head_dim")
    dout = d if d_out is None else check_count(d_out, "d_out")
    check_choice(gate_form, "gate_form", ("activation", "multiplicative"))
    check_choice(granularity, "granularity", ("headwise", "elementwise"))
    scale = check_positive(scale, "scale")
    layout = LayerLayout(H, d, dv, dout, qk=qk,
                         granularity=granularity if gate_form == "multiplicative" else None,
                         fit_intercept=bool(fit_intercept))
    rng = check_random_state(random_state)
    s_in = scale / np.sqrt(d)
    W_Q = rng.normal(0.0, s_in, size=(H, d, dv))
    W_K = rng.normal(0.0, s_in, size=(H, d, dv))
    kw = {
        "W_V": rng.normal(0.0, s_in, size=(H, d, dv)),
        "W_O": rng.normal(0.0, scale / np.sqrt(dv), size=(H, dv, dout)),
    }
    if layout.granularity == "headwise":
        kw["W_theta"] = rng.normal(0.0, s_in, size=(H, d))
    elif layout.granularity == "elementwise":
        kw["W_theta"] = rng.normal(0.0, s_in, size=(H, d, dv))
    if layout.fit_intercept:
        kw["intercept"] = rng.normal(0.0, scale, size=dout)
    if qk == "full":
        kw["P"] = np.einsum("hde,hfe->hdf", W_Q, W_K) / np.sqrt(dv)
    else:
        kw["W_Q"], kw["W_K"] = W_Q, W_K
    return AttentionLayer(**kw)


def make_attention_regression(n, layer, *, n_tokens, gate="none", activation="sigmoid",
                              gate_form=None, noise=0.0, rows="all", tokens="normal",
                              random_state=None):
    """Token matrices and noisy outputs of the attention layer ``layer``.

    Parameters
    ----------
    n : int
        Number of samples (token matrices).
    layer : AttentionLayer
        The truth (e.g. from :func:`random_attention_layer`).
    n_tokens : int
        Sequence length ``N``.
    gate, activation, gate_form, rows
        As in :func:`attention_layer_output`.
    noise : float >= 0
        Standard deviation of the Gaussian noise on every output entry.
    tokens : {"normal", "uniform"}
        Tokens i.i.d. ``N(0, I_d)``, or uniform on ``[-1, 1]^d``.
    random_state : int, RandomState instance or None

    Returns
    -------
    X : ndarray of shape (n, N, d)
    Y : ndarray of shape (n, N, d_out), or (n, d_out) with ``rows="last"``

    Examples
    --------
    >>> from hmoe_estim.layer import make_attention_regression, random_attention_layer
    >>> layer = random_attention_layer(1, 3, 2, random_state=0)
    >>> X, Y = make_attention_regression(50, layer, n_tokens=4, gate="value", noise=0.1,
    ...                                  random_state=1)
    >>> X.shape, Y.shape
    ((50, 4, 3), (50, 4, 3))
    """
    n = check_count(n, "n")
    N = check_count(n_tokens, "n_tokens")
    if not isinstance(layer, AttentionLayer):
        raise ValueError(f"layer must be an AttentionLayer; got {type(layer).__name__}.")
    check_form(layer, gate, activation, gate_form, rows)
    noise = check_positive(noise, "noise", allow_zero=True)
    check_choice(tokens, "tokens", ("normal", "uniform"))
    R = 1 if rows == "last" else N
    doubles = n * N * layer.d + n * R * layer.d_out
    if doubles > MAX_DATA_DOUBLES:
        raise ValueError(f"X and Y would hold {doubles} doubles ({8 * doubles / 1e9:.1f} GB), "
                         f"more than {MAX_DATA_DOUBLES}: lower n or n_tokens.")
    rng = check_random_state(random_state)
    if tokens == "normal":
        X = rng.normal(size=(n, N, layer.d))
    else:
        X = rng.uniform(-1.0, 1.0, size=(n, N, layer.d))
    Y = attention_layer_output(X, layer, gate=gate, activation=activation, gate_form=gate_form,
                               rows=rows)
    if noise > 0:
        Y = Y + rng.normal(0.0, noise, size=Y.shape)
    return X, Y
