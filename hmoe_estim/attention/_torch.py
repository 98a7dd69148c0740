"""PyTorch in and out: ``torch.nn.MultiheadAttention`` ⇄ HMoE mixing measures.

Optional dependency (``pip install "hmoe-estim[torch]"``); nothing here is imported by the rest
of the package.

**In.** :func:`from_torch` reads a ``torch.nn.MultiheadAttention`` used as *self*-attention
(``query = key = value = X``, ``X`` of shape ``(N, E)``) and returns the
:class:`~hmoe_estim.MixingMeasure` of one output entry ``(row, column)``, through
:func:`~hmoe_estim.attention.attention_to_measure` (the construction of the paper's Section 2:
``M[h, j] = J_rowᵀ P_h J_j``, ``P_h = W_Q,h W_K,hᵀ / sqrt(d_v)``, experts ``J_jᵀ W_V,h``,
``omega = W_O[:, :, column]``). In PyTorch's layout, with ``E = embed_dim``, ``H = num_heads``
and ``d_v = E / H`` (``head_dim``)::

    W_Q,h = in_proj_weight[0:E][h·d_v:(h+1)·d_v].T          (E, d_v)
    W_K,h = in_proj_weight[E:2E][h·d_v:(h+1)·d_v].T         (E, d_v)
    W_V,h = in_proj_weight[2E:3E][h·d_v:(h+1)·d_v].T        (E, d_v)
    W_O,h = out_proj.weight[:, h·d_v:(h+1)·d_v].T           (d_v, E)

and PyTorch scales the logits by ``1/sqrt(head_dim) = 1/sqrt(d_v)``, as the paper does. On the
input ``x = vec(X) = X.reshape(-1)`` (``D = N·E``)::

    regression_function(from_torch(m, n_tokens=N, row=i, column=c), X.reshape(1, -1))
        == m(X, X, X)[0][i, c]           (gate="none", module without biases)

and the same measure gives the gated positions of :func:`attention_forward` (value, SDPA and
output gates, eq. (9), (12) and G5). :func:`from_torch_all` returns every entry at once.

Biases, exactly where the HMoE form allows them:

- the key bias ``b_K`` adds ``q_i·b_K`` to every logit of row ``i``: the token softmax does not
  see it, it is dropped;
- the query bias ``b_Q`` adds ``b_Q,h·(W_K,hᵀ x_j)``, a term *linear* in ``x`` that differs
  from token to token: the gate ``xᵀ M x`` has no such term, so a non-zero ``W_K,h b_Q,h`` is
  a ``ValueError``;
- the value bias ``b_V`` (the softmax weights sum to 1) and the output bias add the constant
  ``Σ_h b_V,h·W_O,h[:, column] + b_out[column]`` to the entry: an intercept
  (``return_intercept=True``). It is exact for ``gate="none"``; at the gated positions the
  value bias sits inside ``φ``, where an HMoE has no constant;
- ``add_bias_kv`` (a learnt extra key whose logit is linear in ``x``) and ``kdim``/``vdim``
  different from ``embed_dim`` (keys and values from another sequence: not self-attention of
  ``X``) do not fit: ``ValueError``. ``add_zero_attn`` appends a token with key and value 0:
  exact, as an extra token ``N`` with ``M = 0`` and ``a = 0`` (the measure has ``N + 1`` tokens).

**Out.** :func:`to_torch` builds a ``torch.nn.MultiheadAttention`` (``bias=False``, or only an
output bias) from ``(W_Q, W_K, W_V, W_O)`` — for example a teacher layer of a study;
:func:`weights_from_torch` is its inverse. :func:`measure_to_torch` evaluates any (fitted)
measure ``f_G(x)`` (plus an intercept) as a ``torch.nn.Module`` (class ``HMoEModule``, built on
first use so that this file imports without PyTorch).

Why one module of this size: every conversion reads or writes the same packed ``in_proj_weight``
layout and shares its checks of a module's sizes and biases; most of the length is validation
with its messages and the docstrings.
"""

import numbers

import numpy as np

from .._validation import check_activation, check_gate
from ..model import MixingMeasure
from ._conversion import _check_index, attention_to_measure

__all__ = [
    "from_torch",
    "from_torch_all",
    "weights_from_torch",
    "to_torch",
    "measure_to_torch",
    "attention_forward",
]

#: Tolerance (relative to the weights' scale) below which a bias part counts as zero.
BIAS_RTOL = 1e-12


def _torch():
    """Import PyTorch or raise an ``ImportError`` that names the extra."""
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            "PyTorch is needed for the conversions of hmoe_estim.attention.from_torch/to_torch; "
            "install the optional extra: pip install \"hmoe-estim[torch]\" (or pip install torch)."
        ) from exc
    return torch


def _numpy(t):
    return t.detach().cpu().to(dtype=_torch().float64).numpy().copy()


def _check_module(module):
    """Validate a ``torch.nn.MultiheadAttention``; return ``(H, E, d_v)``."""
    torch = _torch()
    if not isinstance(module, torch.nn.MultiheadAttention):
        raise ValueError(
            f"module must be a torch.nn.MultiheadAttention; got {type(module).__name__}. "
            "For raw weights use hmoe_estim.attention.attention_to_measure."
        )
    E, H = module.embed_dim, module.num_heads
    if module.kdim != E or module.vdim != E or not module._qkv_same_embed_dim:
        raise ValueError(
            f"the module has kdim = {module.kdim}, vdim = {module.vdim} but embed_dim = {E}: "
            "its keys and values come from another sequence, so it is not self-attention of one "
            "token matrix X and has no HMoE form on x = vec(X). Use kdim = vdim = embed_dim."
        )
    if module.bias_k is not None or module.bias_v is not None:
        raise ValueError(
            "the module has add_bias_kv=True: the extra key bias_k gives a logit q_i·bias_k "
            "that is linear in x, which the gate xᵀ M x cannot express. Use add_bias_kv=False."
        )
    if H < 1 or E % H:
        raise ValueError(f"embed_dim = {E} is not a multiple of num_heads = {H}.")
    d_v = E // H
    W_in = module.in_proj_weight
    if W_in is None or tuple(W_in.shape) != (3 * E, E):
        shape = None if W_in is None else tuple(W_in.shape)
        raise ValueError(
            f"in_proj_weight has shape {shape}; (H, d, d_v) = ({H}, {E}, {d_v}) needs "
            f"(3·E, E) = {(3 * E, E)}."
        )
    if tuple(module.out_proj.weight.shape) != (E, E):
        raise ValueError(
            f"out_proj.weight has shape {tuple(module.out_proj.weight.shape)}; embed_dim = {E} "
            f"needs {(E, E)}."
        )
    return H, E, d_v


def weights_from_torch(module):
    """``(W_Q, W_K, W_V, W_O)`` of a ``torch.nn.MultiheadAttention`` as float64 arrays.

    Shapes ``(H, E, d_v)`` for the projections and ``(H, d_v, E)`` for ``W_O`` (the layout of
    :func:`~hmoe_estim.attention.multihead_attention`); the inverse of :func:`to_torch`.
    Biases are not part of the result (see :func:`from_torch`).

    Raises
    ------
    ValueError
        Another module type, ``kdim``/``vdim`` different from ``embed_dim``, ``add_bias_kv``,
        or weights whose shapes do not give ``(H, d, d_v)``.
    ImportError
        PyTorch is not installed.
    """
    H, E, d_v = _check_module(module)
    W_in = _numpy(module.in_proj_weight)  # (3E, E): rows are output features
    W_out = _numpy(module.out_proj.weight)  # (E, E): out = heads @ W_out.T

    def per_head(block):  # (E, E) rows h·d_v.. -> (H, E, d_v)
        return np.ascontiguousarray(block.reshape(H, d_v, E).transpose(0, 2, 1))

    W_Q, W_K, W_V = (per_head(W_in[p * E:(p + 1) * E]) for p in range(3))
    W_O = np.ascontiguousarray(W_out.T.reshape(H, d_v, E))
    return W_Q, W_K, W_V, W_O


def _biases(module, W_K, W_O):
    """The constant each output column gets from the value and output biases, shape (E,).

    Raises if the query bias adds a token-dependent term linear in ``x`` to the logits.
    """
    H, E, d_v = W_K.shape[0], W_K.shape[1], W_K.shape[2]
    const = np.zeros(E)
    if module.in_proj_bias is not None:
        b = _numpy(module.in_proj_bias)
        b_q, b_v = b[:E].reshape(H, d_v), b[2 * E:].reshape(H, d_v)
        lin = np.einsum("hde,he->hd", W_K, b_q)  # logit term b_Q,h·(W_K,hᵀ x_j)
        scale = max(1.0, float(np.abs(W_K).max()) * max(1.0, float(np.abs(b_q).max())))
        if np.abs(lin).max() > BIAS_RTOL * scale:
            h = int(np.argmax(np.abs(lin).max(axis=1)))
            raise ValueError(
                "in_proj_bias (its query part, entries 0..embed_dim-1) adds b_Q,h·(W_K,hᵀ x_j) "
                f"to the attention logits (largest |W_K,h b_Q,h| = {np.abs(lin).max():.3g}, head "
                f"{h}): a term linear in x that differs between tokens, which the HMoE gate "
                "xᵀ M x cannot express. Zero the query bias (the key and value biases are fine)."
            )
        if module.add_zero_attn:
            # the zero token has key 0 and value 0, so neither bias is shared by every token
            W_Q = weights_from_torch(module)[0]
            b_k = b[E:2 * E].reshape(H, d_v)
            for name, part in (
                ("key", np.einsum("hde,he->hd", W_Q, b_k)), ("value", b_v),
            ):
                if np.abs(part).max() > BIAS_RTOL * max(1.0, float(np.abs(W_Q).max())):
                    raise ValueError(
                        f"with add_zero_attn=True the {name} bias does not fit: the appended "
                        f"zero token has no {name} bias, so the {name} bias no longer cancels "
                        f"(key: in the softmax; value: as a constant). Zero the {name} part of "
                        "in_proj_bias or use add_zero_attn=False."
                    )
        const += np.einsum("he,hef->f", b_v, W_O)
    if module.out_proj.bias is not None:
        const += _numpy(module.out_proj.bias)
    return const


def _check_tokens(n_tokens):
    if isinstance(n_tokens, (bool, np.bool_)) or not isinstance(n_tokens, numbers.Integral) \
            or n_tokens < 1:
        raise ValueError(f"n_tokens must be an integer >= 1 (sequence length N); got {n_tokens!r}.")
    return int(n_tokens)


def _entry_measure(W, module, N, row, column):
    G = attention_to_measure(*W, n_tokens=N, row=row, column=column)
    if not module.add_zero_attn:
        return G
    # the zero token's logit is 0 exactly, so add it before normalising: recompute the raw
    # gate matrices (un-normalised) with one more all-zero token
    raw = _raw_measure(W, N, row, column)
    H, _, K, D = raw.shape
    M = np.concatenate([raw.M, np.zeros((H, 1, D, D))], axis=1)
    a = np.concatenate([raw.a, np.zeros((H, 1, K, D))], axis=1)
    return MixingMeasure(raw.omega, M, a).normalized()


def _raw_measure(W, N, row, column):
    """:func:`attention_to_measure` before the gauge normalisation ``M[h, N-1] = 0``."""
    W_Q, W_K, W_V, W_O = W
    H, d, d_v = W_Q.shape
    D = N * d
    P = np.einsum("hde,hfe->hdf", W_Q, W_K) / np.sqrt(d_v)
    M = np.zeros((H, N, D, D))
    rs = slice(row * d, (row + 1) * d)
    for j in range(N):
        M[:, j, rs, j * d:(j + 1) * d] = P
    M = 0.5 * (M + np.swapaxes(M, 2, 3))
    a = np.zeros((H, N, d_v, D))
    for j in range(N):
        a[:, j, :, j * d:(j + 1) * d] = np.swapaxes(W_V, 1, 2)
    return MixingMeasure(W_O[:, :, column].copy(), M, a)


def from_torch(module, *, n_tokens, row, column, return_intercept=False):
    """The HMoE mixing measure of one output entry of a ``torch.nn.MultiheadAttention``.

    The module is read as self-attention on a token matrix ``X`` of shape ``(N, E)``; the
    measure is that of :func:`~hmoe_estim.attention.attention_to_measure` (excerpt Section 2) on
    ``x = vec(X)``: ``H = num_heads`` heads, ``K = d_v = E / H`` channels, ``N`` tokens
    (``N + 1`` with ``add_zero_attn``), ``D = N·E`` features. It serves every gate position::

        regression_function(G, X.reshape(1, -1), gate=g, activation=φ)[0] + c
            == attention_forward(module, X, gate=g, activation=φ)[row, column]

    with ``c = 0`` for a module without value/output biases (and ``c`` the returned intercept
    for ``gate="none"``). For ``gate="none"`` the right-hand side is the module's own output
    ``module(X, X, X)[0][row, column]`` (in eval mode: dropout off).

    Parameters
    ----------
    module : torch.nn.MultiheadAttention
    n_tokens : int
        Sequence length ``N >= 1`` (the weights do not fix it).
    row : int
        Output token in ``[0, N)``.
    column : int
        Output feature in ``[0, E)``.
    return_intercept : bool, default=False
        Also return the constant ``c`` that the value and output biases add to the entry.

    Returns
    -------
    MixingMeasure, or (MixingMeasure, float) with ``return_intercept=True``

    Raises
    ------
    ValueError
        Another module type; sizes that do not give ``(H, d, d_v)``; ``row``/``column`` out of
        range; a part that has no HMoE form (query bias with ``W_K,h b_Q,h ≠ 0``,
        ``add_bias_kv``, ``kdim``/``vdim`` ≠ ``embed_dim``); biases that add a constant while
        ``return_intercept=False``.
    ImportError
        PyTorch is not installed (extra ``torch``).
    """
    W = weights_from_torch(module)
    N = _check_tokens(n_tokens)
    E = W[0].shape[1]
    row = _check_index(row, "row", N, "an output token, N = n_tokens")
    column = _check_index(column, "column", E, "an output feature, E = embed_dim")
    const = _biases(module, W[1], W[3])
    c = float(const[column])
    if c != 0.0 and not return_intercept:
        raise ValueError(
            f"the module's value/output biases add the constant {c:.6g} to output column "
            f"{column}, and an HMoE regression function has no constant: pass "
            "return_intercept=True to get it (exact for gate='none'), or build the module with "
            "bias=False."
        )
    G = _entry_measure(W, module, N, row, column)
    return (G, c) if return_intercept else G


def from_torch_all(module, *, n_tokens, return_intercept=False):
    """Every output entry at once: ``measures[row][column]`` as in :func:`from_torch`.

    Returns
    -------
    list of list of MixingMeasure, shape ``N × E``; with ``return_intercept=True`` also the
    constants, an array of shape ``(E,)`` (the same for every row).
    """
    W = weights_from_torch(module)
    N = _check_tokens(n_tokens)
    E = W[0].shape[1]
    const = _biases(module, W[1], W[3])
    if np.any(const != 0.0) and not return_intercept:
        raise ValueError(
            "the module's value/output biases add constants to the output columns "
            f"(largest {np.abs(const).max():.6g}); an HMoE regression function has none: pass "
            "return_intercept=True, or build the module with bias=False."
        )
    measures = [[_entry_measure(W, module, N, i, c) for c in range(E)] for i in range(N)]
    return (measures, const) if return_intercept else measures


def to_torch(W_Q, W_K, W_V, W_O, *, bias=None, batch_first=True, dtype=None):
    """A ``torch.nn.MultiheadAttention`` with the given weights (the inverse of
    :func:`weights_from_torch`).

    Parameters
    ----------
    W_Q, W_K, W_V : array-like of shape (H, d, d_v)
    W_O : array-like of shape (H, d_v, d)
        As in :func:`~hmoe_estim.attention.multihead_attention`. PyTorch's module has
        ``head_dim = embed_dim / num_heads``, so ``d_v·H`` must equal ``d``.
    bias : array-like of shape (d,) or None, default=None
        Output bias (a constant per output column). ``None``: a module with ``bias=False``.
    batch_first : bool, default=True
    dtype : torch.dtype or None, default=None
        ``torch.float64`` when None (exact comparisons with the HMoE kernels).

    Returns
    -------
    torch.nn.MultiheadAttention in eval mode.

    Raises
    ------
    ValueError
        Shapes that do not fit together, or ``d_v·H ≠ d``.
    ImportError
        PyTorch is not installed.
    """
    from ._conversion import _check_weights

    torch = _torch()
    W_Q, W_K, W_V, W_O, (H, d, d_v) = _check_weights(W_Q, W_K, W_V, W_O)
    if H * d_v != d:
        raise ValueError(
            f"torch.nn.MultiheadAttention has head_dim = embed_dim / num_heads, so the weights "
            f"must have d_v·H = d; got (H, d, d_v) = {(H, d, d_v)}."
        )
    dtype = torch.float64 if dtype is None else dtype
    if bias is not None:
        bias = np.asarray(bias, dtype=np.float64)
        if bias.shape != (d,) or not np.all(np.isfinite(bias)):
            raise ValueError(
                f"bias must be a finite array of shape (d,) = ({d},); got {bias.shape}.")
    module = torch.nn.MultiheadAttention(
        d, H, bias=bias is not None, batch_first=batch_first, dtype=dtype
    )

    def rows(Wh):  # (H, d, d_v) -> (H·d_v, d): row h·d_v + e is W_h[:, e]
        return Wh.transpose(0, 2, 1).reshape(H * d_v, d)

    in_proj = np.concatenate([rows(W_Q), rows(W_K), rows(W_V)])
    with torch.no_grad():
        module.in_proj_weight.copy_(torch.as_tensor(in_proj, dtype=dtype))
        module.out_proj.weight.copy_(torch.as_tensor(W_O.reshape(H * d_v, d).T, dtype=dtype))
        if bias is not None:
            module.in_proj_bias.zero_()
            module.out_proj.bias.copy_(torch.as_tensor(bias, dtype=dtype))
    return module.eval()


def _phi(torch, activation, z):
    F = torch.nn.functional
    if activation == "sigmoid":
        return torch.sigmoid(z)
    if activation == "tanh":
        return torch.tanh(z)
    if activation == "gelu":
        return F.gelu(z)  # exact (erf) form, as the package's kernel
    return F.silu(z)


def attention_forward(module, X, *, gate="none", activation="sigmoid"):
    """Self-attention of ``module`` on ``X``, with an optional gate, computed in PyTorch.

    ``X`` of shape ``(N, E)`` or ``(B, N, E)`` (tokens in rows, whatever ``batch_first``).
    Per head, ``S_h = softmax((X W_Q,h + b_Q,h)(X W_K,h + b_K,h)ᵀ / sqrt(d_v))``,
    ``V_h = X W_V,h + b_V,h``; the gate positions of
    :func:`~hmoe_estim.attention.multihead_attention`:

    - ``"none"``: ``Σ_h S_h V_h W_O,h + b_out`` (the module's own output);
    - ``"value"`` (G2): ``Σ_h S_h φ(V_h) W_O,h + b_out``;
    - ``"sdpa"`` (G1): ``Σ_h φ(S_h V_h) W_O,h + b_out``;
    - ``"output"`` (G5): ``φ(Σ_h S_h V_h W_O,h + b_out)``.

    Returns
    -------
    torch.Tensor of shape like ``X`` (the module's dtype).
    """
    torch = _torch()
    check_gate(gate)
    check_activation(activation)
    H, E, d_v = _check_module(module)
    W_in, out = module.in_proj_weight, module.out_proj
    X = torch.as_tensor(X, dtype=W_in.dtype)
    if X.ndim not in (2, 3) or X.shape[-1] != E or X.shape[-2] < 1:
        raise ValueError(
            f"X must have shape (N, E) or (B, N, E) with E = {E}; got {tuple(X.shape)}.")
    b = module.in_proj_bias
    q, k, v = (
        X @ W_in[p * E:(p + 1) * E].T + (0 if b is None else b[p * E:(p + 1) * E])
        for p in range(3)
    )

    def heads(t):  # (..., N, E) -> (..., H, N, d_v)
        return t.reshape(*t.shape[:-1], H, d_v).transpose(-3, -2)

    q, k, v = heads(q), heads(k), heads(v)
    if module.add_zero_attn:
        zeros = torch.zeros_like(k[..., :1, :])
        k, v = torch.cat([k, zeros], dim=-2), torch.cat([v, zeros], dim=-2)
    S = torch.softmax(q @ k.transpose(-2, -1) / np.sqrt(d_v), dim=-1)
    if gate == "value":
        v = _phi(torch, activation, v)
    h = S @ v
    if gate == "sdpa":
        h = _phi(torch, activation, h)
    h = h.transpose(-3, -2).reshape(*X.shape[:-1], E)
    y = h @ out.weight.T
    if out.bias is not None:
        y = y + out.bias
    if gate == "output":
        y = _phi(torch, activation, y)
    return y


def measure_to_torch(measure, *, gate="none", activation="sigmoid", intercept=0.0, dtype=None):
    """A ``torch.nn.Module`` (``HMoEModule``) computing ``f_G(x) + intercept``.

    The forward pass takes ``x`` of shape ``(B, D)`` and returns ``(B,)``: the regression
    function of :func:`~hmoe_estim.regression_function` for the gate position (eq.
    (2), (9), (12), or G5) plus the intercept. ``omega``, ``M``, ``a`` and the intercept are
    ``torch.nn.Parameter`` (float64 unless ``dtype`` says otherwise), so the module can be
    trained further in PyTorch.

    Raises
    ------
    ValueError
        ``measure`` is not a MixingMeasure, unknown gate or activation.
    ImportError
        PyTorch is not installed (extra ``torch``).
    """
    _torch()  # the ImportError naming the extra, also once the class exists
    cls = __getattr__("HMoEModule") if "HMoEModule" not in globals() else globals()["HMoEModule"]
    return cls(measure, gate=gate, activation=activation, intercept=intercept, dtype=dtype)


def _hmoe_module_class():
    torch = _torch()

    class HMoEModule(torch.nn.Module):
        """``f_G(x) + c`` of a :class:`~hmoe_estim.MixingMeasure` as a PyTorch module.

        The forward pass takes ``x`` of shape ``(B, D)`` and returns ``(B,)``: with
        ``g[h, i](x) = softmax_i(xᵀ M[h, i] x)``, the regression function of
        :func:`~hmoe_estim.regression_function` for the gate position
        (eq. (2), (9), (12), or G5), plus the intercept. ``omega``, ``M``, ``a`` and the
        intercept are parameters (so the module can be trained further in PyTorch).
        """

        def __init__(self, measure, *, gate="none", activation="sigmoid", intercept=0.0,
                     dtype=None):
            super().__init__()
            if not isinstance(measure, MixingMeasure):
                raise ValueError(
                    f"measure must be a MixingMeasure; got {type(measure).__name__}."
                )
            self.gate = check_gate(gate)
            self.activation = check_activation(activation)
            dtype = torch.float64 if dtype is None else dtype
            self.omega = torch.nn.Parameter(torch.as_tensor(measure.omega, dtype=dtype))
            self.M = torch.nn.Parameter(torch.as_tensor(measure.M, dtype=dtype))
            self.a = torch.nn.Parameter(torch.as_tensor(measure.a, dtype=dtype))
            self.intercept = torch.nn.Parameter(torch.tensor(float(intercept), dtype=dtype))

        def forward(self, x):
            x = torch.as_tensor(x, dtype=self.M.dtype)
            D = self.M.shape[-1]
            if x.ndim != 2 or x.shape[1] != D:
                raise ValueError(f"x must have shape (B, D) with D = {D}; got {tuple(x.shape)}.")
            s = torch.einsum("bd,hnde,be->bhn", x, self.M, x)
            g = torch.softmax(s, dim=-1)  # (B, H, N)
            z = torch.einsum("bd,hnkd->bhnk", x, self.a)
            if self.gate == "value":
                z = _phi(torch, self.activation, z)
            u = torch.einsum("bhn,bhnk->bhk", g, z)
            if self.gate == "sdpa":
                u = _phi(torch, self.activation, u)
            f = torch.einsum("bhk,hk->b", u, self.omega)
            if self.gate == "output":
                f = _phi(torch, self.activation, f)
            return f + self.intercept

    return HMoEModule


def __getattr__(name):
    if name == "HMoEModule":  # built on first use, so that importing this file needs no torch
        cls = _hmoe_module_class()
        globals()["HMoEModule"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
