"""``svclab serve --components processes``: every component an OS process of its own under
the supervisor, each an API client with its own certificate; killed processes are
restarted and converge by relisting; two controller-managers elect one leader through
their Lease.

One real server (a 2-node cluster) for the module; leader election is made fast
(lease 4 s, renew deadline 3 s, retry 1 s) so that a takeover takes seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.livehost import RULES_DIR
from control.agents.kubeproxy import EmulatedRules, KubeProxy
from control.apiserver.http import pki
from control.clock import WallClock
from control.informers.http import Credentials, KubeClient
from control.leaderelection import holder
from control.live import load_config
from netmodel.objects import KubeObject, Node
from tests.control.informers.serve_helpers import ROOT, Served, serve, wait_for

BOUND = 90.0
ELECTION = [
    "--leader-elect-lease-duration",
    "4",
    "--leader-elect-renew-deadline",
    "3",
    "--leader-elect-retry-period",
    "1",
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("procs"), "--components", "processes", *ELECTION) as s:
        yield s


def client_as(s: Served, user: str, *groups: str) -> KubeClient:
    ca = pki.load_ca(s.state / "pki")
    cert, key = pki.client_cert(ca, user, list(groups))
    return KubeClient(Credentials(s.server, ca.pem, cert, key), user_agent="procs-test")


def components(s: Served) -> dict[str, tuple[int, int]]:
    """Each running component process (``GROUP`` or ``GROUP/NODE``) of this server's
    state directory: (pid, parent pid), as ``ps`` shows them."""
    out = subprocess.run(
        ["ps", "-wweo", "pid=,ppid=,args="], capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, tuple[int, int]] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 8 or "app.livehost" not in parts or "component" not in parts:
            continue
        args = parts[2:]
        i = args.index("component")
        if args[i + 2] != str(s.state):
            continue
        group = args[i + 1]
        nodes = [args[j + 1] for j, a in enumerate(args) if a == "--node"]
        name = f"{group}/{','.join(nodes)}" if nodes else group
        found[name] = (int(parts[0]), int(parts[1]))
    return found


def pods(s: Served, app: str) -> dict[str, dict[str, Any]]:
    proc = s.kubectl("get", "pods", "-l", f"app={app}", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    return {p["metadata"]["name"]: p for p in json.loads(proc.stdout)["items"]}


def running(s: Served, app: str, n: int) -> dict[str, dict[str, Any]] | None:
    got = pods(s, app)
    ok = len(got) == n and all(
        p["status"].get("phase") == "Running" and p["status"].get("podIP") for p in got.values()
    )
    return got if ok else None


def published(s: Served, node: str) -> str:
    path = s.state / RULES_DIR / node
    return path.read_text() if path.exists() else ""


def fresh_rules(s: Served, node: str) -> str:
    """What a freshly started kube-proxy of ``node`` loads: one full sync over the
    Node, Services and EndpointSlices listed through the API now."""
    client = client_as(s, "system:kube-proxy")
    try:
        objs: list[KubeObject] = [
            o for o in client.list("Node").objects if isinstance(o, Node) and o.name == node
        ]
        objs += client.list("Service").objects + client.list("EndpointSlice").objects
    finally:
        client.close()
    spec, proxy_config = load_config(s.state)
    sink = EmulatedRules()
    proxy = KubeProxy(node, spec, proxy_config, sink, None, clock=WallClock())
    proxy.resync(objs)
    proxy.sync()
    return sink.nodes[node].save_text


def canonical(text: str) -> dict[str, tuple[frozenset[str], dict[str, list[str]]]]:
    """Per table, its chains and each chain's rules in order: what the kernel's behaviour
    depends on. Not the order chains were created in, which differs between a fresh
    full sync and one that added a Service's chains later."""
    out: dict[str, tuple[frozenset[str], dict[str, list[str]]]] = {}
    table = ""
    chains: set[str] = set()
    rules: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("*"):
            table, chains, rules = line, set(), {}
        elif line.startswith(":"):
            chains.add(line.split()[0][1:])
        elif line.startswith("-A "):
            rules.setdefault(line.split()[1], []).append(line)
        elif line == "COMMIT":
            out[table] = (frozenset(chains), rules)
    return out


def same_rules(s: Served, node: str) -> bool:
    live = published(s, node)
    return bool(live) and canonical(live) == canonical(fresh_rules(s, node))


def deploy(s: Served, name: str, replicas: int) -> None:
    made = s.kubectl(
        "create", "deployment", name, "--image=nginx", f"--replicas={replicas}", "--port=80"
    )
    assert made.returncode == 0, made.stderr
    exposed = s.kubectl("expose", "deployment", name, "--port=80")
    assert exposed.returncode == 0, exposed.stderr


def test_processes_bring_the_cluster_up_one_process_per_component(served: Served) -> None:
    s = served
    procs = wait_for(
        lambda: c if len(c := components(s)) == 8 else None,
        BOUND,
        "eight component processes",
    )
    assert set(procs) == {
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet/node-1",
        "kubelet/node-2",
        "kube-proxy/node-1",
        "kube-proxy/node-2",
        "kube-router/node-1",
        "kube-router/node-2",
    }
    pids = {pid for pid, _ in procs.values()}
    assert len(pids) == 8 and s.proc.pid not in pids, "separate PIDs, none the server's"
    parents = {ppid for _, ppid in procs.values()}
    assert len(parents) == 1 and parents != {s.proc.pid}, "all children of one supervisor"

    deploy(s, "web", 2)
    web = wait_for(lambda: running(s, "web", 2), BOUND, "two web pods Running")
    ips = {p["status"]["podIP"] for p in web.values()}
    assert {p["spec"]["nodeName"] for p in web.values()} == {"node-1", "node-2"}

    def sliced() -> bool:
        proc = s.kubectl(
            "get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", "json"
        )
        got = {
            a
            for sl in json.loads(proc.stdout)["items"]
            for e in sl.get("endpoints") or []
            for a in e["addresses"]
        }
        return got == ips

    wait_for(sliced, BOUND, "web's EndpointSlice holds both pods")
    for node in ("node-1", "node-2"):
        wait_for(
            lambda node=node: same_rules(s, node),
            BOUND,
            f"{node}'s kube-proxy process synced what a fresh kube-proxy loads",
        )
        assert all(ip in published(s, node) for ip in ips)
    log = s.log_text()
    for node in ("node-1", "node-2"):  # each policy agent listed under its own identity
        assert f"component=kube-router/{node} synced=1" in log
    assert "lease=kube-system/kube-controller-manager acquired" in log
    assert "lease=kube-system/kube-scheduler acquired" in log


def test_a_killed_kube_proxy_process_is_restarted_and_relists(served: Served) -> None:
    s = served
    wait_for(lambda: running(s, "web", 2), BOUND, "the first test's web pods")
    old = wait_for(lambda: components(s).get("kube-proxy/node-1"), BOUND, "kube-proxy/node-1")
    os.kill(old[0], signal.SIGKILL)
    # while it is down (or restarting), the Service gets a third endpoint
    assert s.kubectl("scale", "deployment", "web", "--replicas=3").returncode == 0
    web = wait_for(lambda: running(s, "web", 3), BOUND, "three web pods Running")
    new = wait_for(
        lambda: (c := components(s).get("kube-proxy/node-1")) and c[0] != old[0] and c,
        BOUND,
        "kube-proxy/node-1 restarted under a new PID",
    )
    assert new[1] == old[1], "restarted by the same supervisor"
    wait_for(
        lambda: (
            same_rules(s, "node-1")
            and all(p["status"]["podIP"] in published(s, "node-1") for p in web.values())
        ),
        BOUND,
        "node-1's rules are what a fresh full sync leaves, with all three pods",
    )
    log = s.log_text()
    assert f"process=kube-proxy/node-1 pid={old[0]} exited code=-9: restarting in" in log
    assert f"process=kube-proxy/node-1 pid={new[0]} started (restart" in log


def test_a_killed_kubelet_process_is_restarted_and_its_pods_stay_as_they_were(
    served: Served,
) -> None:
    s = served
    assert s.kubectl("scale", "deployment", "web", "--replicas=3").returncode == 0
    before = wait_for(lambda: running(s, "web", 3), BOUND, "three web pods")
    old = wait_for(lambda: components(s).get("kubelet/node-1"), BOUND, "kubelet/node-1")
    starts = s.log_text().count("component=kubelet/node-1 started")
    os.kill(old[0], signal.SIGKILL)
    wait_for(
        lambda: s.log_text().count("component=kubelet/node-1 started") > starts,
        BOUND,
        "kubelet/node-1 restarted and listed its pods",
    )
    new = components(s)["kubelet/node-1"]
    assert new[0] != old[0]
    time.sleep(3)  # a restarted kubelet that recreated sandboxes would have by now
    after = pods(s, "web")
    assert set(after) == set(before)
    for name, p in before.items():
        q = after[name]
        assert q["metadata"]["uid"] == p["metadata"]["uid"]
        assert q["status"]["podIP"] == p["status"]["podIP"], name
        assert q["status"]["phase"] == "Running"
        assert [c.get("restartCount", 0) for c in q["status"].get("containerStatuses", [])] == [
            c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])
        ]
    # the restarted kubelet re-learned the addresses its pods hold: new pods get others
    assert s.kubectl("scale", "deployment", "web", "--replicas=7").returncode == 0
    more = wait_for(lambda: running(s, "web", 7), BOUND, "seven web pods Running")
    ips = [p["status"]["podIP"] for p in more.values()]
    assert len(set(ips)) == len(ips), f"an address handed out twice: {sorted(ips)}"
    for name, p in before.items():
        assert more[name]["status"]["podIP"] == p["status"]["podIP"]


def _lease(s: Served, name: str) -> tuple[str, int, float | None]:
    client = client_as(s, "system:kube-controller-manager")
    try:
        return holder(client.get("Lease", f"kube-system/{name}"))
    finally:
        client.close()


def test_two_controller_managers_elect_one_and_the_other_takes_over(
    served: Served, tmp_path: Path
) -> None:
    s = served
    leader, transitions, _ = wait_for(
        lambda: (h := _lease(s, "kube-controller-manager"))[0] and h,
        BOUND,
        "a controller-manager leads",
    )
    leader_pid = int(leader.split("_")[-2])
    assert components(s)["kube-controller-manager"][0] == leader_pid
    log = tmp_path / "standby.log"
    with open(log, "wb") as out:
        standby = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.livehost",
                "component",
                "kube-controller-manager",
                str(s.state),
                s.server,
                *(f"{a}={b}" for a, b in zip(ELECTION[::2], ELECTION[1::2], strict=True)),
            ],
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    try:
        wait_for(
            lambda: "lease=kube-system/kube-controller-manager attempting" in log.read_text(),
            BOUND,
            "the second controller-manager tries the Lease",
        )
        time.sleep(6)  # longer than the lease: a standby that ignored it would act by now
        assert _lease(s, "kube-controller-manager")[0] == leader, "the leader kept its Lease"
        assert "component=deployment-controller started" not in log.read_text(), (
            "the standby's controllers do not act while another leads"
        )
        os.kill(leader_pid, signal.SIGKILL)
        new, grown, _ = wait_for(
            lambda: (h := _lease(s, "kube-controller-manager"))[0] not in ("", leader) and h,
            BOUND,
            "another controller-manager took the Lease",
        )
        assert grown > transitions
        assert new.split("_")[-2] == str(standby.pid), "the standby (not the restarted one)"
        wait_for(
            lambda: "component=deployment-controller started" in log.read_text(),
            BOUND,
            "the new leader's controllers start",
        )
        deploy(s, "after", 2)
        wait_for(lambda: running(s, "after", 2), BOUND, "the new leader's controllers act")
    finally:
        if standby.stdin is not None:
            standby.stdin.close()
        try:
            standby.wait(20)
        except subprocess.TimeoutExpired:
            standby.kill()
            standby.wait()
