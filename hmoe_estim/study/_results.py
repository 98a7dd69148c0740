"""The append-only results file of a study, ``OUT/results.jsonl``.

One JSON object per finished fit, one per line. Writing is crash-safe:

- each record is serialised first and written as the whole line plus ``"\\n"`` in a single
  ``os.write`` on a file descriptor opened with ``O_APPEND``, then ``fsync``-ed; a crash (even
  ``SIGKILL``) therefore leaves either the complete line or, at worst (power loss, full disk),
  a trailing fragment without its ``"\\n"``;
- a finished line is never rewritten.

Reading distinguishes the two failure modes:

- a **trailing fragment without "\\n"** cannot be a finished result; it is reported. When a
  study resumes it is moved aside to ``results.jsonl.partial-<time>`` (bytes preserved) and
  cut from the file, and the fit it belonged to is simply run again;
- a **complete line that is not a valid record** (hand edits, concatenated files, disk
  corruption) is an error: the reader stops with the file name and line number and changes
  nothing, so that no finished result is lost by accident.
"""

import json
import math
import os
import time

__all__ = [
    "RESULTS_FILE",
    "REQUIRED_KEYS",
    "ResultsError",
    "read_results",
    "set_aside_partial",
    "ResultsWriter",
    "record_key",
    "deduplicate",
    "json_safe",
]

RESULTS_FILE = "results.jsonl"
#: Keys every record has.
REQUIRED_KEYS = (
    "model", "n", "rep", "seed", "voronoi_loss", "expert_error", "regression_error",
    "fit_seconds", "converged",
)


class ResultsError(ValueError):
    """A results file that cannot be read safely; the message names the line and the fix."""


def record_key(record):
    """The identity of a fit: ``(model, n, rep)``."""
    return (record["model"], int(record["n"]), int(record["rep"]))


def json_safe(value):
    """Recursively replace NaN/inf floats by None and NumPy scalars/arrays by Python values."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return json_safe(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def read_results(path, *, required=REQUIRED_KEYS):
    """Read ``results.jsonl``.

    Parameters
    ----------
    path : str
        The file; a missing file reads as empty.
    required : sequence of str, default=REQUIRED_KEYS
        Keys every record must have (a layer study's records have others: the
        ``required_keys`` of its config).

    Returns
    -------
    records : list of dict
        Every complete record, in file order.
    partial : bytes or None
        A trailing fragment without ``"\\n"`` (left by a crash), or None.

    Raises
    ------
    ResultsError
        A complete line is not a JSON object with the keys of :data:`REQUIRED_KEYS`, or its
        ``model``, ``n``, ``rep`` or ``seed`` has the wrong type; the message gives the line
        number. Nothing is modified.
    """
    records, _, partial = read_numbered_results(path, required=required)
    return records, partial


def _check_types(rec, path, lineno):
    """``model`` a string, ``n``, ``rep``, ``seed`` integers (JSON numbers, not booleans)."""
    for key, kind in (("model", str), ("n", int), ("rep", int), ("seed", int)):
        value = rec[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ResultsError(
                f"{path}, line {lineno}: {key!r} must be "
                f"{'a string' if kind is str else 'an integer'}"
                f"; got {value!r}. Not a record written by hmoe-estim: delete that line (the "
                "fit is redone on the next run) or use another --out."
            )


def read_numbered_results(path, *, required=REQUIRED_KEYS):
    """:func:`read_results` plus the line number of every record: ``(records, lines, partial)``."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return [], [], None
    except IsADirectoryError:
        raise ResultsError(f"{path} is a directory, expected the results file.") from None
    partial = None
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        partial = data[cut:]
        data = data[:cut]
    records, lines = [], []
    for lineno, line in enumerate(data.split(b"\n")[:-1], start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ResultsError(
                f"{path}, line {lineno}: corrupt line ({exc}). Finished results were not "
                "touched. Delete or repair that line (the fit it held will be redone on the "
                "next run), or start a fresh study with another --out."
            ) from None
        missing = [k for k in required if not isinstance(rec, dict) or k not in rec]
        if missing:
            raise ResultsError(
                f"{path}, line {lineno}: not a study record (missing {missing}). Delete that "
                "line or use another --out."
            )
        _check_types(rec, path, lineno)
        records.append(rec)
        lines.append(lineno)
    return records, lines, partial


def set_aside_partial(path, partial):
    """Move a trailing fragment of ``path`` to ``path.partial-<time>`` and cut it off.

    Only the fragment after the last ``"\\n"`` is removed; the finished lines are untouched.
    Call it only while holding the study's lock (no concurrent writer).

    Returns
    -------
    str
        The file holding the fragment's bytes.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = f"{path}.partial-{stamp}-{os.getpid()}"
    with open(aside, "wb") as fh:
        fh.write(partial)
        fh.flush()
        os.fsync(fh.fileno())
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.seek(size - len(partial))
        if fh.read() != partial:
            raise ResultsError(f"{path} changed while repairing it; is another run writing?")
    os.truncate(path, size - len(partial))
    return aside


def deduplicate(records):
    """Keep the first record of every ``(model, n, rep)``; return (records, n_duplicates)."""
    seen = set()
    out = []
    for rec in records:
        key = record_key(rec)
        if key in seen:
            continue
        seen.add(key)
        out.append(rec)
    return out, len(records) - len(out)


class ResultsWriter:
    """Append records to ``results.jsonl``, one ``os.write`` + ``fsync`` per line.

    Use as a context manager::

        with ResultsWriter(path) as w:
            w.append(record)
    """

    def __init__(self, path, *, fsync=True):
        self.path = path
        self.fsync = fsync
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self

    def append(self, record):
        """Write ``record`` (a dict; NaN/inf become null) as one line."""
        line = json.dumps(json_safe(record), allow_nan=False, separators=(",", ":")) + "\n"
        data = line.encode("utf-8")
        written = os.write(self.fd, data)
        while written < len(data):  # regular files write fully; be safe anyway
            written += os.write(self.fd, data[written:])
        if self.fsync:
            os.fsync(self.fd)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __exit__(self, *exc):
        self.close()
        return False
