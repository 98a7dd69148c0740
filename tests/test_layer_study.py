"""Layer studies (kind = "layer"): config, run, resume, records, rates, figure, CLI."""

import io
import json
import os

import numpy as np
import pytest

from hmoe_estim.study import (
    ConfigError,
    LayerStudyConfig,
    StudyConfig,
    StudyError,
    certificate_summary,
    fit_seed,
    load_preset,
    load_study,
    main,
    read_results,
    run_study,
    true_layer,
    write_rates,
)

TINY = {
    "kind": "layer",
    "name": "tiny-layer",
    "seed": 5,
    "models": ["none", "value"],
    "truth": {"d": 2, "head_dim": 2, "d_out": 2, "seed": 1},
    "data": {"n_tokens": 2, "noise": 0.1},
    "grid": {"n": [150, 300], "reps": 2},
    "fit": {"n_starts": 1, "max_iter": 40},
    "baseline": {"n_starts": 1, "max_iter": 40},
    "metrics": {"n_ref": 400},
}


def tiny(**changes):
    return StudyConfig.from_dict(TINY).with_changes(**changes)


def run(config, out, **kw):
    kw.setdefault("n_jobs", 1)
    return run_study(config, str(out), progress=False, stream=io.StringIO(), **kw)


# -- configuration -------------------------------------------------------------------------
def test_entry_config_hash_unchanged():
    """Configs without ``kind`` are entry studies and keep the hash they had before."""
    d = {"name": "old", "seed": 3,
         "models": ["none", "value", {"gate": "sdpa", "activation": "tanh"}],
         "truth": {"n_features": 2, "seed": 1}, "grid": {"n": [40, 80], "reps": 2},
         "fit": {"n_starts": 1, "max_iter": 15, "solver": "lbfgs"}, "metrics": {"n_ref": 300}}
    cfg = StudyConfig.from_dict(d)
    assert cfg.kind == "entry" and "kind" not in cfg.to_dict()
    assert cfg.config_hash() == "7466685f6b55c908"
    assert StudyConfig.from_dict({**d, "kind": "entry"}).config_hash() == "7466685f6b55c908"
    assert load_preset("quick").config_hash() == "078ad4ed1eb03420"


def test_layer_config_round_trip_and_preset():
    cfg = tiny()
    assert isinstance(cfg, LayerStudyConfig) and cfg.kind == "layer"
    assert cfg.fit.head_dim == 2 and cfg.fit.qk == "factored" and cfg.baseline.n_experts == 2
    again = StudyConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.config_hash() == cfg.config_hash()
    assert cfg.with_changes(grid={"reps": 3}).grid.reps == 3
    layer = load_preset("layer")
    assert layer.kind == "layer" and [m.gate for m in layer.models] == ["none", "value", "sdpa"]
    assert layer.truth.n_heads == 1 and layer.data.noise == 0.1


@pytest.mark.parametrize("change, match", [
    ({"truth": {"d_model": 3}}, r"unknown key 'd_model' in \[truth\]; allowed keys"),
    ({"fit": {"n_experts": 3}}, r"unknown key 'n_experts' in \[fit\]; allowed keys"),
    ({"models": ["none", "gated"]}, r"models\[1\]\.gate must be one of .*'query'"),
    ({"fit": {"head_dim": 3}}, r"fit\.head_dim = 3 > truth\.d = 2 .* Use fit\.head_dim <= d"),
    ({"truth": {"head_dim": 3}}, r"truth\.head_dim = 3 > truth\.d = 2"),
    ({"baseline": {"column": 2}}, r"baseline\.column = 2 is outside .* use 0\.\.1"),
    ({"baseline": {"row": 2}}, r"baseline\.row must be an integer in \[-2, 2\)"),
    ({"data": {"rows": "last"}, "baseline": {"row": 0}}, r"Use baseline\.row = -1"),
    ({"grid": {"n": [5, 300]}}, r"grid\.n\[0\] must be >= 10"),
    ({"grid": {"n": [20, 300]}}, r"per-entry baseline .* Raise the smallest n of \[grid\]"),
    ({"models": ["value"], "truth": {"gate_form": "multiplicative"}},
     r"use models = \[\"sdpa\"\]"),
    ({"kind": "layers"}, r"kind must be one of \['entry', 'layer'\]"),
    ({"fit": {"varpro": "yes"}}, r"fit\.varpro must be \"auto\", true or false"),
    ({"fit": {"n_starts": "many"}}, r"fit\.n_starts must be \"auto\" or an integer >= 1"),
    ({"fit": {"n_starts": 0}}, r"fit\.n_starts"),
    ({"models": ["output"], "fit": {"varpro": True}}, r"Use fit\.varpro = \"auto\""),
])
def test_bad_layer_config_says_what_to_fix(change, match):
    with pytest.raises(ConfigError, match=match):
        tiny(**change)


def test_entry_config_rejects_layer_sections():
    d = {"models": ["none"], "baseline": {"column": 0}}
    with pytest.raises(ConfigError, match="unknown key 'baseline'.*allowed keys.*kind"):
        StudyConfig.from_dict(d)


# -- one study, interrupted and resumed ------------------------------------------------------
@pytest.fixture(scope="module")
def done_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("layer") / "out"
    cfg = tiny()
    first = run(cfg, out, max_fits=3)  # an interrupted run: 3 of the 8 fits finished
    path = out / "results.jsonl"
    with open(path, "ab") as fh:  # and a crash in the middle of writing the fourth
        fh.write(b'{"model": "none", "n": 150, "rep"')
    err = io.StringIO()
    second = run_study(cfg, str(out), n_jobs=1, progress=False, stream=err)
    return cfg, out, first, second, err.getvalue()


def test_resume_runs_each_fit_once(done_study):
    cfg, out, first, second, err = done_study
    assert first["n_run"] == 3 and second["n_skipped"] == 3 and second["n_run"] == 5
    assert "unfinished line" in err
    records, partial = read_results(out / "results.jsonl", required=cfg.required_keys)
    assert partial is None and len(records) == 8
    assert len({(r["model"], r["n"], r["rep"]) for r in records}) == 8
    again = run(cfg, out)
    assert again["n_run"] == 0 and again["n_skipped"] == 8
    stored = json.loads((out / "config.json").read_text())
    assert stored["config_hash"] == cfg.config_hash() and stored["config"]["kind"] == "layer"
    truth = json.loads((out / "truth.json").read_text())
    assert np.allclose(truth["layer"]["W_V"], true_layer(cfg).W_V)
    loaded, recs = load_study(str(out))
    assert loaded == cfg and len(recs) == 8


def test_records_hold_layer_and_baseline_metrics(done_study):
    cfg, out, *_ = done_study
    _, records = load_study(str(out))
    for rec in records:
        assert rec["seed"] == fit_seed(cfg.seed, cfg.model(rec["model"]).key, rec["n"],
                                       rec["rep"])
        for key in ("regression_error", "P_error", "VO_error", "objective", "truth_objective",
                    "n_rounds_agreeing", "converged", "fit_seconds", "entry_voronoi_loss",
                    "baseline_voronoi_loss", "baseline_expert_error", "baseline_fit_seconds"):
            assert key in rec, key
        assert rec["regression_error"] >= 0 and rec["P_error"] >= 0 and rec["VO_error"] >= 0
        assert rec["objective_gap"] == pytest.approx(rec["objective"] - rec["truth_objective"])
        assert isinstance(rec["worse_than_truth"], bool)
        assert np.asarray(rec["layer"]["W_O"]).shape == (1, 2, 2)
        assert np.asarray(rec["baseline_measure"]["a"]).shape == (1, 2, 2, 4)
    assert any("layer_voronoi_loss" in r for r in records if r["gate"] == "value")
    cert = certificate_summary(records)
    assert all(d["checked"] == 4 for d in cert.values())
    base = certificate_summary(records, prefix="baseline_")
    assert all(d["checked"] == 4 for d in base.values())


def test_rates_verdicts_and_figure(done_study, capsys):
    cfg, out, *_ = done_study
    rates = write_rates(str(out), n_boot=50)
    for model in ("none", "value"):
        per = rates[model]
        for metric in ("regression_error", "P_error", "VO_error", "entry_voronoi_loss",
                       "baseline_voronoi_loss"):
            assert "slope" in per[metric], (model, metric)
        assert per["certificate"]["checked"] == 4
        ident = per["identifiability"]
        assert ident["verdict"] == "identifiable up to the gauges"  # the layer report's
        assert per["P_error"]["reading"] == "rate" and per["VO_error"]["reading"] == "rate"
        assert "reading" in per["baseline_voronoi_loss"]
        assert ident["baseline_entry"]["label"].startswith("per-entry baseline: ")
    # the per-entry verdicts of the truth's entry measure: MHA's is the fibre of b = Σ ω a
    assert rates["none"]["identifiability"]["baseline_entry"]["verdict"] == "not identifiable"
    assert rates["none"]["baseline_voronoi_loss"]["reading"].startswith("not a rate")
    # MHA's raw entry loss sees the V/O gauge, whatever the layer's verdict
    assert "V/O gauge" in rates["none"]["entry_voronoi_loss"]["reading"]
    assert "V/O gauge" not in rates["value"]["entry_voronoi_loss"]["reading"]
    assert main(["plot", str(out)]) == 0
    assert os.path.getsize(out / "learning_curves.png") > 10_000
    assert main(["rates", str(out), "--n-boot", "50"]) == 0
    text = capsys.readouterr().out
    assert "baseline_voronoi_loss" in text and "identifiability" in text
    assert "median fit s" in text and "baseline fit s" in text
    assert "certificate of the per-entry baseline fits" in text
    assert main(["claims", str(out)]) == 2  # the paper's claims are about entry studies


def test_verdict_not_assessed_is_explicit(monkeypatch):
    """Without the layer identifiability report the verdict says so, with the reason."""
    import hmoe_estim.layer
    from hmoe_estim.study._verdicts import layer_study_verdicts

    monkeypatch.delattr(hmoe_estim.layer, "layer_identifiability_report")
    for rec in layer_study_verdicts(tiny(models=["value"])).values():
        assert rec["verdict"] == "unknown"
        assert rec["label"].startswith("identifiability not assessed: ")
        assert rec["baseline_entry"]["label"].startswith("per-entry baseline: ")


def test_other_config_in_same_out_is_refused(done_study):
    cfg, out, *_ = done_study
    with pytest.raises(StudyError, match="fit.n_starts: 1 -> 2"):
        run(cfg.with_changes(fit={"n_starts": 2}), out)


def test_cli_layer_preset(capsys):
    from hmoe_estim.study import build_parser

    assert build_parser().parse_args(["reproduce", "--layer"]).preset == "layer"
    assert main(["preset", "layer"]) == 0
    import tomllib

    assert StudyConfig.from_dict(tomllib.loads(capsys.readouterr().out)) == load_preset("layer")
    assert main(["reproduce", "--layer", "--near-truth", "--max-fits", "0"]) == 2


def test_layer_certificate_is_the_entry_studies_rule():
    """A fit above the truth's own objective is a certified failure, however little above (the
    rule of entry studies); the unit σ̂²/m is only recorded to read the gap in."""
    from hmoe_estim.study._layer_fit import _certificate

    gap, unit, worse = _certificate(1.0 + 1e-9, 1.0, 1000)
    assert worse and gap > 0 and unit == pytest.approx(1e-3)
    assert not _certificate(1.0 - 1e-9, 1.0, 1000)[2]
