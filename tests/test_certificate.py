"""The optimisation certificate of a study: counted per model, headlined, and droppable."""

import json

import numpy as np
import pytest

from hmoe_estim.study import (
    certificate_summary,
    certified_records,
    format_certificate,
    format_rates_table,
    write_rates,
)
from hmoe_estim.study._cli import main

from .test_study import run, tiny


@pytest.fixture
def run_tiny():
    """Run a 4-fits-per-model study into a folder; return the folder."""
    def _run(out):
        run(tiny(models=["none", "value"], grid={"n": [40, 80], "reps": 2}), out)
        return out
    return _run


def _records():
    rng = np.random.default_rng(0)
    recs = []
    for model in ("a", "b"):
        for n in (100, 1000, 10000):
            for rep in range(3):
                failed = model == "b" and rep == 0
                recs.append({"model": model, "n": n, "rep": rep, "K": 3, "K_true": 2,
                             "worse_than_truth": failed,
                             "voronoi_loss": float(n ** -0.5 * (1 + 0.1 * rng.random())),
                             "objective_gap": 1.0 if failed else -1.0})
    return recs


def test_summary_counts_failures_per_model():
    s = certificate_summary(_records())
    assert s["a"] == {"fits": 9, "checked": 9, "failures": 0, "failure_rate": 0.0}
    assert s["b"]["failures"] == 3 and s["b"]["failure_rate"] == 3 / 9
    text = format_certificate(s)
    assert "a: 0 of 9 fits failed" in text and "b: 3 of 9 fits failed (33.3%)" in text


def test_fits_without_a_certificate_are_not_counted():
    recs = [{"model": "a", "n": 10, "rep": 0, "K": 1, "K_true": 2, "worse_than_truth": True}]
    s = certificate_summary(recs)
    assert s["a"]["checked"] == 0 and s["a"]["failure_rate"] is None
    assert "no certificate" in format_certificate(s)


def test_certified_records_drop_failures_and_say_how_many():
    kept, dropped = certified_records(_records())
    assert dropped == {"a": 0, "b": 3}
    assert len(kept) == 15 and not any(r["worse_than_truth"] for r in kept)


def test_rates_json_carries_the_certificate(tmp_path, run_tiny):
    out = run_tiny(tmp_path / "s")
    rates = write_rates(str(out))
    for model, entry in rates.items():
        cert = entry["certificate"]
        assert cert["fits"] == cert["checked"] == 4
        assert cert["certified_only"] is False and cert["dropped"] == 0
    on_disk = json.loads((out / "rates.json").read_text())
    assert on_disk[model]["certificate"]["fits"] == 4
    # the share found twice is written next to the failures, counted like the printed table
    from hmoe_estim.study import fit_diagnostics

    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    table = fit_diagnostics(recs)
    for model, entry in on_disk.items():
        assert entry["certificate"]["found_twice"] == table[model]["found_twice"]
    # the table lists metrics only
    assert "certificate" not in format_rates_table(rates)


def test_cli_headline_and_certified_only(tmp_path, run_tiny, capsys):
    out = run_tiny(tmp_path / "s")
    # mark one fit as a certified failure
    path = out / "results.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for j, r in enumerate(recs):  # the tiny fits stop early: set the flags by hand
        r["worse_than_truth"] = j == 0
    rec = recs[0]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["rates", str(out), "--n-boot", "20", "--certified-only"]) == 0
    text = capsys.readouterr().out
    assert "optimisation certificate" in text and "1 of 4 fits failed" in text
    assert "certified fits only" in text
    rates = json.loads((out / "rates.json").read_text())
    assert rates[rec["model"]]["certificate"]["dropped"] == 1
    assert rates[rec["model"]]["certificate"]["certified_only"] is True
    # found twice counts every fit of the model, the dropped one included
    from hmoe_estim.study import fit_diagnostics

    assert (rates[rec["model"]]["certificate"]["found_twice"]
            == fit_diagnostics(recs)[rec["model"]]["found_twice"])


def test_records_store_how_many_starts_agreed(tmp_path, run_tiny):
    """Each study fit records the estimator's ``n_starts_agreeing_``, and the diagnostics
    count it the same way from ``start_objectives`` for records written before the field."""
    from hmoe_estim.solvers import count_agreeing
    from hmoe_estim.study import fit_diagnostics, format_diagnostics
    from hmoe_estim.study._diagnostics import starts_agreeing

    out = run_tiny(tmp_path / "s")
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for r in recs:
        assert 1 <= r["n_starts_agreeing"] <= len(r["start_objectives"])
        assert r["n_starts_agreeing"] == count_agreeing(r["start_objectives"], r["n"])
        old = {k: v for k, v in r.items() if k != "n_starts_agreeing"}
        assert starts_agreeing(old) == r["n_starts_agreeing"]
    table = fit_diagnostics(recs)
    for model in table:
        mine = [r for r in recs if r["model"] == model]
        assert table[model]["found_twice"] == np.mean([r["n_starts_agreeing"] >= 2 for r in mine])
    assert "found twice" in format_diagnostics(table)


def test_found_twice_counts_starts_within_the_tolerance():
    n = 1000
    base = {"model": "m", "n": n, "K": 2, "K_true": 2, "worse_than_truth": False,
            "converged": True, "fit_seconds": 1.0}
    best = 0.01
    recs = [
        dict(base, rep=0, start_objectives=[best, best * (1 + 0.5 / n), 0.02]),  # 2 agree
        dict(base, rep=1, start_objectives=[best, best * (1 + 2.0 / n), 0.02]),  # 1 agrees
        dict(base, rep=2, start_objectives=[best], n_starts_agreeing=1),
        dict(base, rep=3, start_objectives=[best, 0.03], n_starts_agreeing=2),  # stored wins
    ]
    from hmoe_estim.study import fit_diagnostics

    assert fit_diagnostics(recs)["m"]["found_twice"] == 0.5


def test_reading_a_study_does_not_load_numba():
    # the summary of a finished study (rates, diagnostics, certificate) needs no kernel:
    # importing it must not pull in Numba and the solvers (about 0.6 s)
    import subprocess
    import sys

    code = ("import sys, hmoe_estim.study; "
            "from hmoe_estim.study._diagnostics import fit_diagnostics, starts_agreeing; "
            "print('numba' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


def test_diagnostics_extra_weight_is_a_dash_for_records_without_extra_atoms():
    """Layer records have no extra atoms: the column says "-", not a mean of zeros."""
    from hmoe_estim.study import fit_diagnostics, format_diagnostics

    base = {"model": "a", "n": 100, "rep": 0, "converged": True, "fit_seconds": 0.1,
            "worse_than_truth": False, "start_objectives": [1.0, 1.0]}
    entry = fit_diagnostics([{**base, "extra_weight": 0.25}])
    layer = fit_diagnostics([base])
    assert entry["a"]["mean_extra_weight"] == 0.25
    assert layer["a"]["mean_extra_weight"] is None
    assert format_diagnostics(layer).splitlines()[-1].split()[-1] == "-"
    assert format_diagnostics(entry).splitlines()[-1].split()[-1] == "0.250"
