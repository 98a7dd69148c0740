"""Configuration of a sample-complexity study: dataclasses, TOML loading, validation, presets.

A study (docs: Theory to code, "The experiment template") fits every model on fresh data from
one true measure ``G*``, for every sample size of a grid and a number of replications. Its TOML
file has these parts (every key optional unless marked; unknown keys are an error)::

    kind = "entry"                 # the default; "layer": a layer study (_layer_config.py)
    name = "my-study"              # label
    description = ""
    seed = 0                       # master seed: every fit's seed derives from it
    activation = "sigmoid"         # default φ of the models given as plain strings
    models = ["none", "value", "sdpa"]   # required; or tables {gate=, activation=, name=}

    [truth]                        # the true measure G*
    n_heads = 1                    # H*   (the fit uses H = H*)
    n_tokens = 2                   # N*   (the fit uses N = N*)
    n_experts = 2                  # K*
    n_features = 3                 # D
    scale = 2.0                    # entries of M*, a* have magnitude in [scale/2, scale]
    seed = 0                       # seed of random_measure
    # or give it explicitly (then the sizes come from it):
    # measure = {omega = [[...]], M = [[[[...]]]], a = [[[[...]]]]}
    # file = "truth.json"          # JSON with omega, M, a (relative to the TOML file)

    [data]
    noise = 0.1                    # σ of the Gaussian noise
    box = 1.0                      # x ~ Uniform([-box, box]^D)

    [grid]
    n = [1000, 3162, 10000]        # sample sizes, or a log grid:
    # n_min = 1000, n_max = 100000, n_points = 5
    reps = 8                       # replications per (model, n)

    [fit]
    n_experts = 3                  # fitted K (default K* + 1); K < K* is allowed, flagged
    solver = "lm"                  # "lm" (Levenberg–Marquardt search) or "lbfgs" (L-BFGS-B)
    n_starts = 4                   # starts run to convergence per search round
    max_iter = 1000
    tol = 1e-9
    param_bound = 10.0             # box of M and a (A.1)
    omega_max = 10.0
    init = "random"                # or "near-truth" (an ORACLE, labelled in the results)
    near_truth_noise = 0.1         # std of the perturbation of the near-truth starts
    split_init = false             # also start from the heaviest channel of a K-1 fit split
                                   # in two (an aid that does not use the truth)

    [metrics]
    r = 0                          # 0: L_2 (default); r >= 1: L_{1,r}
    n_ref = 20000                  # reference sample for L2 / sup norms over x
    ref_seed = 0

Everything that changes the numbers is in the config; run-time choices (``n_jobs``, Dask,
output directory) are not, so a study can be resumed with other resources.

Why one module of this size: the schema of a study is one nested structure whose sections
validate against each other (grid against the parameter count, truth scale against the box);
most of the length is the per-key checks and their messages.
"""

import copy
import dataclasses
import hashlib
import json
import math
import numbers
import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources

from .._defaults import MAX_ITER, N_STARTS, OMEGA_MAX, PARAM_BOUND, SOLVER, SOLVERS, TOL
from .._names import ACTIVATIONS, GATES, LAYER_GATE_LABELS

__all__ = [
    "ConfigError",
    "ModelSpec",
    "TruthConfig",
    "DataConfig",
    "GridConfig",
    "FitConfig",
    "MetricsConfig",
    "StudyConfig",
    "load_config",
    "load_preset",
    "PRESETS",
    "INIT_CHOICES",
]

#: Built-in presets shipped as ``hmoe_estim/study/presets/<name>.toml``.
PRESETS = ("quick", "full", "layer")
#: Kinds of study: ``"entry"`` fits one output entry as an HMoE (the default; configs
#: without ``kind`` are entry studies), ``"layer"`` a whole attention layer
#: (``hmoe_estim/study/_layer_config.py``).
KINDS = ("entry", "layer")
#: Top-level keys of a config that describe a study without changing its numbers: left out of
#: :meth:`StudyConfig.config_hash` and of the comparison that lets a stored study resume.
DESCRIPTIVE_KEYS = ("description",)


def _fit_dict(fit):
    """The ``[fit]`` section as a dict; ``solver`` only when it is not the default, so that
    folders written before studies could name a solver keep their hash and resume."""
    d = dataclasses.asdict(fit)
    if d["solver"] == SOLVER:
        del d["solver"]
    return d


def without_descriptive(config_dict):
    """The canonical config dict (:meth:`StudyConfig.to_dict`) without :data:`DESCRIPTIVE_KEYS`."""
    return {k: v for k, v in config_dict.items() if k not in DESCRIPTIVE_KEYS}


#: Start strategies of the fit; "near-truth" is an oracle (it starts from the truth).
INIT_CHOICES = ("random", "near-truth")

#: Smallest sample size accepted on the grid.
MIN_N = 10
#: Most fits a study may plan (models × sample sizes × reps): planning, the results file and
#: the rates stay within seconds and megabytes below it.
MAX_FITS = 100_000
#: Largest config, truth or stored-study JSON file read (bytes): ``/dev/zero`` or a stray
#: multi-gigabyte file is refused instead of read without limit.
MAX_FILE_BYTES = 16 * 2**20


def read_limited(path, what, limit=MAX_FILE_BYTES):
    """The bytes of ``path`` if it holds at most ``limit`` bytes; else :class:`ConfigError`.

    Reads at most ``limit + 1`` bytes, so a device such as ``/dev/zero`` cannot hang the run.
    ``OSError`` propagates (the caller words it).
    """
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(
            f"{what} {path!r} is larger than {limit // 2**20} MiB: not a study file. "
            "Check the path."
        )
    return data


def decode_utf8(data, path, what):
    """``data`` decoded as UTF-8, or :class:`ConfigError` naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {path!r} is not UTF-8 text (byte {data[exc.start]:#04x} at offset "
            f"{exc.start}); save it as UTF-8."
        ) from None


class ConfigError(ValueError):
    """A study configuration that cannot be run; the message says what to change."""


# -- small checkers -----------------------------------------------------------------------
def _int(value, where, minimum=None):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{where} must be an integer; got {value!r}.")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ConfigError(f"{where} must be >= {minimum}; got {value}.")
    return value


def _float(value, where, *, positive=False, nonneg=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{where} must be a number; got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ConfigError(f"{where} must be finite; got {value!r}.")
    if positive and value <= 0:
        raise ConfigError(f"{where} must be > 0; got {value}.")
    if nonneg and value < 0:
        raise ConfigError(f"{where} must be >= 0; got {value}.")
    return value


def _str(value, where, choices=None):
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string; got {value!r}.")
    if choices is not None and value not in choices:
        raise ConfigError(f"{where} must be one of {list(choices)}; got {value!r}.")
    return value


def _bool(value, where):
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false; got {value!r}.")
    return value


def _check_keys(table, allowed, where):
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table (section); got {type(table).__name__}.")
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ConfigError(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} in "
            f"{where}; allowed keys: {', '.join(sorted(allowed))}."
        )


# -- sections ------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelSpec:
    """One fitted model: gate position and activation (paper eq. (2), (9), (12)), unique name.

    ``name`` labels the model in ``results.jsonl`` and ``rates.json``; by default it is the
    gate (``"none"``, ``"value"``, ``"sdpa"``, ``"output"``), or ``"gate-activation"`` when
    two models share a gate.
    """

    gate: str
    activation: str = "sigmoid"
    name: str = ""

    @property
    def label(self):
        """Paper label, e.g. ``"G2 (value)"``."""
        return f"{LAYER_GATE_LABELS[self.gate]} ({self.name})"

    @property
    def key(self):
        """Identity used for seeds: ``"gate/activation"`` (independent of the name)."""
        return f"{self.gate}/{self.activation}"


@dataclass(frozen=True)
class TruthConfig:
    """The true measure ``G*``: drawn by :func:`~hmoe_estim.datasets.random_measure` or given."""

    n_heads: int = 1
    n_tokens: int = 2
    n_experts: int = 2
    n_features: int = 3
    scale: float = 2.0
    seed: int = 0
    #: explicit measure as a dict ``{"omega", "M", "a"}`` (nested lists), or None
    measure: dict = None


@dataclass(frozen=True)
class DataConfig:
    """Noise ``σ`` and input box: ``x ~ U([-box, box]^D)``, ``y = f_{G*}(x) + N(0, σ²)``."""

    noise: float = 0.1
    box: float = 1.0


@dataclass(frozen=True)
class GridConfig:
    """Sample sizes (sorted, unique) and replications per ``(model, n)``."""

    n: tuple = (1000, 10000)
    reps: int = 4


@dataclass(frozen=True)
class FitConfig:
    """Estimator settings (:class:`~hmoe_estim.estimators.HMoERegressor`) and start strategy.

    ``n_experts`` None means ``K* + 1``; ``solver`` is the estimator's local solver
    (``"lm"`` or ``"lbfgs"``); the defaults are the estimator's (``hmoe_estim/_defaults.py``).
    """

    n_experts: int = None
    n_starts: int = N_STARTS
    max_iter: int = MAX_ITER
    tol: float = TOL
    param_bound: float = PARAM_BOUND
    omega_max: float = OMEGA_MAX
    init: str = "random"
    near_truth_noise: float = 0.1
    split_init: bool = False
    solver: str = SOLVER


@dataclass(frozen=True)
class MetricsConfig:
    """Metric settings: ``r = 0`` means ``L_2``; ``r >= 1`` means ``L_{1,r}`` (paper, Section 3)."""

    r: int = 0
    n_ref: int = 20000
    ref_seed: int = 0


@dataclass(frozen=True)
class StudyConfig:
    """A complete, validated study configuration.

    Build it with :func:`load_config` (TOML or JSON file), :func:`load_preset` or
    :meth:`from_dict`; :meth:`to_dict` gives the canonical plain form stored in
    ``OUT/config.json`` and hashed by :meth:`config_hash`.
    """

    models: tuple
    name: str = "study"
    description: str = ""
    seed: int = 0
    truth: TruthConfig = field(default_factory=TruthConfig)
    data: DataConfig = field(default_factory=DataConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    fit: FitConfig = field(default_factory=FitConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    #: The kind of study (:data:`KINDS`); a class attribute, not a field, so that the plain
    #: form and hash of an entry study are those of configs written before kinds existed.
    kind = "entry"

    # -- derived -------------------------------------------------------------------------
    @property
    def true_shape(self):
        """``(H*, N*, K*, D)``."""
        t = self.truth
        return (t.n_heads, t.n_tokens, t.n_experts, t.n_features)

    @property
    def fitted_shape(self):
        """``(H, N, K, D)`` of the fitted model (``H = H*``, ``N = N*``)."""
        H, N, _, D = self.true_shape
        return (H, N, self.fit.n_experts, D)

    @property
    def specification(self):
        """``"over-specified"`` (K > K*), ``"exactly specified"`` or ``"under-specified"``."""
        K, Ks = self.fit.n_experts, self.truth.n_experts
        if K > Ks:
            return "over-specified"
        if K == Ks:
            return "exactly specified"
        return "under-specified"

    @property
    def oracle(self):
        """True when the fits start near the true measure (an oracle aid)."""
        return self.fit.init == "near-truth"

    @property
    def required_keys(self):
        """Keys every record of this study has (``hmoe_estim.study.REQUIRED_KEYS``)."""
        from ._results import REQUIRED_KEYS

        return REQUIRED_KEYS

    @property
    def rate_metrics(self):
        """Metrics whose rates the study fits, and the panels of its figure, in order."""
        from ._rates import RATE_METRICS

        return RATE_METRICS

    @property
    def optional_metrics(self):
        """Rate metrics left out of a model none of whose records has them."""
        from ._rates import MEASURE_METRICS

        return MEASURE_METRICS

    @property
    def plot_panels(self):
        """Panels of the learning-curve figure (:func:`~hmoe_estim.study.plot_learning_curves`)."""
        from ._plotting import PLOT_METRICS

        return PLOT_METRICS

    def plan_summary(self):
        """The fitted model and search in one phrase, for the line a run starts with."""
        return (f"K={self.fit.n_experts} ({self.specification}), init={self.fit.init}, "
                f"{self.fit.n_starts} starts")

    def figure_title(self):
        """Title of the learning-curve figure."""
        return (f"{self.name}: K={self.fit.n_experts} fitted, K*={self.truth.n_experts}, "
                f"init={self.fit.init}")

    def warnings(self):
        """Human-readable remarks about the configuration (not errors)."""
        out = []
        if self.specification == "under-specified":
            out.append(
                f"fit.n_experts = {self.fit.n_experts} < K* = {self.truth.n_experts}: the "
                "fitted model is under-specified; the Voronoi loss has empty cells and cannot "
                "go to 0."
            )
        if self.truth.measure is not None and min(min(r) for r in self.truth.measure["omega"]) < 0:
            out.append(
                "the true measure has negative weights omega (e.g. W_O of an attention layer): "
                "the fits keep omega >= 0 (assumption A.2) and cannot reach it."
            )
        if self.oracle:
            out.append(
                "fit.init = 'near-truth': the fits start near the true measure. This is an "
                "oracle aid (as in published studies), labelled in config.json and results."
            )
        return out

    # -- plain form ----------------------------------------------------------------------
    def to_dict(self):
        """Canonical nested dict (JSON-serialisable), the inverse of :meth:`from_dict`."""
        truth = dataclasses.asdict(self.truth)
        if truth["measure"] is None:
            del truth["measure"]
        return self._plain(truth=truth, data=dataclasses.asdict(self.data),
                           fit=_fit_dict(self.fit), metrics=dataclasses.asdict(self.metrics))

    # -- shared with LayerStudyConfig (assigned there) ---------------------------------
    def model(self, name):
        """The :class:`ModelSpec` called ``name``."""
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)

    def n_fits(self):
        """``len(models) · len(n grid) · reps``."""
        return len(self.models) * len(self.grid.n) * self.grid.reps

    def _plain(self, **sections):
        """The plain form of the common fields, then ``sections`` (``to_dict``'s body)."""
        return {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "models": [
                {"gate": m.gate, "activation": m.activation, "name": m.name} for m in self.models
            ],
            "grid": {"n": list(self.grid.n), "reps": self.grid.reps},
            **sections,
        }

    def config_hash(self):
        """SHA-256 (16 hex digits) of the canonical JSON of :meth:`to_dict`, without the
        descriptive fields (``DESCRIPTIVE_KEYS``): rewording a description does not make a
        stored study a different one."""
        d = without_descriptive(self.to_dict())
        text = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def with_changes(self, **sections):
        """A new validated config with some fields replaced, e.g.
        ``cfg.with_changes(fit={"init": "near-truth"}, grid={"reps": 2})``."""
        d = self.to_dict()
        for section, values in sections.items():
            if isinstance(values, dict) and isinstance(d.get(section), dict):
                d[section] = {**d[section], **values}
                if section == "grid" and ("n_min" in values or "n_points" in values):
                    d[section].pop("n", None)
            else:
                d[section] = values
        return StudyConfig.from_dict(d)

    @classmethod
    def from_dict(cls, d, *, base_dir=None):
        """Validate a nested dict (as read from TOML/JSON) into a study config: a
        :class:`StudyConfig`, or a :class:`LayerStudyConfig` when ``kind = "layer"``.

        Parameters
        ----------
        d : dict
            Top-level keys ``kind, name, description, seed, activation, models, truth, data,
            grid, fit, metrics`` (and ``baseline`` for a layer study).
        base_dir : str or None
            Directory against which ``truth.file`` is resolved.

        Raises
        ------
        ConfigError
            Unknown keys, wrong types, impossible sizes, an unreadable truth file, duplicate
            model names, an empty grid.
        """
        return _from_dict(d, base_dir)


# -- validation ----------------------------------------------------------------------------
_TOP = {"kind", "name", "description", "seed", "activation", "models", "truth", "data", "grid",
        "fit", "metrics"}
_TRUTH = {"n_heads", "n_tokens", "n_experts", "n_features", "scale", "seed", "measure", "file"}
_DATA = {"noise", "box"}
_GRID = {"n", "n_min", "n_max", "n_points", "reps"}
_FIT = {f.name for f in dataclasses.fields(FitConfig)}
_METRICS = {f.name for f in dataclasses.fields(MetricsConfig)}
_MODEL = {"gate", "activation", "name"}


def _models(raw, default_activation, gates=GATES):
    if raw is None:
        raise ConfigError(
            "the config has no 'models': add e.g. models = [\"none\", \"value\", \"sdpa\"]."
        )
    if not isinstance(raw, list) or not raw:
        raise ConfigError("'models' must be a non-empty list of gate names or tables.")
    specs = []
    for j, item in enumerate(raw):
        where = f"models[{j}]"
        if isinstance(item, str):
            gate, act, name = item, default_activation, ""
        elif isinstance(item, dict):
            _check_keys(item, _MODEL, where)
            if "gate" not in item:
                raise ConfigError(f"{where} needs a 'gate' (one of {list(gates)}).")
            gate = item["gate"]
            act = item.get("activation", default_activation)
            name = _str(item.get("name", ""), f"{where}.name")
        else:
            raise ConfigError(f"{where} must be a gate name or a table; got {item!r}.")
        _str(gate, f"{where}.gate", gates)
        _str(act, f"{where}.activation", ACTIVATIONS)
        specs.append([gate, act, name])
    gates = [s[0] for s in specs]
    for s in specs:
        if not s[2]:
            s[2] = s[0] if gates.count(s[0]) == 1 else f"{s[0]}-{s[1]}"
    names = [s[2] for s in specs]
    dup = sorted({x for x in names if names.count(x) > 1})
    if dup:
        raise ConfigError(f"model names must be unique; repeated: {dup}. Give each a 'name'.")
    keys = [f"{s[0]}/{s[1]}" for s in specs]
    dupk = sorted({x for x in keys if keys.count(x) > 1})
    if dupk:
        raise ConfigError(f"the same model (gate/activation) is listed twice: {dupk}.")
    return tuple(ModelSpec(g, a, n) for g, a, n in specs)


def _measure_dict(raw, where):
    from ..model import MixingMeasure

    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table with omega, M and a.")
    _check_keys(raw, {"omega", "M", "a"}, where)
    missing = [k for k in ("omega", "M", "a") if k not in raw]
    if missing:
        raise ConfigError(f"{where} is missing {missing}.")
    try:
        m = MixingMeasure(raw["omega"], raw["M"], raw["a"])
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if m.n_tokens < 2:
        raise ConfigError(f"{where}: the true measure needs N* >= 2 tokens (assumption A.4).")
    return m.normalized().to_dict()


def _section(raw, where):
    """A config section as a dict (absent: empty); anything but a table is an error."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{where} must be a table (a [section] or {{key = value}}); got "
            f"{type(raw).__name__} {raw!r:.40}."
        )
    return dict(raw)


def _truth(raw, base_dir):
    raw = _section(raw, "[truth]")
    _check_keys(raw, _TRUTH, "[truth]")
    if "measure" in raw and "file" in raw:
        raise ConfigError("[truth] gives both 'measure' and 'file'; keep one.")
    if "file" in raw:
        path = _str(raw.pop("file"), "truth.file")
        if base_dir and not os.path.isabs(path):
            path = os.path.join(base_dir, path)
        try:
            data = json.loads(decode_utf8(read_limited(path, "truth.file"), path, "truth.file"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read truth.file {path!r}: {exc}") from None
        if isinstance(data, dict) and "measure" in data:
            data = data["measure"]
        raw["measure"] = data
    measure = None
    if "measure" in raw:
        measure = _measure_dict(raw["measure"], "truth.measure")
        H = len(measure["omega"])
        K = len(measure["omega"][0])
        N = len(measure["M"][0])
        D = len(measure["M"][0][0])
        for key, val in (("n_heads", H), ("n_tokens", N), ("n_experts", K), ("n_features", D)):
            if key in raw and raw[key] != val:
                raise ConfigError(
                    f"truth.{key} = {raw[key]!r} disagrees with the given measure ({val}); "
                    "drop it or fix it."
                )
            raw[key] = val
    t = TruthConfig(
        n_heads=_int(raw.get("n_heads", 1), "truth.n_heads", 1),
        n_tokens=_int(raw.get("n_tokens", 2), "truth.n_tokens", 2),
        n_experts=_int(raw.get("n_experts", 2), "truth.n_experts", 1),
        n_features=_int(raw.get("n_features", 3), "truth.n_features", 1),
        scale=_float(raw.get("scale", 2.0), "truth.scale", positive=True),
        seed=_int(raw.get("seed", 0), "truth.seed", 0),
        measure=measure,
    )
    return t


def _grid(raw):
    raw = _section(raw, "[grid]")
    _check_keys(raw, _GRID, "[grid]")
    log_keys = {"n_min", "n_max", "n_points"} & set(raw)
    if "n" in raw and log_keys:
        raise ConfigError(
            "[grid] gives both 'n' and a log grid (n_min/n_max/n_points); keep one."
        )
    if log_keys:
        missing = {"n_min", "n_max", "n_points"} - log_keys
        if missing:
            raise ConfigError(f"[grid] log grid is missing {sorted(missing)}.")
        lo = _int(raw["n_min"], "grid.n_min", MIN_N)
        hi = _int(raw["n_max"], "grid.n_max", MIN_N)
        pts = _int(raw["n_points"], "grid.n_points", 1)
        if hi < lo:
            raise ConfigError(f"grid.n_max ({hi}) must be >= grid.n_min ({lo}).")
        if pts == 1:
            ns = [lo]
        else:
            ns = [int(round(math.exp(math.log(lo) + j * (math.log(hi) - math.log(lo)) / (pts - 1))))
                  for j in range(pts)]
    else:
        ns = raw.get("n", list(GridConfig.n))
        if not isinstance(ns, list) or not ns:
            raise ConfigError("grid.n must be a non-empty list of sample sizes.")
        ns = [_int(v, f"grid.n[{j}]", MIN_N) for j, v in enumerate(ns)]
    ns = tuple(sorted(set(ns)))
    reps = _int(raw.get("reps", GridConfig.reps), "grid.reps", 1)
    return GridConfig(n=ns, reps=reps)


def _from_dict(d, base_dir=None):
    if not isinstance(d, dict):
        raise ConfigError("a study config must be a table of keys.")
    d = copy.deepcopy(d)
    # A stored OUT/config.json wraps the config; accept it directly.
    if "config" in d and "config_hash" in d:
        d = d["config"]
    if not isinstance(d, dict):
        raise ConfigError("a study config must be a table of keys.")
    kind = _str(d.get("kind", "entry"), "kind", KINDS)
    if kind == "layer":
        from ._layer_config import layer_from_dict

        return layer_from_dict(d)
    d.pop("kind", None)
    _check_keys(d, _TOP, "the config's top level")
    name = _str(d.get("name", "study"), "name")
    description = _str(d.get("description", ""), "description")
    seed = _int(d.get("seed", 0), "seed", 0)
    default_act = _str(d.get("activation", "sigmoid"), "activation", ACTIVATIONS)
    models = _models(d.get("models"), default_act)
    truth = _truth(d.get("truth"), base_dir)

    data_raw = _section(d.get("data"), "[data]")
    _check_keys(data_raw, _DATA, "[data]")
    data = DataConfig(
        noise=_float(data_raw.get("noise", 0.1), "data.noise", nonneg=True),
        box=_float(data_raw.get("box", 1.0), "data.box", positive=True),
    )
    grid = _grid(d.get("grid"))

    fit_raw = _section(d.get("fit"), "[fit]")
    _check_keys(fit_raw, _FIT, "[fit]")
    K = fit_raw.get("n_experts")
    K = truth.n_experts + 1 if K is None else _int(K, "fit.n_experts", 1)
    split = _bool(fit_raw.get("split_init", False), "fit.split_init")
    if split and K < 2:
        raise ConfigError("fit.split_init needs fit.n_experts >= 2 (it splits a K-1 fit).")
    fit = FitConfig(
        n_experts=K,
        n_starts=_int(fit_raw.get("n_starts", N_STARTS), "fit.n_starts", 1),
        max_iter=_int(fit_raw.get("max_iter", MAX_ITER), "fit.max_iter", 1),
        tol=_float(fit_raw.get("tol", TOL), "fit.tol", positive=True),
        param_bound=_float(fit_raw.get("param_bound", PARAM_BOUND), "fit.param_bound",
                           positive=True),
        omega_max=_float(fit_raw.get("omega_max", OMEGA_MAX), "fit.omega_max", positive=True),
        solver=_str(fit_raw.get("solver", SOLVER), "fit.solver", tuple(SOLVERS)),
        init=_str(fit_raw.get("init", "random"), "fit.init", INIT_CHOICES),
        near_truth_noise=_float(fit_raw.get("near_truth_noise", 0.1), "fit.near_truth_noise",
                                nonneg=True),
        split_init=split,
    )
    met_raw = _section(d.get("metrics"), "[metrics]")
    _check_keys(met_raw, _METRICS, "[metrics]")
    metrics = MetricsConfig(
        r=_int(met_raw.get("r", 0), "metrics.r", 0),
        n_ref=_int(met_raw.get("n_ref", 20000), "metrics.n_ref", 100),
        ref_seed=_int(met_raw.get("ref_seed", 0), "metrics.ref_seed", 0),
    )
    n_fits = len(models) * len(grid.n) * grid.reps
    if n_fits > MAX_FITS:
        raise ConfigError(
            f"the study asks for {len(models)} models x {len(grid.n)} sample sizes x "
            f"{grid.reps} reps = {n_fits} fits; at most {MAX_FITS} are supported. Lower "
            "grid.reps or the number of sample sizes."
        )
    from ..estimators import MAX_FIT_BYTES, fit_memory_bytes
    from ..model import n_params

    shape = (truth.n_heads, truth.n_tokens, fit.n_experts, truth.n_features)
    need = fit_memory_bytes(shape, grid.n[-1], "value") + 48 * grid.n[-1] * (truth.n_features + 1)
    if need > MAX_FIT_BYTES:
        raise ConfigError(
            f"a fit at the largest sample size {grid.n[-1]} with (H, N, K, D) = {shape} would "
            f"need about {need / 2**30:.1f} GiB (limit {MAX_FIT_BYTES / 2**30:.0f} GiB). Use "
            "smaller sample sizes or a smaller model."
        )
    P = n_params(truth.n_heads, truth.n_tokens, fit.n_experts, truth.n_features)
    if grid.n[0] < P:
        raise ConfigError(
            f"the smallest sample size {grid.n[0]} is below the {P} free parameters of the "
            f"fitted model (H={truth.n_heads}, N={truth.n_tokens}, K={fit.n_experts}, "
            f"D={truth.n_features}); the least-squares fit would be under-determined. Use "
            f"n >= {P}."
        )
    if truth.measure is not None:
        # the truth must fit inside the estimator's box
        import numpy as np

        big = max(np.abs(np.asarray(truth.measure["M"])).max(),
                  np.abs(np.asarray(truth.measure["a"])).max())
        if big > fit.param_bound:
            raise ConfigError(
                f"the true measure has an entry of size {big:g} outside the fit's box "
                f"fit.param_bound = {fit.param_bound:g}; raise param_bound."
            )
    elif truth.scale > fit.param_bound:
        raise ConfigError(
            f"truth.scale = {truth.scale:g} exceeds fit.param_bound = {fit.param_bound:g}: the "
            "true parameters would lie outside the fitted box. Raise param_bound."
        )
    return StudyConfig(
        models=models, name=name, description=description, seed=seed, truth=truth, data=data,
        grid=grid, fit=fit, metrics=metrics,
    )


def load_config(path):
    """Read and validate a study config from a TOML file (or a JSON ``OUT/config.json``).

    Raises
    ------
    ConfigError
        Missing or unreadable file, TOML/JSON syntax error, or any validation error.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ConfigError(f"config file {path!r} does not exist.")
    if os.path.isdir(path):
        cand = os.path.join(path, "config.json")
        if os.path.exists(cand):
            path = cand
        else:
            raise ConfigError(f"{path!r} is a directory without config.json; pass a TOML file.")
    try:
        text = decode_utf8(read_limited(path, "config file"), path, "config file")
        d = json.loads(text) if path.endswith(".json") else tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: TOML syntax error: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: JSON syntax error: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path!r}: {exc}") from None
    try:
        return StudyConfig.from_dict(d, base_dir=os.path.dirname(os.path.abspath(path)))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def load_preset(name):
    """The built-in study ``name`` (one of :data:`PRESETS`) as a :class:`StudyConfig`."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {list(PRESETS)}.")
    try:
        path = resources.files("hmoe_estim.study").joinpath("presets", f"{name}.toml")
        text = path.read_text("utf-8")
    except OSError as exc:
        raise ConfigError(
            f"the preset file presets/{name}.toml is missing from this installation ({exc}); "
            "reinstall hmoe-estim."
        ) from None
    return StudyConfig.from_dict(tomllib.loads(text))
