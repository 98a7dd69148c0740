"""The layer kernel's analytic Jacobian (``hmoe_estim/kernels/layer.py``): it matches central
finite differences for every gate, form and activation, its Gauss–Newton sums are those of
an independent NumPy Jacobian, ``LayerPasses`` gives the same numbers, and the numerical null
space of ``J`` has the dimension of the layer's continuous gauges."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from hmoe_estim.kernels import (
    LayerPasses,
    layer_jacobian,
    layer_sums,
    layer_values,
    single_thread_blas,
)
from hmoe_estim.layer import random_attention_layer

from .test_layer_model import reference_output

ACTIVATIONS = ("sigmoid", "tanh", "gelu", "silu")
GATES = ("none", "value", "sdpa", "output", "key", "query")
BILINEAR = ("none", "value", "sdpa", "output")

#: (layer options, gate) of every form: the activation form at each gate position, full Q/K
#: at the bilinear ones, and the multiplicative SDPA gate (headwise, elementwise)
FORMS = (
    [({}, g) for g in GATES]
    + [({"qk": "full"}, g) for g in BILINEAR]
    + [({"gate_form": "multiplicative", "granularity": gr, **qk}, "sdpa")
       for gr in ("headwise", "elementwise") for qk in ({}, {"qk": "full"})]
)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # small SVDs and products: a second BLAS thread only waits (0.2 s per SVD on a busy machine)
    with single_thread_blas():
        yield


def _case(options, gate, activation, *, H=2, n=5, rows="all", seed=0, intercept=True):
    layer = random_attention_layer(H, 3, 2, random_state=seed, fit_intercept=intercept,
                                   **options)
    X = np.random.default_rng(seed + 1).normal(size=(n, 3, 3))
    layout = layer.layout
    return layer, layout, layout.pack(layer), X, layout.kernel_args(gate, activation, rows)


def _central_differences(fun, theta, step=1e-6):
    cols = []
    for p in range(theta.size):
        tp, tm = theta.copy(), theta.copy()
        h = step * max(1.0, abs(theta[p]))
        tp[p] += h
        tm[p] -= h
        cols.append((fun(tp) - fun(tm)) / (2 * h))
    return np.stack(cols, axis=1)


def _ids(forms):
    return [f"{gate}-{'-'.join(str(v) for v in opts.values()) or 'activation'}"
            for opts, gate in forms]


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("options, gate", FORMS, ids=_ids(FORMS))
def test_jacobian_matches_central_differences(options, gate, activation):
    for H, rows in ((1, "last"), (2, "all")):
        layer, layout, theta, X, args = _case(options, gate, activation, H=H, rows=rows)
        f, J = layer_jacobian(theta, X, *args)

        def values(t):
            return layer_values(t, X, *args, np.empty(f.size)).copy()

        np.testing.assert_array_equal(values(theta), f)
        Jfd = _central_differences(values, theta)
        err = np.max(np.abs(J - Jfd)) / np.max(np.abs(Jfd))
        assert err < 1e-7, (H, rows, err)


@pytest.mark.parametrize("H", [2, 1], ids=["H2-per-output", "H1-per-row"])
@pytest.mark.parametrize("options, gate", FORMS, ids=_ids(FORMS))
def test_gauss_newton_sums_equal_those_of_an_independent_jacobian(options, gate, H):
    # H = 1 (d_out = 3 > H·d_v = 2): the sums per token row (_sums_worker_wo) for every gate
    # but "output"; H = 2: the sums per output
    layer, layout, theta, X, args = _case(options, gate, "tanh", H=H, n=2, seed=3)
    y = np.random.default_rng(7).normal(size=X.shape[0] * 3 * 3)
    offset = 0.25
    # the Jacobian of the test's own NumPy pass, by central differences
    Jnp = _central_differences(
        lambda t: reference_output(X, layout.unpack(t), gate, "tanh").ravel(), theta)
    r = reference_output(X, layer, gate, "tanh").ravel() + offset - y
    A, g, ssr, colsum, rsum = layer_sums(theta, X, y, offset, *args)
    scale = np.max(np.abs(Jnp.T @ Jnp))
    np.testing.assert_allclose(A, Jnp.T @ Jnp, rtol=0, atol=1e-7 * scale)
    np.testing.assert_allclose(g, Jnp.T @ r, rtol=0, atol=1e-7 * np.max(np.abs(Jnp.T @ r)))
    np.testing.assert_allclose(colsum, Jnp.sum(axis=0), rtol=0,
                               atol=1e-7 * np.max(np.abs(Jnp)) * len(r))
    np.testing.assert_allclose([ssr, rsum], [r @ r, r.sum()], rtol=1e-12)
    # exactly the kernel's own Jacobian, and the solver-facing passes give the same bits
    f, J = layer_jacobian(theta, X, *args)
    np.testing.assert_allclose(A, J.T @ J, rtol=1e-13, atol=1e-13 * scale)
    passes = LayerPasses(X, y, args)
    assert passes.n == y.size and passes.n_samples == X.shape[0]
    assert passes.penalty_weights is None and passes.floor >= 0
    A2, g2, ssr2, colsum2, rsum2, finite = passes.sums(theta, offset)
    assert finite
    for u, v in ((A2, A), (g2, g), (ssr2, ssr), (colsum2, colsum), (rsum2, rsum)):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(passes.values(theta), f)
    assert len(passes.workspace(theta.size)) == 7


@pytest.mark.parametrize("rows", ["all", "last"])
@pytest.mark.parametrize("intercept", [True, False])
@pytest.mark.parametrize("options, gate", [f for f in FORMS if f[1] != "output"],
                         ids=_ids([f for f in FORMS if f[1] != "output"]))
def test_sums_per_row_equal_the_sums_per_output(options, gate, rows, intercept):
    """The two ways to the Gauss–Newton sums of a layer linear in ``W_O`` agree: per output
    (``_sums_worker``, ``J`` row by row) and per token row (``_sums_worker_wo``, through
    ``W_O W_Oᵀ``), with ``d_out`` above and below ``H·d_v`` and a rank-deficient ``W_O``."""
    from hmoe_estim.kernels import layer as kl

    for H, dout, rank_one in ((1, 4, False), (2, 3, False), (1, 4, True)):
        layer = random_attention_layer(H, 3, 2, d_out=dout, random_state=4,
                                       fit_intercept=intercept, **options)
        layout = layer.layout
        theta = layout.pack(layer)
        if rank_one:  # W_O W_Oᵀ singular: F from its eigenvectors keeps the null direction
            oO = kl.layer_offsets(H, 3, 2, dout, layout.qk == "full", 0, intercept)[2]
            W = theta[oO:oO + 2 * dout].reshape(2, dout)
            W[1] = 0.5 * W[0]
        X = np.random.default_rng(5).normal(size=(9, 3, 3))
        args = layout.kernel_args(gate, "gelu", rows)
        y = np.random.default_rng(6).normal(size=X.shape[0] * (1 if rows == "last" else 3)
                                            * dout)
        P = theta.size
        per_output = np.zeros((kl.layer_chunks(9, P), P * P + 2 * P + 2))
        per_row = np.zeros_like(per_output)
        kl._sums_worker(0, 1, theta, X, y, 0.25, *args, per_output)
        kl._sums_worker_wo(0, 1, theta, X, y, 0.25, *args, kl._wo_factor(theta, X, args),
                           per_row)
        a, b = kl._sums_total(per_output, P), kl._sums_total(per_row, P)
        for u, v in zip(a, b):
            np.testing.assert_allclose(v, u, rtol=1e-12, atol=1e-12 * np.max(np.abs(a[0])))


def test_sums_per_row_report_a_non_finite_w_o():
    layer, layout, theta, X, args = _case({}, "value", "sigmoid", H=1, n=4)
    y = np.zeros(X.shape[0] * 3 * 3)
    from hmoe_estim.kernels import layer as kl

    assert kl._factored(X, args)
    bad = theta.copy()
    bad[kl.layer_offsets(1, 3, 2, 3, False, 0, True)[2]] = np.nan
    *_, finite = LayerPasses(X, y, args).sums(bad, 0.0)
    assert not finite


#: Continuous gauges of one head (H = 1, N = 3, d = 3, d_v = 2, d_out = 3): the dimension of
#: the numerical null space of J, and why.
GAUGES = [
    ({}, "none", 8, "W_Q→W_Q A, W_K→W_K A⁻ᵀ (d_v² = 4) and W_V→W_V B, W_O→B⁻¹W_O (4)"),
    ({}, "output", 8, "G5 applies φ after W_O: both gauges of MHA survive"),
    ({}, "value", 4, "φ(X W_V) breaks the V/O gauge; the bilinear scores keep Q/K's"),
    ({}, "sdpa", 4, "φ(S X W_V) breaks the V/O gauge; the bilinear scores keep Q/K's"),
    ({}, "key", 4, "φ(X W_K) breaks the Q/K gauge; V/O untouched"),
    ({}, "query", 4, "φ(X W_Q) breaks the Q/K gauge; V/O untouched"),
    ({"qk": "full"}, "none", 4, "P is free (no Q/K gauge); V/O gauge"),
    ({"qk": "full"}, "output", 4, "P is free; V/O gauge"),
    ({"qk": "full"}, "value", 0, "P is free; φ breaks V/O"),
    ({"qk": "full"}, "sdpa", 0, "P is free; φ breaks V/O"),
    ({"gate_form": "multiplicative"}, "sdpa", 8,
     "headwise: one factor per head and row commutes with any B; Q/K gauge too"),
    ({"gate_form": "multiplicative", "granularity": "elementwise"}, "sdpa", 6,
     "elementwise: only a diagonal B (one scale per channel, d_v = 2) commutes; Q/K 4"),
    ({"gate_form": "multiplicative", "qk": "full"}, "sdpa", 4, "headwise, full P: V/O only"),
    ({"gate_form": "multiplicative", "granularity": "elementwise", "qk": "full"}, "sdpa", 2,
     "elementwise, full P: diagonal B only"),
]


def _null_dimension(J):
    s = np.linalg.svd(J, compute_uv=False)
    rel = s / s[0]
    k = int(np.sum(rel < 1e-10))
    # a clear gap: the null directions are at rounding level, the others far above
    assert k == len(s) or rel[len(s) - k - 1] > 1e-4, rel
    return k


@pytest.mark.parametrize("options, gate, expected, why", GAUGES,
                         ids=[f"{g}-{'-'.join(map(str, o.values())) or 'activation'}"
                              for o, g, _, _ in GAUGES])
def test_null_space_is_the_gauge(options, gate, expected, why):
    X = np.random.default_rng(0).normal(size=(200, 3, 3))
    for activation in ACTIVATIONS:
        layer = random_attention_layer(1, 3, 2, random_state=1, **options)
        layout = layer.layout
        _, J = layer_jacobian(layout.pack(layer), X, *layout.kernel_args(gate, activation,
                                                                          "all"))
        assert _null_dimension(J) == expected, (activation, why)


def test_gauges_add_up_over_heads_and_ignore_the_intercept():
    X = np.random.default_rng(0).normal(size=(200, 3, 3))
    # two heads: each head has its own gauges (the head swap is discrete)
    for gate, expected in (("none", 16), ("value", 8), ("key", 8)):
        layer = random_attention_layer(2, 3, 2, random_state=2)
        layout = layer.layout
        _, J = layer_jacobian(layout.pack(layer), X, *layout.kernel_args(gate, "sigmoid",
                                                                          "all"))
        assert _null_dimension(J) == expected, gate
    # an intercept per column adds no null direction; the last row alone keeps the gauges
    layer = random_attention_layer(1, 3, 2, random_state=3, fit_intercept=True)
    layout = layer.layout
    for rows in ("all", "last"):
        _, J = layer_jacobian(layout.pack(layer), X, *layout.kernel_args("none", "sigmoid",
                                                                          rows))
        assert _null_dimension(J) == 8, rows


_SCRIPT = r"""
import json, sys
import numpy as np
from hmoe_estim.kernels import layer_jacobian, layer_sums
from hmoe_estim.layer import random_attention_layer
out = []
for H, opts, gate in [(2, {}, "key"), (2, {"qk": "full"}, "output"),
                      (2, {"gate_form": "multiplicative", "granularity": "elementwise"}, "sdpa"),
                      (1, {"gate_form": "multiplicative"}, "sdpa")]:
    layer = random_attention_layer(H, 3, 2, random_state=0, fit_intercept=True, **opts)
    X = np.random.default_rng(1).normal(size=(3, 3, 3))
    y = np.random.default_rng(2).normal(size=27)
    args = layer.layout.kernel_args(gate, "gelu", "all")
    theta = layer.layout.pack(layer)
    f, J = layer_jacobian(theta, X, *args)
    A, g, ssr, colsum, rsum = layer_sums(theta, X, y, 0.5, *args)
    out.append([f.tolist(), J.tolist(), A.tolist(), g.tolist(), ssr])
json.dump(out, sys.stdout)
"""


def test_interpreted_layer_kernel_matches_compiled():
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, check=True)
    # the last case (one head, d_out > H·d_v) takes the sums per token row
    cases = [(2, {}, "key"), (2, {"qk": "full"}, "output"),
             (2, {"gate_form": "multiplicative", "granularity": "elementwise"}, "sdpa"),
             (1, {"gate_form": "multiplicative"}, "sdpa")]
    for (H, opts, gate), (f, J, A, g, ssr) in zip(cases, json.loads(proc.stdout)):
        layer = random_attention_layer(H, 3, 2, random_state=0, fit_intercept=True, **opts)
        X = np.random.default_rng(1).normal(size=(3, 3, 3))
        y = np.random.default_rng(2).normal(size=27)
        args = layer.layout.kernel_args(gate, "gelu", "all")
        theta = layer.layout.pack(layer)
        f2, J2 = layer_jacobian(theta, X, *args)
        A2, g2, ssr2, _, _ = layer_sums(theta, X, y, 0.5, *args)
        np.testing.assert_allclose(f2, f, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(J2, J, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(A2, A, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(g2, g, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(ssr2, ssr, rtol=1e-12)


@pytest.mark.parametrize("qk", ["factored", "full"])
@pytest.mark.parametrize("gate, activation", [("none", "sigmoid"), ("value", "tanh"),
                                              ("sdpa", "gelu"), ("output", "silu")])
def test_jacobian_is_the_chain_rule_through_the_per_entry_kernel(gate, activation, qk):
    """Rows of entry (i, c) of the layer Jacobian = the per-entry kernel's Jacobian of that
    entry's HMoE (``kernels.jacobian_matrix`` at ``pack(entry_measure)``) times the derivative
    of the map layer weights → entry measure (bilinear, so central differences are exact up to
    rounding)."""
    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels import jacobian_matrix
    from hmoe_estim.model import pack

    options = {} if qk == "factored" else {"qk": "full"}
    layer, layout, theta, X, args = _case(options, gate, activation, intercept=False)
    n, N, d = X.shape
    _, J = layer_jacobian(theta, X, *args)
    R, dout = N, layout.d_out
    XT = np.ascontiguousarray(X.reshape(n, N * d).T)
    for row, column in ((0, 0), (N - 1, dout - 1)):
        def entry(t):
            return pack(layout.unpack(t).entry_measure(row, column, n_tokens=N))

        G = layout.unpack(theta).entry_measure(row, column, n_tokens=N)
        dG = _central_differences(entry, theta)
        J_entry = jacobian_matrix(pack(G), XT, *G.shape, GATE_CODES[gate],
                                  ACTIVATION_CODES[activation])
        rows = np.arange(n) * R * dout + row * dout + column
        np.testing.assert_allclose(J[rows], J_entry @ dG, rtol=1e-7,
                                   atol=1e-8 * np.abs(J[rows]).max())
