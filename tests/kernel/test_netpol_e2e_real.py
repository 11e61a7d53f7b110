"""The upstream NetworkPolicy e2e truth tables (tests/data/netpol_e2e) on the kernel:
one cluster (x, y, z with pods a, b, c) realised once with ``svclab up --real``; for
each case, each step's policies and labels are applied with ``svclab apply``/``delete``
and the matrix is probed through real sockets in the pods' namespaces
(:func:`app.reachprobe.probe_matrix` with ``real=True``, which brings the realised
cluster up to date first: the policy agent's rules are loaded into the nodes). Each
step is also checked against :func:`netmodel.netpolicy.decide`.

SCTP is not probed here: this kernel has no SCTP (no ``sctp`` module to load, and
``socket(AF_INET, SOCK_STREAM, IPPROTO_SCTP)`` fails with EPROTONOSUPPORT), and the
pod servers serve TCP and UDP. The SCTP cases run computed and emulated
(tests/app/test_netpol_e2e.py); here :func:`test_sctp_probes_are_refused_saying_why`
checks that asking the kernel for SCTP is refused with that reason, never answered as
"nothing reaches". The cluster is torn down after the module, also on failure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.reachprobe import probe_matrix
from dataplane.linux.netns import is_root
from dataplane.linux.traffic import sctp_refused
from netmodel.errors import BackendError
from tests.netpol_e2e import Case, Harness, load_cases, run_case

pytestmark = [pytest.mark.kernel, pytest.mark.skipif(not is_root(), reason="needs root")]

KERNEL_PROTOCOLS = ("TCP", "UDP")
#: every case with a TCP or UDP probe (the three SCTP-only cases: see the docstring)
CASES = [c for c in load_cases() if c.protocols & set(KERNEL_PROTOCOLS)]


@pytest.fixture(scope="module")
def realised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, dict[str, str]]]:
    h = Harness(tmp_path_factory.mktemp("netpol-e2e-real") / "state")
    h.create()
    try:
        h.svclab("up", "--real")
        yield h, h.ips()
    finally:
        h.svclab("down")


def test_45_cases_run_on_the_kernel() -> None:
    assert len(CASES) == 45
    assert {c.name for c in load_cases()} - {c.name for c in CASES} == {
        "sctp-default-deny-ingress",
        "sctp-ports",
        "sctp-pod-in-other-namespace",
    }


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_on_the_kernel(case: Case, realised: tuple[Harness, dict[str, str]]) -> None:
    h, ips = realised

    def probe(ports: list[tuple[str, int]]) -> dict[tuple[str, str], frozenset[tuple[str, int]]]:
        return probe_matrix(h.state, ports=ports, real=True)

    failures = run_case(case, h, probe, ips, protocols=KERNEL_PROTOCOLS)
    assert not failures, "\n\n".join(failures)


def test_sctp_probes_are_refused_saying_why(realised: tuple[Harness, dict[str, str]]) -> None:
    h, _ = realised
    why = sctp_refused()
    expected = why if why is not None else "the pod servers serve TCP and UDP only"
    with pytest.raises(BackendError) as e:
        probe_matrix(h.state, ports=[("TCP", 80), ("SCTP", 80)], real=True)
    assert str(e.value) == f"SCTP probes on the kernel: {expected}"
