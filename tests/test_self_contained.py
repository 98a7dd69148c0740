"""The repository stands on its own: code, tests, docs, examples, benchmarks and the README cite
the paper (arXiv 2602.01468) and the documentation's "Theory to code" page, never a document the
package does not ship."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: where the shipped text lives
SEARCHED = ("hmoe_estim", "tests", "docs", "examples", "benchmarks", "README.md")
#: generated files (the docs' build and autosummary output, caches)
SKIPPED_DIRS = {"_build", "generated", "__pycache__", ".ipynb_checkpoints"}
TEXT_SUFFIXES = {".py", ".rst", ".md", ".toml", ".txt", ".cfg", ".json", ".html", ".css", ".txt"}

#: references to the project's private notes: the capitalised name of the private contract
#: (cited as "<name> §n") and the folder it lived in. Built from pieces so that this file does
#: not match itself.
FORBIDDEN = re.compile(r"\b" + "SP" + r"EC\b|(?i:" + "shared" + r"\s+folder)")


def _files():
    for name in SEARCHED:
        path = ROOT / name
        if path.is_file():
            yield path
            continue
        for f in sorted(path.rglob("*")):
            if (f.is_file() and f.suffix in TEXT_SUFFIXES
                    and not SKIPPED_DIRS.intersection(f.relative_to(ROOT).parts)):
                yield f


def test_no_reference_to_unshipped_documents():
    hits = []
    for f in _files():
        text = f.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{f.relative_to(ROOT)}:{lineno}: {line.strip()[:100]}")
    assert not hits, ("cite the paper's equations or the docs' Theory to code page instead:\n"
                      + "\n".join(hits))


def test_the_pattern_finds_what_it_should():
    assert FORBIDDEN.search("see " + "SP" + "EC §4")
    assert FORBIDDEN.search("the project's " + "shared" + " folder")
    assert FORBIDDEN.search("the " + "Shared" + " Folder")
    assert not FORBIDDEN.search("a " + "SP" + "ECTRUM, a module's __spec__, format(x, spec)")


def test_ci_runs_the_readme_test_command_verbatim():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```bash", 1)[1].split("```", 1)[0].strip().splitlines()
    test_command = block[1].strip()
    assert "ruff check ." in test_command and "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in [line.strip() for line in ci]
