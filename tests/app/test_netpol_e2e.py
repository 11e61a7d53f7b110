"""The upstream NetworkPolicy e2e truth tables (tests/data/netpol_e2e), each case run
two ways here: computed (:func:`netmodel.netpolicy.decide` over the pods; the reach
matrix of :mod:`netmodel.reach` joins when it lands) and probed through the emulated
dataplane (:func:`app.reachprobe.probe_matrix`, the machinery of ``svclab connect``).
The kernel's run is tests/kernel/test_netpol_e2e_real.py.

Each case's steps are applied with ``svclab apply``/``delete`` to one persistent
cluster (x, y, z with pods a, b, c) built once for the module; a failure shows the
expected and the observed table."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.reachprobe import probe_matrix
from tests.netpol_e2e import Case, Harness, load_cases, run_case

CASES = load_cases()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, dict[str, str]]]:
    h = Harness(tmp_path_factory.mktemp("netpol-e2e") / "state")
    h.create()
    yield h, h.ips()


def test_there_are_48_cases_with_distinct_names() -> None:
    assert len(CASES) == 48
    assert len({c.name for c in CASES}) == 48


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_computed_and_emulated(case: Case, harness: tuple[Harness, dict[str, str]]) -> None:
    h, ips = harness

    def probe(ports: list[tuple[str, int]]) -> dict[tuple[str, str], frozenset[tuple[str, int]]]:
        return probe_matrix(h.state, ports=ports)

    failures = run_case(case, h, probe, ips)
    assert not failures, "\n\n".join(failures)
