"""The optimisation certificate of a study's fits (see the documentation, Theory to code).

On synthetic data with ``K >= K*`` the truth ``G*`` lies in the fitted class, so the
least-squares estimator of eq. (3) has an objective at most the truth's own on the same data.
A fit whose objective is above it (``worse_than_truth`` in its record) is a *certified
optimisation failure*: the search missed the global optimum, whatever the statistics say.
A flat learning curve made of such fits says nothing about the rate.

This module counts those failures per model (the headline of a study's summary, of
``rates.json`` and of the figure) and drops them when rates are to be fitted on certified
fits only.
"""

__all__ = ["certificate_summary", "certified_records", "format_certificate"]


def _failed(record):
    return record.get("worse_than_truth") is True


def certificate_summary(records, *, prefix=""):
    """Certified optimisation failures per model.

    Parameters
    ----------
    records : iterable of dict
        Study records (``model``, ``worse_than_truth``, ``objective_gap``).
    prefix : str, default=""
        Read the certificate of another fit of each record: ``"baseline_"`` for the per-entry
        baseline of a layer study (``baseline_worse_than_truth``, ``baseline_K``,
        ``baseline_K_true``).

    Returns
    -------
    dict
        ``{model: {"fits", "checked", "failures", "failure_rate"}}`` in first-seen order.
        ``checked`` counts the fits that carry a certificate (``K >= K*``, truth known);
        ``failure_rate`` is ``failures / checked`` (None when nothing could be checked).
    """
    out = {}
    worse, K, Ks = f"{prefix}worse_than_truth", f"{prefix}K", f"{prefix}K_true"
    for rec in records:
        d = out.setdefault(rec["model"], {"fits": 0, "checked": 0, "failures": 0})
        d["fits"] += 1
        if rec.get(worse) is not None and rec.get(K, 0) >= rec.get(Ks, 0):
            d["checked"] += 1
            d["failures"] += int(rec[worse] is True)
    for d in out.values():
        d["failure_rate"] = d["failures"] / d["checked"] if d["checked"] else None
    return out


def certified_records(records):
    """The records that are not certified optimisation failures, and how many were dropped.

    Returns
    -------
    kept : list of dict
    dropped : dict
        ``{model: number of records dropped}`` (every model present, 0 when none).
    """
    kept, dropped = [], {}
    for rec in records:
        dropped.setdefault(rec["model"], 0)
        if _failed(rec):
            dropped[rec["model"]] += 1
        else:
            kept.append(rec)
    return kept, dropped


def format_certificate(summary, labels=None, *, what="optimisation certificate"):
    """One headline line per model: ``G2 (value): 3 of 40 fits above G*'s objective (7.5%)``;
    ``what`` names the fits in the first line (e.g. a layer study's per-entry baseline)."""
    lines = [f"{what} (fit objective above the truth's own = certified failure):"]
    for model, d in summary.items():
        name = labels.get(model, model) if labels else model
        if not d["checked"]:
            lines.append(f"  {name}: no certificate (K < K* or no truth objective recorded)")
            continue
        verdict = "every fit reached at least the truth's objective" if not d["failures"] \
            else "rates on these fits may reflect the optimiser, not the statistics"
        lines.append(f"  {name}: {d['failures']} of {d['checked']} fits failed "
                     f"({100 * d['failure_rate']:.1f}%) - {verdict}")
    return "\n".join(lines)
