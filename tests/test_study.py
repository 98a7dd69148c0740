"""Study runner (hmoe_estim.study, hmoe_estim.study): seeds, resume, crash safety, Dask."""

import fcntl
import hashlib
import io
import json
import os

import numpy as np
import pytest

from hmoe_estim.study import (
    REQUIRED_KEYS,
    ResultsError,
    ResultsWriter,
    StudyConfig,
    StudyError,
    fit_seed,
    load_study,
    near_truth_starts,
    plan_fits,
    prepare_out,
    read_results,
    run_study,
    true_measure,
    write_rates,
)

TINY = {
    "name": "tiny",
    "seed": 3,
    "models": ["none", "value", "sdpa"],
    "truth": {"n_features": 2, "seed": 1},
    "grid": {"n": [40, 80], "reps": 2},
    "fit": {"n_starts": 1, "max_iter": 15},
    "metrics": {"n_ref": 300},
}

# metrics that must be identical between two runs with the same seeds
METRICS = ("voronoi_loss", "voronoi_exact", "voronoi_over", "expert_error", "regression_error",
           "objective")


def tiny(**changes):
    d = json.loads(json.dumps(TINY))
    for section, values in changes.items():
        if isinstance(values, dict):
            d.setdefault(section, {}).update(values)
        else:
            d[section] = values
    return StudyConfig.from_dict(d)


def by_key(records):
    return {(r["model"], r["n"], r["rep"]): r for r in records}


def run(config, out, **kw):
    kw.setdefault("n_jobs", 1)
    return run_study(config, str(out), progress=False, stream=io.StringIO(), **kw)


# -- seeds and planning --------------------------------------------------------------------
def test_fit_seed_is_seedsequence_of_names():
    key = int.from_bytes(hashlib.sha256(b"value/sigmoid").digest()[:4], "little")
    ss = np.random.SeedSequence(entropy=5, spawn_key=(key, 1000, 2))
    assert fit_seed(5, "value/sigmoid", 1000, 2) == int(ss.generate_state(1, np.uint32)[0] >> 1)
    seeds = {fit_seed(0, m, n, r) for m in ("none/sigmoid", "value/sigmoid")
             for n in (100, 200) for r in range(3)}
    assert len(seeds) == 12
    assert fit_seed(0, "none/sigmoid", 100, 0) != fit_seed(1, "none/sigmoid", 100, 0)


def test_plan_fits_order_and_skip():
    cfg = tiny()
    tasks = plan_fits(cfg)
    assert len(tasks) == cfg.n_fits() == 12
    assert [t[1] for t in tasks] == sorted((t[1] for t in tasks), reverse=True)
    done = {("none", 80, 0), ("sdpa", 40, 1)}
    rest = plan_fits(cfg, done)
    assert len(rest) == 10 and not done & {t[:3] for t in rest}


# -- one study, resume, outputs ------------------------------------------------------------
@pytest.fixture(scope="module")
def done_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "out"
    cfg = tiny()
    summary = run(cfg, out)
    return cfg, out, summary


def test_study_writes_every_fit_once(done_study):
    cfg, out, summary = done_study
    assert summary["n_run"] == 12 and summary["n_failed"] == 0
    records, partial = read_results(out / "results.jsonl")
    assert partial is None
    assert len(records) == 12 and len(by_key(records)) == 12
    for rec in records:
        for k in REQUIRED_KEYS:
            assert k in rec
        assert rec["seed"] == fit_seed(cfg.seed, cfg.model(rec["model"]).key, rec["n"], rec["rep"])
        assert rec["init"] == "random" and rec["oracle"] is False
        assert np.asarray(rec["measure"]["a"]).shape == (1, 2, 3, 2)
        assert rec["voronoi_loss"] == pytest.approx(
            rec["voronoi_weight"] + rec["voronoi_exact"] + rec["voronoi_over"])
    stored = json.loads((out / "config.json").read_text())
    assert stored["config_hash"] == cfg.config_hash()
    assert stored["specification"] == "over-specified" and stored["oracle_init"] is False
    truth = json.loads((out / "truth.json").read_text())["measure"]
    assert np.allclose(truth["a"], true_measure(cfg).a)


def test_metrics_match_direct_computation(done_study):
    """A record's metrics equal the metric functions applied to its stored fitted measure."""
    from hmoe_estim.metrics import regression_error, voronoi_loss
    from hmoe_estim.model import MixingMeasure
    from hmoe_estim.study import reference_sample_for

    cfg, out, _ = done_study
    rec = read_results(out / "results.jsonl")[0][0]
    G = MixingMeasure.from_dict(rec["measure"])
    truth = true_measure(cfg)
    X = reference_sample_for(cfg)
    assert X.shape == (300, 2) and np.all(np.abs(X) <= cfg.data.box)
    kw = dict(gate=rec["gate"], activation=rec["activation"], X_ref=X)
    assert rec["voronoi_loss"] == pytest.approx(voronoi_loss(G, truth, **kw), rel=1e-12)
    assert rec["regression_error"] == pytest.approx(regression_error(G, truth, **kw), rel=1e-12)


def test_rerun_skips_and_never_duplicates(done_study):
    cfg, out, _ = done_study
    before = (out / "results.jsonl").read_bytes()
    summary = run(cfg, out)
    assert summary["n_run"] == 0 and summary["n_skipped"] == 12
    assert (out / "results.jsonl").read_bytes() == before
    runs = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["fits_run"] for r in runs] == [12, 0]


def test_other_config_is_refused(done_study):
    _, out, _ = done_study
    with pytest.raises(StudyError, match=r"different configuration.*fit\.n_starts: 1 -> 2"):
        run(tiny(fit={"n_starts": 2}), out)


def test_description_is_not_hashed():
    assert tiny(description="one wording").config_hash() == tiny(description="other").config_hash()
    assert tiny(seed=4).config_hash() != tiny().config_hash()


def test_folder_with_old_description_and_old_style_hash_resumes(tmp_path):
    """A folder written when the description was part of the hash, with another wording of the
    description, resumes without redoing a fit; a real change is still refused."""
    out = tmp_path / "old"
    cfg = tiny(grid={"n": [40], "reps": 1}, models=["none"], description="new wording")
    assert run(cfg, out)["n_run"] == 1
    path = out / "config.json"
    stored = json.loads(path.read_text())
    stored["config"]["description"] = "old wording, as an earlier release wrote it"
    text = json.dumps(stored["config"], sort_keys=True, separators=(",", ":"))
    stored["config_hash"] = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    assert stored["config_hash"] != cfg.config_hash()
    path.write_text(json.dumps(stored, indent=1))
    written = path.read_bytes()
    results = (out / "results.jsonl").read_bytes()
    summary = run(cfg, out)
    assert summary["n_run"] == 0 and summary["n_skipped"] == 1
    assert (out / "results.jsonl").read_bytes() == results
    assert path.read_bytes() == written  # the user's config.json is left as it was
    with pytest.raises(StudyError, match=r"different configuration.*fit\.n_starts: 1 -> 2"):
        run(cfg.with_changes(fit={"n_starts": 2}), out)


def test_rates_json_structure(done_study):
    _, out, _ = done_study
    rates = write_rates(str(out), n_boot=50)
    on_disk = json.loads((out / "rates.json").read_text())
    assert set(on_disk) == {"none", "value", "sdpa"}
    for gate in on_disk:
        entry = on_disk[gate]["voronoi_loss"]
        assert {"slope", "slope_ci", "log_lambda", "better_law"} <= set(entry)
        assert entry["better_law"] is None  # two sample sizes only
    slope = on_disk["none"]["regression_error"]["slope"]
    assert rates["none"]["regression_error"]["slope"] == slope


def test_both_readings_in_records_rates_and_verdicts(done_study, tmp_path):
    """G2 fits carry the measure-level metrics (the functions on the stored measure), rates.json
    gives them a rate and a reading under the measure-level verdict; other gates have none.
    Records written before the fields existed get them recomputed from their measures."""
    import shutil

    from hmoe_estim.metrics import expert_error, voronoi_loss
    from hmoe_estim.model import MixingMeasure
    from hmoe_estim.study import format_rates_table, reference_sample_for

    cfg, out, _ = done_study
    records = read_results(out / "results.jsonl")[0]
    truth, X = true_measure(cfg), reference_sample_for(cfg)
    for rec in records:
        has = "voronoi_loss_measure" in rec and "expert_error_measure" in rec
        assert has == (rec["gate"] == "value")
        if has:
            G = MixingMeasure.from_dict(rec["measure"])
            kw = dict(gate="value", activation=rec["activation"], X_ref=X, level="measure")
            assert rec["voronoi_loss_measure"] == pytest.approx(
                voronoi_loss(G, truth, **kw), rel=1e-12)
            assert rec["expert_error_measure"] == pytest.approx(
                expert_error(G, truth, **kw), rel=1e-12)
    rates = write_rates(str(out), n_boot=50)
    assert "voronoi_loss_measure" not in rates["none"]
    for metric in ("voronoi_loss_measure", "expert_error_measure"):
        assert "slope" in rates["value"][metric] and "reading" in rates["value"][metric]
    level = rates["value"]["identifiability"]["measure_level"]
    assert level["level"] == "measure" and level["label"].startswith("measure level: ")
    assert "identifiability, measure level: " in format_rates_table(rates)
    # an old folder: the fields removed from every record are recomputed on `rates`
    old = tmp_path / "old"
    shutil.copytree(out, old)
    (old / "rates.json").unlink()
    lines = [json.loads(line) for line in (old / "results.jsonl").read_text().splitlines()]
    with open(old / "results.jsonl", "w") as fh:
        for rec in lines:
            rec.pop("voronoi_loss_measure", None)
            rec.pop("expert_error_measure", None)
            fh.write(json.dumps(rec) + "\n")
    again = write_rates(str(old), n_boot=50)
    for metric in ("voronoi_loss_measure", "expert_error_measure"):
        assert again["value"][metric]["slope"] == rates["value"][metric]["slope"]


def test_out_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StudyError, match="is a file"):
        run(tiny(), f)


def test_results_without_config_refused(tmp_path):
    (tmp_path / "results.jsonl").write_text("")
    with pytest.raises(StudyError, match="no config.json"):
        run(tiny(), tmp_path)


def test_locked_out_is_refused(tmp_path):
    prepare_out(str(tmp_path), tiny())
    fd = os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StudyError, match="another hmoe-estim run"):
            run(tiny(), tmp_path)
    finally:
        os.close(fd)


# -- crash safety ----------------------------------------------------------------------------
def _slice_study(tmp_path, k):
    cfg = tiny(grid={"n": [40], "reps": 2}, models=["none"])
    out = tmp_path / "crash"
    run(cfg, out, max_fits=k)
    return cfg, out


def test_trailing_fragment_is_set_aside_and_refit(tmp_path):
    cfg, out = _slice_study(tmp_path, 1)
    path = out / "results.jsonl"
    finished = path.read_bytes()
    fragment = b'{"model":"none","n":40,"rep":1,"seed":12'
    with open(path, "ab") as fh:
        fh.write(fragment)
    records, partial = read_results(path)
    assert len(records) == 1 and partial == fragment
    err = io.StringIO()
    run_study(cfg, str(out), n_jobs=1, progress=False, stream=err)
    assert "unfinished line" in err.getvalue()
    data = path.read_bytes()
    assert data.startswith(finished)  # the finished line is untouched
    records, partial = read_results(path)
    assert partial is None and sorted(r["rep"] for r in records) == [0, 1]
    aside = [p for p in os.listdir(out) if p.startswith("results.jsonl.partial-")]
    assert len(aside) == 1 and (out / aside[0]).read_bytes() == fragment


def test_corrupt_complete_line_stops_without_change(tmp_path):
    cfg, out = _slice_study(tmp_path, 1)
    path = out / "results.jsonl"
    with open(path, "ab") as fh:
        fh.write(b'{"model": "none", "n": 40, garbage}\n')
    before = path.read_bytes()
    with pytest.raises(ResultsError, match="line 2: corrupt"):
        run(cfg, out)
    assert path.read_bytes() == before
    with pytest.raises(ResultsError, match="line 2"):
        load_study(str(out))


def test_record_missing_keys_is_an_error(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"model": "none"}\n')
    with pytest.raises(ResultsError, match="line 1: not a study record"):
        read_results(path)


def test_writer_one_line_per_record(tmp_path):
    path = tmp_path / "r.jsonl"
    rec = {k: 1 for k in REQUIRED_KEYS} | {"model": "none", "x": float("nan"),
                                           "arr": np.arange(3)}
    with ResultsWriter(str(path)) as w:
        w.append(rec)
        w.append(rec | {"rep": 2})
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    first = json.loads(lines[0])
    assert first["x"] is None and first["arr"] == [0, 1, 2]


# -- parallel and distributed runs give the same numbers ------------------------------------
def _compare(a, b):
    ra, rb = by_key(a), by_key(b)
    assert set(ra) == set(rb)
    for key in ra:
        for m in METRICS:
            assert ra[key][m] == rb[key][m], (key, m)
        assert ra[key]["measure"] == rb[key]["measure"]


def test_parallel_run_matches_sequential(done_study, tmp_path):
    cfg, out, _ = done_study
    run(cfg, tmp_path / "par", n_jobs=2)
    _compare(read_results(out / "results.jsonl")[0],
             read_results(tmp_path / "par" / "results.jsonl")[0])


def test_dask_local_cluster_matches_local_run(done_study, tmp_path):
    pytest.importorskip("dask.distributed")
    from hmoe_estim.study import dask_backend

    cfg, out, _ = done_study
    with dask_backend(n_workers=2, processes=True):
        run_study(cfg, str(tmp_path / "dask"), n_jobs=-1, backend_name="dask", progress=False,
                  stream=io.StringIO())
    _compare(read_results(out / "results.jsonl")[0],
             read_results(tmp_path / "dask" / "results.jsonl")[0])
    runs = json.loads((tmp_path / "dask" / "runs.jsonl").read_text())
    assert runs["backend"] == "dask"


def test_unreachable_scheduler():
    pytest.importorskip("dask.distributed")
    from hmoe_estim.study import dask_backend

    with pytest.raises(StudyError, match="cannot reach the Dask scheduler"):
        with dask_backend("tcp://127.0.0.1:9", timeout=1):
            pass


# -- start strategies ----------------------------------------------------------------------
def test_near_truth_starts_reproduce_truth_without_noise():
    from hmoe_estim.model import regression_function

    cfg = tiny()
    truth = true_measure(cfg)
    starts = near_truth_starts(truth, 3, 2, 0.0, np.random.default_rng(0), param_bound=10,
                               omega_max=10)
    X = np.random.default_rng(1).uniform(-1, 1, (50, 2))
    for gate in ("none", "value"):  # the split extra channel leaves f unchanged
        assert np.allclose(regression_function(starts[0], X, gate=gate),
                           regression_function(truth, X, gate=gate))
    noisy = near_truth_starts(truth, 3, 2, 0.1, np.random.default_rng(0), param_bound=10,
                              omega_max=10)
    assert not np.allclose(noisy[0].a, noisy[1].a)
    assert np.all(noisy[0].omega >= 0)


def test_near_truth_and_split_init_are_labelled(tmp_path):
    cfg = tiny(grid={"n": [40], "reps": 1}, models=["value"],
               fit={"init": "near-truth", "split_init": True})
    assert cfg.oracle and any("oracle" in w for w in cfg.warnings())
    run(cfg, tmp_path)
    (rec,), _ = read_results(tmp_path / "results.jsonl")
    assert rec["init"] == "near-truth" and rec["oracle"] is True and rec["split_init"] is True
    assert rec["split_objective"] is not None
    assert json.loads((tmp_path / "config.json").read_text())["oracle_init"] is True
