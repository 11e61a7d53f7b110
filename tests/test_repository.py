"""The repository is whole by itself: no file that a clone carries (tests, labs, scripts,
docs, examples, the packages, the README) refers to a path outside it. A fresh clone has
nothing beside it, so a test reading ``../something`` or a README linking there fails
only for the people who clone it.

The scanner finds three kinds of reference:

* a relative path (one or more ``..`` steps) that, resolved from the file's own
  directory, leaves the repository;
* an absolute path into a home or workspace directory (under ``/home``, ``/root``,
  ``/work`` or ``/Users``): another machine's files. System paths (``/usr/lib/cni``,
  ``/proc``, ``/var/run/netns``) are the environment's, not references out of the tree;
* ``Path(__file__)`` climbed (``.parent``, ``.parents[N]``) above the repository root.

Recorded third-party data (a directory under ``tests/data`` whose ``SOURCE.md`` or
``PROVENANCE.md`` says where it was taken from) keeps the absolute paths it was
recorded with: a real pod's ``HOME`` (a directory under ``/home``) is part of the object,
not a reference. Its provenance notes are ours and are scanned like any other file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: what is scanned: everything a user's clone carries that could point somewhere
SCANNED = (
    "README.md",
    "pyproject.toml",
    ".ci",
    "docs",
    "examples",
    "labs",
    "scripts",
    "tests",
    "netmodel",
    "dataplane",
    "control",
    "app",
)
TEXT_SUFFIXES = {"", ".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".json", ".sh", ".cfg"}

_RELATIVE = re.compile(r"(?<![\w./-])((?:\.\./)+)([\w./-]*)")
_ABSOLUTE = re.compile(r"(?<![\w.~-])/(?:home|root|work|Users)/[\w.-]+")
_FILE_CLIMB = re.compile(
    r"Path\(__file__\)(?:\.resolve\(\)|\.absolute\(\))?((?:\.parents?(?:\[\d+\])?)+)"
)
_STEP = re.compile(r"\.parent(s\[(\d+)\])?")


@dataclass(frozen=True)
class Reference:
    """One reference out of the repository: ``file:line: what``."""

    file: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def _levels(chain: str) -> int:
    """How many directories ``.parent`` / ``.parents[N]`` steps climb from a file
    (``.parent`` is the file's own directory: 1)."""
    return sum(int(m.group(2)) + 1 if m.group(1) else 1 for m in _STEP.finditer(chain))


PROVENANCE = ("SOURCE.md", "PROVENANCE.md")


def recorded_data(path: Path, root: Path) -> bool:
    """Is ``path`` third-party data recorded as it was (see the module docstring)?"""
    data = root / "tests" / "data"
    if path.name in PROVENANCE or data not in path.parents:
        return False
    return any(
        (d / name).is_file()
        for d in path.parents
        if d == data or data in d.parents
        for name in PROVENANCE
    )


def outside_references(path: Path, root: Path) -> Iterator[Reference]:
    """The references out of ``root`` in the text file ``path`` (inside ``root``)."""
    rel = path.relative_to(root)
    absolute_ok = recorded_data(path, root)
    depth = len(rel.parts) - 1  # directories between the root and the file
    for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        for m in _RELATIVE.finditer(line):
            up = m.group(1).count("../")
            if up > depth:
                yield Reference(rel, no, m.group(0))
        for m in () if absolute_ok else _ABSOLUTE.finditer(line):
            yield Reference(rel, no, m.group(0))
        for m in _FILE_CLIMB.finditer(line):
            if _levels(m.group(1)) > depth + 1:
                yield Reference(rel, no, m.group(0))


def scanned_files(root: Path) -> Iterator[Path]:
    """The text files of :data:`SCANNED` under ``root`` (caches and virtualenvs left out)."""
    for name in SCANNED:
        top = root / name
        files = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        for f in files:
            parts = set(f.relative_to(root).parts)
            if (
                f.is_file()
                and f.suffix in TEXT_SUFFIXES
                and not parts & {"__pycache__", ".venv", ".svclab", ".mypy_cache"}
            ):
                yield f


def scan(root: Path) -> list[Reference]:
    return [r for f in scanned_files(root) for r in outside_references(f, root)]


def test_no_file_refers_to_a_path_outside_the_repository() -> None:
    found = scan(ROOT)
    assert not found, "references out of the repository:\n" + "\n".join(map(str, found))


def test_the_scan_covers_the_tests_labs_scripts_docs_and_readme() -> None:
    files = {f.relative_to(ROOT).parts[0] for f in scanned_files(ROOT)}
    assert {"README.md", "tests", "labs", "scripts", "docs", "examples"} <= files
    assert ROOT / "tests" / "test_repository.py" in set(scanned_files(ROOT))


# ---------------------------------------------------------------------- the scanner itself

UP = "../"  # kept apart so that this file does not refer out of the repository itself
F = "Path(__file__)"


@pytest.mark.parametrize(
    ("where", "text", "found"),
    [
        ("README.md", f"See [the design]({UP}shared/DESIGN.md).", f"{UP}shared/DESIGN.md"),
        ("tests/a/t.py", f"CASES = '{UP}{UP}{UP}shared/cases'", f"{UP}{UP}{UP}shared/cases"),
        ("scripts/x.sh", "cat /" + "work/shared/STYLE.md", "/" + "work/shared"),
        ("docs/d.md", "run /" + "home/me/svclab/labs/00.py", "/" + "home/me"),
        (
            "tests/cli/t.py",
            f"CASES = {F}.resolve().parents[2].parent / 'shared'",
            f"{F}.resolve().parents[2].parent",
        ),
        (
            "tests/cli/t.py",
            f"X = {F}.parent.parent.parent.parent / 'x'",
            f"{F}.parent.parent.parent.parent",
        ),
        ("labs/l.py", f"ROOT = {F}.resolve().parents[2]", f"{F}.resolve().parents[2]"),
    ],
)
def test_the_scanner_finds_a_planted_reference(
    tmp_path: Path, where: str, text: str, found: str
) -> None:
    f = tmp_path / where
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(f"first line\n{text}\n")
    assert [str(r) for r in scan(tmp_path)] == [f"{where}:2: {found}"]


def test_recorded_data_keeps_its_absolute_paths_but_its_notes_do_not(tmp_path: Path) -> None:
    home = "/" + "home/klipper-helm"
    d = tmp_path / "tests" / "data" / "dumps" / "k3s"
    (d / "pods").mkdir(parents=True)
    (d / "pods" / "p.json").write_text(f'{{"env": "HOME={home}"}}\n')
    planted = f"tests/data/dumps/k3s/pods/p.json:1: {home}"
    assert [str(r) for r in scan(tmp_path)] == [planted]  # no provenance: a reference
    (d / "SOURCE.md").write_text(f"taken from {home}\n")
    assert [str(r) for r in scan(tmp_path)] == [f"tests/data/dumps/k3s/SOURCE.md:1: {home}"]
    # relative climbs out of the tree are still references, recorded or not
    (d / "pods" / "q.yaml").write_text(f"x: {UP * 6}etc\n")
    assert f"tests/data/dumps/k3s/pods/q.yaml:1: {UP * 6}etc" in map(str, scan(tmp_path))


@pytest.mark.parametrize(
    ("where", "text"),
    [
        ("tests/data/cases/c.yaml", f"# see {UP}README.md for the schema"),
        ("tests/cli/t.py", f"open('{UP}{UP}examples/web.yaml')"),
        ("tests/cli/t.py", f"CASES = {F}.resolve().parents[1] / 'data'"),
        ("tests/cli/t.py", f"ROOT = {F}.parent.parent.parent"),
        ("labs/l.py", f"ROOT = {F}.resolve().parents[1]"),
        ("scripts/install", "ls /usr/lib/cni /var/run/netns /proc/self /tmp/x ~/work/y"),
        ("README.md", "a/../b and x../y and https://example.org/../z"),
    ],
)
def test_the_scanner_accepts_paths_inside_the_repository(
    tmp_path: Path, where: str, text: str
) -> None:
    f = tmp_path / where
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text + "\n")
    assert scan(tmp_path) == []
