"""Configuration of a layer study (``kind = "layer"``): a whole attention layer fitted by
:class:`~hmoe_estim.AttentionLayerRegressor`, with one entry fitted on its own by
:class:`~hmoe_estim.HMoERegressor` as the per-entry baseline.

A layer study's TOML file (every key optional unless marked; unknown keys are an error)::

    kind = "layer"                 # required for a layer study
    name = "my-layer-study"
    description = ""
    seed = 0                       # master seed: every fit's seed derives from it
    activation = "sigmoid"         # default φ of the models given as plain strings
    models = ["none", "value", "sdpa"]   # required; also "output", "key", "query"

    [truth]                        # the true layer, drawn by random_attention_layer
    n_heads = 1                    # H (the fit uses the same H)
    d = 2                          # token dimension
    head_dim = 2                   # d_v of the truth
    d_out = 2                      # output columns (default d)
    qk = "factored"                # or "full" (one free P per head)
    gate_form = "activation"       # or "multiplicative" (Qiu et al. 2025; models "sdpa" only)
    granularity = "headwise"       # of the multiplicative gate, or "elementwise"
    scale = 1.5                    # projections of standard tokens have std `scale`
    seed = 0                       # seed of random_attention_layer

    [data]
    n_tokens = 3                   # N: tokens per sample
    noise = 0.1                    # σ of the Gaussian noise on every output entry
    rows = "all"                   # fit every output row, or "last" only
    tokens = "normal"              # tokens ~ N(0, I_d), or "uniform" on [-1, 1]^d

    [grid]                         # as in an entry study
    n = [300, 3000, 30000]         # or n_min, n_max, n_points
    reps = 3

    [fit]                          # AttentionLayerRegressor
    head_dim = 2                   # fitted d_v (default: the truth's)
    qk = "factored"                # default: the truth's
    n_starts = "auto"              # starts per round: "auto" is the estimator's (2; 4 from
                                   # two gated or three heads) or an integer
    max_iter = 1000
    fit_intercept = false
    varpro = "auto"                # W_O solved in closed form: "auto", true or false

    [baseline]                     # the per-entry HMoERegressor on one entry of the same data
    enabled = true
    row = -1                       # output row (negative counts from the end; the last row
                                   # is the only one with rows = "last")
    column = 0                     # output column
    n_experts = 2                  # fitted K (default: the fitted head_dim)
    n_starts = 4
    max_iter = 1000
    solver = "lm"

    [metrics]
    r = 0                          # Voronoi losses: 0 is L_2, r >= 1 is L_{1,r}
    n_ref = 20000                  # reference sample of token matrices (same distribution)
    ref_seed = 0

The per-entry baseline exists for the gates whose entries are HMoEs (``none``, ``value``,
``sdpa``, ``output`` in the activation form); for the others the record has no baseline
fields (:meth:`LayerStudyConfig.warnings` says so).
"""

import dataclasses
import numbers
from dataclasses import dataclass, field

from .._defaults import MAX_ITER, N_STARTS, SOLVER, SOLVERS
from .._names import GATE_FORMS, GRANULARITIES, LAYER_GATES, QK_FORMS, ROWS
from ._config import (
    MAX_FITS,
    ConfigError,
    GridConfig,
    StudyConfig,
    _bool,
    _check_keys,
    _float,
    _grid,
    _int,
    _models,
    _section,
    _str,
)

__all__ = [
    "LayerStudyConfig", "LayerTruthConfig", "LayerDataConfig", "LayerFitConfig",
    "BaselineConfig", "LayerMetricsConfig", "layer_from_dict", "ENTRY_GATES", "TOKENS",
]

#: Gates whose output entries are HMoEs (in the activation form): the per-entry baseline and
#: the entry Voronoi loss exist for them only.
ENTRY_GATES = ("none", "value", "sdpa", "output")
#: Token distributions of ``hmoe_estim.layer.make_attention_regression``.
TOKENS = ("normal", "uniform")


@dataclass(frozen=True)
class LayerTruthConfig:
    """The true layer: ``hmoe_estim.layer.random_attention_layer`` of these settings."""

    n_heads: int = 1
    d: int = 2
    head_dim: int = 2
    d_out: int = 2
    qk: str = "factored"
    gate_form: str = "activation"
    granularity: str = "headwise"
    scale: float = 1.5
    seed: int = 0


@dataclass(frozen=True)
class LayerDataConfig:
    """Samples of ``n_tokens`` tokens, noise ``σ`` on every fitted output entry."""

    n_tokens: int = 3
    noise: float = 0.1
    rows: str = "all"
    tokens: str = "normal"


@dataclass(frozen=True)
class LayerFitConfig:
    """Settings of :class:`~hmoe_estim.AttentionLayerRegressor` (``head_dim`` and
    ``qk`` default to the truth's)."""

    head_dim: int = None
    qk: str = None
    n_starts: object = "auto"
    max_iter: int = MAX_ITER
    fit_intercept: bool = False
    varpro: object = "auto"


@dataclass(frozen=True)
class BaselineConfig:
    """The per-entry baseline: :class:`~hmoe_estim.HMoERegressor` on output entry
    ``(row, column)`` of the same data, with signed weights (``W_O`` is signed)."""

    enabled: bool = True
    row: int = -1
    column: int = 0
    n_experts: int = None
    n_starts: int = N_STARTS
    max_iter: int = MAX_ITER
    solver: str = SOLVER


@dataclass(frozen=True)
class LayerMetricsConfig:
    """``r = 0``: the Voronoi losses are ``L_2``; ``r >= 1``: ``L_{1,r}``. The reference sample
    holds ``n_ref`` token matrices from the data's token distribution."""

    r: int = 0
    n_ref: int = 20000
    ref_seed: int = 0


@dataclass(frozen=True)
class LayerStudyConfig:
    """A complete, validated layer study configuration (``kind = "layer"``; module docstring).

    Built by :func:`hmoe_estim.study.load_config` or :meth:`from_dict` from a config with
    ``kind = "layer"``; :meth:`to_dict` is the canonical plain form stored in
    ``OUT/config.json`` and hashed by :meth:`config_hash`. The methods that do not depend on
    the kind are :class:`StudyConfig`'s.
    """

    models: tuple
    name: str = "layer-study"
    description: str = ""
    seed: int = 0
    truth: LayerTruthConfig = field(default_factory=LayerTruthConfig)
    data: LayerDataConfig = field(default_factory=LayerDataConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    fit: LayerFitConfig = field(default_factory=LayerFitConfig)
    baseline: BaselineConfig = field(default_factory=BaselineConfig)
    metrics: LayerMetricsConfig = field(default_factory=LayerMetricsConfig)

    kind = "layer"

    model = StudyConfig.model
    n_fits = StudyConfig.n_fits
    config_hash = StudyConfig.config_hash
    with_changes = StudyConfig.with_changes
    from_dict = StudyConfig.__dict__["from_dict"]
    _plain = StudyConfig._plain

    # -- derived -------------------------------------------------------------------------
    @property
    def specification(self):
        """``"over-specified"`` (fitted ``d_v`` above the truth's), ``"exactly specified"`` or
        ``"under-specified"``."""
        dv, dvs = self.fit.head_dim, self.truth.head_dim
        if dv > dvs:
            return "over-specified"
        return "exactly specified" if dv == dvs else "under-specified"

    @property
    def oracle(self):
        """Always False: layer fits start from random draws only."""
        return False

    @property
    def fitted_rows(self):
        """Output rows fitted per sample (``N`` or 1)."""
        return 1 if self.data.rows == "last" else self.data.n_tokens

    @property
    def baseline_row(self):
        """The baseline entry's row as an index in ``[0, N)``."""
        return self.baseline.row % self.data.n_tokens

    @property
    def required_keys(self):
        """Keys every record of a layer study has."""
        from ._layer_fit import LAYER_REQUIRED_KEYS

        return LAYER_REQUIRED_KEYS

    @property
    def rate_metrics(self):
        """Metrics whose rates the study fits, in order."""
        from ._layer_fit import LAYER_METRICS

        return LAYER_METRICS

    @property
    def optional_metrics(self):
        """Rate metrics left out of a model none of whose records has them: the layer Voronoi
        loss (gates whose channels the layer does not identify) and the baseline's."""
        from ._layer_fit import BASELINE_METRICS

        return ("layer_voronoi_loss",) + BASELINE_METRICS

    @property
    def plot_panels(self):
        """Panels of the figure: regression error, ``P`` and ``C`` errors, layer Voronoi loss,
        and the baseline entry's Voronoi loss read off the layer fit against the per-entry
        fit's."""
        return ("regression_error", "P_error", "VO_error", "layer_voronoi_loss",
                ("entry_voronoi_loss", "baseline_voronoi_loss"))

    def has_baseline(self, model):
        """Whether the fits of ``model`` (a :class:`ModelSpec`) get the per-entry baseline."""
        return (self.baseline.enabled and model.gate in ENTRY_GATES
                and self.truth.gate_form == "activation")

    def plan_summary(self):
        """The fitted layer and search in one phrase, for the line a run starts with."""
        t, f = self.truth, self.fit
        base = (f"baseline entry ({self.baseline_row}, {self.baseline.column}) with "
                f"K={self.baseline.n_experts}" if self.baseline.enabled else "no baseline")
        starts = "the estimator's" if f.n_starts == "auto" else f.n_starts
        return (f"layer H={t.n_heads}, N={self.data.n_tokens}, d={t.d}, d_v={f.head_dim} "
                f"({self.specification}; truth d_v={t.head_dim}), d_out={t.d_out}, "
                f"rows={self.data.rows}, {starts} starts; {base}")

    def figure_title(self):
        """Title of the learning-curve figure."""
        t = self.truth
        what = self.name if self.name == "layer" else f"{self.name}: layer"
        return (f"{what} H={t.n_heads}, N={self.data.n_tokens}, d={t.d}, "
                f"d_v={self.fit.head_dim} (truth {t.head_dim}), sigma={self.data.noise:g}")

    def warnings(self):
        """Human-readable remarks about the configuration (not errors)."""
        out = []
        if self.specification == "under-specified":
            out.append(f"fit.head_dim = {self.fit.head_dim} < the truth's {self.truth.head_dim}: "
                       "the fitted layer cannot reach the truth.")
        skipped = [m.name for m in self.models if self.baseline.enabled
                   and not self.has_baseline(m)]
        if skipped:
            out.append(f"no per-entry baseline for {skipped}: an entry is an HMoE only for the "
                       f"gates {list(ENTRY_GATES)} in the activation form.")
        return out

    # -- plain form ----------------------------------------------------------------------
    def to_dict(self):
        """Canonical nested dict (JSON-serialisable), the inverse of ``from_dict``."""
        return {"kind": "layer", **self._plain(**{
            k: dataclasses.asdict(getattr(self, k))
            for k in ("truth", "data", "fit", "baseline", "metrics")})}


# -- validation ----------------------------------------------------------------------------
_TOP = {"kind", "name", "description", "seed", "activation", "models", "truth", "data", "grid",
        "fit", "baseline", "metrics"}


def _keys(cls):
    return {f.name for f in dataclasses.fields(cls)}


def _truth(raw):
    raw = _section(raw, "[truth]")
    _check_keys(raw, _keys(LayerTruthConfig), "[truth]")
    d = _int(raw.get("d", 2), "truth.d", 1)
    t = LayerTruthConfig(
        n_heads=_int(raw.get("n_heads", 1), "truth.n_heads", 1),
        d=d,
        head_dim=_int(raw.get("head_dim", min(2, d)), "truth.head_dim", 1),
        d_out=_int(raw.get("d_out", d), "truth.d_out", 1),
        qk=_str(raw.get("qk", "factored"), "truth.qk", QK_FORMS),
        gate_form=_str(raw.get("gate_form", "activation"), "truth.gate_form", GATE_FORMS),
        granularity=_str(raw.get("granularity", "headwise"), "truth.granularity",
                         GRANULARITIES),
        scale=_float(raw.get("scale", 1.5), "truth.scale", positive=True),
        seed=_int(raw.get("seed", 0), "truth.seed", 0),
    )
    if t.qk == "factored" and t.head_dim > t.d:
        raise ConfigError(
            f"truth.head_dim = {t.head_dim} > truth.d = {t.d} with truth.qk = 'factored': "
            "W_Q W_Kᵀ has rank at most d. Use head_dim <= d or qk = 'full'.")
    return t


def _data(raw):
    raw = _section(raw, "[data]")
    _check_keys(raw, _keys(LayerDataConfig), "[data]")
    return LayerDataConfig(
        n_tokens=_int(raw.get("n_tokens", 3), "data.n_tokens", 2),
        noise=_float(raw.get("noise", 0.1), "data.noise", nonneg=True),
        rows=_str(raw.get("rows", "all"), "data.rows", ROWS),
        tokens=_str(raw.get("tokens", "normal"), "data.tokens", TOKENS),
    )


def _fit(raw, truth):
    raw = _section(raw, "[fit]")
    _check_keys(raw, _keys(LayerFitConfig), "[fit]")
    qk = _str(raw.get("qk", truth.qk), "fit.qk", QK_FORMS)
    dv = raw.get("head_dim")
    dv = truth.head_dim if dv is None else _int(dv, "fit.head_dim", 1)
    if qk == "factored" and dv > truth.d:
        raise ConfigError(
            f"fit.head_dim = {dv} > truth.d = {truth.d} with fit.qk = 'factored': W_Q W_Kᵀ has "
            "rank at most d, so the extra columns only add gauge directions. Use "
            "fit.head_dim <= d or fit.qk = 'full'.")
    return LayerFitConfig(
        head_dim=dv,
        qk=qk,
        n_starts=_auto_int(raw.get("n_starts", "auto"), "fit.n_starts"),
        max_iter=_int(raw.get("max_iter", MAX_ITER), "fit.max_iter", 1),
        fit_intercept=_bool(raw.get("fit_intercept", False), "fit.fit_intercept"),
        varpro=_varpro(raw.get("varpro", "auto")),
    )


def _auto_int(value, name):
    if isinstance(value, str) and value == "auto":
        return value
    if isinstance(value, str):
        raise ConfigError(f"{name} must be \"auto\" or an integer >= 1; got {value!r}.")
    return _int(value, name, 1)


def _varpro(value):
    if value != "auto" and not isinstance(value, bool):
        raise ConfigError(f"fit.varpro must be \"auto\", true or false; got {value!r}.")
    return value


def _baseline(raw, fit, truth, data):
    raw = _section(raw, "[baseline]")
    _check_keys(raw, _keys(BaselineConfig), "[baseline]")
    N = data.n_tokens
    row = raw.get("row", -1)
    if isinstance(row, bool) or not isinstance(row, numbers.Integral) or not -N <= row < N:
        raise ConfigError(f"baseline.row must be an integer in [-{N}, {N}) (data.n_tokens = "
                          f"{N}; -1 is the last row); got {row!r}.")
    row = int(row)
    if data.rows == "last" and row % N != N - 1:
        raise ConfigError(f"baseline.row = {row} is not the last row, the only row fitted with "
                          "data.rows = 'last'. Use baseline.row = -1.")
    column = _int(raw.get("column", 0), "baseline.column", 0)
    if column >= truth.d_out:
        raise ConfigError(f"baseline.column = {column} is outside the truth's d_out = "
                          f"{truth.d_out} output columns; use 0..{truth.d_out - 1}.")
    K = raw.get("n_experts")
    return BaselineConfig(
        enabled=_bool(raw.get("enabled", True), "baseline.enabled"),
        row=row,
        column=column,
        n_experts=fit.head_dim if K is None else _int(K, "baseline.n_experts", 1),
        n_starts=_int(raw.get("n_starts", N_STARTS), "baseline.n_starts", 1),
        max_iter=_int(raw.get("max_iter", MAX_ITER), "baseline.max_iter", 1),
        solver=_str(raw.get("solver", SOLVER), "baseline.solver", tuple(SOLVERS)),
    )


def _check_models(models, truth, fit):
    for m in models:
        if fit.varpro is True and m.gate == "output":
            raise ConfigError(
                f"model {m.name!r} has gate 'output' (G5), whose output is not linear in W_O: "
                "fit.varpro = true cannot hold it. Use fit.varpro = \"auto\".")
        if truth.gate_form == "multiplicative" and m.gate != "sdpa":
            raise ConfigError(
                f"model {m.name!r} has gate {m.gate!r}, but truth.gate_form = 'multiplicative' "
                "is the gate of the SDPA output (Qiu et al. 2025): use models = [\"sdpa\"] or "
                "truth.gate_form = 'activation'.")
        if m.gate in ("key", "query") and "full" in (truth.qk, fit.qk):
            raise ConfigError(
                f"model {m.name!r} has gate {m.gate!r}, whose scores are not bilinear: it needs "
                "qk = 'factored' in [truth] and [fit].")


def _check_sizes(config):
    """The smallest ``n`` must give at least as many residuals as parameters, in the layer and
    in the baseline; the largest must fit the data limit."""
    from ..estimators import MAX_FIT_BYTES
    from ..layer import LayerLayout
    from ..model import n_params

    t, f, data, grid = config.truth, config.fit, config.data, config.grid
    granularity = t.granularity if t.gate_form == "multiplicative" else None
    layout = LayerLayout(t.n_heads, t.d, f.head_dim, t.d_out, qk=f.qk, granularity=granularity,
                         fit_intercept=f.fit_intercept)
    m = grid.n[0] * config.fitted_rows * t.d_out
    if m < layout.n_params:
        raise ConfigError(
            f"the smallest sample size {grid.n[0]} gives {m} output entries for the "
            f"{layout.n_params} parameters of the fitted layer: the least-squares fit would be "
            "under-determined. Raise the smallest n of [grid].")
    if config.baseline.enabled and any(config.has_baseline(mm) for mm in config.models):
        P = n_params(t.n_heads, data.n_tokens, config.baseline.n_experts,
                     data.n_tokens * t.d)
        if grid.n[0] < P:
            raise ConfigError(
                f"the smallest sample size {grid.n[0]} is below the {P} free parameters of the "
                f"per-entry baseline (H={t.n_heads}, N={data.n_tokens}, "
                f"K={config.baseline.n_experts}, D={data.n_tokens * t.d}). Raise the smallest "
                "n of [grid], or set baseline.enabled = false.")
    need = 8 * grid.n[-1] * data.n_tokens * (t.d + config.fitted_rows * t.d_out)
    if need > MAX_FIT_BYTES:
        raise ConfigError(
            f"the data of the largest sample size {grid.n[-1]} alone would need "
            f"{need / 2**30:.1f} GiB (limit {MAX_FIT_BYTES / 2**30:.0f} GiB). Use smaller "
            "sample sizes or fewer tokens.")


def layer_from_dict(d):
    """Validate the plain dict of a layer study (``kind = "layer"``) into a
    :class:`LayerStudyConfig`; :class:`~hmoe_estim.study.ConfigError` says what to fix."""
    _check_keys(d, _TOP, "the config's top level (kind = 'layer')")
    name = _str(d.get("name", "layer-study"), "name")
    description = _str(d.get("description", ""), "description")
    seed = _int(d.get("seed", 0), "seed", 0)
    from .._names import ACTIVATIONS

    default_act = _str(d.get("activation", "sigmoid"), "activation", ACTIVATIONS)
    models = _models(d.get("models"), default_act, LAYER_GATES)
    truth = _truth(d.get("truth"))
    data = _data(d.get("data"))
    grid = _grid(d.get("grid"))
    fit = _fit(d.get("fit"), truth)
    baseline = _baseline(d.get("baseline"), fit, truth, data)
    met_raw = _section(d.get("metrics"), "[metrics]")
    _check_keys(met_raw, _keys(LayerMetricsConfig), "[metrics]")
    metrics = LayerMetricsConfig(
        r=_int(met_raw.get("r", 0), "metrics.r", 0),
        n_ref=_int(met_raw.get("n_ref", 20000), "metrics.n_ref", 100),
        ref_seed=_int(met_raw.get("ref_seed", 0), "metrics.ref_seed", 0),
    )
    _check_models(models, truth, fit)
    n_fits = len(models) * len(grid.n) * grid.reps
    if n_fits > MAX_FITS:
        raise ConfigError(
            f"the study asks for {len(models)} models x {len(grid.n)} sample sizes x "
            f"{grid.reps} reps = {n_fits} fits; at most {MAX_FITS} are supported. Lower "
            "grid.reps or the number of sample sizes.")
    config = LayerStudyConfig(models=models, name=name, description=description, seed=seed,
                              truth=truth, data=data, grid=grid, fit=fit, baseline=baseline,
                              metrics=metrics)
    _check_sizes(config)
    return config
