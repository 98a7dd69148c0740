"""A whole attention layer in and out of PyTorch (``hmoe_estim.layer.layer_to_torch`` and
``layer_from_torch``, optional extra ``torch``).

The torch module is checked against the layer kernel (``attention_layer_output``), against
``torch.nn.MultiheadAttention`` itself for the ungated layer, and against the independent
loop-by-loop NumPy forward pass of the layer's model tests (``reference_output`` of
``test_layer_model.py``, written from the definitions, no code of the package in it).
"""

import sys

import numpy as np
import pytest

from hmoe_estim.layer import (
    AttentionLayer,
    AttentionLayerRegressor,
    attention_layer_output,
    layer_from_torch,
    layer_to_torch,
    make_attention_regression,
    random_attention_layer,
)

from .test_layer_model import ACTIVATIONS, GATES, reference_output

torch = pytest.importorskip("torch")

TOL = 1e-12


def _tokens(n, N, d, seed):
    return np.random.default_rng(seed).normal(size=(n, N, d))


def _close(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=0, atol=TOL * max(1.0, float(np.abs(b).max())))


def _run(module, X):
    with torch.no_grad():
        return module(torch.from_numpy(X)).numpy()


def _mha(E, H, seed, **kw):
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64, **kw)
    with torch.no_grad():  # weights of order one (the default init is small)
        for p in m.parameters():
            p.normal_()
    return m.eval()


def _same_layer(A, B):
    for name in ("W_Q", "W_K", "P", "W_V", "W_O", "W_theta", "intercept"):
        a, b = getattr(A, name), getattr(B, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == np.float64 and np.array_equal(a, b), name


# -- gate none: torch.nn.MultiheadAttention itself ----------------------------------------
@pytest.mark.parametrize("H, d, dv, N", [(1, 2, 2, 3), (2, 4, 2, 2), (3, 3, 1, 4)])
def test_ungated_layer_is_torch_multihead_attention(H, d, dv, N):
    layer = random_attention_layer(H, d, dv, scale=1.5, random_state=H + d)
    X = _tokens(6, N, d, seed=2)
    mha = layer_to_torch(layer, mha=True)
    assert isinstance(mha, torch.nn.MultiheadAttention) and mha.batch_first
    assert mha.in_proj_bias is None and mha.out_proj.bias is None
    Xt = torch.from_numpy(X)
    with torch.no_grad():
        own = mha(Xt, Xt, Xt, need_weights=False)[0].numpy()
    _close(attention_layer_output(X, layer), own)
    _close(_run(layer_to_torch(layer), X), own)
    _close(reference_output(X, layer, "none", "sigmoid"), own)


def test_torch_multihead_attention_read_as_a_layer():
    m = _mha(4, 2, seed=0, bias=False)
    X = _tokens(5, 3, 4, seed=1)
    Xt = torch.from_numpy(X)
    with torch.no_grad():
        own = m(Xt, Xt, Xt, need_weights=False)[0].numpy()
    layer = layer_from_torch(m)
    assert layer.W_Q.shape == (2, 4, 2) and layer.intercept is None
    _close(attention_layer_output(X, layer), own)


def test_output_bias_is_the_intercept():
    m = _mha(4, 2, seed=3, bias=True)
    with torch.no_grad():
        m.in_proj_bias.zero_()
    X = _tokens(5, 3, 4, seed=1)
    Xt = torch.from_numpy(X)
    with torch.no_grad():
        own = m(Xt, Xt, Xt, need_weights=False)[0].numpy()
    layer = layer_from_torch(m)
    np.testing.assert_array_equal(layer.intercept, m.out_proj.bias.detach().numpy())
    _close(attention_layer_output(X, layer), own)
    # and back: the intercept goes to the output bias of a plain module
    back = layer_to_torch(layer, mha=True)
    with torch.no_grad():
        _close(back(Xt, Xt, Xt, need_weights=False)[0].numpy(), own)


def test_fitted_estimator_predicts_as_torch():
    truth = random_attention_layer(2, 4, 2, scale=1.5, random_state=0)
    X, Y = make_attention_regression(80, truth, n_tokens=3, noise=0.1, random_state=1)
    est = AttentionLayerRegressor(n_heads=2, head_dim=2, n_starts=1, random_state=0).fit(X, Y)
    Xt = torch.from_numpy(X)
    mha = est.to_torch(mha=True)
    assert isinstance(mha, torch.nn.MultiheadAttention)
    with torch.no_grad():
        own = mha(Xt, Xt, Xt, need_weights=False)[0].numpy()
    _close(est.predict(X), own)
    _close(_run(est.to_torch(), X), est.predict(X))


@pytest.mark.parametrize("gate", ["value", "sdpa"])
def test_fitted_gated_estimator_predicts_as_torch(gate):
    truth = random_attention_layer(1, 3, 2, d_out=2, random_state=0)
    X, Y = make_attention_regression(60, truth, n_tokens=2, gate=gate, noise=0.1,
                                     random_state=1)
    est = AttentionLayerRegressor(head_dim=2, gate=gate, rows="all", n_starts=1,
                                  random_state=0).fit(X, Y)
    module = est.to_torch()
    _close(_run(module, X), est.predict(X))
    layer, form = layer_from_torch(module, return_form=True)
    _same_layer(layer, est.layer_)
    assert form == {"gate": gate, "activation": "sigmoid", "gate_form": "activation",
                    "rows": "all"}


# -- every gate and form: the module, the kernel and the loops agree ------------------------
def _cases():
    for gate in GATES:
        for qk in ("factored", "full"):
            if qk == "full" and gate in ("key", "query"):
                continue
            yield gate, qk


@pytest.mark.parametrize("gate, qk", list(_cases()))
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_gate_matches_kernel_and_loops(gate, qk, activation):
    layer = random_attention_layer(2, 3, 2, d_out=2, qk=qk, fit_intercept=True, scale=1.5,
                                   random_state=len(gate) + len(activation))
    X = _tokens(4, 3, 3, seed=5)
    for rows in ("all", "last"):
        kw = dict(gate=gate, activation=activation, rows=rows)
        got = _run(layer_to_torch(layer, **kw), X)
        _close(got, attention_layer_output(X, layer, **kw))
        _close(got, reference_output(X, layer, kw["gate"], kw["activation"], rows=kw["rows"]))


@pytest.mark.parametrize("granularity", ["headwise", "elementwise"])
@pytest.mark.parametrize("qk", ["factored", "full"])
@pytest.mark.parametrize("activation", ["sigmoid", "silu"])
def test_multiplicative_gate_matches_kernel_and_loops(granularity, qk, activation):
    layer = random_attention_layer(2, 3, 2, qk=qk, gate_form="multiplicative",
                                   granularity=granularity, scale=1.5, random_state=7)
    X = _tokens(4, 3, 3, seed=6)
    for rows in ("all", "last"):
        module = layer_to_torch(layer, gate="sdpa", activation=activation, rows=rows)
        assert module.gate_form == "multiplicative"
        got = _run(module, X)
        kw = dict(gate="sdpa", activation=activation, rows=rows)
        _close(got, attention_layer_output(X, layer, **kw))
        _close(got, reference_output(X, layer, kw["gate"], kw["activation"], rows=kw["rows"]))


def test_one_token_matrix_and_autograd():
    layer = random_attention_layer(1, 2, 2, random_state=0)
    module = layer_to_torch(layer, gate="value")
    X = _tokens(1, 3, 2, seed=0)
    _close(_run(module, X[0]), attention_layer_output(X, layer, gate="value")[0])
    loss = module(torch.from_numpy(X)).square().sum()
    loss.backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in module.parameters())


# -- round trips ---------------------------------------------------------------------------
def _layers():
    yield random_attention_layer(2, 4, 2, random_state=0)
    yield random_attention_layer(1, 3, 2, d_out=5, qk="full", fit_intercept=True,
                                 random_state=1)
    yield random_attention_layer(2, 3, 3, gate_form="multiplicative", granularity="headwise",
                                 random_state=2)
    yield random_attention_layer(2, 3, 1, gate_form="multiplicative",
                                 granularity="elementwise", fit_intercept=True, random_state=3)


@pytest.mark.parametrize("index", range(4))
def test_round_trip_layer_torch_layer_is_exact(index):
    layer = list(_layers())[index]
    gate = "sdpa" if layer.W_theta is not None else "value"
    module = layer_to_torch(layer, gate=gate, activation="tanh", rows="last")
    # the parameters, in order, are the packed vector
    theta = torch.cat([p.detach().reshape(-1) for p in module.parameters()]).numpy()
    np.testing.assert_array_equal(theta, layer.layout.pack(layer))
    back, form = layer_from_torch(module, return_form=True)
    _same_layer(back, layer)
    assert form["gate"] == gate and form["activation"] == "tanh" and form["rows"] == "last"
    assert form["gate_form"] == ("multiplicative" if layer.W_theta is not None else "activation")


def test_round_trip_through_multihead_attention_is_exact():
    layer = random_attention_layer(2, 4, 2, random_state=4)
    _same_layer(layer_from_torch(layer_to_torch(layer, mha=True)), layer)
    with_b = AttentionLayer(W_Q=layer.W_Q, W_K=layer.W_K, W_V=layer.W_V, W_O=layer.W_O,
                            intercept=[0.5, -1.0, 0.25, 2.0])
    _same_layer(layer_from_torch(layer_to_torch(with_b, mha=True)), with_b)
    m = _mha(6, 3, seed=2, bias=False)
    again = layer_to_torch(layer_from_torch(m), mha=True)
    for name in ("in_proj_weight",):
        assert torch.equal(getattr(again, name), getattr(m, name))
    assert torch.equal(again.out_proj.weight, m.out_proj.weight)


# -- what is refused, and why ----------------------------------------------------------------
@pytest.mark.parametrize("kw, part", [
    (dict(bias=True), "bias=False"),
    (dict(bias=False, add_bias_kv=True), "add_bias_kv=False"),
    (dict(bias=False, add_zero_attn=True), "add_zero_attn=False"),
    (dict(bias=False, kdim=2, vdim=2), "kdim = vdim = embed_dim"),
])
def test_modules_the_layer_cannot_hold_are_refused(kw, part):
    m = _mha(4, 2, seed=0, **kw)
    with pytest.raises(ValueError, match=part):
        layer_from_torch(m)


def test_nonzero_input_biases_are_named():
    m = _mha(4, 2, seed=0, bias=True)
    with torch.no_grad():
        m.in_proj_bias[:4] = 0.0  # only the key and value parts are left
    with pytest.raises(ValueError, match=r"key, value part.*bias=False"):
        layer_from_torch(m)


def test_other_modules_are_refused():
    with pytest.raises(ValueError, match="MultiheadAttention or the AttentionLayerModule"):
        layer_from_torch(torch.nn.Linear(3, 3))


@pytest.mark.parametrize("layer, kw, why", [
    (random_attention_layer(2, 4, 2, random_state=0), dict(gate="value"), "no gate"),
    (random_attention_layer(2, 4, 2, qk="full", random_state=0), {}, "full P"),
    (random_attention_layer(2, 4, 2, d_out=3, random_state=0), {}, "d_out = 3"),
    (random_attention_layer(1, 4, 2, random_state=0), {}, "head_dim"),
    (random_attention_layer(2, 4, 2, random_state=0), dict(rows="last"), "every row"),
])
def test_mha_refuses_what_it_cannot_hold(layer, kw, why):
    with pytest.raises(ValueError, match=f"cannot hold this layer: .*{why}.*mha=False"):
        layer_to_torch(layer, mha=True, **kw)


def test_bad_forms_and_inputs_are_refused():
    layer = random_attention_layer(1, 3, 2, random_state=0)
    with pytest.raises(ValueError, match="gate_form='multiplicative'"):
        layer_to_torch(layer, gate="sdpa", gate_form="multiplicative")
    with pytest.raises(ValueError, match="AttentionLayer"):
        layer_to_torch(np.zeros(3))
    with pytest.raises(ValueError, match=r"shape \(n, N, d\) or \(N, d\) with d = 3"):
        layer_to_torch(layer)(torch.zeros(2, 3, 4, dtype=torch.float64))


def test_without_torch_the_error_names_the_extra(monkeypatch):
    layer = random_attention_layer(1, 2, 2, random_state=0)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"hmoe-estim\[torch\]"):
        layer_to_torch(layer)
    with pytest.raises(ImportError, match=r"hmoe-estim\[torch\]"):
        layer_from_torch(object())
