"""Make the shared helpers (``proxy_builders``) importable however pytest imports
these tests (rootdir-relative packages or the default prepend mode)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
