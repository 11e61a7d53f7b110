"""The upstream NetworkPolicy e2e truth tables (tests/data/netpol_e2e/cases.yaml, see its
PROVENANCE.md) and what running them needs: reading the cases, the expected table of a
probe, the table :func:`netmodel.netpolicy.decide` computes, and applying a case's
steps to a persistent cluster through the CLI (``svclab apply`` / ``delete``), as a user
would, so that the emulated and the kernel probes (:func:`app.reachprobe.probe_matrix`)
see the policies the way ``svclab connect`` does.

One cluster (cluster.yaml: x, y, z with pods a, b, c) serves every case: a case's steps
are applied in turn, and :meth:`Harness.reset` puts the cluster back (no policy, the
original labels) whatever happened.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from app.cli.main import cli
from netmodel.netpolicy import PolicyPod, decide, named_ports, policy_from_wire
from netmodel.reach import Matrix

DATA = Path(__file__).resolve().parent / "data" / "netpol_e2e"
CLUSTER = DATA / "cluster.yaml"
CASES = DATA / "cases.yaml"
NAMESPACES = ("x", "y", "z")
PODS = tuple(f"{ns}/{p}" for ns in NAMESPACES for p in ("a", "b", "c"))
NAME_LABEL = "kubernetes.io/metadata.name"

Pair = tuple[str, str]
Table = dict[Pair, bool]


@dataclass(frozen=True)
class Probe:
    protocol: str
    port: int
    expect: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class Step:
    policies: tuple[Mapping[str, Any], ...]
    probes: tuple[Probe, ...]
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    pod_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    name: str
    steps: tuple[Step, ...]

    @property
    def protocols(self) -> set[str]:
        return {p.protocol for s in self.steps for p in s.probes}


def load_cases() -> list[Case]:
    out = []
    for c in yaml.safe_load(CASES.read_text()):
        steps = tuple(
            Step(
                policies=tuple(s.get("policies") or ()),
                probes=tuple(
                    Probe(p["protocol"], int(p["port"]), tuple(p.get("expect") or ()))
                    for p in s["probes"]
                ),
                namespace_labels=s.get("namespaceLabels") or {},
                pod_labels=s.get("podLabels") or {},
            )
            for s in c["steps"]
        )
        out.append(Case(c["name"], steps))
    return out


def _matches(pattern: str, pod: str) -> bool:
    if pattern == "*":
        return True
    ns, _, name = pattern.partition("/")
    pns, _, pname = pod.partition("/")
    return ns == pns and name in ("*", pname)


def expected(probe: Probe) -> Table:
    """The probe's truth table over every ordered pair of distinct pods: every pair
    reaches, then each ``expect`` entry in order sets its pairs."""
    table = {(s, d): True for s in PODS for d in PODS if s != d}
    for e in probe.expect:
        for s, d in table:
            if _matches(e["from"], s) and _matches(e["to"], d):
                table[(s, d)] = bool(e["reach"])
    return table


_PLACEHOLDER = re.compile(r"\{(ip|net4):([xyz]/[abc])\}")


def fill(policy: Mapping[str, Any], ips: Mapping[str, str]) -> dict[str, Any]:
    """A case's policy as a manifest: apiVersion and kind added, ``{ip:NS/POD}`` and
    ``{net4:NS/POD}`` replaced by the pod's address and the /4 that holds it."""

    def sub(m: re.Match[str]) -> str:
        ip = ips[m.group(2)]
        return ip if m.group(1) == "ip" else str(ip_network(f"{ip}/4", strict=False))

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _PLACEHOLDER.sub(sub, v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    doc = walk(copy.deepcopy(dict(policy)))
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", **doc}


# ------------------------------------------------------------------------------ computed


def cluster_pods() -> dict[str, dict[str, Any]]:
    """The Pod documents of cluster.yaml by key."""
    out = {}
    for d in yaml.safe_load_all(CLUSTER.read_text()):
        if d and d.get("kind") == "Pod":
            out[f"{d['metadata']['namespace']}/{d['metadata']['name']}"] = d
    return out


@dataclass
class Labels:
    """The labels a step sees: namespaces' and pods', changed by the steps so far."""

    namespaces: dict[str, dict[str, str]]
    pods: dict[str, dict[str, str]]

    @classmethod
    def initial(cls) -> Labels:
        docs = cluster_pods()
        return cls(
            {ns: {NAME_LABEL: ns} for ns in NAMESPACES},
            {k: dict(d["metadata"].get("labels") or {}) for k, d in docs.items()},
        )

    def after(self, step: Step) -> Labels:
        ns = {k: dict(v) for k, v in self.namespaces.items()}
        for name, labels in step.namespace_labels.items():
            ns[name].update(labels)
        pods = {k: dict(v) for k, v in self.pods.items()}
        for key, labels in step.pod_labels.items():
            pods[key] = dict(labels)
        return Labels(ns, pods)


def computed(step: Step, probe: Probe, labels: Labels, ips: Mapping[str, str]) -> Table:
    """The probe's table as :func:`netmodel.netpolicy.decide` computes it from the
    step's policies alone."""
    docs = cluster_pods()
    pods = {
        key: PolicyPod(
            key.split("/")[0],
            key.split("/")[1],
            labels.pods[key],
            ip_address(ips[key]),
            ports=named_ports(docs[key]["spec"]["containers"]),
        )
        for key in PODS
    }
    policies = [policy_from_wire(fill(p, ips)) for p in step.policies]
    return {
        (s, d): decide(
            pods[s], pods[d], probe.protocol, probe.port, policies, labels.namespaces
        ).allowed
        for s in PODS
        for d in PODS
        if s != d
    }


def reached(step: Step, probe: Probe, labels: Labels, ips: Mapping[str, str]) -> Table:
    """The probe's table as ``svclab reach``'s matrix (:class:`netmodel.reach.Matrix`)
    computes it from the step's policies alone."""
    docs = cluster_pods()
    pods = [
        PolicyPod(
            key.split("/")[0],
            key.split("/")[1],
            labels.pods[key],
            ip_address(ips[key]),
            ports=named_ports(docs[key]["spec"]["containers"]),
        )
        for key in PODS
    ]
    policies = [policy_from_wire(fill(p, ips)) for p in step.policies]
    m = Matrix(pods, policies, labels.namespaces)
    return {
        (s, d): m.allows(s, d, probe.protocol, probe.port) for s in PODS for d in PODS if s != d
    }


def probed(matrix: Mapping[Pair, frozenset[tuple[str, int]]], probe: Probe) -> Table:
    """A probe's table from :func:`app.reachprobe.probe_matrix`'s answer."""
    return {
        (s, d): (probe.protocol, probe.port) in matrix[(s, d)] for s in PODS for d in PODS if s != d
    }


def render(table: Table) -> str:
    """A table as text: a row per source, ``+`` reaches, ``-`` does not, ``.`` self."""
    head = "      " + " ".join(p.replace("/", "") for p in PODS)
    rows = [head]
    for s in PODS:
        cells = [" . " if s == d else (" + " if table[(s, d)] else " - ") for d in PODS]
        rows.append(f"{s:<5} " + "".join(cells))
    return "\n".join(rows)


def differences(want: Table, got: Table) -> list[str]:
    return [
        f"{s} -> {d}: expected {'reach' if want[k] else 'no reach'}, got "
        f"{'reach' if got[k] else 'no reach'}"
        for k in sorted(want)
        for s, d in [k]
        if want[k] != got[k]
    ]


# ------------------------------------------------------------------------------ applying


class Harness:
    """A persistent cluster of cluster.yaml in ``state`` driven through the CLI."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.applied: set[tuple[str, str]] = set()  # (namespace, name) of policies
        self.relabelled_ns: set[str] = set()
        self.relabelled_pods: set[str] = set()

    def svclab(self, *args: str, stdin: str | None = None) -> str:
        res = CliRunner().invoke(cli, ["--state", str(self.state), *args], input=stdin)
        if res.exit_code != 0:
            raise AssertionError(f"svclab {' '.join(args)}: exit {res.exit_code}: {res.output}")
        return res.output

    def create(self) -> None:
        self.svclab("apply", "-f", str(CLUSTER))

    def ips(self) -> dict[str, str]:
        out = self.svclab("get", "pods", "-A", "-o", "json")
        items = yaml.safe_load(out)["items"]
        ips = {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["status"]["podIP"]
            for p in items
        }
        missing = [k for k in PODS if not ips.get(k)]
        assert not missing, f"pods without an address: {missing}"
        return ips

    def apply_step(self, step: Step, ips: Mapping[str, str], labels: Labels) -> None:
        """Make the cluster's policies and labels those of ``step`` (``labels``: as
        they are after it)."""
        wanted = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in step.policies}
        for ns, name in sorted(self.applied - wanted):
            self.svclab("delete", "networkpolicy", name, "-n", ns)
        docs: list[dict[str, Any]] = [fill(p, ips) for p in step.policies]
        for ns in step.namespace_labels:
            docs.append(_namespace(ns, labels.namespaces[ns]))
            self.relabelled_ns.add(ns)
        pods = cluster_pods()
        for key in step.pod_labels:
            docs.append(_relabelled(pods[key], labels.pods[key]))
            self.relabelled_pods.add(key)
        if docs:
            self.svclab("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        self.applied = wanted

    def reset(self) -> None:
        """No policy, every label as cluster.yaml has it."""
        for ns, name in sorted(self.applied):
            self.svclab("delete", "networkpolicy", name, "-n", ns)
        self.applied = set()
        initial = Labels.initial()
        docs: list[dict[str, Any]] = [
            _namespace(ns, initial.namespaces[ns]) for ns in sorted(self.relabelled_ns)
        ]
        pods = cluster_pods()
        docs += [_relabelled(pods[k], initial.pods[k]) for k in sorted(self.relabelled_pods)]
        if docs:
            self.svclab("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        self.relabelled_ns, self.relabelled_pods = set(), set()


def _namespace(name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": dict(labels)},
    }


def _relabelled(pod: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    doc = copy.deepcopy(dict(pod))
    doc["metadata"] = {**doc["metadata"], "labels": dict(labels)}
    return doc


def run_case(
    case: Case,
    harness: Harness,
    probe: Any,
    ips: Mapping[str, str],
    *,
    protocols: Sequence[str] = ("TCP", "UDP", "SCTP"),
) -> list[str]:
    """Run every step of ``case``: apply it, check the computed table against the
    expected one, probe (``probe(ports) -> matrix``) and check that too. Returns the
    failures, each with both tables; the cluster is reset afterwards, also on error."""
    failures: list[str] = []
    labels = Labels.initial()
    try:
        for i, step in enumerate(case.steps):
            labels = labels.after(step)
            harness.apply_step(step, ips, labels)
            probes = [p for p in step.probes if p.protocol in protocols]
            if not probes:
                continue
            matrix = probe([(p.protocol, p.port) for p in probes])
            for p in probes:
                want = expected(p)
                where = f"{case.name} step {i + 1} {p.protocol}/{p.port}"
                for what, got in (
                    ("computed (decide)", computed(step, p, labels, ips)),
                    ("computed (reach matrix)", reached(step, p, labels, ips)),
                    ("probed", probed(matrix, p)),
                ):
                    diff = differences(want, got)
                    if diff:
                        failures.append(
                            f"{where}, {what}: {len(diff)} pairs differ: {'; '.join(diff[:6])}\n"
                            f"expected:\n{render(want)}\ngot:\n{render(got)}"
                        )
    finally:
        harness.reset()
    return failures
