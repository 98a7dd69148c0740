"""The layering of the package: no import circle between subpackages, no arrow from a lower
layer to a higher one, and every import between subpackages through the imported
subpackage's ``__init__``.

Every module of ``hmoe_estim`` is parsed with :mod:`ast` (nothing is imported): the import
statements at any depth — inside functions too, where imports are deferred for speed —,
relative and absolute, and ``importlib.import_module`` of a literal name. The top-level
``__init__.py``, ``__main__.py`` and ``_moved.py`` (the lazy public names, the command line and
the aliases of 0.1.0's module paths) sit above every layer and are not checked.
"""

import ast
import textwrap
from pathlib import Path

PACKAGE = "hmoe_estim"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

#: The top-level private helpers every layer may import: plain Python (names and codes of the
#: gates and activations, argument checks, default settings, lazy names), no NumPy object of
#: the package.
#: They are one unit, layer 0, and import nothing else of the package.
BASE = ("_names", "_validation", "_defaults", "_lazy")

#: Layer of each unit, lowest first. A module imports from its own unit and from units of a
#: strictly lower layer only, so two units of one layer may not import each other. The order
#: is the order of dependence of the code:
#:
#: - ``kernels`` compute on plain arrays in the packed parameter layout and know no model
#:   object;
#: - ``model`` (mixing measure, parameter vector, regression functions, starts) evaluates
#:   through the kernels;
#: - ``solvers`` minimise eq. (3) over the model's parameter vector with the kernels;
#: - ``metrics`` (Voronoi losses, expert error, identifiability) and ``datasets`` (synthetic
#:   data from a measure) read the model only, and neither needs the other: one layer, no
#:   arrow between them (none exists in either direction);
#: - ``estimators`` wrap model and solvers for scikit-learn;
#: - ``attention`` converts attention layers to and from mixing measures;
#: - ``layer`` models a whole attention layer with shared parameters (weights, output, data;
#:   its fit through the kernels and solvers), above ``attention`` so that it can map a
#:   layer to the per-entry measures;
#: - ``study`` runs everything below: truth, data, fits, metrics, rates.
LAYERS = {
    "base": 0,
    "kernels": 1,
    "model": 2,
    "solvers": 3,
    "metrics": 4,
    "datasets": 4,
    "estimators": 5,
    "attention": 6,
    "layer": 7,
    "study": 8,
}

#: Top-level modules outside the check (they may import anything; nothing imports them).
OUTSIDE = ("__init__", "__main__", "_moved")

#: Names a module may import from the top-level package itself. Any other top-level name is a
#: lazy re-export of a subpackage's name, and importing it there would hide the arrow.
TOP_LEVEL_NAMES = ("__version__",)

#: Cross-subpackage imports allowed to target a module below a subpackage's ``__init__``:
#: ``(importing module, imported module): reason``. Empty: none is needed.
PRIVATE_EXCEPTIONS = {}


# -- the checker ----------------------------------------------------------------------------
def _module_name(path, root):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([root.name, *parts])


def _modules(root):
    """``{module name: (path, is a package)}`` of every module under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            out[_module_name(path, root)] = (path, path.name == "__init__.py")
    return out


def _resolve(name, package, level):
    """Absolute name of ``from <level dots><name> import ...`` in ``package``."""
    if level == 0:
        return name
    base = package.split(".")
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join(base + ([name] if name else []))


def _literal(node, module, package):
    """The string a call argument names: a literal, ``__name__`` or ``__package__``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id == "__name__":
        return module
    if isinstance(node, ast.Name) and node.id == "__package__":
        return package
    return None


def _is_import_module(func):
    return (isinstance(func, ast.Attribute) and func.attr == "import_module"
            and isinstance(func.value, ast.Name) and func.value.id == "importlib") or (
        isinstance(func, ast.Name) and func.id == "import_module")


def collect_imports(root):
    """Every import of the package under ``root`` (a directory named like the package).

    Returns a list of ``(module, path, line, target, name)``: ``target`` is the module
    imported (``from X import y`` targets ``X.y`` when that is a module, else ``X``), ``name``
    the name taken from it (``None`` for ``import X``).
    """
    root = Path(root)
    modules = _modules(root)
    out = []
    for module, (path, is_package) in modules.items():
        package = module if is_package else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out.append((module, path, node.lineno, alias.name, None))
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node.module, package, node.level)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    target = sub if sub in modules else base
                    out.append((module, path, node.lineno, target, alias.name))
            elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
                name = _literal(node.args[0], module, package)
                anchor = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "package"), None)
                if name is None:
                    continue  # a computed name (the lazy __getattr__ of an __init__)
                if name.startswith("."):
                    anchor = _literal(anchor, module, package) if anchor is not None else None
                    if anchor is None:
                        continue
                    level = len(name) - len(name.lstrip("."))
                    # import_module resolves against the anchor as a package
                    name = _resolve(name[level:], anchor, level)
                out.append((module, path, node.lineno, name, None))
    return [imp for imp in out if imp[3] == root.name or imp[3].startswith(root.name + ".")]


def unit_of(module):
    """Unit of a module of the package: ``"base"``, a subpackage, ``None`` outside the check,
    ``"?"`` for a path that is no module of the package's layers (e.g. an old path)."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in OUTSIDE:
        return None
    if parts[1] in BASE:
        return "base"
    return parts[1] if parts[1] in LAYERS else "?"


def _where(path, line, root):
    return f"{path.relative_to(Path(root).parent).as_posix()}:{line}"


def check_layering(root):
    """Violations of the layering of the package under ``root``.

    Returns ``{"unknown": [...], "upward": [...], "circle": [...], "private": [...]}``, each a
    list of messages naming the importing module's file and line and the target (one per
    line and target).
    """
    root = Path(root)
    found = {"unknown": [], "upward": [], "circle": [], "private": []}
    edges = {}  # (unit, unit) -> first import that makes the arrow
    for module, path, line, target, name in collect_imports(root):
        src = unit_of(module)
        if src is None:
            continue
        where = _where(path, line, root)
        if src == "?":
            found["unknown"].append(f"{where}: {module} is in no layer: add its subpackage to "
                                    "LAYERS in tests/test_import_graph.py")
            continue
        if target == root.name:
            if name not in TOP_LEVEL_NAMES:
                found["private"].append(
                    f"{where}: {module} imports {name or 'the package'} from the top-level "
                    f"{root.name}: import it from the subpackage that defines it")
            continue
        dst = unit_of(target)
        if dst is None or dst == "?":
            found["unknown"].append(f"{where}: {module} imports {target}, which is no module "
                                    "of a layer (an old path of 0.1.0, _moved, __main__?)")
            continue
        if dst == src:
            continue
        edges.setdefault((src, dst), (where, module, target))
        if LAYERS[dst] >= LAYERS[src]:
            found["upward"].append(
                f"{where}: {module} ({src}, layer {LAYERS[src]}) imports {target} ({dst}, "
                f"layer {LAYERS[dst]}): a module imports only from lower layers")
        entry = ".".join(target.split(".")[:2])
        if target != entry and (module, target) not in PRIVATE_EXCEPTIONS:
            found["private"].append(
                f"{where}: {module} imports {target}: import from {entry} (its __init__)")
    found = {kind: list(dict.fromkeys(messages)) for kind, messages in found.items()}
    found["circle"] = _circles(edges)
    return found


def _circles(edges):
    """One message per circle of the unit graph (each strongly connected component)."""
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(set(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    messages = []
    for component in components:
        cycle = _cycle_in(component, graph)
        steps = "; ".join(f"{a} -> {b} ({edges[a, b][0]}: {edges[a, b][1]} imports "
                          f"{edges[a, b][2]})" for a, b in zip(cycle, cycle[1:]))
        messages.append(f"import circle {' -> '.join(cycle)}: {steps}")
    return messages


def _cycle_in(component, graph):
    """A closed path ``[u, ..., u]`` through the strongly connected ``component``."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in component)
        if start in nxt and len(path) > 1:
            return [*path, start]
        fresh = [w for w in nxt if w not in seen]
        w = fresh[0] if fresh else nxt[0]
        if w in seen:  # closed elsewhere: cut the path to that loop
            path = path[path.index(w):]
            return [*path, w]
        path.append(w)
        seen.add(w)


# -- the package --------------------------------------------------------------------------
def _report(messages):
    return "\n" + "\n".join(messages)


def test_every_module_is_in_a_layer():
    tops = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
            if (p.is_file() and p.suffix == ".py") or (p / "__init__.py").is_file()}
    missing = sorted(t for t in tops if t not in OUTSIDE and t not in BASE and t not in LAYERS)
    assert not missing, f"top-level modules in no layer of tests/test_import_graph.py: {missing}"
    found = check_layering(ROOT)
    assert not found["unknown"], _report(found["unknown"])


def test_no_arrow_to_a_higher_layer():
    found = check_layering(ROOT)
    assert not found["upward"], _report(found["upward"])


def test_no_import_circle_between_subpackages():
    found = check_layering(ROOT)
    assert not found["circle"], _report(found["circle"])


def test_imports_between_subpackages_go_through_their_init():
    found = check_layering(ROOT)
    assert not found["private"], _report(found["private"])


def test_exceptions_are_still_needed():
    # an exception whose import has gone must go too
    imports = {(module, target) for module, _, _, target, _ in collect_imports(ROOT)}
    stale = [pair for pair in PRIVATE_EXCEPTIONS if pair not in imports]
    assert not stale, f"PRIVATE_EXCEPTIONS no longer used: {stale}"


# -- the checker on a planted tree --------------------------------------------------------------
def _write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_checker_catches_planted_violations(tmp_path):
    root = tmp_path / PACKAGE
    _write(root, {
        "__init__.py": "from .study import main\n__version__ = '0'\n",
        "_moved.py": "import hmoe_estim.study._cli\n",
        "_names.py": "NAMES = ()\n",
        "_validation.py": "from ._names import NAMES\n",
        "kernels/__init__.py": "import importlib\nimportlib.import_module('.k', __name__)\n",
        "kernels/k.py": """\
            from .._names import NAMES


            def f():
                from ..study._plan import plan  # upward (and private), inside a function
                return plan
            """,
        "model/__init__.py": "from ._m import M\n",
        "model/_m.py": """\
            from ..kernels.k import f  # private
            from .. import kernels  # fine: the subpackage itself
            M = 1
            """,
        "metrics/__init__.py": "from ._a import a\n",
        "metrics/_a.py": """\
            from ..model import M
            from ..datasets import d  # same layer
            a = M
            """,
        "datasets/__init__.py": "from ._d import d\n",
        "datasets/_d.py": """\
            import hmoe_estim.metrics  # same layer, and a circle with metrics
            d = 1
            """,
        "study/__init__.py": "from ._plan import plan\nfrom ._cli import main\n",
        "study/_plan.py": """\
            import importlib

            from .. import __version__  # allowed
            from ..model import M
            plan = importlib.import_module("hmoe_estim.estimators._e")  # private
            """,
        "study/_cli.py": """\
            from .. import voronoi_loss  # a lazy top-level name
            import hmoe_estim.voronoi  # an old path
            main = 1
            """,
        "estimators/__init__.py": "",
        "estimators/_e.py": "from ..model._m import M  # private\n",
        "plugins/__init__.py": "from ..model import M\n",
    })
    found = check_layering(root)

    assert sorted(found["upward"]) == sorted([
        "hmoe_estim/kernels/k.py:5: hmoe_estim.kernels.k (kernels, layer 1) imports "
        "hmoe_estim.study._plan (study, layer 8): a module imports only from lower layers",
        "hmoe_estim/metrics/_a.py:2: hmoe_estim.metrics._a (metrics, layer 4) imports "
        "hmoe_estim.datasets (datasets, layer 4): a module imports only from lower layers",
        "hmoe_estim/datasets/_d.py:1: hmoe_estim.datasets._d (datasets, layer 4) imports "
        "hmoe_estim.metrics (metrics, layer 4): a module imports only from lower layers",
    ])
    private = "\n".join(found["private"])
    for where, target in [("kernels/k.py:5", "hmoe_estim.study._plan"),
                          ("model/_m.py:1", "hmoe_estim.kernels.k"),
                          ("study/_plan.py:5", "hmoe_estim.estimators._e"),
                          ("estimators/_e.py:1", "hmoe_estim.model._m")]:
        assert f"hmoe_estim/{where}: " in private and f"imports {target}: import from" in private
    assert "hmoe_estim/study/_cli.py:1: hmoe_estim.study._cli imports voronoi_loss from the " \
        "top-level hmoe_estim" in private
    assert len(found["private"]) == 5, private  # not __version__, not `from .. import kernels`
    unknown = "\n".join(found["unknown"])
    assert "hmoe_estim/study/_cli.py:2: hmoe_estim.study._cli imports hmoe_estim.voronoi" in unknown
    assert "hmoe_estim/plugins/__init__.py:1: hmoe_estim.plugins is in no layer" in unknown
    assert len(found["unknown"]) == 2, unknown  # _moved.py and __init__.py are not checked
    # metrics <-> datasets, and kernels -> study -> (estimators ->) model -> kernels
    assert sorted(found["circle"]) == [
        "import circle datasets -> metrics -> datasets: "
        "datasets -> metrics (hmoe_estim/datasets/_d.py:1: hmoe_estim.datasets._d imports "
        "hmoe_estim.metrics); "
        "metrics -> datasets (hmoe_estim/metrics/_a.py:2: hmoe_estim.metrics._a imports "
        "hmoe_estim.datasets)",
        "import circle estimators -> model -> kernels -> study -> estimators: "
        "estimators -> model (hmoe_estim/estimators/_e.py:1: hmoe_estim.estimators._e imports "
        "hmoe_estim.model._m); "
        "model -> kernels (hmoe_estim/model/_m.py:1: hmoe_estim.model._m imports "
        "hmoe_estim.kernels.k); "
        "kernels -> study (hmoe_estim/kernels/k.py:5: hmoe_estim.kernels.k imports "
        "hmoe_estim.study._plan); "
        "study -> estimators (hmoe_estim/study/_plan.py:5: hmoe_estim.study._plan imports "
        "hmoe_estim.estimators._e)",
    ]


def test_checker_passes_a_clean_tree(tmp_path):
    root = tmp_path / PACKAGE
    _write(root, {
        "__init__.py": "",
        "_names.py": "",
        "kernels/__init__.py": "from .._names import *\n",
        "model/__init__.py": "def f():\n    from ..kernels import phi\n",
        "study/__init__.py": "from ..model import f\nfrom .. import __version__\n",
    })
    assert check_layering(root) == {"unknown": [], "upward": [], "circle": [], "private": []}
