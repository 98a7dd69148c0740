"""The output folder of a study: ``config.json``, ``truth.json``, the lock, and loading.

``OUT`` holds ``config.json`` (the canonical config and its hash), ``truth.json`` (``G*``),
``results.jsonl`` (``hmoe_estim/study/_results.py``), ``runs.jsonl`` (one line per
invocation), ``rates.json`` and the PNGs. A different config in the same ``OUT`` is refused;
a lock (``OUT/.lock``) keeps two runs from writing to one ``OUT`` at the same time.
"""

import contextlib
import json
import os
import sys
import time

import numpy as np

from .. import __version__
from ._config import ConfigError, StudyConfig, decode_utf8, read_limited, without_descriptive
from ._plan import true_measure
from ._results import (
    RESULTS_FILE,
    ResultsError,
    deduplicate,
    json_safe,
    read_numbered_results,
    set_aside_partial,
)
from ._seeds import fit_seed

__all__ = [
    "StudyError", "prepare_out", "load_study",
    "CONFIG_FILE", "TRUTH_FILE", "RATES_FILE", "RUNS_FILE",
]

CONFIG_FILE = "config.json"
TRUTH_FILE = "truth.json"
RATES_FILE = "rates.json"
RUNS_FILE = "runs.jsonl"
LOCK_FILE = ".lock"


class StudyError(Exception):
    """A study that cannot run as asked (bad ``OUT``, other config, failed fits, no Dask)."""


def _write_json_atomic(path, obj):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(json_safe(obj), fh, indent=1, sort_keys=False, allow_nan=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _diff_configs(old, new, prefix=""):
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += _diff_configs(a, b, f"{prefix}{key}.")
        elif a != b:
            sa, sb = json.dumps(a), json.dumps(b)
            if len(sa) > 60:
                sa = sa[:57] + "..."
            if len(sb) > 60:
                sb = sb[:57] + "..."
            diffs.append(f"{prefix}{key}: {sa} -> {sb}")
    return diffs


@contextlib.contextmanager
def _locked(out):
    import fcntl

    path = os.path.join(out, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StudyError(
            f"cannot write to the output directory {out!r} ({exc.strerror}); choose a writable "
            "--out."
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StudyError(
                f"another hmoe-estim run is using {out} (lock {path} is held). Wait for it to "
                "finish or use another --out."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def _check_out_path(out):
    out = os.fspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise StudyError(f"--out {out!r} is a file; give a directory (it is created if missing).")
    return out


def _read_json(path, what):
    """JSON of a file of ``OUT`` (size-limited), or :class:`StudyError` saying how to fix it."""
    try:
        return json.loads(decode_utf8(read_limited(path, what), path, what))
    except (OSError, ValueError, ConfigError) as exc:
        raise StudyError(f"{path} is unreadable ({exc}); {_FIXES[what]}") from None


_FIXES = {
    "config.json": "it is not a study's config. Use another --out.",
    "truth.json": "delete it (it is rewritten from config.json) or use another --out.",
    "rates.json": "rewrite it with `hmoe-estim rates OUT` (hmoe_estim.study.write_rates).",
}


def make_out(out):
    """Create the directory ``OUT`` (and its parents) if missing; return its path."""
    out = _check_out_path(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise StudyError(f"cannot create the output directory {out!r}: {exc}") from None
    return out


def prepare_out(out, config):
    """Create or check ``OUT`` for ``config``; return ``G*`` (the true
    ``AttentionLayer`` of a layer study).

    Writes ``config.json`` and ``truth.json`` for a new study. For an existing one, refuses a
    different config (listing the differing keys); a config that differs only in its
    descriptive fields (``description``) is the same study and resumes. ``config.json`` is
    never rewritten. :func:`run_study` calls it while holding ``OUT``'s lock, so that two
    studies started at once cannot both claim ``OUT``.

    Raises
    ------
    StudyError
        ``OUT`` is a file, holds another study, or holds results without ``config.json``.
    """
    out = _check_out_path(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise StudyError(f"cannot create the output directory {out!r}: {exc}") from None
    cfg_path = os.path.join(out, CONFIG_FILE)
    truth_path = os.path.join(out, TRUTH_FILE)
    new = config.to_dict()
    h = config.config_hash()
    if os.path.exists(cfg_path):
        stored = _read_json(cfg_path, "config.json")
        try:
            old_hash = stored["config_hash"]
            old = stored["config"]
        except (KeyError, TypeError) as exc:
            raise StudyError(f"{cfg_path} is unreadable ({exc}); use another --out.") from None
        # Folders written before the description left the hash carry a hash that includes it:
        # when the hashes differ, compare the configs themselves without descriptive fields.
        if old_hash != h and (not isinstance(old, dict)
                              or without_descriptive(old) != without_descriptive(new)):
            diffs = _diff_configs(without_descriptive(old) if isinstance(old, dict) else {},
                                  without_descriptive(new))
            more = f"; ... ({len(diffs)} differences)" if len(diffs) > 8 else ""
            shown = "; ".join(diffs[:8]) + more
            raise StudyError(
                f"{out} already holds a study with a different configuration (hash {old_hash}, "
                f"this one {h}): {shown or 'same keys, other values'}. Use another --out, or "
                f"run `hmoe-estim study {cfg_path} --out {out}` to resume the stored study."
            )
    elif os.path.exists(os.path.join(out, RESULTS_FILE)):
        raise StudyError(
            f"{out} has {RESULTS_FILE} but no {CONFIG_FILE}: it is not a study directory that "
            "can be resumed. Use another --out."
        )
    else:
        _write_json_atomic(cfg_path, {
            "config": new,
            "config_hash": h,
            "specification": config.specification,
            "oracle_init": config.oracle,
            "n_fits": config.n_fits(),
            "labels": {m.name: m.label for m in config.models},
            "hmoe_estim_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        })
    if config.kind == "layer":
        return _layer_truth_file(truth_path, config)
    truth = true_measure(config)
    if os.path.exists(truth_path):
        from ..model import MixingMeasure

        stored = _read_json(truth_path, "truth.json")
        try:
            stored_truth = MixingMeasure.from_dict(stored["measure"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StudyError(
                f"{truth_path} does not hold a measure ({type(exc).__name__}: {exc}); "
                f"{_FIXES['truth.json']}"
            ) from None
        if not (stored_truth.shape == truth.shape
                and np.allclose(stored_truth.normalized().M, truth.normalized().M)
                and np.allclose(stored_truth.a, truth.a)
                and np.allclose(stored_truth.omega, truth.omega)):
            raise StudyError(_TRUTH_CHANGED.format(truth_path))
    else:
        t = config.truth
        _write_json_atomic(truth_path, {
            "measure": truth.to_dict(),
            "shape": {"H": truth.n_heads, "N": truth.n_tokens, "K": truth.n_experts,
                      "D": truth.n_features},
            "source": "given" if t.measure is not None else
            f"random_measure(n_heads={t.n_heads}, n_tokens={t.n_tokens}, "
            f"n_experts={t.n_experts}, n_features={t.n_features}, scale={t.scale}, "
            f"random_state={t.seed})",
        })
    return truth


_TRUTH_CHANGED = (
    "{} differs from the truth this config produces now (another version of random_measure "
    "or random_attention_layer?). Use another --out to start afresh."
)


def _layer_truth_file(truth_path, config):
    """``truth.json`` of a layer study: written once, then checked against the config's
    truth; returns the true ``AttentionLayer``."""
    from ._layer_plan import layer_from_dict, layer_to_dict, same_layer, true_layer, truth_source

    truth = true_layer(config)
    if not os.path.exists(truth_path):
        _write_json_atomic(truth_path, {
            "layer": layer_to_dict(truth),
            "shape": {"H": truth.n_heads, "d": truth.d, "d_v": truth.head_dim,
                      "d_out": truth.d_out, "N": config.data.n_tokens},
            "P": truth.P_, "VO": truth.VO_,
            "source": truth_source(config),
        })
        return truth
    stored = _read_json(truth_path, "truth.json")
    try:
        stored_truth = layer_from_dict(stored["layer"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StudyError(
            f"{truth_path} does not hold a layer ({type(exc).__name__}: {exc}); "
            f"{_FIXES['truth.json']}"
        ) from None
    if not same_layer(stored_truth, truth):
        raise StudyError(_TRUTH_CHANGED.format(truth_path))
    return truth


def load_study(out, *, repair=False, stream=None):
    """Read a study directory: ``(config, records)``.

    Parameters
    ----------
    out : str
        The study's ``OUT``.
    repair : bool, default=False
        Move a trailing crash fragment aside (only while holding the lock). Without it the
        fragment is ignored with a message.
    stream : file-like or None
        Where messages go (default stderr).

    Raises
    ------
    StudyError
        ``OUT`` missing, a file, or without ``config.json``.
    ResultsError
        A corrupt complete line in ``results.jsonl``, or a record that is not a fit of the
        stored config (``check_records``); the message gives the line number.
    """
    stream = sys.stderr if stream is None else stream
    out = _check_out_path(out)
    cfg_path = os.path.join(out, CONFIG_FILE)
    if not os.path.isdir(out):
        raise StudyError(f"{out!r} does not exist; run a study into it first.")
    if not os.path.exists(cfg_path):
        raise StudyError(f"{out} has no {CONFIG_FILE}: not a study directory.")
    try:
        config = StudyConfig.from_dict(_read_json(cfg_path, "config.json"))
    except ValueError as exc:
        raise StudyError(f"{cfg_path} is unreadable: {exc}") from None
    path = os.path.join(out, RESULTS_FILE)
    records, lines, partial = read_numbered_results(path, required=config.required_keys)
    check_records(config, records, lines, path)
    if partial is not None:
        if repair:
            aside = set_aside_partial(path, partial)
            print(
                f"hmoe-estim: {path} ended with an unfinished line ({len(partial)} bytes, left "
                f"by an interrupted run); moved it to {aside}. Its fit will be run again.",
                file=stream,
            )
        else:
            print(
                f"hmoe-estim: ignoring an unfinished last line of {path} ({len(partial)} bytes, "
                "left by an interrupted run); the next `study`/`reproduce` run sets it aside.",
                file=stream,
            )
    records, dups = deduplicate(records)
    if dups:
        print(f"hmoe-estim: {path} holds {dups} duplicate fit(s); using the first of each.",
              file=stream)
    return config, records


def check_records(config, records, lines, path):
    """Refuse a record that is not a fit of ``config``: unknown model, ``n`` off the grid,
    ``rep`` out of range, or a ``seed`` other than ``fit_seed(config.seed, model, n, rep)``
    (a fit of another config with the same ``(model, n, rep)``). The message gives the line.
    """
    models = {m.name: m for m in config.models}
    grid = set(config.grid.n)
    for rec, lineno in zip(records, lines):
        model = models.get(rec["model"])
        n, rep = rec["n"], rec["rep"]
        why = None
        if model is None:
            why = f"model {rec['model']!r} is not one of {sorted(models)}"
        elif n not in grid:
            why = f"n = {n} is not on the grid {sorted(grid)}"
        elif not 0 <= rep < config.grid.reps:
            why = f"rep = {rep} is outside 0..{config.grid.reps - 1}"
        else:
            expected = fit_seed(config.seed, model.key, n, rep)
            if rec["seed"] != expected:
                why = (f"its seed {rec['seed']} is not the seed {expected} this study assigns "
                       f"to (model={rec['model']}, n={n}, rep={rep})")
        if why:
            raise ResultsError(
                f"{path}, line {lineno}: not a fit of the study in this folder: {why}. Was it "
                "copied from another study? Delete that line (the fit is redone on the next "
                "run) or use another --out."
            )
