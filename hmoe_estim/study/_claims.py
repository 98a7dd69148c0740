"""The paper's claims next to a study's measurements (docs: "What the paper claims, and what
the toolkit measures").

:func:`claim_rows` reads a study's rates (``rates.json``, :func:`hmoe_estim.study.write_rates`)
and gives one row per claim, model and metric: the claim with its reference, the measured
slope ``b`` of ``loss ≈ c n^b`` with its 95 % interval (and the log law's ``λ`` where the claim
is about a logarithmic rate), a verdict and the caveats (identifiability at the metric's
reading, the optimisation certificate, the slope's ``"reading"``).
:func:`claims_table` renders the rows as a reStructuredText ``list-table`` or as plain text.

Verdict rules, on the slope's interval ``[lo, hi]`` only (never on the point estimate):

* ``≈ n^t`` (``t = -1/2``: Proposition 1 and the exactly-specified cells; ``t = -1/4``: the
  over-specified cells): **consistent** if the interval contains ``t`` or lies within
  ``[t - 0.1, t + 0.1]``, unless it also reaches above ``-0.1`` (then it cannot exclude a
  flat curve: **not measurable**); otherwise **not consistent**.
* *slower than any polynomial* (Theorem 1, and G5 "does not help"): **consistent** if the
  interval lies above ``-0.1`` (no polynomial decrease visible); **not consistent** if it lies
  below ``-0.1``; **not measurable** if it straddles ``-0.1`` (an interval that contains 0 but
  reaches below ``-0.1`` cannot exclude a polynomial rate).
* *polynomial* (G1, G2): **consistent** if the interval lies below ``-0.1``; **not
  consistent** if it lies above ``-0.1``; **not measurable** if it straddles ``-0.1``.

A claim of a rate (the first and third kinds) on a parameter metric whose slope is read "not a
rate" (the model is not identifiable at that reading, :func:`hmoe_estim.study.annotate_rates`)
is **not measurable**: the slope is shown, and what it alone would say is in the caveats. For
the *slower than any polynomial* claims non-identifiability is the claimed mechanism, so it is
a caveat. A model or metric missing from the rates, or a metric that could not be fitted, gives
a **not measurable** row that says why; nothing raises.
"""

import math
import re

__all__ = ["claim_rows", "claims_table", "FLAT_SLOPE", "SLOPE_TOL"]

#: Slopes above this are "no polynomial decrease visible" on the grid.
FLAT_SLOPE = -0.1
#: Half-width of the band around a claimed exponent that still reads "consistent".
SLOPE_TOL = 0.1

#: Model of the claims -> (label, model name in the built-in presets).
MODELS = {
    "mha": ("MHA", "none"),
    "g2": ("G2", "value"),
    "g1": ("G1", "sdpa"),
    "g5": ("G5", "output"),
}

_MEASURE = ("voronoi_loss_measure", "expert_error_measure")

#: The claims, in the order of the page: key, text, reference, kind, target, {model: metrics}.
CLAIMS = (
    {
        "key": "proposition-1",
        "claim": "the regression error falls like n^(-1/2), up to a log factor, for every model",
        "reference": "Proposition 1",
        "kind": "near", "target": -0.5,
        "models": {"mha": ("regression_error",), "g2": ("regression_error",),
                   "g1": ("regression_error",), "g5": ("regression_error",)},
    },
    {
        "key": "theorem-1",
        "claim": "MHA estimates its parameters and experts slower than any polynomial rate "
                 "(about 1/log^lambda n)",
        "reference": "Theorem 1",
        "kind": "slow", "target": None,
        "models": {"mha": ("voronoi_loss", "voronoi_exact", "expert_error")},
    },
    {
        "key": "gated-polynomial",
        "claim": "G1 and G2 estimate their parameters and experts at a polynomial rate",
        "reference": "the paper's introduction (gated results, Table 1)",
        "kind": "poly", "target": None,
        "models": {"g1": ("voronoi_loss", "expert_error"),
                   "g2": ("voronoi_loss", "expert_error", "voronoi_loss_measure",
                          "expert_error_measure")},
    },
    {
        "key": "gated-exact",
        "claim": "G1 and G2: n^(-1/2) in exactly-specified cells",
        "reference": "Table 1, split reconstructed (Theory to code)",
        "kind": "near", "target": -0.5,
        "models": {"g1": ("voronoi_exact",), "g2": ("voronoi_exact",)},
    },
    {
        "key": "gated-over",
        "claim": "G1 and G2: n^(-1/4) in over-specified cells",
        "reference": "Table 1, split reconstructed (Theory to code)",
        "kind": "near", "target": -0.25,
        "models": {"g1": ("voronoi_over",), "g2": ("voronoi_over",)},
    },
    {
        "key": "g5",
        "claim": "G5 (gate after the dense output) does not help: its parameters and experts are "
                 "as slow as MHA's",
        "reference": "the toolkit's prediction, beyond the paper (Theory to code)",
        "kind": "slow", "target": None,
        "models": {"g5": ("voronoi_loss", "voronoi_exact", "expert_error")},
    },
)

_METRIC_TEXT = {
    "regression_error": "regression error",
    "voronoi_loss": "Voronoi loss {loss} (channel)",
    "voronoi_exact": "{loss}, exactly-specified cells",
    "voronoi_over": "{loss}, over-specified cells",
    "expert_error": "expert error (channel)",
    "voronoi_loss_measure": "Voronoi loss {loss} (measure)",
    "expert_error_measure": "expert error (measure)",
}


def _loss_name(voronoi_r):
    if voronoi_r is None:
        return "L"
    return "L_2" if int(voronoi_r) == 0 else f"L_1,{int(voronoi_r)}"


def _num(x, spec="+.2f"):
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "?"
    return format(x, spec) if math.isfinite(x) else "?"


def _interval(r, key):
    """``(lo, hi)`` of an interval entry, or None when absent or not finite."""
    ci = r.get(key)
    try:
        lo, hi = (float(v) for v in ci)
    except (TypeError, ValueError):
        return None
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) and lo <= hi else None


def _rule(kind, lo, hi, target):
    """``(verdict, detail)`` of a slope interval under a claim's rule (module docstring)."""
    iv = f"[{lo:+.2f}, {hi:+.2f}]"
    if kind == "near":
        near = lo <= target <= hi or (target - SLOPE_TOL <= lo and hi <= target + SLOPE_TOL)
        if near and hi >= FLAT_SLOPE:
            return (f"not measurable: the interval {iv} also reaches above {FLAT_SLOPE:+.1f}, "
                    "so it cannot exclude a flat curve (more replications or sample sizes)", "")
        if near:
            return "consistent", f"the interval contains {target:+.2f} or lies within " \
                                 f"{SLOPE_TOL} of it"
        side = "faster" if hi < target else "slower"
        return "not consistent", f"{side} than n^({target:+.2f}): the interval {iv} excludes it"
    if kind == "slow":
        if lo >= FLAT_SLOPE:
            return "consistent", f"the interval lies above {FLAT_SLOPE:+.1f}: no polynomial " \
                                 "decrease visible"
        if hi < FLAT_SLOPE:
            return "not consistent", f"the interval lies below {FLAT_SLOPE:+.1f}: a polynomial " \
                                     "decrease is visible"
        return (f"not measurable: the interval {iv} straddles {FLAT_SLOPE:+.1f} (more "
                "replications or sample sizes)", "")
    if kind == "poly":
        if hi < FLAT_SLOPE:
            return "consistent", f"the interval lies below {FLAT_SLOPE:+.1f}"
        if lo >= FLAT_SLOPE:
            return "not consistent", f"the interval lies above {FLAT_SLOPE:+.1f}: no " \
                                     "polynomial decrease visible"
        return (f"not measurable: the interval {iv} straddles {FLAT_SLOPE:+.1f} (more "
                "replications or sample sizes)", "")
    raise ValueError(f"unknown claim kind {kind!r}")  # pragma: no cover


def _certificate_caveat(per):
    cert = per.get("certificate")
    if not isinstance(cert, dict):
        return "no certificate in the rates"
    checked, failures = cert.get("checked") or 0, cert.get("failures") or 0
    if not checked:
        return "no certificate (K < K* or no truth objective recorded)"
    if failures:
        text = (f"certificate: {failures} of {checked} fits are certified optimisation "
                f"failures ({100 * failures / checked:.0f}%)")
        if cert.get("certified_only"):
            text += f"; the rates leave them out ({cert.get('dropped', 0)} dropped)"
        else:
            text += "; the slopes may reflect the optimiser, not the statistics"
        return text
    return f"certificate: no certified failure in {checked} fits"


def _identifiability_label(per, metric):
    ident = per.get("identifiability")
    if not isinstance(ident, dict):
        return None
    if metric in _MEASURE:
        ml = ident.get("measure_level")
        return ml.get("label") if isinstance(ml, dict) else None
    label = ident.get("label")
    return f"channel level: {label}" if label else None


def _row(claim, key, metric, rates, voronoi_r, names):
    label, name = names[key]
    loss = _loss_name(voronoi_r)
    row = {
        "claim": claim["claim"], "reference": claim["reference"], "key": claim["key"],
        "model": f"{label} ({name})", "metric": metric,
        "metric_text": _METRIC_TEXT.get(metric, metric).format(loss=loss),
        "measurement": "", "verdict": "", "detail": "", "caveats": [],
    }
    per = rates.get(name)
    if not isinstance(per, dict):
        row["measurement"] = "not in this study"
        row["verdict"] = f"not measurable: {label} ({name}) is not in this study"
        return row
    r = per.get(metric)
    if not isinstance(r, dict):
        row["measurement"] = "not in this study"
        row["verdict"] = f"not measurable: {metric} of {label} is not in this study"
        return row
    if "error" in r:
        row["measurement"] = "not fitted"
        row["verdict"] = f"not measurable: not fitted ({r['error']})"
        row["caveats"].append(_certificate_caveat(per))
        return row
    slope_ci = _interval(r, "slope_ci")
    row["slope"] = r.get("slope")
    row["slope_ci"] = list(slope_ci) if slope_ci else None
    row["measurement"] = f"b = {_num(r.get('slope'))}" + (
        f" [{slope_ci[0]:+.2f}, {slope_ci[1]:+.2f}]" if slope_ci else " (no interval)")
    if claim["kind"] == "slow":
        lam = _interval(r, "log_lambda_ci")
        row["measurement"] += f"; lambda = {_num(r.get('log_lambda'), '.2f')}" + (
            f" [{lam[0]:.2f}, {lam[1]:.2f}]" if lam else "")
        if r.get("better_law"):
            row["measurement"] += f"; better law: {r['better_law']}"
    if slope_ci is None:
        row["verdict"] = "not measurable: the slope has no finite interval"
    else:
        row["verdict"], row["detail"] = _rule(claim["kind"], *slope_ci, claim["target"])

    caveats = row["caveats"]
    reading = r.get("reading") if isinstance(r.get("reading"), str) else None
    ident = _identifiability_label(per, metric) if metric != "regression_error" else None
    if reading and reading.startswith("not a rate"):
        what, _, rest = reading.partition(":")[2].strip().partition(";")
        if claim["kind"] == "slow":
            caveats.append(f"{ident or what}: the mechanism the claim predicts; a flat "
                           "curve is also what optimisation failures give (see the certificate)")
        else:
            if not row["verdict"].startswith("not measurable"):
                caveats.append(f"the slope alone reads: {row['verdict']}")
            row["verdict"], row["detail"] = f"not measurable: {what}, the slope is not a rate", ""
        if rest.strip():
            caveats.append(rest.strip())
    else:
        if ident:
            caveats.append(ident)
        if reading and reading != "rate":
            caveats.append(f"reading: {reading}")
    if metric.startswith("voronoi") and voronoi_r is not None and int(voronoi_r) == 0 \
            and claim["key"] == "theorem-1":
        caveats.append("measured in L_2 (metrics.r = 0); Theorem 1 is stated for L_1,r "
                       "(set metrics.r >= 1 to measure it)")
    if claim["key"] == "gated-over":
        ew = per.get("extra_weight")
        ci = _interval(ew, "slope_ci") if isinstance(ew, dict) else None
        if ci:
            caveats.append(f"extra-atom weight b = {_num(ew.get('slope'))} [{ci[0]:+.2f}, "
                           f"{ci[1]:+.2f}]; the reconstructed n^(-1/4) assumes it vanishes")
    if claim["key"] == "g5":
        for other in ("mha", "g1"):
            olabel, oname = names[other]
            o = rates.get(oname, {}).get(metric) if isinstance(rates.get(oname), dict) else None
            oci = _interval(o, "slope_ci") if isinstance(o, dict) else None
            caveats.append(f"{olabel}: b = {_num(o.get('slope'))} [{oci[0]:+.2f}, {oci[1]:+.2f}]"
                           if oci else f"{olabel}: not in this study")
    if isinstance(r.get("skipped"), int) and r["skipped"]:
        caveats.append(f"{r['skipped']} fits without a finite value left out")
    caveats.append(_certificate_caveat(per))
    return row


def claim_rows(rates, *, voronoi_r=None, models=None):
    """One row per claim, model and metric of the paper's claims, measured by ``rates``.

    Parameters
    ----------
    rates : dict
        A study's ``rates.json`` (:func:`hmoe_estim.study.write_rates`).
    voronoi_r : int or None, default=None
        The study's ``metrics.r`` (0: the Voronoi loss is ``L_2``; ``r >= 1``: ``L_{1,r}``),
        for the metric names and the caveat of Theorem 1; None: not said.
    models : dict or None, default=None
        Model names of the study for ``"mha"``, ``"g2"``, ``"g1"`` and ``"g5"`` (default: the
        presets' ``"none"``, ``"value"``, ``"sdpa"``, ``"output"``).

    Returns
    -------
    list of dict
        Keys ``claim``, ``reference``, ``key``, ``model``, ``metric``, ``metric_text``,
        ``measurement``, ``verdict`` (``"consistent"``, ``"not consistent"`` or
        ``"not measurable: <reason>"``), ``detail`` (why, for the first two), ``caveats``
        (list of str) and, when fitted, ``slope`` and ``slope_ci``. The verdict rules are in
        the module's documentation and on the claims page.
    """
    if not isinstance(rates, dict):
        raise TypeError(f"rates must be the dict of a rates.json; got {type(rates).__name__}.")
    names = {k: (label, (models or {}).get(k, name)) for k, (label, name) in MODELS.items()}
    rows = []
    for claim in CLAIMS:
        for key, metrics in claim["models"].items():
            for metric in metrics:
                rows.append(_row(claim, key, metric, rates, voronoi_r, names))
    return rows


def _esc(text):
    """``text`` safe inside reStructuredText: inline markup characters escaped."""
    text = str(text).replace("\\", "\\\\")
    text = re.sub(r"([*`|])", r"\\\1", text)
    return re.sub(r"(\w)_(?=\W|$)", r"\1\\_", text)


def _grid_text(rates):
    for per in rates.values():
        if not isinstance(per, dict):
            continue
        for r in per.values():
            if isinstance(r, dict) and isinstance(r.get("n"), list) and r["n"]:
                reps = r.get("n_reps") or []
                reps = "" if not reps else f", {min(reps)} replications" \
                    if min(reps) == max(reps) else f", {min(reps)}–{max(reps)} replications"
                return f"n = {r['n'][0]}..{r['n'][-1]} ({len(r['n'])} sample sizes{reps})"
    return None


def _verdict_text(row):
    return row["verdict"] + (f" — {row['detail']}" if row["detail"] else "")


def claims_table(rates, *, study=None, voronoi_r=None, models=None, format="rst"):
    """The paper's claims against a study's rates, as a table.

    Parameters
    ----------
    rates : dict
        A study's ``rates.json`` (:func:`hmoe_estim.study.write_rates`).
    study : str or None, default=None
        The study's name (a preset's is ``"quick"`` or ``"full"``), named in the first line
        and the title.
    voronoi_r, models
        As in :func:`claim_rows`.
    format : {"rst", "text"}, default="rst"
        ``"rst"``: a reStructuredText ``list-table`` whose first line is a comment saying how
        it was generated; ``"text"``: the same rows readable in a terminal.

    Returns
    -------
    str
        Columns: claim (with its reference), model, metric, measurement (slope ``b`` of
        ``c n^b`` with its 95 % interval; ``λ`` of ``c / log(n)^λ`` for the logarithmic
        claims), verdict and caveats.

    Examples
    --------
    >>> from hmoe_estim.study import claims_table
    >>> print(claims_table({}, format="text").splitlines()[2])
    [Proposition 1] the regression error falls like n^(-1/2), up to a log factor, for every model
    """
    if format not in ("rst", "text"):
        raise ValueError(f"format must be 'rst' or 'text'; got {format!r}.")
    rows = claim_rows(rates, voronoi_r=voronoi_r, models=models)
    source = f'the study "{study}"' if study else "a study"
    grid = _grid_text(rates)
    head = (f"Generated by `hmoe-estim claims OUT` from the rates.json of {source}"
            + (f" ({grid})" if grid else "") + "; rerun the command to refresh it.")
    if format == "text":
        lines = [head, ""]
        last = None
        for row in rows:
            if row["key"] != last:
                if last is not None:
                    lines.append("")
                lines.append(f"[{row['reference']}] {row['claim']}")
                last = row["key"]
            lines.append(f"  {row['model']:<13} {row['metric_text']:<34} {row['measurement']}")
            lines.append(f"  {'':<13} -> {_verdict_text(row)}")
            for c in row["caveats"]:
                lines.append(f"  {'':<13}    * {c}")
        return "\n".join(lines) + "\n"

    title = "The paper's claims and what " + (f'the study "{study}"' if study else "a study") \
        + " measures" + (f", {grid}" if grid else "")
    out = [f".. {head}", "", f".. list-table:: {_esc(title)}", "   :header-rows: 1",
           "   :widths: 24 8 14 18 18 18", "",
           "   * - Claim", "     - Model", "     - Metric", "     - Measurement",
           "     - Verdict", "     - Caveats"]
    for row in rows:
        out.append(f"   * - {_esc(row['claim'])} ({_esc(row['reference'])})")
        out.append(f"     - {_esc(row['model'])}")
        out.append(f"     - {_esc(row['metric_text'])}")
        out.append(f"     - {_esc(row['measurement'])}")
        out.append(f"     - **{_esc(row['verdict'].split(':', 1)[0])}**"
                   + (":" + _esc(row["verdict"].split(":", 1)[1])
                      if ":" in row["verdict"] else "")
                   + (f" — {_esc(row['detail'])}" if row["detail"] else ""))
        if row["caveats"]:
            first, *rest = row["caveats"]
            out.append(f"     - * {_esc(first)}")
            out.extend(f"       * {_esc(c)}" for c in rest)
        else:
            out.append("     - none")
    return "\n".join(out) + "\n"
