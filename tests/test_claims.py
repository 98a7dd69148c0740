"""The claims table (``hmoe_estim.study.claims_table``) and ``hmoe-estim claims OUT``: every
verdict branch from a hand-written ``rates.json``, the rst it makes, and the command's errors."""

import json

import pytest

from hmoe_estim.study import claim_rows, claims_table, load_preset, main
from hmoe_estim.study._claims import _rule


def rate(slope, lo, hi, reading=None, lam=(1.0, 0.5, 1.5), better="power"):
    r = {"slope": slope, "slope_ci": [lo, hi], "log_lambda": lam[0],
         "log_lambda_ci": [lam[1], lam[2]], "better_law": better, "n": [1000, 10000, 100000],
         "n_reps": [8, 8, 8], "skipped": 0}
    if reading is not None:
        r["reading"] = reading
    return r


def certificate(checked=24, failures=0, certified_only=False, dropped=0):
    return {"fits": 24, "checked": checked, "failures": failures,
            "failure_rate": failures / checked if checked else None,
            "certified_only": certified_only, "dropped": dropped, "found_twice": 0.5}


MHA_NOT = "not a rate: not identifiable (mha-fibre)"
G2_NOT = "not a rate: not identifiable (token-regroup)"

#: a study of MHA, G2 and G1 (no G5), every verdict branch somewhere
RATES = {
    "none": {
        "regression_error": rate(-0.50, -0.52, -0.49),                 # contains -1/2
        "voronoi_loss": rate(0.004, -0.03, 0.03, MHA_NOT, better="log"),  # flat
        "voronoi_exact": rate(-0.30, -0.40, -0.20, MHA_NOT),           # polynomial: not slow
        "expert_error": rate(-0.10, -0.20, 0.05, MHA_NOT),             # straddles -0.1
        "certificate": certificate(),
        "identifiability": {"verdict": "not identifiable",
                            "label": "not identifiable (mha-fibre)"},
    },
    "value": {
        "regression_error": rate(-0.52, -0.53, -0.51),                 # within -1/2 ± 0.1
        "voronoi_loss": rate(-0.46, -0.51, -0.41, G2_NOT),
        "expert_error": rate(0.02, -0.07, 0.12, G2_NOT),
        "voronoi_loss_measure": rate(-0.30, -0.35, -0.25, "rate"),
        "expert_error_measure": rate(-0.05, -0.08, -0.02, "rate; pre-asymptotic: near-"
                                     "alternative token-exchange (rms gap 2.5e-06) "
                                     "unresolved below n ~ 2.8e+10"),
        "certificate": certificate(),
        "identifiability": {"verdict": "not identifiable",
                            "label": "not identifiable (token-regroup)",
                            "measure_level": {"verdict": "identifiable",
                                              "label": "measure level: identifiable"}},
    },
    "sdpa": {
        "regression_error": rate(-0.30, -0.33, -0.28),                 # slower than -1/2
        "voronoi_loss": rate(-0.56, -0.60, -0.52, "rate"),
        "voronoi_exact": rate(-0.50, -0.90, 0.00, "rate"),             # too wide
        "voronoi_over": rate(-0.57, -0.61, -0.53, "rate"),             # faster than -1/4
        "extra_weight": rate(-0.14, -0.21, -0.09, "rate"),
        "expert_error": {"error": "an average loss is <= 0", "skipped": 0},
        "certificate": certificate(failures=3),
        "identifiability": {"verdict": "identifiable", "label": "identifiable"},
    },
}


def find(rows, key, model, metric):
    (row,) = [r for r in rows if r["key"] == key and r["model"].endswith(f"({model})")
              and r["metric"] == metric]
    return row


@pytest.mark.parametrize("kind, lo, hi, target, verdict", [
    ("near", -0.52, -0.49, -0.5, "consistent"),          # holds the target
    ("near", -0.58, -0.52, -0.5, "consistent"),          # within ± 0.1
    ("near", -0.33, -0.28, -0.5, "not consistent"),      # slower
    ("near", -0.80, -0.65, -0.5, "not consistent"),      # faster
    ("near", -0.90, 0.00, -0.5, "not measurable"),       # holds it, but also a flat curve
    ("near", -0.30, -0.20, -0.25, "consistent"),
    ("slow", -0.03, 0.03, None, "consistent"),
    ("slow", 0.10, 0.30, None, "consistent"),            # rising: no decrease
    ("slow", -0.40, -0.20, None, "not consistent"),
    ("slow", -0.30, 0.05, None, "not measurable"),       # contains 0, reaches below -0.1
    ("poly", -0.51, -0.41, None, "consistent"),
    ("poly", -0.05, 0.05, None, "not consistent"),
    ("poly", -0.25, -0.05, None, "not measurable"),
])
def test_verdict_rules(kind, lo, hi, target, verdict):
    got, detail = _rule(kind, lo, hi, target)
    assert got == verdict or got.startswith(verdict + ":")
    assert got.startswith("not measurable:") or detail  # a reason either way


def test_rows_from_hand_written_rates():
    rows = claim_rows(RATES, voronoi_r=0)
    # Proposition 1: one row per model, G5 not in this study
    assert find(rows, "proposition-1", "none", "regression_error")["verdict"] == "consistent"
    assert find(rows, "proposition-1", "value", "regression_error")["verdict"] == "consistent"
    row = find(rows, "proposition-1", "sdpa", "regression_error")
    assert row["verdict"] == "not consistent" and "slower" in row["detail"]
    assert row["caveats"][-1].startswith("certificate: 3 of 24 fits are certified optimisation")
    row = find(rows, "proposition-1", "output", "regression_error")
    assert row["measurement"] == "not in this study"
    assert row["verdict"] == "not measurable: G5 (output) is not in this study"
    # Theorem 1: the log law is shown, non-identifiability is a caveat, not the verdict
    row = find(rows, "theorem-1", "none", "voronoi_loss")
    assert row["verdict"] == "consistent"
    assert "lambda = 1.00 [0.50, 1.50]" in row["measurement"] and "better law: log" in \
        row["measurement"]
    assert any("mha-fibre" in c and "mechanism" in c for c in row["caveats"])
    assert any("measured in L_2" in c for c in row["caveats"])
    assert find(rows, "theorem-1", "none", "voronoi_exact")["verdict"] == "not consistent"
    assert find(rows, "theorem-1", "none", "expert_error")["verdict"].startswith(
        "not measurable: the interval [-0.20, +0.05] straddles -0.1")
    # G2: both readings, each with its own verdict
    row = find(rows, "gated-polynomial", "value", "voronoi_loss")
    assert row["verdict"] == "not measurable: not identifiable (token-regroup), the slope is " \
                             "not a rate"
    assert "the slope alone reads: consistent" in row["caveats"]
    assert find(rows, "gated-polynomial", "value", "expert_error")["caveats"][0] == \
        "the slope alone reads: not consistent"
    row = find(rows, "gated-polynomial", "value", "voronoi_loss_measure")
    assert row["verdict"] == "consistent" and row["metric_text"] == "Voronoi loss L_2 (measure)"
    assert row["caveats"][0] == "measure level: identifiable"
    row = find(rows, "gated-polynomial", "value", "expert_error_measure")
    assert row["verdict"] == "not consistent"
    assert any(c.startswith("reading: rate; pre-asymptotic") for c in row["caveats"])
    # G1: a metric that could not be fitted, a too-wide interval, the over-specified cells
    row = find(rows, "gated-polynomial", "sdpa", "expert_error")
    assert row["verdict"] == "not measurable: not fitted (an average loss is <= 0)"
    assert find(rows, "gated-exact", "sdpa", "voronoi_exact")["verdict"].startswith(
        "not measurable: the interval [-0.90, +0.00] also reaches above -0.1")
    row = find(rows, "gated-over", "sdpa", "voronoi_over")
    assert row["verdict"] == "not consistent" and "faster" in row["detail"]
    assert any(c.startswith("extra-atom weight b = -0.14") for c in row["caveats"])
    # a metric missing from a model that is there
    assert find(rows, "gated-exact", "value", "voronoi_exact")["verdict"] == \
        "not measurable: voronoi_exact of G2 is not in this study"
    # G5 does not help: every row says it is not in this study
    g5 = [r for r in rows if r["key"] == "g5"]
    assert len(g5) == 3 and all(r["verdict"].endswith("not in this study") for r in g5)


def test_g5_rows_compare_with_mha_and_g1():
    rates = {**RATES, "output": {"voronoi_loss": rate(0.01, -0.02, 0.04, MHA_NOT),
                                 "certificate": certificate(checked=0)}}
    rows = claim_rows(rates)
    row = find(rows, "g5", "output", "voronoi_loss")
    assert row["verdict"] == "consistent"
    assert "MHA: b = +0.00 [-0.03, +0.03]" in row["caveats"]
    assert "G1: b = -0.56 [-0.60, -0.52]" in row["caveats"]
    assert row["caveats"][-1].startswith("no certificate")
    assert find(rows, "g5", "output", "expert_error")["verdict"].endswith("not in this study")


def test_rst_table_parses_and_text_is_readable():
    docutils = pytest.importorskip("docutils.core")
    rst = claims_table(RATES, study="quick", voronoi_r=0)
    first = rst.splitlines()[0]
    assert first.startswith(".. Generated by `hmoe-estim claims OUT`") and '"quick"' in first
    assert "n = 1000..100000 (3 sample sizes, 8 replications)" in first
    assert "**not measurable**: not identifiable (token-regroup)" in rst
    doctree = docutils.publish_doctree(rst, settings_overrides={"report_level": 5})
    problems = [m for m in doctree.findall() if m.tagname == "system_message"]
    assert not problems, [p.astext() for p in problems]
    (table,) = [n for n in doctree.findall() if n.tagname == "table"]
    n_rows = len([n for n in table.findall() if n.tagname == "row"])
    assert n_rows == 1 + len(claim_rows(RATES))
    text = claims_table(RATES, study="quick", format="text")
    assert "[Theorem 1]" in text and "-> not consistent" in text and "**" not in text
    with pytest.raises(ValueError, match="format must be"):
        claims_table(RATES, format="html")


def test_empty_or_odd_rates_never_raise():
    rows = claim_rows({})
    assert rows and all(r["verdict"].startswith("not measurable:") for r in rows)
    odd = {"none": {"regression_error": {"slope": None, "slope_ci": [None, None]},
                    "voronoi_loss": {"slope": 0.1, "slope_ci": [float("nan"), 0.2]}}}
    rows = claim_rows(odd)
    assert find(rows, "proposition-1", "none", "regression_error")["verdict"] == \
        "not measurable: the slope has no finite interval"
    assert "no certificate in the rates" in find(rows, "theorem-1", "none",
                                                 "voronoi_loss")["caveats"]
    assert claims_table(odd).startswith(".. Generated")
    with pytest.raises(TypeError):
        claim_rows([])


# -- the command ---------------------------------------------------------------------------
def study_folder(tmp_path, rates=RATES, config=True):
    out = tmp_path / "out"
    out.mkdir()
    if config:
        cfg = load_preset("quick")
        (out / "config.json").write_text(json.dumps(
            {"config": cfg.to_dict(), "config_hash": cfg.config_hash()}))
    if rates is not None:
        (out / "rates.json").write_text(json.dumps(rates))
    return out


def run_cli(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_claims_prints_and_writes(tmp_path, capsys):
    out = study_folder(tmp_path)
    code, stdout, err = run_cli(["claims", out], capsys)
    assert code == 0, err
    assert stdout == claims_table(RATES, study="quick", voronoi_r=0)
    target = tmp_path / "claims.rst"
    code, stdout, _ = run_cli(["claims", out, "--output", target], capsys)
    assert code == 0 and f"written to {target}" in stdout
    assert target.read_text(encoding="utf-8") == claims_table(RATES, study="quick", voronoi_r=0)
    code, stdout, _ = run_cli(["claims", out, "--format", "text"], capsys)
    assert code == 0 and stdout.startswith("Generated by") and "[Proposition 1]" in stdout


def test_cli_claims_without_config_json(tmp_path, capsys):
    out = study_folder(tmp_path, config=False)
    code, stdout, _ = run_cli(["claims", out], capsys)
    assert code == 0 and "of a study" in stdout.splitlines()[0]


def test_cli_claims_errors(tmp_path, capsys):
    out = study_folder(tmp_path, rates=None)
    code, _, err = run_cli(["claims", out], capsys)
    assert code == 2 and "has no rates.json" in err and f"hmoe-estim rates {out}" in err
    assert "Traceback" not in err
    code, _, err = run_cli(["claims", tmp_path / "missing"], capsys)
    assert code == 2 and "does not exist" in err
    (out / "rates.json").write_text("[1, 2]")
    code, _, err = run_cli(["claims", out], capsys)
    assert code == 2 and "is not a study's rates" in err
    (out / "rates.json").write_text("{not json")
    code, _, err = run_cli(["claims", out], capsys)
    assert code == 2 and "unreadable" in err and "hmoe-estim rates OUT" in err
    (out / "rates.json").write_text(json.dumps(RATES))
    code, _, err = run_cli(["claims", out, "--output", tmp_path / "no" / "c.rst"], capsys)
    assert code == 2 and "does not exist" in err
