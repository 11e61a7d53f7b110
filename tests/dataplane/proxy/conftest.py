"""Make the shared helpers (``proxy_builders``) importable however pytest imports
these tests (rootdir-relative packages or the default prepend mode), and the
upstream-case converter (``scripts/upstream_cases.py``, a script, not part of the
product)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
_SCRIPTS = str(Path(__file__).resolve().parents[3] / "scripts")
for _path in (_HERE, _SCRIPTS):
    if _path not in sys.path:
        sys.path.insert(0, _path)
