"""Sphinx configuration of the hmoe-estim documentation.

Build (warnings are errors)::

    sphinx-build -W -b html docs docs/_build/html

Page examples written as ``.. doctest::`` blocks are checked with::

    sphinx-build -W -b doctest docs docs/_build/doctest

Docstring examples of the package are checked by ``python -m pytest --doctest-modules
hmoe_estim`` (see ``tests/test_docs.py``), not by the Sphinx doctest builder, so each runs once.

Environment variables
---------------------
HMOE_DOCS_MATHJAX
    URL of a MathJax 2 script to use instead of the CDN (for offline viewing), e.g.
    ``file:///usr/share/javascript/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML``
    (Debian package ``libjs-mathjax``).
HMOE_DOCS_RUN_EXAMPLES
    ``1``: re-run every script of ``docs/examples/`` before the build (they write PNGs into
    ``docs/_static/examples/``); by default only scripts whose figure is missing are run.
"""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from docutils import nodes  # noqa: E402
from docutils.parsers.rst import Directive  # noqa: E402

import hmoe_estim  # noqa: E402

# -- project -----------------------------------------------------------------------------------
project = "hmoe-estim"
author = "hmoe-estim developers"
copyright = "2025, hmoe-estim developers"
release = hmoe_estim.__version__
version = ".".join(release.split(".")[:2])

# -- extensions --------------------------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
]

templates_path = ["_templates"]
# _static/study/*.rst: generated tables, included by pages (claims.rst), not pages themselves
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "examples/*.py", "_static/**/*.rst"]
source_suffix = {".rst": "restructuredtext"}
root_doc = "index"
default_role = "code"
pygments_style = "sphinx"
# Every cross-reference must resolve (with -W a broken link fails the build), except those to
# other projects: there is no network at build time, hence no intersphinx inventories.
# numpydoc type strings ("array-like of shape (n, D)") are not cross-referenced
# (numpydoc_xref_param_type = False below).
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(sklearn|numpy|scipy|joblib|dask|distributed|numba|matplotlib)(\..*)?"),
]

# -- autodoc / autosummary / numpydoc ----------------------------------------------------------
#: Submodules with a page of their own in the API reference (see api.rst).
API_SUBMODULES = ("model", "estimators", "solvers", "metrics", "attention", "study")
#: Subpackages shown on the API page by their docstring only (every public name is top-level).
API_LAYOUT_ONLY = ("datasets", "kernels")


def _module_constants(name):
    """Names in ``__all__`` of ``hmoe_estim.<name>`` that are data (not classes or functions).

    autosummary only lists module attributes that carry a doc-comment; the module template
    documents these constants with ``autodata`` on the module's page instead.
    """
    import importlib
    import inspect

    module = importlib.import_module(f"hmoe_estim.{name}")
    return [
        item
        for item in getattr(module, "__all__", [])
        if not (inspect.isclass(getattr(module, item)) or callable(getattr(module, item))
                or inspect.ismodule(getattr(module, item)))
    ]


def _toplevel_names():
    """Public names of ``hmoe_estim`` itself: documented once, on their top-level page."""
    import hmoe_estim

    return list(hmoe_estim.__all__)


autosummary_context = {
    "module_constants": {f"hmoe_estim.{m}": _module_constants(m) for m in API_SUBMODULES},
    "toplevel_names": _toplevel_names(),
}
autosummary_generate = True
autosummary_imported_members = False
autosummary_ignore_module_all = False
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"
# numpydoc writes the member tables itself from the docstring; the class template below adds
# the full documentation of the members defined on the class (not those inherited from
# scikit-learn's BaseEstimator).
numpydoc_show_class_members = False
numpydoc_show_inherited_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False

# -- doctest (pages only; docstrings run under pytest --doctest-modules) ------------------------
doctest_test_doctest_blocks = ""
doctest_global_setup = """
import numpy as np
np.set_printoptions(precision=4, suppress=True)
"""

# -- HTML --------------------------------------------------------------------------------------
html_theme = "alabaster"
html_title = f"hmoe-estim {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_theme_options = {
    "description": "Sample complexity of (gated) attention as a hierarchical mixture of experts",
    "fixed_sidebar": True,
    "page_width": "1180px",
    "sidebar_width": "250px",
    "body_max_width": "none",
    "show_relbars": True,
}
html_sidebars = {"**": ["about.html", "navigation.html", "relations.html", "searchbox.html"]}
html_show_sourcelink = False

_mathjax = os.environ.get("HMOE_DOCS_MATHJAX")
if _mathjax:
    mathjax_path = _mathjax
    mathjax2_config = {"tex2jax": {"inlineMath": [["\\(", "\\)"]]}}


# -- figures of docs/examples ------------------------------------------------------------------
def _run_doc_examples(app):
    """Run the doc example scripts whose figure is missing (or all of them if asked)."""
    force = os.environ.get("HMOE_DOCS_RUN_EXAMPLES") == "1"
    out = HERE / "_static" / "examples"
    for script in sorted((HERE / "examples").glob("plot_*.py")):
        png = out / (script.stem + ".png")
        if png.exists() and not force:
            continue
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(script), "--out", str(out)], check=True, cwd=ROOT)


def _skip_sklearn_members(app, what, name, obj, skip, options):
    """Leave out the members a class inherits or gets generated by scikit-learn.

    ``set_fit_request`` and friends are created by scikit-learn's metadata routing on every
    estimator class; their docstrings link into scikit-learn's own documentation.
    """
    if name.startswith("set_") and name.endswith("_request"):
        return True
    module = getattr(obj, "__module__", None) or ""
    if what == "class" and module.startswith("sklearn"):
        return True
    return None


def _public_bases(app, name, obj, options, bases):
    """Show the public base class instead of the private preset base of the estimators."""
    for j, base in enumerate(bases):
        if getattr(base, "__name__", "").startswith("_") and base.__mro__[1:]:
            bases[j] = base.__mro__[1]


def _drop_type_docstring(app, what, name, obj, options, lines):
    """A constant without a doc-comment would show the docstring of its type (``str``...)."""
    import inspect

    if what in ("data", "attribute") and lines and not inspect.isclass(obj):
        type_doc = inspect.getdoc(type(obj)) or ""
        if type_doc and "\n".join(lines).strip() == type_doc.strip():
            lines.clear()


class CommandHelp(Directive):
    """``.. command-help:: [SUBCOMMAND]``: ``hmoe-estim``'s ``--help`` text as a literal block.

    Generated from :func:`hmoe_estim.study.build_parser` at build time, so the page cannot drift
    from the code.
    """

    optional_arguments = 1

    def run(self):
        import argparse

        from hmoe_estim.study import build_parser

        os.environ["COLUMNS"] = "92"  # argparse wraps to the terminal width
        parser = build_parser()
        if self.arguments:
            sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
            parser = sub.choices[self.arguments[0]]
        text = parser.format_help()
        node = nodes.literal_block(text, text)
        node["language"] = "none"
        return [node]


def _resolve_aliases(app, env, node, contnode):
    """Resolve references to a public name by the path of the submodule that defines it.

    Docstrings say ``hmoe_estim.datasets.random_measure`` or just ``MixingMeasure``; the API
    reference documents ``hmoe_estim.random_measure`` and ``hmoe_estim.MixingMeasure``.
    """
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    short = target.rsplit(".", 1)[-1]
    module = node.get("py:module") or ""
    candidates = [f"hmoe_estim.{short}"]
    if module:
        candidates.append(f"{module}.{target}")
    # e.g. VoronoiDetails -> hmoe_estim.metrics.VoronoiDetails,
    # ModelSpec.key inside hmoe_estim.study -> hmoe_estim.study.ModelSpec.key
    for sub in API_SUBMODULES + API_LAYOUT_ONLY:
        candidates.append(f"hmoe_estim.{sub}.{target}")
    py = env.get_domain("py")
    for candidate in candidates:
        if candidate != target and candidate in py.objects:
            return py.resolve_xref(env, node["refdoc"], app.builder, node["reftype"],
                                   candidate, node, contnode)
    return None


def setup(app):
    app.add_directive("command-help", CommandHelp)
    app.connect("missing-reference", _resolve_aliases)
    app.connect("builder-inited", _run_doc_examples)
    app.connect("autodoc-skip-member", _skip_sklearn_members)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("autodoc-process-docstring", _drop_type_docstring, priority=100)

# A role that marks the parts of the theory page that go beyond the available paper text.
rst_prolog = """
.. role:: reconstructed
   :class: reconstructed
"""
