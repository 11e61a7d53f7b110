"""netmodel/errors.py's docstring draws the error tree as it is: every SvclabError
subclass defined anywhere in svclab appears in it, under its real base."""

from __future__ import annotations

import importlib
import pkgutil
import re

import netmodel.errors
from netmodel.errors import SvclabError

PACKAGES = ("netmodel", "dataplane", "control", "app")
#: modules that need what a test machine may lack are still imported: all of svclab's
#: dependencies are installed wherever its tests run


def _all_modules() -> None:
    for top in PACKAGES:
        pkg = importlib.import_module(top)
        for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{top}."):
            importlib.import_module(m.name)


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        if sub.__module__.split(".")[0] in PACKAGES:
            out.append(sub)
        out.extend(_subclasses(sub))
    return out


def _drawn() -> dict[str, int]:
    """Each class name in the docstring's tree -> its depth (column of its name)."""
    doc = netmodel.errors.__doc__ or ""
    tree = doc.split("::", 1)[1].split("\n\n", 2)[1]
    found = {}
    for line in tree.splitlines():
        m = re.match(r"^(\s*(?:[│├└─ ]*)?)(\w+)", line)
        if m and m.group(2)[0].isupper():
            found[m.group(2)] = len(m.group(1))
    return found


def test_every_error_class_is_in_the_tree_under_its_base() -> None:
    _all_modules()
    drawn = _drawn()
    doc = netmodel.errors.__doc__ or ""
    lines = doc.splitlines()
    for cls in _subclasses(SvclabError):
        name = cls.__name__
        assert name in drawn, f"{cls.__module__}.{name} is missing from the tree"
        # its parent in the drawing is the nearest line above at a smaller depth
        at = next(i for i, line in enumerate(lines) if re.search(rf"[─ ]{name}\b", line))
        depth = drawn[name]
        parent = None
        for line in reversed(lines[:at]):
            m = re.match(r"^(\s*(?:[│├└─ ]*)?)(\w+)", line)
            if m and m.group(2) in drawn and len(m.group(1)) < depth:
                parent = m.group(2)
                break
        assert parent == cls.__bases__[0].__name__, f"{name} drawn under {parent}"
