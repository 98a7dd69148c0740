"""A study folder as pandas DataFrames (hmoe_estim.study.study_dataframes)."""

import io
import json
import math
import sys

import pytest

from hmoe_estim.study import (
    MODEL_KEYS,
    StudyConfig,
    StudyError,
    StudyFrames,
    read_results,
    run_study,
    study_dataframes,
    write_rates,
)

pd = pytest.importorskip("pandas")

TINY = {
    "name": "tiny-frames",
    "seed": 3,
    "models": ["none", "value"],
    "truth": {"n_features": 2, "seed": 1},
    "grid": {"n": [40, 80], "reps": 2},
    "fit": {"n_starts": 1, "max_iter": 15},
    "metrics": {"n_ref": 300},
}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A finished tiny study: (out, frames read before rates.json existed, frames after)."""
    out = tmp_path_factory.mktemp("frames") / "out"
    cfg = StudyConfig.from_dict(TINY)
    run_study(cfg, str(out), n_jobs=1, progress=False, stream=io.StringIO())
    with pytest.warns(UserWarning, match="no rates.json"):
        before = study_dataframes(out)
    write_rates(str(out), n_boot=50, stream=io.StringIO())
    return out, before, study_dataframes(out)


def same(cell, value):
    """A frame cell equals the record's JSON value (null reads as NaN in numeric columns)."""
    if value is None:
        return cell is None or (isinstance(cell, float) and math.isnan(cell))
    return cell == value


def test_one_row_per_fit_with_every_record_field(study):
    out, _, frames = study
    assert isinstance(frames, StudyFrames) and frames["records"] is frames.records
    records, _ = read_results(out / "results.jsonl")
    df = frames.records
    assert len(df) == len(records) == 8
    keys = list(zip(df["model"], df["n"], df["rep"]))
    assert len(set(keys)) == 8
    assert set(keys) == {(m, n, r) for m in ("none", "value") for n in (40, 80) for r in (0, 1)}
    fields = {k for rec in records for k in rec}
    assert fields <= set(df.columns)
    rows = {(row["model"], row["n"], row["rep"]): row for row in df.to_dict("records")}
    for rec in records:
        row = rows[(rec["model"], rec["n"], rec["rep"])]
        for key, value in rec.items():
            assert same(row[key], value), (key, row[key], value)
    # nested fields are kept whole: the measure reads back as a MixingMeasure
    from hmoe_estim import MixingMeasure

    assert MixingMeasure.from_dict(df["measure"].iloc[0]).shape == (1, 2, 3, 2)
    # canonical order: config's model order, then n, then rep
    assert keys == sorted(keys, key=lambda k: (["none", "value"].index(k[0]), k[1], k[2]))
    assert df["voronoi_loss"].dtype.kind == "f" and df["converged"].dtype == bool


def test_rates_match_rates_json(study):
    out, _, frames = study
    stored = json.loads((out / "rates.json").read_text())
    rates = frames.rates.set_index(["model", "metric"])
    expected = [(m, k) for m, entry in stored.items() for k in entry if k not in MODEL_KEYS]
    assert sorted(rates.index) == sorted(expected)
    for (model, metric), row in rates.iterrows():
        entry = stored[model][metric]
        assert row["slope"] == entry["slope"]
        assert (row["slope_ci_low"], row["slope_ci_high"]) == tuple(entry["slope_ci"])
        assert same(row["n_for_eps_power"], entry["n_for_eps"]["power"])
        assert row["n"] == entry["n"] and row["average"] == entry["average"]
        for key, value in entry.items():  # every field, flattened
            if isinstance(value, dict):
                for sub, v in value.items():
                    assert same(row[f"{key}_{sub}"], v), (model, metric, key, sub)
            elif key.endswith("_ci"):
                assert [row[f"{key}_low"], row[f"{key}_high"]] == value
            else:
                assert same(row[key], value), (model, metric, key)


def test_certificate_and_verdicts_match_rates_json(study):
    out, before, frames = study
    stored = json.loads((out / "rates.json").read_text())
    assert list(frames.certificate.index) == ["none", "value"]
    for model, row in frames.certificate.iterrows():
        cert = stored[model]["certificate"]
        for key in ("fits", "checked", "failures", "failure_rate", "found_twice"):
            assert same(row[key], cert[key]), (model, key)
    for model, row in frames.identifiability.iterrows():
        verdict = stored[model]["identifiability"]
        assert row["label"] == verdict["label"] and row["verdict"] == verdict["verdict"]
        assert row["jacobian_null_dimension"] == verdict["jacobian"]["null_dimension"]
        assert row["obstructions"] == verdict["obstructions"]
    # before rates.json: the same records and certificate, empty rates with their columns
    pd.testing.assert_frame_equal(before.records, frames.records)
    pd.testing.assert_frame_equal(before.certificate, frames.certificate)
    assert before.rates.empty and list(before.rates.columns) == ["model", "metric"]
    assert before.identifiability.empty


def test_pandas_missing_is_a_clear_import_error(study, monkeypatch):
    out, _, _ = study
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    with pytest.raises(ImportError, match=r"pip install hmoe-estim\[pandas\]"):
        study_dataframes(out)


def test_not_a_study_folder(tmp_path):
    with pytest.raises(StudyError, match="not a study directory"):
        study_dataframes(tmp_path)
    with pytest.raises(KeyError, match="use 'records'"):
        StudyFrames(None, None, None, None, None, "x")["bogus"]
