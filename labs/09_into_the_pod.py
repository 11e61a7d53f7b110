#!/usr/bin/env python3
"""Lab 09 — into the pod: the SNAT lesson, seen from the server's own access log.

What ``kubectl exec``, ``kubectl logs`` and ``kubectl port-forward`` reach, asked of
the pods directly through the pod runtime (the kubelet's side of those commands, the
same calls ``svclab serve`` makes):

1. exec into pod `client` (node-1) and ``curl -s web``, a Service by name: the answer
   names the server pod (`web`, on node-2) and the source address it saw, the client
   pod's own (ClusterIP traffic from a pod is not masqueraded);
2. read `web`'s log (its CRI log file, as ``kubectl logs web``): the access record
   shows the same client address and port;
3. a NodePort Service `web-np` with ``externalTrafficPolicy: Cluster``, reached from
   another node (node-1, where kube-apiserver runs, the runtime's ``dial``) at node-2's
   address: node-2 masquerades, and the log shows node-2's own address, not node-1's;
4. the same with ``externalTrafficPolicy: Local`` (node-2 has the endpoint): no SNAT,
   the log shows node-1's address, the client's own;
5. ``kubectl port-forward`` to `web` (the runtime's ``port_forward``): kubelet connects
   from inside the pod, and the log shows 127.0.0.1.

With ``--pictures DIR`` it draws step 3's path (the emulator's trace, SNAT included).
Run with ``--real`` to ask the same of real network namespaces (needs root; the
cluster is brought up with ``svclab up --real``'s code in a temporary state directory
and torn down at the end).
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Checks, parse_real_flag, save_trace

from app.podruntime import runtime_for
from control.apiserver import crilog
from control.apiserver.podruntime import ExecSpec, PodRuntime, PodRuntimeError
from control.session import Session
from netmodel.manifests import load_text
from netmodel.objects import Node, Pod

NODE_PORT = 30080

MANIFEST = """
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {name: lab09}
spec: {nodes: 2}
---
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  nodeSelector: {kubernetes.io/hostname: node-2}
  containers:
  - {name: web, image: agnhost, args: [netexec], ports: [{containerPort: 8080}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  nodeSelector: {kubernetes.io/hostname: node-1}
  containers: [{name: client, image: busybox}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
"""

NODEPORT = """
apiVersion: v1
kind: Service
metadata: {name: web-np}
spec:
  type: NodePort
  externalTrafficPolicy: %s
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080, nodePort: %d}]
"""


class Captured:
    """An exec's client side: no stdin, output kept."""

    def __init__(self) -> None:
        self.out = b""
        self.err = b""

    async def read_stdin(self) -> bytes | None:
        return None

    async def write_stdout(self, data: bytes) -> None:
        self.out += data

    async def write_stderr(self, data: bytes) -> None:
        self.err += data


async def exec_(rt: PodRuntime, pod: str, *argv: str) -> tuple[int, str, str]:
    io = Captured()
    code = await rt.exec(ExecSpec("default", pod, pod, tuple(argv)), io)
    return code, io.out.decode(), io.err.decode()


async def http_get(opening, path: str = "/") -> bytes:  # type: ignore[no-untyped-def]
    """One HTTP/1.1 request over the connection ``opening`` (a runtime call that opens
    a Conn) gives: the whole answer; empty (and the runtime's error printed) when the
    connection is refused."""
    try:
        conn = await opening
    except PodRuntimeError as e:
        print(f"   refused: {e}")
        return b""
    await conn.write(f"GET {path} HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n".encode())
    out = b""
    while chunk := await conn.read():
        out += chunk
    await conn.close()
    return out


def last_record(rt: PodRuntime) -> str:
    """The text of the last access record in pod `web`'s log (``kubectl logs web
    --tail=1``)."""
    path = rt.log_path("default", "web", "web", False)
    if path is None:
        return ""
    records = crilog.parse_records(path.read_bytes(), str(path))
    return records[-1].text.decode() if records else ""


def source(record: str) -> str:
    """The peer address of an access record (``peer:port -> local:port "..."``)."""
    return record.split(" -> ", 1)[0].rsplit(":", 1)[0] if " -> " in record else ""


def node_addresses(session: Session, name: str) -> set[str]:
    """A node's own addresses: its InternalIP and its bridge's and tunnel's (the first
    two of its pod CIDR), the ones its MASQUERADE may choose."""
    node = session.store.get("Node", f"{name}")
    assert isinstance(node, Node)
    out = set(node.internal_ips)
    if node.spec.pod_cidr:
        net = ipaddress.ip_network(node.spec.pod_cidr)
        out |= {str(net[0]), str(net[1])}
    return out


def set_policy(session: Session, policy: str, real: bool) -> None:
    session.apply(load_text(NODEPORT % (policy, NODE_PORT), source=f"lab09 {policy}"))
    session.converge()
    if real:
        from app import real as realmod

        realmod.ensure_current(session)


async def lab(session: Session, rt: PodRuntime, c: Checks, real: bool) -> None:
    web = session.store.get("Pod", "default/web")
    client = session.store.get("Pod", "default/client")
    assert isinstance(web, Pod) and isinstance(client, Pod)
    client_ip, web_ip = client.status.pod_ip or "", web.status.pod_ip or ""
    n1 = session.store.get("Node", "node-1")
    n2 = session.store.get("Node", "node-2")
    assert isinstance(n1, Node) and isinstance(n2, Node)
    node1_ip, node2_ip = n1.internal_ips[0], n2.internal_ips[0]
    print(f"   client {client_ip} on node-1 ({node1_ip}), web {web_ip} on node-2 ({node2_ip})")

    print("1. kubectl exec client -- curl -s web")
    code, out, err = await exec_(rt, "client", "curl", "-s", "web")
    print(f"   exit {code}: {out.strip()}{err.strip()}")
    fields = out.split()
    c.check(code == 0 and len(fields) == 3, "curl answered (pod, source address, source port)")
    seen_pod, seen_ip, seen_port = [*fields, "", "", ""][:3]
    c.check(seen_pod == "default/web", "the answer names the server pod default/web")
    c.check(seen_ip == client_ip, f"the server saw the client pod's own address {client_ip}")

    print("2. kubectl logs web --tail=1")
    rec = last_record(rt)
    print(f"   {rec}")
    c.check(
        rec.startswith(f"{client_ip}:{seen_port} -> {web_ip}:8080 "),
        "the access record shows the same client address and port",
    )

    print(f"3. NodePort web-np (externalTrafficPolicy Cluster) from node-1 to {node2_ip}")
    await asyncio.to_thread(set_policy, session, "Cluster", real)  # the kernel: off the loop
    answer = await http_get(rt.dial(node2_ip, NODE_PORT))
    rec = last_record(rt)
    status_line = answer.split(b"\r\n", 1)[0].decode()
    print(f"   answer: {status_line}; log: {rec}")
    snat = source(rec)
    c.check(answer.startswith(b"HTTP/1.1 200"), "the NodePort answered")
    c.check(
        snat in node_addresses(session, "node-2") and snat != node1_ip,
        f"the log shows node-2's SNAT address ({snat}), not node-1's {node1_ip}",
    )
    save_trace(session, "09_into_the_pod", "node/node-1", node2_ip, "tcp", NODE_PORT)

    print("4. the same with externalTrafficPolicy Local")
    await asyncio.to_thread(set_policy, session, "Local", real)
    answer = await http_get(rt.dial(node2_ip, NODE_PORT))
    rec = last_record(rt)
    print(f"   log: {rec}")
    c.check(answer.startswith(b"HTTP/1.1 200"), "the NodePort answered (node-2 has the endpoint)")
    c.check(source(rec) == node1_ip, f"the log shows the client's own address {node1_ip}")

    print("5. kubectl port-forward web 8080")
    answer = await http_get(rt.port_forward("default", "web", 8080), "/forwarded")
    rec = last_record(rt)
    print(f"   log: {rec}")
    c.check(answer.startswith(b"HTTP/1.1 200"), "the forwarded request was answered")
    c.check(
        source(rec) == "127.0.0.1" and '"GET /forwarded HTTP/1.1"' in rec,
        "the log shows 127.0.0.1 (kubelet connects from inside the pod)",
    )


def main() -> None:
    real = parse_real_flag(__doc__ or "")
    c = Checks("lab 09" + (" (real)" if real else ""))
    with tempfile.TemporaryDirectory(prefix="svclab-lab09-") as tmp:
        session = Session.open(tmp, must_exist=False)
        session.apply(load_text(MANIFEST, source="lab09"))
        session.converge()
        if real:
            from app import real as realmod

            realmod.up(session)
        try:
            rt = runtime_for(session, real=real)
            asyncio.run(lab(session, rt, c, real))
        finally:
            if real:
                realmod.down(tmp)
            session.close()
    c.finish()


if __name__ == "__main__":
    main()
