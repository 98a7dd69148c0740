"""Scaling and size guards of a layer fit (as ``estimators/_guards.py`` for the per-entry fits).

- :func:`scale_factors` — the fit works on ``X / s_x`` and ``(Y − Ȳ) / s_y`` (powers of two,
  from :func:`~hmoe_estim.estimators._guards.input_scale` and ``target_scale``); the layer
  of the scaled data is the layer of the data with ``W_Q, W_K, W_V, W_θ`` multiplied by
  ``s_x`` (every projection ``x·W`` unchanged), ``P`` by ``s_x²``, and ``W_O`` and the
  intercept divided by ``s_y`` (the output ``Φ W_O + b`` is linear in them; G5 is not, and is
  fitted with ``s_y = 1``). Powers of two make the maps exact.
- :func:`layer_fit_memory_bytes`, :func:`check_layer_fit_size` — the memory of a fit's
  buffers, estimated from the sizes before anything is allocated; above
  :data:`~hmoe_estim.estimators._guards.MAX_FIT_BYTES` the fit is refused.
"""

import numpy as np

from ..estimators._guards import MAX_FIT_BYTES

__all__ = ["scale_factors", "layer_fit_memory_bytes", "check_layer_fit_size"]


def scale_factors(layout, s_x, s_y):
    """``v`` with ``theta_scaled = theta · v`` (module docstring); the intercept's entries
    map ``b − Ȳ``."""
    oK, oV, oO, oT, oB, P = layout.offsets()
    v = np.empty(P)
    v[:oV] = s_x * s_x if layout.qk == "full" else s_x
    v[oV:oO] = s_x
    v[oO:oT] = 1.0 / s_y
    v[oT:oB] = s_x
    v[oB:] = 1.0 / s_y
    return v


def layer_fit_memory_bytes(n, N, R, layout, varpro):
    """Estimated peak memory (bytes) of a layer fit on ``n`` token matrices of ``N`` tokens
    (``R`` output rows each).

    The data and their scaled copies (``X``: ``2 n N d`` doubles; ``Y``: 4 copies of the
    ``m = n R d_out`` targets — the user's, the scaled, the problem's, the solver's forward
    pass), the race's subsamples (at most a quarter more), the head outputs ``Φ`` of the
    variable projection and two products of its size (``3 n R (H d_v + 1)`` doubles), and per
    kernel worker (at most 64) the Jacobian rows of a sample and the partial sums
    (``R d_out P + P² + 2P``), plus a few ``P × P`` matrices of the iterations.
    """
    H, d, dv, dout = layout.n_heads, layout.d, layout.head_dim, layout.d_out
    P = layout.n_params
    m = n * R * dout
    doubles = 2 * n * N * d + 4 * m
    doubles += (2 * n * N * d + 4 * m) // 4
    if varpro:
        doubles += 3 * n * R * (H * dv + 1)
    from ..kernels import layer_chunks

    doubles += layer_chunks(n, P) * (P * P + 2 * P + 2) + 64 * R * dout * P + 16 * P * P
    return 8 * int(doubles)


def check_layer_fit_size(n, N, R, layout, varpro):
    """Raise ``ValueError`` before any allocation when a fit would need more than
    :data:`~hmoe_estim.estimators._guards.MAX_FIT_BYTES`."""
    need = layer_fit_memory_bytes(n, N, R, layout, varpro)
    if need > MAX_FIT_BYTES:
        m = n * R * layout.d_out
        n_max = max(1, int(n * MAX_FIT_BYTES / need))
        raise ValueError(
            f"a layer fit on {n} samples of {N} tokens has {m} residuals (n·R·d_out with "
            f"R = {R} rows, d_out = {layout.d_out}) and would need about {need / 2**30:.1f} GiB "
            f"(limit {MAX_FIT_BYTES / 2**30:.0f} GiB). Use fewer samples (about {n_max} fit), "
            "rows='last', or fewer output columns.")
