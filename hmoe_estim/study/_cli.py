"""The ``hmoe-estim`` command: run, resume, scale out and summarise sample-complexity studies.

::

    hmoe-estim reproduce [--quick | --full | --layer] [--out OUT] [--n-jobs J]
                         [--dask-scheduler ADDR | --dask-workers N] [--near-truth]
    hmoe-estim study CONFIG.toml [--out OUT] [--n-jobs J] [--dask-...]
    hmoe-estim rates OUT [--eps EPS] [--n-boot B] [--certified-only]
    hmoe-estim plot OUT [--output FILE] [--certified-only]
    hmoe-estim claims OUT [--output FILE] [--format rst|text]
    hmoe-estim preset NAME            # print a built-in config as TOML, to copy and edit

``reproduce`` runs the built-in study, the experiment template of the documentation's "Theory to
code" page (``--quick`` by default; ``--full`` is sized like published studies; ``--layer`` is
the layer study: MHA, G1 and G2 fitted as whole attention layers, with the per-entry
baseline). Every run can
be interrupted and resumed by running the same command again. User mistakes end with a one-line
message on stderr and exit status 2; an interrupted run exits with 130.
"""

import argparse
import os
import sys

from .. import __version__

__all__ = ["main", "build_parser"]

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A bad command-line value (reported without a traceback)."""


def _add_run_options(p):
    p.add_argument("--out", metavar="OUT", help="output directory (created; resumable)")
    p.add_argument("--n-jobs", type=int, default=-1, metavar="J",
                   help="parallel fits on this machine (-1: all cores; 1: one fit at a time, "
                        "Numba threads inside it). Default: -1")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--dask-scheduler", metavar="ADDR",
                   help="run the fits on a Dask cluster (e.g. tcp://host:8786); needs "
                        "hmoe-estim[dask] here and hmoe-estim on the workers")
    g.add_argument("--dask-workers", type=int, metavar="N",
                   help="run the fits on a local Dask cluster of N single-thread workers")
    p.add_argument("--dask-timeout", type=float, default=10.0, metavar="S",
                   help="seconds to wait for the Dask scheduler (default: 10)")
    p.add_argument("--near-truth", action="store_true",
                   help="ORACLE: start the fits near the true measure (as published studies "
                        "do); labelled in config.json and every result")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    p.add_argument("--max-fits", type=int, metavar="K",
                   help="run at most K of the remaining fits, then stop (to time a slice; "
                        "rerun to continue)")


def build_parser():
    """The ``argparse`` parser of ``hmoe-estim``."""
    from ._config import PRESETS

    parser = argparse.ArgumentParser(
        prog="hmoe-estim",
        description="Sample-complexity studies of (gated) attention as a hierarchical mixture "
                    "of experts.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("reproduce", help="run the built-in study (MHA vs G1/G2 separation)",
                       description="Run the built-in study (the documentation's experiment "
                                   "template): D=3, H*=1, N*=2, K*=2 "
                                   "fitted with K=3, sigmoid, sigma=0.1, models none/value/sdpa "
                                   "(--full: output too, for comparison).")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="preset", action="store_const", const="quick",
                      help="5 sample sizes x 8 replications, about two minutes on 2 cores "
                           "(default)")
    size.add_argument("--full", dest="preset", action="store_const", const="full",
                      help="9 sample sizes x 30 replications (resumable)")
    size.add_argument("--layer", dest="preset", action="store_const", const="layer",
                      help="the layer study: MHA, G1, G2 fitted as whole attention layers "
                           "(H=1, N=2, d=2, d_v=2), each with a per-entry fit of one entry "
                           "as the baseline; a few minutes on 2 cores")
    _add_run_options(p)

    p = sub.add_parser("study", help="run or resume a study from a TOML config",
                       description="Run or resume the study described by CONFIG (TOML, or "
                                   "the config.json of an existing OUT).")
    p.add_argument("config", metavar="CONFIG")
    _add_run_options(p)

    p = sub.add_parser("rates", help="fit power and log laws to the results in OUT",
                       description="Fit loss ~ c n^b and loss ~ c / log(n)^lambda per model and "
                                   "metric; write OUT/rates.json and print a table.")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--eps", type=float, help="target accuracy for the predicted n "
                                             "(default: half the smallest mean)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--certified-only", action="store_true",
                   help="fit the rates without the certified optimisation failures (fits whose "
                        "objective is above the truth's own); the output says how many")

    p = sub.add_parser("plot", help="draw the learning curves of OUT as a PNG")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--output", metavar="FILE",
                   help="PNG file, or a folder for learning_curves.png (default: OUT)")
    p.add_argument("--certified-only", action="store_true",
                   help="draw and fit the curves without the certified optimisation failures")

    p = sub.add_parser("claims", help="the paper's claims against the rates of OUT",
                       description="Read OUT/rates.json (written by `hmoe-estim rates OUT`) and "
                                   "print, per claim of the paper, model and metric, the "
                                   "measured slope with its 95%% interval, a verdict "
                                   "(consistent, not consistent, not measurable) and the "
                                   "caveats, as a reStructuredText table (the documentation's "
                                   "claims page includes it).")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--output", metavar="FILE",
                   help="write the table to FILE (default: print it)")
    p.add_argument("--format", choices=["rst", "text"], default="rst",
                   help="rst: a list-table for Sphinx (default); text: for a terminal")

    p = sub.add_parser("preset", help="print a built-in study config as TOML")
    p.add_argument("name", choices=list(PRESETS))
    return parser


def _err(msg):
    print(f"hmoe-estim: error: {msg}", file=sys.stderr)


def _labels(config):
    return {m.name: m.label for m in config.models}


def _certified_labels(config, records):
    """Legend labels with each model's certified failures, e.g. ``G2 (value) [0/40 failed]``."""
    from ._certificate import certificate_summary

    labels = _labels(config)
    for model, d in certificate_summary(records).items():
        if d["checked"]:
            labels[model] = f"{labels.get(model, model)} [{d['failures']}/{d['checked']} failed]"
    return labels


def _summarise(out, config, records, *, eps=None, n_boot=2000, plot=True, certified_only=False):
    from ._certificate import certificate_summary, format_certificate
    from ._diagnostics import fit_diagnostics, format_diagnostics, sort_records, write_rates
    from ._rates import format_rates_table

    records = sort_records(config, records)
    print(format_certificate(certificate_summary(records), labels=_labels(config)))
    baseline = certificate_summary(records, prefix="baseline_")
    if any(d["checked"] for d in baseline.values()):  # a layer study's per-entry fits
        print(format_certificate({m: d for m, d in baseline.items() if d["checked"]},
                                 labels=_labels(config),
                                 what="certificate of the per-entry baseline fits"))
    if certified_only:
        print("rates below use certified fits only (failures dropped)")
    print()
    rates = write_rates(out, records=records, config=config, eps=eps, n_boot=n_boot,
                        certified_only=certified_only)
    print(format_rates_table(rates, labels=_labels(config)))
    print()
    print(format_diagnostics(fit_diagnostics(records), labels=_labels(config)))
    print(f"\nrates written to {os.path.join(out, 'rates.json')}")
    if plot:
        _plot(out, config, records, rates, certified_only=certified_only)
    return rates


def _plot(out, config, records, rates, path=None, certified_only=False):
    from ._certificate import certified_records
    from ._plotting import PlottingError, plot_learning_curves

    path = path or os.path.join(out, "learning_curves.png")
    title = config.figure_title()
    labels = _certified_labels(config, records)
    if certified_only:
        records = certified_records(records)[0]
        title += " (certified fits only)"
    try:
        plot_learning_curves(records, path, rates=rates, labels=labels, title=title,
                             metrics=config.plot_panels)
    except PlottingError as exc:
        print(f"hmoe-estim: no plot: {exc}", file=sys.stderr)
        return None
    print(f"learning curves drawn in {path}")
    return path


def _run(args, config, default_out):
    from ._dask import dask_backend
    from ._diagnostics import sort_records
    from ._runner import run_study
    from ._store import load_study

    if args.near_truth and config.kind == "layer":
        raise UsageError("--near-truth is not available for a layer study: its fits start "
                         "from random draws only. Drop --near-truth.")
    if args.near_truth and config.fit.init != "near-truth":
        config = config.with_changes(fit={"init": "near-truth"}, name=config.name + "-near-truth")
    for w in config.warnings():
        print(f"hmoe-estim: note: {w}", file=sys.stderr)
    out = args.out or default_out + ("-near-truth" if args.near_truth else "")
    if args.n_jobs == 0:
        raise UsageError("--n-jobs must be a non-zero integer (-1 = all cores).")
    if args.max_fits is not None and args.max_fits < 0:
        raise UsageError(f"--max-fits must be >= 0 (0: only prepare OUT); got {args.max_fits}.")
    print(
        f"hmoe-estim: study {config.name!r}: {len(config.models)} models x "
        f"{len(config.grid.n)} sample sizes {list(config.grid.n)} x {config.grid.reps} reps = "
        f"{config.n_fits()} fits; {config.plan_summary()}; output in {out}",
        file=sys.stderr,
    )
    kwargs = dict(progress=not args.no_progress, max_fits=args.max_fits)
    if args.dask_scheduler or args.dask_workers is not None:
        with dask_backend(args.dask_scheduler, args.dask_workers, timeout=args.dask_timeout):
            summary = run_study(config, out, n_jobs=-1, backend_name="dask", **kwargs)
    else:
        summary = run_study(config, out, n_jobs=args.n_jobs, **kwargs)
    from ._progress import format_duration

    print(f"hmoe-estim: {summary['n_run']} fits run, {summary['n_skipped']} already done, "
          f"wall time {format_duration(summary['wall_seconds'])} "
          f"({summary['wall_seconds']:.0f} s).", file=sys.stderr)
    config, records = load_study(out)
    records = sort_records(config, records)
    if len(records) < config.n_fits():
        print(f"hmoe-estim: {len(records)} of {config.n_fits()} fits done; rerun to continue.",
              file=sys.stderr)
    try:
        _summarise(out, config, records, plot=not args.no_plot)
    except Exception as exc:  # rates of a partial study may be impossible (one n only)
        from ._store import StudyError

        if not isinstance(exc, (ValueError, StudyError)):
            raise
        print(f"hmoe-estim: no rates yet: {exc}", file=sys.stderr)
    return 0


def _safe_name(name):
    """``name`` as one directory name: path separators and other unusual characters become
    ``_`` and a leading dot is escaped, so the default ``--out`` stays in the working
    directory."""
    import re

    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", name) or "study"
    return "_" + safe if safe.startswith(".") else safe


def _stored_study_dir(path):
    """The ``OUT`` whose ``config.json`` ``path`` is (or the folder itself), else None: running
    a stored study's config resumes it in its own folder."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return path if os.path.exists(os.path.join(path, "config.json")) else None
    if os.path.basename(path) == "config.json":
        return os.path.dirname(path) or "."
    return None


def _plot_path(out, output):
    """The PNG file of ``plot``: ``OUT/learning_curves.png`` by default, ``DIR/...`` for a
    folder, ``.png`` added to a name without a suffix; a missing parent folder is an error."""
    if not output:
        return os.path.join(out, "learning_curves.png")
    if os.path.isdir(output):
        return os.path.join(output, "learning_curves.png")
    parent = os.path.dirname(output) or "."
    if not os.path.isdir(parent):
        raise UsageError(
            f"--output {output!r}: the folder {parent!r} does not exist; create it or give an "
            "existing folder."
        )
    ext = os.path.splitext(output)[1]
    if not ext:
        return output + ".png"
    if ext.lower() not in (".png", ".pdf", ".svg"):
        raise UsageError(f"--output {output!r}: give a .png (or .pdf, .svg) file name.")
    return output


def _claims(args):
    """``hmoe-estim claims OUT``: the claims table of ``OUT/rates.json``."""
    from ._claims import claims_table
    from ._config import StudyConfig
    from ._store import CONFIG_FILE, RATES_FILE, StudyError, _read_json

    out = os.fspath(args.out)
    if not os.path.isdir(out):
        raise StudyError(f"{out!r} does not exist; run a study into it first.")
    path = os.path.join(out, RATES_FILE)
    if not os.path.exists(path):
        raise StudyError(f"{out} has no {RATES_FILE}; write it with `hmoe-estim rates {out}` "
                         "first.")
    rates = _read_json(path, RATES_FILE)
    if not isinstance(rates, dict) or not all(isinstance(v, dict) for v in rates.values()):
        raise StudyError(f"{path} is not a study's rates ({{model: {{metric: ...}}}}); rewrite "
                         f"it with `hmoe-estim rates {out}`.")
    study, r = None, None
    cfg_path = os.path.join(out, CONFIG_FILE)
    if os.path.exists(cfg_path):  # the study's name and Voronoi loss, for the table's text
        try:
            config = StudyConfig.from_dict(_read_json(cfg_path, CONFIG_FILE))
        except ValueError as exc:
            raise StudyError(f"{cfg_path} is unreadable: {exc}") from None
        if config.kind == "layer":
            raise StudyError(
                f"{out} holds a layer study (kind = 'layer'): the paper's claims are about one "
                "output entry, so `claims` reads entry studies only. Read the layer study's "
                f"rates with `hmoe-estim rates {out}`.")
        study, r = config.name, config.metrics.r
    text = claims_table(rates, study=study, voronoi_r=r, format=args.format)
    if not args.output:
        sys.stdout.write(text)
        return 0
    parent = os.path.dirname(args.output) or "."
    if not os.path.isdir(parent):
        raise UsageError(f"--output {args.output!r}: the folder {parent!r} does not exist; "
                         "create it or give an existing folder.")
    with open(args.output, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"claims table written to {args.output}")
    return 0


def _dispatch(args):
    from ._config import load_config, load_preset

    if args.command == "reproduce":
        preset = args.preset or "quick"
        return _run(args, load_preset(preset), f"hmoe-{preset}")
    if args.command == "study":
        config = load_config(args.config)
        stored = _stored_study_dir(args.config)
        return _run(args, config, stored or f"study-{_safe_name(config.name)}")
    if args.command == "rates":
        from ._store import load_study

        if args.n_boot < 1:
            raise UsageError("--n-boot must be >= 1.")
        if args.eps is not None and not args.eps > 0:
            raise UsageError("--eps must be > 0.")
        config, records = load_study(args.out)
        _summarise(args.out, config, records, eps=args.eps, n_boot=args.n_boot, plot=False,
                   certified_only=args.certified_only)
        return 0
    if args.command == "plot":
        from ._diagnostics import sort_records
        from ._plotting import plot_learning_curves
        from ._rates import rates_from_records
        from ._store import StudyError, load_study

        config, records = load_study(args.out)
        records = sort_records(config, records)
        if not records:
            raise StudyError(f"{args.out} has no finished fits yet.")
        labels = _certified_labels(config, records)
        title = config.figure_title()
        if args.certified_only:
            from ._certificate import certified_records

            records = certified_records(records)[0]
            title += " (certified fits only)"
        rates = rates_from_records(records, metrics=config.rate_metrics,
                                   random_state=config.seed, optional=config.optional_metrics)
        from ._verdicts import annotate_rates

        annotate_rates(rates, config, records=records)
        path = _plot_path(args.out, args.output)
        plot_learning_curves(records, path, rates=rates, labels=labels, title=title,
                             metrics=config.plot_panels)
        print(f"learning curves drawn in {path}")
        return 0
    if args.command == "claims":
        return _claims(args)
    if args.command == "preset":
        from importlib import resources

        load_preset(args.name)  # clear error if the file is missing or invalid
        text = resources.files("hmoe_estim.study").joinpath("presets", f"{args.name}.toml")
        sys.stdout.write(text.read_text("utf-8"))
        return 0
    raise AssertionError(args.command)  # pragma: no cover


def main(argv=None):
    """Entry point of ``hmoe-estim`` (and ``python -m hmoe_estim``); returns the exit status."""
    from ._config import ConfigError
    from ._plotting import PlottingError
    from ._results import ResultsError
    from ._store import StudyError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(args)
    except (ConfigError, ResultsError, StudyError, PlottingError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    except UsageError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\nhmoe-estim: interrupted. Finished fits are saved; run the same command again "
              "to resume.", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except OSError as exc:  # unwritable OUT, full disk: finished fits are on disk already
        where = f" ({exc.filename})" if exc.filename else ""
        _err(f"{exc.strerror or exc}{where}. Free space or choose a writable --out; finished "
             "fits are saved, rerun the same command to resume.")
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
