"""What every ``scripts/bench_*.py`` prints, and the check it passes before printing.

The convention (one for all benches):

* a timed key says whether it was taken ``cold`` (the first run in a fresh process,
  caches empty, on the path a user runs: the CLI or the API) or ``warm`` (anything else:
  repeats, or a process or state that has done the work before):
  ``list_pods_cold_seconds``, ``trace_warm_median_seconds``. A key counts as timed when
  its name has ``seconds``, ``_ms``, ``per_s``, ``per_second`` or ``ratio`` in it or
  ends in ``_s``; a timed key nested in an object whose key says ``cold`` or ``warm``
  inherits it;
* no verdict apart from its figure: no ``targets_met`` or ``meets_targets`` table;
* a target sits beside the figure it names, as the figure's value::

      "list_pods_cold_seconds": {"value": 0.8, "at_most": 1.0, "met": true}

  ``met`` is true or false only when ``value`` was measured; an unmeasured figure
  (``value`` null) has ``met`` null, never true.

:func:`emit` checks an output against this and prints it; a bench that breaks the
convention stops with the offending keys instead of printing figures nobody can read
right.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

_TIMED = re.compile(r"seconds|_ms(_|$)|per_s(econd)?(_|$)|ratio|_s$")
_VERDICT = re.compile(r"(^|_)(met|meets)(_|$)")
_TEMPERATURE = re.compile(r"(^|_)(cold|warm)(_|$)")


def target(
    value: float | None, *, at_most: float | None = None, at_least: float | None = None
) -> dict[str, Any]:
    """The figure ``value`` beside its target (exactly one of ``at_most``/``at_least``);
    ``met`` is None when ``value`` is None (not measured)."""
    if (at_most is None) == (at_least is None):
        raise ValueError("a target is at_most or at_least, exactly one")
    out: dict[str, Any] = {"value": value}
    if at_most is not None:
        out["at_most"] = at_most
        out["met"] = None if value is None else value <= at_most
    else:
        out["at_least"] = at_least
        out["met"] = None if value is None else value >= at_least
    return out


def is_target(obj: Any) -> bool:
    """Whether ``obj`` is a figure beside its target (as :func:`target` makes)."""
    return isinstance(obj, dict) and "value" in obj and ("at_most" in obj or "at_least" in obj)


def problems(obj: Any, path: str = "", labelled: bool = False) -> list[str]:
    """Every way ``obj`` breaks the convention, one line each (empty: none)."""
    out: list[str] = []
    if isinstance(obj, dict):
        if is_target(obj):
            met, value = obj.get("met"), obj["value"]
            if value is None and met is not None:
                out.append(f"{path}: met is {met!r} for a figure not measured")
            if value is not None and not isinstance(met, bool):
                out.append(f"{path}: met must be true or false for a measured figure")
            if value is not None:
                bound = obj.get("at_most", obj.get("at_least"))
                right = value <= bound if "at_most" in obj else value >= bound
                if met is not right:
                    out.append(f"{path}: met is {met!r} for {value} against {bound}")
            if not labelled and _TIMED.search(path.rsplit(".", 1)[-1]):
                out.append(f"{path}: a timed key says neither cold nor warm")
            return out
        for key, val in obj.items():
            name = str(key)
            here = f"{path}.{name}" if path else name
            if _VERDICT.search(name):
                out.append(f"{here}: a verdict away from its figure (use target())")
                continue
            says = labelled or bool(_TEMPERATURE.search(name))
            numbers = isinstance(val, list) and any(_number(v) for v in val)
            if isinstance(val, dict | list) and not numbers:
                out += problems(val, here, says)
            elif (_number(val) or numbers) and _TIMED.search(name) and not says:
                out.append(f"{here}: a timed key says neither cold nor warm")
    elif isinstance(obj, list):
        for i, val in enumerate(obj):
            out += problems(val, f"{path}[{i}]", labelled)
    return out


def _number(val: Any) -> bool:
    return isinstance(val, int | float) and not isinstance(val, bool)


def emit(result: dict[str, Any]) -> None:
    """Print ``result`` as JSON after :func:`problems` found nothing; else exit 2 naming
    each offending key (on stderr)."""
    bad = problems(result)
    if bad:
        for line in bad:
            print(f"bench output: {line}", file=sys.stderr)
        raise SystemExit(2)
    print(json.dumps(result, indent=2))
