"""Shared fixtures. Kernel tests get a fresh, uniquely named namespace that is always
removed; the session fails if any svclab-prefixed namespace is left behind."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# Property tests state what must hold, not how fast: a per-example deadline is a timing
# assertion, and on a loaded machine it fails correct code. Tests that set their own
# settings keep them (they override this profile's fields they name).
settings.register_profile("svclab", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("svclab")

#: test data kept in the repository (tests/data/kube-proxy/PROVENANCE.md says where it is from)
DATA = Path(__file__).resolve().parent / "data"
CASES = DATA / "kube-proxy" / "cases"


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace (``svclab-t-XXXXXXXX``), removed after the test."""
    from dataplane.linux import netns as ns

    with ns.temporary("t") as name:
        yield name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that asks for the :func:`netns` fixture must carry the ``kernel`` marker
    (else ``-m "not kernel"`` would run it): refused at collection, before anything runs.
    A kernel test must also say so in its module's text (``mark.kernel``): that is how
    the workers' scheduler (:func:`pytest_xdist_make_scheduler`) finds them."""
    unseen = sorted(
        {
            i.nodeid.split("::")[0]
            for i in items
            if i.get_closest_marker("kernel") is not None and not _says_kernel(i.path)
        }
    )
    if unseen:
        raise pytest.UsageError(
            f"kernel tests whose module never writes 'mark.kernel': {', '.join(unseen)}"
        )
    if hasattr(config, "workerinput"):  # an xdist worker: the kernel unit is handed out
        # first (it is the longest), so the run does not end waiting for it
        items.sort(key=lambda i: not _says_kernel(i.path))
    bare = [
        i.nodeid
        for i in items
        if "netns" in getattr(i, "fixturenames", ()) and i.get_closest_marker("kernel") is None
    ]
    if bare:
        raise pytest.UsageError(
            f"tests use the netns fixture without pytest.mark.kernel: {', '.join(bare)}"
        )


@functools.cache
def _says_kernel(module: Path) -> bool:
    """Does the test module ``module`` mark kernel tests (its text names ``mark.kernel``)?"""
    try:
        return "mark.kernel" in module.read_text()
    except OSError:
        return False


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``scripts/test`` runs ``-n auto``) tests go to the workers a
    module at a time (a module's fixtures, a served cluster say, are made once), and
    every module with kernel tests goes to one worker as one unit: kernel tests run one
    at a time, as without workers (some touch state the host shares: sysctls, conntrack,
    kernel modules), while the other workers run the rest."""
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    root = config.rootpath

    class KernelTestsInTurn(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "kernel" if _says_kernel(root / module) else module

    return KernelTestsInTurn(config, log)


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_namespaces() -> Iterator[None]:
    """Fails the session if tests left svclab namespaces behind: those no other live
    process holds, and also the namespaces (and /run/svclab state) of persistent (kept)
    clusters this test process created, which the ordinary leak check leaves alone."""
    yield
    try:
        from dataplane.linux import netns as ns
        from dataplane.linux import nsenter
    except ImportError:  # pragma: no cover - pyroute2 missing
        return
    left = ns.list_ours()
    kept = [n for n in ns.list_ours(include_held=True) if nsenter.owner(n) == os.getpid()]
    clusters = sorted({n[len(ns.PREFIX) :].split("-", 1)[0] for n in (*left, *kept)})
    if clusters:  # their pod servers and /run/svclab state go too, not only namespaces
        from dataplane.linux import realize
        from dataplane.linux.names import CLUSTER_ID_RE

        for cid in clusters:
            if CLUSTER_ID_RE.match(cid):
                realize.cleanup(cid)
    ns.cleanup()
    assert not left, f"tests left svclab namespaces behind: {left}"
    assert not kept, f"tests left persistent clusters behind: {clusters} ({kept})"


#: Skips a root CI machine may have, by the start of their reason, each with why. Any
#: other skip under ``CI=true`` as root fails the run (:func:`pytest_runtest_makereport`):
#: such a machine has every tool scripts/install installs, so a skip there means a part
#: of svclab went untested. Empty today: every skip in the suite is for a missing tool,
#: a missing binary or missing root, none of which a root CI machine lacks.
CI_ALLOWED_SKIPS: dict[str, str] = {}


def _ci_root() -> bool:
    return os.environ.get("CI") == "true" and os.geteuid() == 0


def _skip_verdict(item: pytest.Item, reason: str) -> str | None:
    """Why a skip of ``item`` is a failure here, or None if it may stay a skip: under
    ``CI=true`` a kernel test must not skip (CI runs as root); as root under ``CI=true``
    no test may, unless its reason starts with a key of :data:`CI_ALLOWED_SKIPS`."""
    if os.environ.get("CI") != "true":
        return None
    if item.get_closest_marker("kernel") is not None:
        return f"kernel test skipped under CI=true (kernel tests must run): {reason}"
    if _ci_root() and not any(reason.startswith(k) for k in CI_ALLOWED_SKIPS):
        return f"test skipped under CI=true as root (not in CI_ALLOWED_SKIPS): {reason}"
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Turns the skips :func:`_skip_verdict` refuses into failures."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if rep.skipped and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        reason = reason.removeprefix("Skipped: ")
        verdict = _skip_verdict(item, reason)
        if verdict is not None:
            rep.outcome = "failed"
            rep.longrepr = verdict


def _ours(pid: int | None) -> bool:
    """Is ``pid`` this process or one of its descendants?"""
    me = os.getpid()
    while pid is not None and pid > 1:
        if pid == me:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return False


def _new_namespaces(before: frozenset[str], *, beside_workers: bool = False) -> list[str]:
    """svclab namespaces made since ``before`` was listed by this process's children (or
    by a process gone since, or a tool that records no owner) and still there; not
    another live process's, nor a persistent cluster's (other users of the machine)."""
    from dataplane.linux import netns as ns
    from dataplane.linux import nsenter

    made = set(ns.list_ours(include_held=True)) - before
    if beside_workers:
        # beside another worker, whose kernel tests' children make namespaces and exit
        # before removing them: only this process's own descendants are judged here (the
        # in-process refusal still holds; a run without workers judges the rest too)
        return sorted(n for n in made if _ours(nsenter.owner(n)))
    return sorted(n for n in made if _ours(nsenter.owner(n)) or not ns.held(n))


@pytest.fixture(autouse=True)
def _namespaces_only_in_kernel_tests(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """A test without the ``kernel`` marker must not make a network namespace: ``-m "not
    kernel"`` runs it without root, where it errors. In this process the namespace
    maker itself refuses (and the test fails even if it catches that); as root, a
    namespace a child process made and left behind fails it too (one a child makes and
    removes again goes unseen)."""
    if request.node.get_closest_marker("kernel") is not None:
        yield
        return
    from dataplane.linux import nsenter

    tried: list[str] = []

    def refuse(name: str) -> bool:
        tried.append(name)  # (checked after the test too: the test may catch this)
        raise AssertionError(f"network namespace {name!r} made by a test without the kernel marker")

    monkeypatch.setattr(nsenter, "create_netns", refuse)
    from dataplane.linux import netns as ns

    before = frozenset(ns.list_ours(include_held=True)) if os.geteuid() == 0 else None
    yield
    if tried:
        pytest.fail(
            f"{request.node.nodeid} makes network namespaces {tried} but has no "
            "pytest.mark.kernel marker",
            pytrace=False,
        )
    # an xdist worker (not merely a process whose parent is one: a nested pytest run)
    beside = hasattr(request.config, "workerinput")
    if before is not None and (made := _new_namespaces(before, beside_workers=beside)):
        pytest.fail(
            f"{request.node.nodeid} made network namespaces {made} (in a child process) "
            "but has no pytest.mark.kernel marker",
            pytrace=False,
        )
