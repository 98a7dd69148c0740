"""The layer identifiability report (``hmoe_estim.layer.layer_identifiability_report``): for
every gate, form and Q/K form the numerical null space of the layer Jacobian at small random
truths is the report's gauge dimension (and the table derived by hand), the discrete
symmetries it lists are exact, over-specified and degenerate truths are flagged with the null
directions they add, and bad input is refused with a message that says what to change."""

import json

import numpy as np
import pytest

from hmoe_estim.kernels import layer_jacobian, single_thread_blas
from hmoe_estim.layer import (
    AttentionLayer,
    LayerIdentifiabilityReport,
    attention_layer_output,
    layer_identifiability_report,
    layer_verdict_label,
    random_attention_layer,
)

from .test_layer_jacobian import _null_dimension

N, D, DV = 3, 3, 2

#: (truth options, gate, gauge dimension per head with d_v = 2): derived by hand
#: (Q/K: d_v² for factored bilinear scores, 0 for full P and for G3/G4; V/O: d_v² for MHA,
#: G5, G3, G4 and the headwise multiplicative gate, d_v for the elementwise one, 0 for G1/G2)
TABLE = [
    ({}, "none", 8), ({}, "output", 8), ({}, "value", 4), ({}, "sdpa", 4),
    ({}, "key", 4), ({}, "query", 4),
    ({"qk": "full"}, "none", 4), ({"qk": "full"}, "output", 4),
    ({"qk": "full"}, "value", 0), ({"qk": "full"}, "sdpa", 0),
    ({"gate_form": "multiplicative", "granularity": "headwise"}, "sdpa", 8),
    ({"gate_form": "multiplicative", "granularity": "elementwise"}, "sdpa", 6),
    ({"gate_form": "multiplicative", "granularity": "headwise", "qk": "full"}, "sdpa", 4),
    ({"gate_form": "multiplicative", "granularity": "elementwise", "qk": "full"}, "sdpa", 2),
]


@pytest.fixture(autouse=True)
def _one_blas_thread():
    with single_thread_blas():
        yield


def _report(truth, gate, activation, **kw):
    return layer_identifiability_report(
        truth, gate=gate, activation=activation, gate_form=truth.granularity and
        "multiplicative" or "activation", qk=truth.qk, n_tokens=N, **kw)


def _weights(layer):
    kw = {"W_V": layer.W_V.copy(), "W_O": layer.W_O.copy()}
    for name in ("W_Q", "W_K", "P", "W_theta", "intercept"):
        if getattr(layer, name) is not None:
            kw[name] = getattr(layer, name).copy()
    return kw


@pytest.mark.parametrize("options, gate, per_head", TABLE,
                         ids=[f"{g}-{'-'.join(o.values()) or 'activation'}"
                              for o, g, _ in TABLE])
def test_null_space_is_the_predicted_gauge_dimension(options, gate, per_head):
    X = np.random.default_rng(5).normal(size=(32, N, D))
    for H in (1, 2):
        for k, activation in enumerate(("sigmoid", "tanh", "silu" if H == 1 else "gelu")):
            intercept = k == 1
            rows = "last" if (H, k) == (2, 2) else "all"
            truth = random_attention_layer(H, D, DV, random_state=10 * H + k,
                                           fit_intercept=intercept, **options)
            rep = _report(truth, gate, activation, rows=rows)
            case = (H, activation, intercept, rows)
            assert rep.gauge_dimension == H * per_head, case
            assert rep.obstructions == [], case
            assert rep.jacobian.matches and rep.jacobian.complete, case
            assert rep.jacobian.null_dimension == H * per_head, case
            assert rep.identifiable is True and rep.verdict == "identifiable up to the gauges"
            assert layer_verdict_label(rep) == "identifiable up to the gauges"
            # the same count from an independent SVD of the kernel's Jacobian
            layout = truth.layout
            _, J = layer_jacobian(layout.pack(truth), X, *layout.kernel_args(gate, activation,
                                                                              rows))
            assert _null_dimension(J) == H * per_head, case


def test_gauges_leave_the_output_unchanged_and_the_listed_symmetries_are_exact():
    X = np.random.default_rng(0).normal(size=(6, N, D))
    A = np.array([[1.5, 0.3], [-0.4, 0.8]])
    Ainv = np.linalg.inv(A)

    def same(a, b, gate, activation, gate_form="activation"):
        ya = attention_layer_output(X, a, gate=gate, activation=activation, gate_form=gate_form)
        yb = attention_layer_output(X, b, gate=gate, activation=activation, gate_form=gate_form)
        return np.allclose(ya, yb, rtol=1e-11, atol=1e-11)

    t = random_attention_layer(2, D, DV, random_state=1, fit_intercept=True)
    kw = _weights(t)
    # Q/K and V/O gauges of MHA; the V/O gauge breaks for G1, the Q/K gauge for G3
    qk = dict(kw, W_Q=kw["W_Q"] @ A, W_K=kw["W_K"] @ Ainv.T)
    vo = dict(kw, W_V=kw["W_V"] @ A, W_O=Ainv @ kw["W_O"])
    assert same(t, AttentionLayer(**qk), "none", "tanh")
    assert same(t, AttentionLayer(**vo), "key", "tanh")
    assert not same(t, AttentionLayer(**vo), "sdpa", "tanh")
    assert not same(t, AttentionLayer(**qk), "key", "tanh")
    # head relabelling
    swap = {k: (v[::-1] if k != "intercept" else v) for k, v in kw.items()}
    assert same(t, AttentionLayer(**swap), "value", "gelu")
    names = {s.name for s in _report(t, "value", "gelu").symmetries}
    assert names == {"head-relabelling", "channel-permutation"}
    # channel sign flip (tanh, G1/G2) and reflection (sigmoid with an intercept)
    flip = dict(kw, W_V=kw["W_V"].copy(), W_O=kw["W_O"].copy(), intercept=kw["intercept"].copy())
    flip["W_V"][0, :, 1] *= -1
    flip["W_O"][0, 1] *= -1
    assert same(t, AttentionLayer(**flip), "sdpa", "tanh")
    assert "channel-sign-flip" in {s.name for s in _report(t, "sdpa", "tanh").symmetries}
    flip["intercept"] += kw["W_O"][0, 1]
    for gate in ("sdpa", "value"):
        assert same(t, AttentionLayer(**flip), gate, "sigmoid")
        assert "channel-reflection" in {s.name for s in _report(t, gate, "sigmoid").symmetries}
    # score sign flip: G3 with tanh or sigmoid, G4 with tanh only
    sflip = dict(kw, W_Q=kw["W_Q"].copy(), W_K=kw["W_K"].copy())
    sflip["W_Q"][1, :, 0] *= -1
    sflip["W_K"][1, :, 0] *= -1
    for gate, activation, exact in (("key", "sigmoid", True), ("key", "tanh", True),
                                    ("query", "tanh", True), ("query", "sigmoid", False),
                                    ("key", "gelu", False)):
        assert same(t, AttentionLayer(**sflip), gate, activation) == exact, (gate, activation)
        names = {s.name for s in _report(t, gate, activation).symmetries}
        assert ("score-sign-flip" in names) == exact, (gate, activation)
    # the multiplicative gate's sign flip (tanh), headwise and elementwise
    for granularity in ("headwise", "elementwise"):
        m = random_attention_layer(1, D, DV, gate_form="multiplicative",
                                   granularity=granularity, random_state=2)
        kw = _weights(m)
        g = dict(kw, W_theta=-kw["W_theta"], W_O=-kw["W_O"])
        assert same(m, AttentionLayer(**g), "sdpa", "tanh", "multiplicative")
        assert "gate-sign-flip" in {s.name for s in _report(m, "sdpa", "tanh").symmetries}


def test_over_specified_head_dim_is_flagged():
    truth = random_attention_layer(2, D, DV, random_state=3)
    for gate, kept, channels in (("none", ("P_h", "C_h"), False), ("value", ("P_h",), True),
                                 ("key", ("C_h",), True)):
        rep = layer_identifiability_report(truth, gate=gate, n_tokens=N, head_dim=3)
        assert rep.head_dim == 3 and rep.identifiable is False, gate
        (o,) = rep.obstructions
        assert o.name == "over-specified" and o.extra_null_dimension == 0
        assert "not identified" in o.description
        for q in kept:
            assert q in o.description, (gate, q)
            assert any(item.startswith(q) for item in rep.identified), (gate, q)
        assert any("not the channels" in item for item in rep.identified) == channels
        assert rep.jacobian.matches  # at the truth's head_dim
        assert layer_verdict_label(rep.to_dict()) == "not identifiable (over-specified)"
        assert "not identifiable" in str(rep) and "over-specified" in str(rep)
    # full scores: the value head may exceed d
    full = random_attention_layer(1, D, DV, qk="full", random_state=3)
    rep = layer_identifiability_report(full, gate="sdpa", qk="full", n_tokens=N, head_dim=5)
    assert [o.name for o in rep.obstructions] == ["over-specified"]
    # the truth embedded in the larger class (a zero channel): null directions beyond the
    # gauges there, each one accounted for
    kw = _weights(truth)
    for name in ("W_Q", "W_K", "W_V"):
        kw[name] = np.concatenate([kw[name], np.zeros((2, D, 1))], axis=2)
    kw["W_O"] = np.concatenate([kw["W_O"], np.zeros((2, 1, D))], axis=1)
    for gate in ("none", "value", "key"):
        rep = _report(AttentionLayer(**kw), gate, "tanh")
        assert rep.identifiable is False and rep.obstructions, gate
        assert rep.jacobian.null_dimension > rep.gauge_dimension, gate
        assert rep.jacobian.matches and rep.jacobian.complete, gate


def test_value_head_wider_than_the_tokens_has_smaller_orbits():
    # full scores, d_v = 4 > d = 3: W_V,h has rank 3, so the GL(4) orbit has dimension
    # 16 - 1·1 = 15, and that is the whole null space (C_h is identified)
    truth = random_attention_layer(1, D, 4, qk="full", random_state=8)
    rep = layer_identifiability_report(truth, gate="none", qk="full", n_tokens=N)
    assert rep.gauge_dimension == 15 and rep.jacobian.null_dimension == 15
    assert rep.identifiable is True and any("d_v = 4 > min(d, d_out)" in n for n in rep.notes)
    # d = 3 < d_v = 4 < d_out = 5: the orbit is all of GL(4), and W_O,h moves beyond it
    truth = random_attention_layer(1, D, 4, 5, qk="full", random_state=8)
    rep = layer_identifiability_report(truth, gate="output", qk="full", n_tokens=N)
    (o,) = rep.obstructions
    assert o.name == "rank-deficient-C" and o.extra_null_dimension == (5 - 4) * (4 - 3)
    assert rep.gauge_dimension == 16 and rep.jacobian.matches
    # d_out = 1 < d_v = 2: W_O,h has rank 1, and W_V,h moves beyond the orbit
    truth = random_attention_layer(1, D, DV, 1, random_state=8)
    rep = layer_identifiability_report(truth, gate="none", n_tokens=N)
    (o,) = rep.obstructions
    assert o.name == "rank-deficient-C" and o.extra_null_dimension == (D - 2) * (2 - 1)
    assert rep.gauge_dimension == 4 + 4 and rep.jacobian.matches
    # one label per kind of obstruction, however many heads it concerns
    two = random_attention_layer(2, D, DV, 1, random_state=8)
    rep = layer_identifiability_report(two, gate="query", n_tokens=N)
    assert [o.heads for o in rep.obstructions] == [(0,), (1,)]
    assert layer_verdict_label(rep) == "not identifiable (rank-deficient-C)"


def _degenerate(truth, edit):
    kw = _weights(truth)
    edit(kw)
    return AttentionLayer(**kw)


#: (truth options, gate, activation, edit of the weights, obstruction, its extra null
#: directions): each from the tangent space of the factorisation or the channels it frees
DEGENERATE = [
    ({}, "none", "tanh", lambda w: w["W_K"][0].__setitem__((slice(None), 1), 2 * w["W_K"][0, :, 0]),
     "rank-deficient-P", 1),
    ({}, "sdpa", "sigmoid", lambda w: w["W_Q"][0].__setitem__((slice(None), 1), 0.0),
     "rank-deficient-P", 1),
    ({}, "key", "gelu", lambda w: w["W_V"][0].__setitem__((slice(None), 1), -w["W_V"][0, :, 0]),
     "rank-deficient-C", 1),
    ({}, "sdpa", "tanh", lambda w: w["W_O"][0].__setitem__(1, 0.0), "zero-channel", D),
    ({}, "value", "silu", lambda w: w["W_V"][0].__setitem__((slice(None), 1), 0.0),
     "zero-channel", D),
    ({}, "value", "tanh", lambda w: w["W_V"][0].__setitem__((slice(None), 1), -w["W_V"][0, :, 0]),
     "duplicate-channel", D),
    ({}, "query", "tanh", lambda w: w["W_K"][0].__setitem__((slice(None), 0), 0.0),
     "zero-score-channel", D),
    ({"gate_form": "multiplicative", "granularity": "elementwise"}, "sdpa", "sigmoid",
     lambda w: w["W_O"][0].__setitem__(1, 0.0), "zero-channel", 2 * D - 1),
]


@pytest.mark.parametrize("options, gate, activation, edit, name, extra", DEGENERATE,
                         ids=[f"{c[4]}-{c[1]}" for c in DEGENERATE])
def test_degenerate_truths_are_flagged_with_their_null_directions(options, gate, activation,
                                                                  edit, name, extra):
    truth = _degenerate(random_attention_layer(2, D, DV, random_state=4, **options), edit)
    rep = _report(truth, gate, activation)
    assert [o.name for o in rep.obstructions] == [name]
    assert rep.obstructions[0].extra_null_dimension == extra
    assert rep.identifiable is False and rep.verdict == "not identifiable"
    assert rep.jacobian.null_dimension == rep.gauge_dimension + extra
    assert rep.jacobian.matches and rep.jacobian.complete
    assert layer_verdict_label(rep) == f"not identifiable ({name})"


def test_duplicate_and_constant_heads_are_flagged():
    truth = random_attention_layer(2, D, DV, random_state=6, fit_intercept=True)
    kw = _weights(truth)
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        kw[name][1] = kw[name][0]
    for gate, per_head, gauge in (("none", 24, 8), ("value", 24, 4)):
        rep = _report(AttentionLayer(**kw), gate, "tanh")
        assert [o.name for o in rep.obstructions] == ["duplicate-heads"]
        assert rep.obstructions[0].extra_null_dimension == per_head - gauge
        assert rep.jacobian.matches
    # W_O,h = 0: only W_O,h (6 weights) moves the output; the head's other 18 are free, of
    # which the gauge orbits (still moving W_Q,h, W_K,h, W_V,h) hold 8 for MHA, 4 for G3
    kw = _weights(truth)
    kw["W_O"][1] = 0.0
    for gate, extra in (("none", 24 - 6 - 8), ("key", 24 - 6 - 4)):
        rep = _report(AttentionLayer(**kw), gate, "tanh")
        (o,) = rep.obstructions
        assert (o.name, o.heads, o.extra_null_dimension) == ("constant-head", (1,), extra)
        assert rep.jacobian.matches and rep.jacobian.complete, gate
    # G1 with sigmoid and W_V,h = 0: the head is the constant σ(0) W_O,h, whatever P_h
    kw = _weights(truth)
    kw["W_V"][1] = 0.0
    rep = _report(AttentionLayer(**kw), "sdpa", "sigmoid")
    names = [o.name for o in rep.obstructions]
    assert "constant-head" in names and rep.identifiable is False
    assert not rep.jacobian.complete
    assert rep.jacobian.null_dimension > rep.jacobian.predicted_null_dimension
    assert "a lower bound" in rep.summary()


def test_full_rank_deficient_P_is_only_a_note_and_the_record_is_json():
    truth = random_attention_layer(1, D, DV, qk="full", random_state=7)  # rank P = d_v < d
    rep = layer_identifiability_report(truth, gate="none", qk="full", n_tokens=N)
    assert rep.identifiable is True and any("rank < d" in n for n in rep.notes)
    record = json.loads(json.dumps(rep.to_dict()))
    assert record["verdict"] == "identifiable up to the gauges"
    assert record["jacobian"]["matches"] and record["gauge_dimension"] == 4
    assert isinstance(rep, LayerIdentifiabilityReport) and str(rep) == rep.summary()
    # a factored truth read with full scores (P_h = W_Q,h W_K,hᵀ/√d_v)
    factored = random_attention_layer(1, D, DV, random_state=7)
    rep = layer_identifiability_report(factored, gate="value", qk="full", n_tokens=N)
    assert rep.qk == "full" and rep.gauge_dimension == 0 and rep.jacobian.null_dimension == 0


@pytest.mark.parametrize("kwargs, match", [
    ({"gate": "G3"}, r"Unknown gate 'G3'.*'key'"),
    ({"activation": "relu"}, r"Unknown activation"),
    ({"qk": "low-rank"}, r"Unknown qk"),
    ({"rows": "first"}, r"Unknown rows"),
    ({"n_tokens": 1}, r"n_tokens must be >= 2"),
    ({"head_dim": 1}, r"head_dim = 1 < d_v\* = 2.*use head_dim >= 2"),
    ({"head_dim": 4}, r"head_dim = 4 > d = 3.*qk='full'"),
    ({"X": np.zeros((4, 3, 2))}, r"d = 3"),
    ({"X": np.zeros((4, 5, 3))}, r"n_tokens = 3.*shape \(n, 3, 3\)"),
    ({"gate": "key", "qk": "full"}, r"bilinear scores.*use qk='factored'"),
    ({"gate_form": "multiplicative"}, r"needs the gate's weights W_theta"),
    ({"granularity": "headwise"}, r"granularity='headwise'.*absent"),
    ({"tol": 2.0}, r"tol must be a number in \(0, 1\)"),
    ({"n_ref": 2}, r"18 rows for 24 parameters.*use n_ref \(or X with n\) >= 3"),
])
def test_bad_input_says_what_to_change(kwargs, match):
    truth = random_attention_layer(1, D, DV, random_state=0)
    args = {"gate": "sdpa", "n_tokens": N, **kwargs}
    with pytest.raises(ValueError, match=match):
        layer_identifiability_report(truth, **args)


def test_bad_truths_say_what_to_change():
    with pytest.raises(ValueError, match=r"must be an AttentionLayer.*random_attention_layer"):
        layer_identifiability_report(np.zeros(3), gate="none", n_tokens=N)
    full = random_attention_layer(1, D, DV, qk="full", random_state=0)
    with pytest.raises(ValueError, match=r"pass qk='full'"):
        layer_identifiability_report(full, gate="none", n_tokens=N)
    gated = random_attention_layer(1, D, DV, gate_form="multiplicative", random_state=0)
    with pytest.raises(ValueError, match=r"use gate_form='multiplicative'"):
        layer_identifiability_report(gated, gate="sdpa", n_tokens=N)
    with pytest.raises(ValueError, match=r"granularity='elementwise'.*headwise"):
        layer_identifiability_report(gated, gate="sdpa", gate_form="multiplicative",
                                     granularity="elementwise", n_tokens=N)
