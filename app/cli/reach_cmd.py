"""``svclab reach``: which connections the stored NetworkPolicies let through, between
every pair of pods and between pods and the IP ranges ipBlocks carve
(:mod:`netmodel.reach`), by protocol and port range.

* ``-o text`` (default): one line per pair, ``ns/pod => ns/pod : TCP 80,UDP 53`` or
  ``: All Connections``, sorted; ``json``: ``{"allowed": [{"from", "to",
  "protocols"}]}``; ``csv``, ``md`` (a table) and ``dot`` (Graphviz source).
* ``-n NS``: only pairs with a pod of NS at one end; ``--port P``: only what may use
  port P (any protocol).
* ClusterNetworkPolicies (``policy.networking.k8s.io/v1alpha2``) count too: their
  Admin tier before the NetworkPolicies, their Baseline tier for pods no NetworkPolicy
  isolates (:mod:`netmodel.reachtiers`).
* ``--what-if -f FILE`` / ``--what-if --delete NAME`` (the NetworkPolicy NAME of
  ``-n``, ``default`` when not given; ``clusternetworkpolicy/NAME`` or ``cnp/NAME``: a
  ClusterNetworkPolicy): the connections the change would add and remove.
  The file's objects are validated as ``svclab apply`` validates them (the API
  server's own admission, as a server-side dry run); nothing stored changes. Exit
  status as ``svclab diff``: 0 when nothing changes, 1 when something does (or on bad
  input, with a one-line error), 2 for bad usage.
* ``--probe [--real]``: the matrix probed by connections through the emulated
  dataplane (with ``--real``, the kernel) on the ports pods declare and policies name
  (``--port``: that one), printed as above; each pair and port where the probe and the
  computation disagree is reported on stderr, and the exit status is then 1.
"""

from __future__ import annotations

import csv
import gc
import io
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from app.cli.context import Context, handle_errors
from app.cli.types import PORT

if TYPE_CHECKING:
    from control.session import Session
    from netmodel.clusterpolicy import ClusterNetworkPolicy
    from netmodel.netpolicy import NetworkPolicy, PolicyPod
    from netmodel.reach import Change, PortSet
    from netmodel.reachtiers import TieredMatrix

__all__ = ["COMMANDS", "cluster_policies", "cluster_view", "policy_pods", "tiered_matrix"]

FORMATS = ["text", "json", "csv", "md", "dot"]


def policy_pods(pods: Iterable[Any]) -> list[PolicyPod]:
    """The stored pods (:class:`netmodel.objects.Pod`) that policies see: every pod
    holding an address and not finished (Succeeded or Failed)."""
    from ipaddress import ip_address

    from netmodel.netpolicy import PolicyPod, named_ports

    out = []
    for pod in pods:
        ip = pod.status.pod_ip
        if not ip or pod.status.phase in ("Succeeded", "Failed"):
            continue
        out.append(
            PolicyPod(
                pod.namespace or "default",
                pod.name,
                dict(pod.metadata.labels or {}),
                ip_address(ip),
                pod.spec.node_name or "",
                named_ports(pod.spec.containers),
                bool(pod.spec.host_network),
            )
        )
    return out


def cluster_view(
    session: Session,
) -> tuple[list[PolicyPod], list[NetworkPolicy], dict[str, dict[str, str]]]:
    """The stored pods, NetworkPolicies and namespaces' labels, as policy sees them."""
    from netmodel.netpolicy import policy_from_wire

    store = session.store
    pods = policy_pods(store.list("Pod"))
    policies = [policy_from_wire(o.to_dict()) for o in store.list("NetworkPolicy")]
    namespaces = {ns.name: dict(ns.metadata.labels or {}) for ns in store.list("Namespace")}
    return pods, policies, namespaces


def cluster_policies(session: Session) -> list[ClusterNetworkPolicy]:
    """The stored ClusterNetworkPolicies, as values."""
    from app.netpolview import read_cluster_policies

    return read_cluster_policies(session.store)


def tiered_matrix(session: Session) -> TieredMatrix:
    """The stored cluster's matrix: NetworkPolicies and ClusterNetworkPolicies."""
    from netmodel.reachtiers import TieredMatrix

    pods, policies, namespaces = cluster_view(session)
    return TieredMatrix(pods, policies, cluster_policies(session), namespaces)


def _port_filter(port: int | None) -> PortSet | None:
    from netmodel.netpolicy import PROTOCOLS
    from netmodel.reach import EMPTY, PortSet

    if port is None:
        return None
    out = EMPTY
    for proto in PROTOCOLS:
        out = out | PortSet.of(proto, port, port)
    return out


def _keep(
    rows: Iterable[tuple[str, str, PortSet]], namespace: str | None, only: PortSet | None
) -> list[tuple[str, str, PortSet]]:
    if namespace is None and only is None:
        return list(rows)
    out = []
    for a, b, ports in rows:
        if namespace is not None and not (
            a.startswith(f"{namespace}/") or b.startswith(f"{namespace}/")
        ):
            continue
        if only is not None:
            ports = ports & only
            if ports.empty:
                continue
        out.append((a, b, ports))
    return out


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while the matrix is read, computed and printed. It is tens
    of thousands of acyclic objects (decoded pods, signatures, port sets, hundreds of
    thousands of pairs); the collections their allocation triggers rescan all of them
    and cost more than the work itself (on 10,000 pods and 1,000 policies: 9.8 s of
    CPU with them, 3.9 s without). Collections resume, as they were, at the end."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# --------------------------------------------------------------------------- printing


def _dot(rows: Sequence[tuple[str, str, str, str]]) -> str:
    """Graphviz source: a cluster per namespace, ranges as boxes; ``rows`` are (from,
    to, label, colour)."""
    import graphviz

    g = graphviz.Digraph("reach", graph_attr={"rankdir": "LR"})
    nodes = sorted({r[0] for r in rows} | {r[1] for r in rows})
    by_ns: dict[str, list[str]] = {}
    for n in nodes:
        if "/" in n:
            by_ns.setdefault(n.split("/", 1)[0], []).append(n)
        else:
            g.node(n, n, shape="box")
    for ns, members in sorted(by_ns.items()):
        with g.subgraph(name=f"cluster_{ns}") as sub:
            sub.attr(label=ns)
            for n in members:
                sub.node(n, n.split("/", 1)[1])
    for a, b, label, colour in rows:
        g.edge(a, b, label=label, color=colour, fontcolor=colour)
    return str(g.source)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], fmt: str) -> str:
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
        return buf.getvalue().rstrip("\n")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _write_json(doc: Any) -> None:
    """``doc`` as ``json.dumps(doc, indent=2)`` writes it, by orjson (C: a matrix of
    hundreds of thousands of pairs in a fraction of the time)."""
    import orjson

    click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())


def print_matrix(rows: Sequence[tuple[str, str, PortSet]], fmt: str) -> None:
    from netmodel.reach import to_json

    if fmt == "json":
        _write_json(to_json(rows))
    elif fmt == "text":
        texts: dict[PortSet, str] = {}
        lines = []
        for a, b, p in rows:
            t = texts.get(p)
            if t is None:
                t = texts[p] = p.text()
            lines.append(f"{a} => {b} : {t}\n")
        click.echo("".join(lines), nl=False)
    elif fmt in ("csv", "md"):
        text = _table(["src", "dst", "conn"], [(a, b, p.text()) for a, b, p in rows], fmt)
        click.echo(text)
    else:
        click.echo(_dot([(a, b, p.text(), "black") for a, b, p in rows]), nl=False)


def print_changes(changes: Sequence[Change], fmt: str) -> None:
    """Each pair's added (``+``) and removed (``-``) connections."""
    signed = []
    for c in changes:
        if not c.added.empty:
            signed.append(("+", c.src, c.dst, c.added))
        if not c.removed.empty:
            signed.append(("-", c.src, c.dst, c.removed))
    if fmt == "json":

        def entries(sign: str) -> list[dict[str, Any]]:
            return [
                {"from": a, "to": b, "protocols": p.to_json()} for s, a, b, p in signed if s == sign
            ]

        _write_json({"added": entries("+"), "removed": entries("-")})
    elif fmt == "text":
        if not signed:
            click.echo("the change adds and removes no connection")
        for s, a, b, p in signed:
            click.echo(f"{s} {a} => {b} : {p.text()}")
    elif fmt in ("csv", "md"):
        rows = [("added" if s == "+" else "removed", a, b, p.text()) for s, a, b, p in signed]
        click.echo(_table(["change", "src", "dst", "conn"], rows, fmt))
    else:
        click.echo(
            _dot([(a, b, p.text(), "darkgreen" if s == "+" else "red") for s, a, b, p in signed]),
            nl=False,
        )


# --------------------------------------------------------------------------- what-if


_CNP_KINDS = ("clusternetworkpolicy/", "clusternetworkpolicies/", "cnp/")


def _policies_of(
    files: Sequence[str], session: Session
) -> tuple[list[NetworkPolicy], list[ClusterNetworkPolicy]]:
    """The NetworkPolicies and ClusterNetworkPolicies of ``files``, admitted by the API
    server as ``svclab apply`` would admit them (a dry run: nothing stored changes)."""
    from control.apiserver import crds
    from control.apiserver.server import APIServer
    from control.events import Recorder
    from netmodel import clusterpolicy
    from netmodel.errors import InputError
    from netmodel.manifests import load
    from netmodel.netpolicy import policy_from_wire

    only = "reach --what-if takes NetworkPolicy and ClusterNetworkPolicy objects only"
    crds.sync(session.store)
    manifests = load(list(files))
    source = ",".join(manifests.sources)
    if manifests.cluster is not None or manifests.proxy_config is not None:
        raise InputError(only, file=source)
    if not manifests.objects:
        raise InputError("no objects passed to apply", file=source)
    for i, obj in enumerate(manifests.objects, start=1):
        if obj.kind == "CustomResourceDefinition" and obj.name == clusterpolicy.STORE_KIND:
            continue  # the shipped CRD a manifest of ClusterNetworkPolicies brings
        if obj.kind != "NetworkPolicy" and obj.store_kind != clusterpolicy.STORE_KIND:
            raise InputError(only, file=source, document=i, obj=obj.ref)
    api = APIServer(
        session.store,
        session.cluster.spec,
        clock=session.clock,
        recorder=Recorder(session.store, session.clock),
    )
    admitted = api.apply(manifests.objects, source=source, dry_run=True)
    nps = [policy_from_wire(o.to_dict()) for _, o in admitted if o.kind == "NetworkPolicy"]
    cnps = [
        clusterpolicy.policy_from_wire(o.to_dict())
        for _, o in admitted
        if o.store_kind == clusterpolicy.STORE_KIND
    ]
    return nps, cnps


def _what_if(
    session: Session,
    files: Sequence[str],
    delete: Sequence[str],
    namespace: str | None,
) -> list[Change]:
    from netmodel.errors import NotFoundError
    from netmodel.reach import Matrix
    from netmodel.reachdelta import delta
    from netmodel.reachtiers import tiered_what_if

    pods, policies, namespaces = cluster_view(session)
    stored_cnps = cluster_policies(session)
    add, add_cnps = _policies_of(files, session) if files else ([], [])
    keys, cnp_names = [], []
    stored = {p.key for p in policies}
    stored_cnp = {c.name for c in stored_cnps}
    for name in delete:
        kind = next((k for k in _CNP_KINDS if name.lower().startswith(k)), None)
        if kind is not None:
            cnp = name[len(kind) :]
            if cnp not in stored_cnp:
                raise NotFoundError(
                    f'clusternetworkpolicies.policy.networking.k8s.io "{cnp}" not found'
                )
            cnp_names.append(cnp)
            continue
        key = f"{namespace or 'default'}/{name}"
        if key not in stored:
            raise NotFoundError(f'networkpolicies.networking.k8s.io "{name}" not found')
        keys.append(key)
    if stored_cnps or add_cnps:
        # the tiers: both matrices in full (netmodel.reachtiers)
        return tiered_what_if(
            pods,
            policies,
            stored_cnps,
            namespaces,
            add=add,
            add_cluster=add_cnps,
            delete=keys,
            delete_cluster=cnp_names,
        )[2]
    # only the pairs the change can touch (property-tested equal to netmodel.reach.what_if,
    # which computes both matrices in full)
    return delta(Matrix(pods, policies, namespaces), add=add, delete=keys)


# --------------------------------------------------------------------------- probe


def _probe_ports(
    pods: Sequence[PolicyPod],
    policies: Sequence[NetworkPolicy],
    port: int | None,
    cnps: Sequence[ClusterNetworkPolicy] = (),
) -> list[tuple[str, int]]:
    """What ``--probe`` tries: ``port`` on each protocol, else every port a pod
    declares a name for, or a policy or ClusterNetworkPolicy names by number (each
    end of a range)."""
    from netmodel.netpolicy import PROTOCOLS

    if port is not None:
        return [(p, port) for p in PROTOCOLS]
    out: set[tuple[str, int]] = set()
    for pod in pods:
        out.update(pod.ports.values())
    for pol in policies:
        for rule in (*pol.ingress, *pol.egress):
            for spec in rule.ports:
                for v in (spec.port, spec.end_port):
                    if isinstance(v, int):
                        out.add((spec.protocol, v))
    for cnp in cnps:
        for crule in (*cnp.ingress, *cnp.egress):
            for m in crule.protocols:
                if m.protocol is not None:
                    out.update((m.protocol, v) for v in (m.start, m.end) if v is not None)
    return sorted(out)


def _probe(
    ctx: Context,
    session: Session,
    namespace: str | None,
    port: int | None,
    real: bool,
) -> tuple[list[tuple[str, str, PortSet]], list[str]]:
    """The probed rows, and each disagreement with the computed matrix."""
    from app.reachprobe import probe_matrix  # type: ignore[import-not-found,unused-ignore]
    from netmodel.reach import EMPTY, PortSet
    from netmodel.reachtiers import TieredMatrix

    pods, policies, namespaces = cluster_view(session)
    cnps = cluster_policies(session)
    ports = _probe_ports(pods, policies, port, cnps)
    found: dict[tuple[str, str], frozenset[tuple[str, int]]] = probe_matrix(
        ctx.state, ports=ports, namespaces=[namespace] if namespace else None, real=real
    )
    matrix = TieredMatrix(pods, policies, cnps, namespaces)
    rows, disagree = [], []
    for (a, b), hits in sorted(found.items()):
        ps = EMPTY
        for proto, num in hits:
            ps = ps | PortSet.of(proto, num, num)
        if not ps.empty:
            rows.append((a, b, ps))
        for proto, num in ports:
            want = matrix.allows(a, b, proto, num)
            if want != ((proto, num) in hits):
                verdict = "allows" if want else "denies"
                disagree.append(
                    f"{a} => {b} : {proto} {num}: the policies' matrix {verdict} it, "
                    f"the probe {'failed' if want else 'connected'}"
                )
    return rows, disagree


# --------------------------------------------------------------------------- command


@click.command("reach")
@click.option("-n", "--namespace", default=None, help="Only pairs with a pod of NAMESPACE")
@click.option("--port", type=PORT, default=None, help="Only what may use this port")
@click.option("-o", "--output", type=click.Choice(FORMATS), default="text", show_default=True)
@click.option(
    "--what-if", "what_if", is_flag=True, help="Print what -f FILE or --delete NAME would change"
)
@click.option("-f", "--filename", "files", multiple=True, help="With --what-if: policies to add")
@click.option(
    "--delete", "delete", multiple=True, metavar="NAME", help="With --what-if: a policy to delete"
)
@click.option("--probe", is_flag=True, help="Probe connections instead of computing them")
@click.option("--real", is_flag=True, help="With --probe: through the real kernel")
@click.pass_obj
@handle_errors
def reach(
    ctx: Context,
    namespace: str | None,
    port: int | None,
    output: str,
    what_if: bool,
    files: tuple[str, ...],
    delete: tuple[str, ...],
    probe: bool,
    real: bool,
) -> None:
    """The connections the stored NetworkPolicies and ClusterNetworkPolicies allow
    between every pair of pods (and IP ranges of ipBlocks and networks), by protocol
    and port ranges; with --what-if, those a change would add and remove (exit 1 when
    there are any)."""
    if (files or delete) and not what_if:
        raise click.UsageError("-f and --delete go with --what-if")
    if what_if and not (files or delete):
        raise click.UsageError("--what-if needs -f FILE or --delete NAME")
    if real and not probe:
        raise click.UsageError("--real goes with --probe")
    if probe and what_if:
        raise click.UsageError("--probe and --what-if do not go together")
    session = ctx.session()
    try:
        if what_if:
            from netmodel.reach import Change

            only = _port_filter(port)
            changes = []
            with _gc_paused():
                found = _what_if(session, files, delete, namespace)
            for c in found:
                kept = _keep([(c.src, c.dst, c.added)], namespace, only)
                gone = _keep([(c.src, c.dst, c.removed)], namespace, only)
                if kept or gone:
                    from netmodel.reach import EMPTY

                    changes.append(
                        Change(
                            c.src,
                            c.dst,
                            kept[0][2] if kept else EMPTY,
                            gone[0][2] if gone else EMPTY,
                        )
                    )
            print_changes(changes, output)
            if changes:
                sys.exit(1)
            return
        if probe:
            rows, disagree = _probe(ctx, session, namespace, port, real)
            print_matrix(_keep(rows, namespace, _port_filter(port)), output)
            for line in disagree:
                click.echo(f"disagree: {line}", err=True)
            if disagree:
                sys.exit(1)
            return
        with _gc_paused():
            matrix = tiered_matrix(session)
            print_matrix(_keep(matrix.pairs(), namespace, _port_filter(port)), output)
    finally:
        session.close()


COMMANDS = [reach]
