"""PyTorch in and out for a whole attention layer: :class:`AttentionLayer` ⇄ ``torch.nn``.

Optional dependency (``pip install "hmoe-estim[torch]"``); PyTorch is imported only when a
conversion runs, so this file imports without it.

**Out.** :func:`layer_to_torch` gives a ``torch.nn.Module`` (``AttentionLayerModule``, built
on first use) whose forward pass on token matrices ``X`` of shape ``(n, N, d)`` is
:func:`~hmoe_estim.layer.attention_layer_output` of the layer, for every gate position (MHA,
G1, G2, G5, G3, G4), activation, form (φ applied to the signal, or the multiplicative gate of
Qiu et al. 2025, headwise or elementwise), factored or full Q/K, with or without an intercept,
all rows or the last. Its parameters are the layer's weights under their own names and shapes
(``W_Q, W_K`` or ``P``, ``W_V``, ``W_O``, ``W_theta``, ``intercept``), registered in the order
of :meth:`~hmoe_estim.layer.LayerLayout.pack`: ``torch.cat([p.reshape(-1) for p in
module.parameters()])`` is the packed vector ``theta``. For the ungated layer with factored
Q/K, ``d_out = d`` and ``H·d_v = d`` (PyTorch's ``head_dim = embed_dim / num_heads``),
``mha=True`` gives a plain ``torch.nn.MultiheadAttention`` instead (``batch_first=True``, no
bias; with an intercept, only the output bias), through
:func:`hmoe_estim.attention.to_torch`::

    module(X, X, X, need_weights=False)[0] == attention_layer_output(X, layer)

**In.** :func:`layer_from_torch` reads an ``AttentionLayerModule`` (exactly) or a
``torch.nn.MultiheadAttention`` used as self-attention (``query = key = value = X``) through
:func:`hmoe_estim.attention.weights_from_torch`: ``W_Q, W_K, W_V`` of shape ``(H, E, E/H)``,
``W_O`` of shape ``(H, E/H, E)``, and the output bias, if any, as the intercept. What an
:class:`AttentionLayer` cannot hold is refused with a ``ValueError`` that says what to change:
a non-zero ``in_proj_bias`` (the query, key and value biases: ``bias=False``), ``add_bias_kv``,
``add_zero_attn``, ``kdim``/``vdim`` other than ``embed_dim``. Dropout is not part of the
layer: it is the module's function in eval mode.
"""

import numpy as np

from ._parameters import AttentionLayer, check_form

__all__ = ["layer_to_torch", "layer_from_torch"]

#: The layer's weights in the order of ``LayerLayout.pack``.
_WEIGHTS = ("W_Q", "W_K", "P", "W_V", "W_O", "W_theta", "intercept")


def _torch():
    """Import PyTorch or raise an ``ImportError`` that names the extra."""
    try:
        import torch
    except ImportError as exc:
        raise ImportError("PyTorch is needed for hmoe_estim.layer.layer_to_torch and "
                          "layer_from_torch; install the optional extra: pip install "
                          "\"hmoe-estim[torch]\" (or pip install torch).") from exc
    return torch


def _phi(torch, activation):
    """``φ`` as a PyTorch function (GELU in its exact erf form, as the layer kernel)."""
    F = torch.nn.functional
    return {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "gelu": F.gelu,
            "silu": F.silu}[activation]


def _layer_module_class():
    torch = _torch()

    class AttentionLayerModule(torch.nn.Module):
        """An :class:`~hmoe_estim.layer.AttentionLayer` with its gate as a PyTorch module.

        ``forward(X)`` takes token matrices of shape ``(n, N, d)`` (or one of shape
        ``(N, d)``) and returns :func:`~hmoe_estim.layer.attention_layer_output` of the layer
        for the module's ``gate``, ``activation``, ``gate_form`` and ``rows``: shape
        ``(n, N, d_out)``, or ``(n, d_out)`` with ``rows="last"`` (without the leading ``n``
        for one matrix). The weights are parameters, in the order of the packed vector.
        """

        def __init__(self, layer, *, gate="none", activation="sigmoid", gate_form=None,
                     rows="all", dtype=None):
            super().__init__()
            if not isinstance(layer, AttentionLayer):
                raise ValueError(f"layer must be an AttentionLayer; got {type(layer).__name__}.")
            self.gate_form = check_form(layer, gate, activation, gate_form, rows)
            self.gate, self.activation, self.rows = gate, activation, rows
            self.head_dim = layer.head_dim
            dtype = torch.float64 if dtype is None else dtype
            for name in _WEIGHTS:
                value = getattr(layer, name)
                if value is not None:
                    self.register_parameter(
                        name, torch.nn.Parameter(torch.as_tensor(value, dtype=dtype).clone()))

        def _get(self, name):
            return self._parameters.get(name)

        def forward(self, X):
            W_V = self._get("W_V")
            X = torch.as_tensor(X, dtype=W_V.dtype)
            d = W_V.shape[1]
            single = X.ndim == 2
            if single:
                X = X[None]
            if X.ndim != 3 or X.shape[-1] != d or X.shape[1] < 1:
                raise ValueError(f"X must have shape (n, N, d) or (N, d) with d = {d}; got "
                                 f"{tuple(X.shape)}.")
            phi = _phi(torch, self.activation)
            gate, last = self.gate, self.rows == "last"
            Xi = X[:, -1:] if last else X  # the query rows
            P = self._get("P")
            if P is not None:
                s = torch.einsum("bip,hpq,bjq->bhij", Xi, P, X)
            else:
                q = torch.einsum("bip,hpe->bhie", Xi, self._get("W_Q"))
                k = torch.einsum("bjp,hpe->bhje", X, self._get("W_K"))
                if gate == "query":
                    q = phi(q)
                elif gate == "key":
                    k = phi(k)
                s = q @ k.transpose(-1, -2) / np.sqrt(self.head_dim)
            v = torch.einsum("bjp,hpe->bhje", X, W_V)
            if gate == "value":
                v = phi(v)
            u = torch.softmax(s, dim=-1) @ v  # (n, H, R, d_v)
            W_theta = self._get("W_theta")
            if self.gate_form == "multiplicative":
                if W_theta.ndim == 2:  # headwise: one factor per head and row
                    u = u * phi(torch.einsum("bip,hp->bhi", Xi, W_theta))[..., None]
                else:
                    u = u * phi(torch.einsum("bip,hpe->bhie", Xi, W_theta))
            elif gate == "sdpa":
                u = phi(u)
            z = torch.einsum("bhie,hec->bic", u, self._get("W_O"))
            if gate == "output":
                z = phi(z)
            if self._get("intercept") is not None:
                z = z + self._get("intercept")
            if last:
                z = z[:, 0]
            return z[0] if single else z

        def extra_repr(self):
            return (f"gate={self.gate!r}, activation={self.activation!r}, "
                    f"gate_form={self.gate_form!r}, rows={self.rows!r}")

    return AttentionLayerModule


def _module_class():
    cls = globals().get("AttentionLayerModule")
    if cls is None:
        cls = globals()["AttentionLayerModule"] = _layer_module_class()
    return cls


def __getattr__(name):
    if name == "AttentionLayerModule":  # built on first use: it subclasses torch.nn.Module
        return _module_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def layer_to_torch(layer, *, gate="none", activation="sigmoid", gate_form=None, rows="all",
                   mha=False, dtype=None):
    """The attention layer ``layer`` as a PyTorch module (see the module docstring).

    Parameters
    ----------
    layer : AttentionLayer
    gate, activation, gate_form, rows
        As in :func:`~hmoe_estim.layer.attention_layer_output` (``gate_form=None``:
        multiplicative when the layer has ``W_theta``).
    mha : bool, default=False
        Return a ``torch.nn.MultiheadAttention`` (``batch_first=True``; no bias, or only the
        output bias holding the intercept): for ``gate="none"``, factored Q/K, ``d_out = d``,
        ``H·d_v = d`` and ``rows="all"`` only.
    dtype : torch.dtype or None, default=None
        ``torch.float64`` when None (the layer kernel's precision).

    Returns
    -------
    torch.nn.Module
        ``AttentionLayerModule``, whose ``forward(X)`` is ``attention_layer_output(X, layer,
        ...)``; with ``mha=True`` a ``torch.nn.MultiheadAttention`` in eval mode, whose
        ``forward(X, X, X)[0]`` is.

    Raises
    ------
    ValueError
        ``layer`` is no AttentionLayer, an unknown name or a combination the layer cannot
        hold (as :func:`~hmoe_estim.layer.attention_layer_output`), ``mha=True`` for a layer
        ``torch.nn.MultiheadAttention`` cannot hold (the message says why).
    ImportError
        PyTorch is not installed (extra ``torch``).
    """
    _torch()
    if not isinstance(layer, AttentionLayer):
        raise ValueError(f"layer must be an AttentionLayer; got {type(layer).__name__}.")
    if not mha:
        return _module_class()(layer, gate=gate, activation=activation, gate_form=gate_form,
                               rows=rows, dtype=dtype)
    check_form(layer, gate, activation, gate_form, rows)
    H, d, dv = layer.W_V.shape
    why = None
    if gate != "none":
        why = f"it has no gate (gate={gate!r})"
    elif layer.qk == "full":
        why = "it needs W_Q and W_K (the layer has a full P: qk='full')"
    elif layer.d_out != d:
        why = f"its output has embed_dim = d = {d} columns (the layer has d_out = {layer.d_out})"
    elif H * dv != d:
        why = (f"its heads have head_dim = embed_dim / num_heads = d / H (the layer has "
               f"(H, d, d_v) = {(H, d, dv)})")
    elif rows != "all":
        why = "it returns every row (rows='last' asked for the last one)"
    if why is not None:
        raise ValueError(f"torch.nn.MultiheadAttention cannot hold this layer: {why}. Use "
                         "mha=False (AttentionLayerModule holds every layer and gate).")
    from ..attention import to_torch

    return to_torch(layer.W_Q, layer.W_K, layer.W_V, layer.W_O, bias=layer.intercept,
                    batch_first=True, dtype=dtype)


def _mha_layer(module):
    """The :class:`AttentionLayer` of a ``torch.nn.MultiheadAttention`` (module docstring)."""
    from ..attention import weights_from_torch

    torch = _torch()
    W_Q, W_K, W_V, W_O = weights_from_torch(module)  # checks kdim/vdim, add_bias_kv, shapes
    if module.add_zero_attn:
        raise ValueError("the module has add_zero_attn=True: it appends an all-zero key and "
                         "value to every sequence, which an AttentionLayer has no place for. "
                         "Use add_zero_attn=False.")
    b = module.in_proj_bias
    if b is not None and bool(torch.any(b != 0)):
        E = module.embed_dim
        parts = [name for p, name in enumerate(("query", "key", "value"))
                 if bool(torch.any(b[p * E:(p + 1) * E] != 0))]
        raise ValueError(
            f"the module's in_proj_bias is non-zero ({', '.join(parts)} part): an "
            "AttentionLayer has no query, key or value bias. Build the module with "
            "bias=False, or zero in_proj_bias (the output bias is read as the intercept).")
    out_bias = module.out_proj.bias
    intercept = None if out_bias is None else out_bias.detach().cpu().double().numpy().copy()
    return AttentionLayer(W_V=W_V, W_O=W_O, W_Q=W_Q, W_K=W_K, intercept=intercept)


def layer_from_torch(module, *, return_form=False):
    """The :class:`AttentionLayer` of a PyTorch module (the inverse of
    :func:`layer_to_torch`).

    Parameters
    ----------
    module : AttentionLayerModule or torch.nn.MultiheadAttention
        A module of :func:`layer_to_torch` (its weights, exactly), or a
        ``torch.nn.MultiheadAttention`` read as self-attention of ``X`` (``gate="none"``).
    return_form : bool, default=False
        Also return the module's form, ``{"gate", "activation", "gate_form", "rows"}``, the
        keywords of :func:`~hmoe_estim.layer.attention_layer_output` that give the module's
        output.

    Returns
    -------
    AttentionLayer, or (AttentionLayer, dict) with ``return_form=True``
        Float64 copies of the weights.

    Raises
    ------
    ValueError
        Another module type; a ``torch.nn.MultiheadAttention`` with a non-zero
        ``in_proj_bias``, ``add_bias_kv``, ``add_zero_attn`` or ``kdim``/``vdim`` other
        than ``embed_dim`` (the message says what to change).
    ImportError
        PyTorch is not installed (extra ``torch``).
    """
    torch = _torch()
    cls = _module_class()
    if isinstance(module, cls):
        weights = {name: p.detach().cpu().double().numpy().copy()
                   for name, p in module.named_parameters()}
        layer = AttentionLayer(**weights)
        form = {"gate": module.gate, "activation": module.activation,
                "gate_form": module.gate_form, "rows": module.rows}
    elif isinstance(module, torch.nn.MultiheadAttention):
        layer = _mha_layer(module)
        form = {"gate": "none", "activation": "sigmoid", "gate_form": "activation",
                "rows": "all"}
    else:
        raise ValueError(
            f"module must be a torch.nn.MultiheadAttention or the AttentionLayerModule of "
            f"hmoe_estim.layer.layer_to_torch; got {type(module).__name__}.")
    return (layer, form) if return_form else layer
