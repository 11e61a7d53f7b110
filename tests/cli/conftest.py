"""The upstream-case converter is a script, not part of the product
(``scripts/upstream_cases.py``): its tests import it from there."""

import sys
from pathlib import Path

SCRIPTS = str(Path(__file__).resolve().parents[2] / "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)
