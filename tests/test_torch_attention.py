"""PyTorch in and out: torch.nn.MultiheadAttention ⇄ HMoE measures (optional extra ``torch``).

Every test that needs PyTorch skips itself without it; the ImportError path is tested by
hiding PyTorch (``sys.modules["torch"] = None``).
"""

import json
import sys

import numpy as np
import pytest

from hmoe_estim import MixingMeasure, regression_function
from hmoe_estim.attention import attention_to_measure, multihead_attention

GATES = ("none", "value", "sdpa", "output")
TOL = 1e-10
# (E, H, N): embed_dim, heads, tokens
SIZES = [(2, 1, 3), (4, 2, 2), (6, 3, 3), (6, 2, 2)]


def _module(E, H, seed, **kw):
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    m = torch.nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64, **kw)
    with torch.no_grad():  # random weights of order one (the default init is small)
        for p in m.parameters():
            p.normal_()
    return m.eval()


def _tokens(B, N, E, seed):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, N, E, generator=g, dtype=torch.float64)


def _zero_query_bias(m):
    import torch

    with torch.no_grad():
        m.in_proj_bias[: m.embed_dim] = 0.0
    return m


@pytest.mark.parametrize("E, H, N", SIZES)
@pytest.mark.parametrize("activation", ["sigmoid", "gelu"])
def test_measures_give_every_output_entry_at_every_gate(E, H, N, activation):
    from hmoe_estim.attention import attention_forward, from_torch, from_torch_all

    m = _module(E, H, seed=E + H + N, bias=False)
    X = _tokens(7, N, E, seed=1)
    x = X.reshape(7, -1).numpy()
    direct = {g: attention_forward(m, X, gate=g, activation=activation).detach().numpy()
              for g in GATES}
    # gate="none" is the module's own output
    own = m(X, X, X, need_weights=False)[0].detach().numpy()
    np.testing.assert_allclose(direct["none"], own, rtol=0, atol=TOL * max(1, np.abs(own).max()))
    measures = from_torch_all(m, n_tokens=N)
    assert len(measures) == N and all(len(r) == E for r in measures)
    for row in range(N):
        for column in range(E):
            G = from_torch(m, n_tokens=N, row=row, column=column)
            assert G == measures[row][column]
            assert G.shape == (H, N, E // H, N * E) and G.is_normalized()
            for gate in GATES:
                f = regression_function(G, x, gate=gate, activation=activation)
                want = direct[gate][:, row, column]
                scale = max(1.0, np.abs(want).max())
                assert np.abs(f - want).max() <= TOL * scale, (gate, row, column)


@pytest.mark.parametrize("E, H, N", SIZES[:3])
def test_torch_gated_forward_matches_numpy_attention(E, H, N):
    from hmoe_estim.attention import attention_forward, weights_from_torch

    m = _module(E, H, seed=3, bias=False)
    X = _tokens(4, N, E, seed=2)
    W = weights_from_torch(m)
    for gate in GATES:
        got = attention_forward(m, X, gate=gate, activation="tanh").detach().numpy()
        want = multihead_attention(X.numpy(), *W, gate=gate, activation="tanh")
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("E, H, N", SIZES)
def test_round_trips(E, H, N):
    torch = pytest.importorskip("torch")
    from hmoe_estim.attention import from_torch, to_torch, weights_from_torch

    m = _module(E, H, seed=5, bias=False)
    W = weights_from_torch(m)
    m2 = to_torch(*W)
    for (n1, p1), (n2, p2) in zip(m.named_parameters(), m2.named_parameters()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    for w1, w2 in zip(W, weights_from_torch(m2)):
        np.testing.assert_array_equal(w1, w2)
    # weights -> module -> measure is attention_to_measure of the weights
    rng = np.random.default_rng(E)
    d_v = E // H
    Ws = rng.normal(size=(3, H, E, d_v))
    W_O = rng.normal(size=(H, d_v, E))
    m3 = to_torch(*Ws, W_O)
    for row in range(N):
        G = from_torch(m3, n_tokens=N, row=row, column=E - 1)
        assert G == attention_to_measure(*Ws, W_O, n_tokens=N, row=row, column=E - 1)
    X = _tokens(3, N, E, seed=0)
    np.testing.assert_allclose(
        m3(X, X, X)[0].detach().numpy(), multihead_attention(X.numpy(), *Ws, W_O),
        rtol=1e-12, atol=1e-12,
    )
    # with an output bias
    b = rng.normal(size=E)
    m4 = to_torch(*Ws, W_O, bias=b)
    G, c = from_torch(m4, n_tokens=N, row=0, column=1, return_intercept=True)
    assert c == b[1]
    out = m4(X, X, X)[0].detach().numpy()[:, 0, 1]
    np.testing.assert_allclose(regression_function(G, X.reshape(3, -1).numpy()) + c, out,
                               rtol=0, atol=1e-10)


@pytest.mark.parametrize("gate", GATES)
def test_fitted_measure_evaluates_in_torch(gate):
    torch = pytest.importorskip("torch")
    from hmoe_estim.attention import HMoEModule, measure_to_torch

    rng = np.random.default_rng(0)
    omega = rng.normal(size=(2, 3))
    M = rng.normal(size=(2, 3, 4, 4))
    M = 0.5 * (M + M.transpose(0, 1, 3, 2))
    G = MixingMeasure(omega, M, rng.normal(size=(2, 3, 3, 4)))
    x = rng.uniform(-1, 1, size=(50, 4))
    for act in ("sigmoid", "tanh", "gelu", "silu"):
        mod = measure_to_torch(G, gate=gate, activation=act, intercept=1.5)
        assert isinstance(mod, HMoEModule) and isinstance(mod, torch.nn.Module)
        got = mod(torch.as_tensor(x)).detach().numpy()
        want = regression_function(G, x, gate=gate, activation=act) + 1.5
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="shape"):
        mod(torch.zeros(3, 5, dtype=torch.float64))


def test_biases_that_fit_and_that_do_not():
    from hmoe_estim.attention import attention_forward, from_torch, from_torch_all

    E, H, N = 4, 2, 3
    m = _module(E, H, seed=9)  # bias=True, every bias random
    with pytest.raises(ValueError, match=r"in_proj_bias \(its query part"):
        from_torch(m, n_tokens=N, row=0, column=0, return_intercept=True)
    _zero_query_bias(m)
    with pytest.raises(ValueError, match="return_intercept=True"):
        from_torch(m, n_tokens=N, row=0, column=0)
    with pytest.raises(ValueError, match="return_intercept=True"):
        from_torch_all(m, n_tokens=N)
    X = _tokens(6, N, E, seed=3)
    own = m(X, X, X)[0].detach().numpy()
    measures, consts = from_torch_all(m, n_tokens=N, return_intercept=True)
    assert consts.shape == (E,)
    for row in range(N):
        for column in range(E):
            G, c = from_torch(m, n_tokens=N, row=row, column=column, return_intercept=True)
            assert c == consts[column] and G == measures[row][column]
            f = regression_function(G, X.reshape(6, -1).numpy()) + c
            np.testing.assert_allclose(f, own[:, row, column], rtol=0, atol=TOL * 10)
    # key bias alone: exact at every gate, no intercept
    import torch

    with torch.no_grad():
        m.in_proj_bias[2 * E:] = 0.0
        m.out_proj.bias.zero_()
    for gate in GATES:
        want = attention_forward(m, X, gate=gate).detach().numpy()[:, 1, 2]
        G = from_torch(m, n_tokens=N, row=1, column=2)
        np.testing.assert_allclose(regression_function(G, X.reshape(6, -1).numpy(), gate=gate),
                                   want, rtol=0, atol=TOL * 10)


def test_add_zero_attn_is_an_extra_token():
    from hmoe_estim.attention import attention_forward, from_torch

    E, H, N = 4, 2, 2
    m = _module(E, H, seed=4, bias=False, add_zero_attn=True)
    X = _tokens(5, N, E, seed=6)
    own = m(X, X, X)[0].detach().numpy()
    for gate in GATES:
        direct = attention_forward(m, X, gate=gate).detach().numpy()
        if gate == "none":
            np.testing.assert_allclose(direct, own, rtol=0, atol=1e-12)
        G = from_torch(m, n_tokens=N, row=1, column=0)
        assert G.n_tokens == N + 1
        np.testing.assert_allclose(regression_function(G, X.reshape(5, -1).numpy(), gate=gate),
                                   direct[:, 1, 0], rtol=0, atol=1e-10)
    m2 = _module(E, H, seed=4, add_zero_attn=True)
    _zero_query_bias(m2)
    with pytest.raises(ValueError, match="add_zero_attn=True the key bias"):
        from_torch(m2, n_tokens=N, row=0, column=0, return_intercept=True)


def test_bad_input():
    torch = pytest.importorskip("torch")
    from hmoe_estim.attention import attention_forward, from_torch, to_torch

    with pytest.raises(ValueError, match="must be a torch.nn.MultiheadAttention; got Linear"):
        from_torch(torch.nn.Linear(2, 2), n_tokens=2, row=0, column=0)
    m = _module(4, 2, seed=0, bias=False)
    with pytest.raises(ValueError, match=r"row must be in \[0, 2\]"):
        from_torch(m, n_tokens=3, row=3, column=0)
    with pytest.raises(ValueError, match=r"column must be in \[0, 3\]"):
        from_torch(m, n_tokens=3, row=0, column=4)
    with pytest.raises(ValueError, match="n_tokens"):
        from_torch(m, n_tokens=0, row=0, column=0)
    kv = torch.nn.MultiheadAttention(4, 2, kdim=3, vdim=5)
    with pytest.raises(ValueError, match="kdim = 3, vdim = 5 but embed_dim = 4"):
        from_torch(kv, n_tokens=2, row=0, column=0)
    bkv = torch.nn.MultiheadAttention(4, 2, add_bias_kv=True)
    with pytest.raises(ValueError, match="add_bias_kv"):
        from_torch(bkv, n_tokens=2, row=0, column=0)
    broken = _module(4, 2, seed=0, bias=False)
    broken.in_proj_weight = torch.nn.Parameter(torch.zeros(12, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"in_proj_weight has shape \(12, 3\)"):
        from_torch(broken, n_tokens=2, row=0, column=0)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="d_v·H = d"):
        to_torch(*rng.normal(size=(3, 2, 4, 3)), rng.normal(size=(2, 3, 4)))
    with pytest.raises(ValueError, match=r"W_O must have shape"):
        to_torch(*rng.normal(size=(3, 2, 4, 2)), rng.normal(size=(2, 4, 2)))
    with pytest.raises(ValueError, match="bias must be"):
        to_torch(*rng.normal(size=(3, 2, 4, 2)), rng.normal(size=(2, 2, 4)), bias=np.ones(3))
    with pytest.raises(ValueError, match="Unknown gate"):
        attention_forward(m, torch.zeros(2, 4, dtype=torch.float64), gate="G1")
    with pytest.raises(ValueError, match=r"X must have shape \(N, E\)"):
        attention_forward(m, torch.zeros(2, 3, dtype=torch.float64))


def test_import_error_names_the_extra(monkeypatch):
    # runs without PyTorch too: hide it whether or not it is installed
    monkeypatch.setitem(sys.modules, "torch", None)
    import hmoe_estim.attention as attention

    with pytest.raises(ImportError, match=r"hmoe-estim\[torch\]"):
        attention.from_torch(object(), n_tokens=2, row=0, column=0)
    with pytest.raises(ImportError, match="torch"):
        attention.to_torch(*np.ones((3, 1, 2, 2)), np.ones((1, 2, 2)))
    with pytest.raises(ImportError, match=r"hmoe-estim\[torch\]"):
        attention.measure_to_torch(None)
    with pytest.raises(AttributeError):
        attention.no_such_name  # noqa: B018


def test_teacher_measure_is_a_study_truth(tmp_path):
    """A layer's measure saved as JSON is the truth of a study config (truth.file)."""
    from hmoe_estim.attention import from_torch
    from hmoe_estim.study import load_config

    m = _module(2, 1, seed=2, bias=False)
    import torch

    with torch.no_grad():  # W_O >= 0 so that the paper's model (A.2) holds for the truth
        m.out_proj.weight.abs_()
    G = from_torch(m, n_tokens=2, row=0, column=1)
    (tmp_path / "teacher.json").write_text(json.dumps(G.to_dict()))
    (tmp_path / "study.toml").write_text(
        'models = ["none"]\n[truth]\nfile = "teacher.json"\n[grid]\nn = [200]\nreps = 1\n'
        "[fit]\nn_experts = 1\n"
    )
    cfg = load_config(tmp_path / "study.toml")
    assert cfg.true_shape == G.shape
    assert MixingMeasure.from_dict(cfg.truth.measure) == G
    assert not any("negative weights" in w for w in cfg.warnings())
    # a signed W_O is flagged: the study's fits keep omega >= 0
    signed = G.to_dict()
    signed["omega"][0][0] = -abs(signed["omega"][0][0]) - 0.1
    (tmp_path / "teacher.json").write_text(json.dumps(signed))
    assert any("negative weights" in w for w in load_config(tmp_path / "study.toml").warnings())
