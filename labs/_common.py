"""Helpers shared by the labs: a check that counts, and a clean exit code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


class Checks:
    """Collects named checks; ``finish()`` prints a summary and exits non-zero on failure."""

    def __init__(self, lab: str) -> None:
        self.lab = lab
        self.failed: list[str] = []
        self.passed = 0

    def check(self, ok: bool, what: str) -> None:
        mark = "ok  " if ok else "FAIL"
        print(f"  [{mark}] {what}")
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)

    def finish(self) -> None:
        total = self.passed + len(self.failed)
        print(f"\n{self.lab}: {self.passed}/{total} checks passed")
        sys.exit(1 if self.failed else 0)


def backend(session, *, real: bool, external_clients=(), seed: int = 0):  # type: ignore[no-untyped-def]
    """A context manager yielding the emulator (default) or the real kernel (``--real``)
    for ``session``'s converged cluster: both realise the same ClusterView."""
    from app import emulation
    from dataplane import backends

    view = emulation.view(session, external_clients=external_clients)
    if real:
        return backends.real_backend(view)
    return backends.emulator_backend(view, seed=seed)


class LabArguments(argparse.ArgumentParser):
    """A lab's command line: a usage error is one line on stderr and exit code 2."""

    def __init__(self, doc: str, *, real: bool = True, hint: str = "see --help") -> None:
        super().__init__(description=doc.splitlines()[0] if doc else None)
        self.hint = hint
        if real:
            self.add_argument("--real", action="store_true", help="use real network namespaces")
        self.add_argument("--pictures", metavar="DIR", help=PICTURES_HELP)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} ({self.hint})\n")


def parse_real_flag(doc: str) -> bool:
    """``--real`` on the command line: run on real network namespaces (root needed)."""
    return bool(LabArguments(doc).parse_args().real)


def parse_without_real(doc: str, why: str) -> None:
    """For a lab without a ``--real`` mode: only ``--pictures`` is accepted; anything
    else (``--real`` included) is a usage error saying ``why``."""
    LabArguments(doc, real=False, hint=why).parse_args()


# --------------------------------------------------------------------------- --pictures

PICTURES_HELP = "also draw the lab's picture into DIR (SVG; lab 02 a PNG plot)"


def pictures_dir() -> Path | None:
    """``--pictures DIR`` on the command line (created if missing), or None."""
    import argparse

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--pictures", metavar="DIR", help=PICTURES_HELP)
    value = parser.parse_known_args()[0].pictures
    if value is None:
        return None
    path = Path(value)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _written(path: Path) -> None:
    print(f"picture: {path}")


def save_timeline(session, name: str) -> None:  # type: ignore[no-untyped-def]
    """With ``--pictures DIR``: the timeline's sequence diagram as DIR/NAME.svg."""
    out = pictures_dir()
    if out is None:
        return
    from app.pictures.files import write_graph
    from app.pictures.scene import pod_nodes
    from app.pictures.sequence import sequence_graph
    from app.pictures.timeline import sequence
    from control.events import timeline

    tl = sequence(timeline(session.store), pod_nodes(session))
    _written(write_graph(sequence_graph(tl, title=name), out / f"{name}.svg"))


def save_trace(session, name: str, src: str, dst: str, proto: str, port=None, clients=()):  # type: ignore[no-untyped-def]
    """With ``--pictures DIR``: the emulated trace of SRC -> DST drawn over the topology
    as DIR/NAME.svg (also after a ``--real`` run: the picture is the emulator's path)."""
    out = pictures_dir()
    if out is None:
        return
    from app import emulation
    from app.pictures.files import write_graph
    from app.pictures.path import path_graph
    from app.pictures.scene import scene

    view = emulation.view(session, external_clients=clients)
    trace = emulation.emulator(session, external_clients=clients).trace(src, dst, proto, port)
    graph = path_graph(scene(session, network=view.network), trace.to_json())
    _written(write_graph(graph, out / f"{name}.svg"))


def save_shares(counts, name: str, title: str) -> None:  # type: ignore[no-untyped-def]
    """With ``--pictures DIR``: per-endpoint shares and the chi-square test as DIR/NAME.png."""
    out = pictures_dir()
    if out is None:
        return
    from app.pictures.files import write_figure
    from app.pictures.shares import shares_figure
    from app.stats import chi_square

    chi = chi_square(list(counts.values()))
    _written(write_figure(shares_figure(counts, chi, title=title), out / f"{name}.png"))
