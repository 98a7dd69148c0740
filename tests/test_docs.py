"""The documentation builds with warnings as errors, its examples run, and it covers the API.

Runs, each in a subprocess, into a temporary directory:

* ``python -m sphinx -W --keep-going -b html docs <tmp>/html`` — the site (issue 6);
* ``python -m sphinx -W --keep-going -b doctest docs <tmp>/doctest`` — the ``.. doctest::``
  blocks of the pages (same doctree cache as the HTML build, so the pages are read once);
* ``python -m pytest --doctest-modules hmoe_estim`` — the ``Examples`` sections of the
  docstrings;
* every ``docs/examples/plot_*.py`` with ``--out <tmp> --quick`` — the figure scripts, at
  small sizes (the committed figures come from full-size runs).

Needs the ``docs`` extra (sphinx, numpydoc, matplotlib).
"""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: Submodules whose public names (their ``__all__``) must each have an API page.
DOCUMENTED_MODULES = (
    "attention", "initialization", "config", "study", "results", "rates", "plotting",
    "identifiability",
)
#: Top-level names documented on the API page itself rather than on a generated page.
CONSTANTS = ("GATES", "ACTIVATIONS", "__version__")


def _env():
    env = dict(os.environ)
    env.setdefault("MPLBACKEND", "Agg")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _run(args, timeout=600):
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    output = proc.stdout[-6000:] + "\n" + proc.stderr[-6000:]
    return proc.returncode, output


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """One HTML build shared by the tests of this module: (html dir, doctree dir)."""
    pytest.importorskip("sphinx", reason="the docs extra (sphinx, numpydoc) is not installed")
    pytest.importorskip("numpydoc", reason="the docs extra (sphinx, numpydoc) is not installed")
    tmp = tmp_path_factory.mktemp("docs")
    html, doctrees = tmp / "html", tmp / "doctrees"
    code, out = _run(
        ["-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html", "-d", str(doctrees),
         str(DOCS), str(html)]
    )
    assert code == 0, f"sphinx-build -W -b html failed:\n{out}"
    return html, doctrees


def test_html_build_has_the_pages(build):
    html, _ = build
    for page in [
        "index", "getting_started", "theory", "api", "user_guide/index", "examples/index",
    ]:
        assert (html / f"{page}.html").is_file(), page
    theory = (html / "theory.html").read_text(encoding="utf-8")
    # every equation of the excerpt the page promises, next to its code
    for tag in ("\\tag{1}", "\\tag{2}", "\\tag{3}", "\\tag{5}", "\\tag{7}"):
        assert tag in theory, tag
    for name in ("voronoi_loss", "expert_error", "regression_function", "attention_to_measure"):
        assert name in theory, name


def test_every_public_name_has_an_api_page(build):
    import hmoe_estim

    html, _ = build
    generated = html / "generated"
    missing = [
        name
        for name in hmoe_estim.__all__
        if name not in CONSTANTS and not (generated / f"hmoe_estim.{name}.html").is_file()
    ]
    for module_name in DOCUMENTED_MODULES:
        module = importlib.import_module(f"hmoe_estim.{module_name}")
        module_page = generated / f"hmoe_estim.{module_name}.html"
        if not module_page.is_file():
            missing.append(module_name)
            continue
        module_html = module_page.read_text(encoding="utf-8")
        for name in getattr(module, "__all__", []):
            full = f"hmoe_estim.{module_name}.{name}"
            # classes and functions get a page; constants are documented on the module's page
            if not (generated / f"{full}.html").is_file() and f'id="{full}"' not in module_html:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"public names without an API page: {missing}"
    api = (html / "api.html").read_text(encoding="utf-8")
    for name in CONSTANTS:
        assert f'id="hmoe_estim.{name}"' in api, name


_NAMES_RESOLVE = """
import importlib, pkgutil, types
import hmoe_estim
from hmoe_estim import regression_error, expert_error   # the natural import line
assert callable(expert_error), f"from hmoe_estim import expert_error gave {expert_error!r}"
for info in pkgutil.walk_packages(hmoe_estim.__path__, "hmoe_estim."):
    if not info.name.endswith("__main__"):
        importlib.import_module(info.name)
bad = [n for n in hmoe_estim.__all__ if isinstance(getattr(hmoe_estim, n), types.ModuleType)]
assert not bad, f"public names that resolve to a submodule instead of their object: {bad}"
"""


def test_public_names_are_the_documented_objects():
    # A public function that shares its name with a submodule (``hmoe_estim.expert_error``)
    # is replaced by the module as soon as anything imports the submodule; the API pages
    # and users' imports then get the module. Checked in a fresh interpreter.
    code, out = _run(["-c", _NAMES_RESOLVE])
    assert code == 0, out


def test_page_doctests(build):
    _, doctrees = build
    out_dir = doctrees.parent / "doctest"
    code, out = _run(
        ["-m", "sphinx", "-W", "--keep-going", "-q", "-b", "doctest", "-d", str(doctrees),
         str(DOCS), str(out_dir)]
    )
    assert code == 0, f"sphinx-build -b doctest failed:\n{out}"


def test_docstring_examples():
    code, out = _run(
        ["-m", "pytest", "--doctest-modules", "hmoe_estim", "-q", "-p", "no:cacheprovider",
         "-o", "addopts="]
    )
    assert code == 0, f"docstring examples failed:\n{out}"


@pytest.mark.parametrize("script", sorted(p.name for p in (DOCS / "examples").glob("plot_*.py")))
def test_doc_example_script_makes_its_figure(script, tmp_path):
    pytest.importorskip("matplotlib")
    code, out = _run([str(DOCS / "examples" / script), "--out", str(tmp_path), "--quick"])
    assert code == 0, f"{script} failed:\n{out}"
    png = tmp_path / (Path(script).stem + ".png")
    assert png.is_file() and png.stat().st_size > 10_000, f"{script} wrote no figure"
