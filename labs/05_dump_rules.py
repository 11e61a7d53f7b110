#!/usr/bin/env python3
"""Lab 05 — reading kube-proxy's rules: the nat table of one node, rule by rule.

Two nodes, a `web` pod on each (port 8080) and a `client` pod on node-1. Three Services
select the web pods:

* `web` — a ClusterIP Service (80 -> 8080) with two endpoints;
* `web-local` — a NodePort Service (30081) with externalTrafficPolicy Local;
* `web-sticky` — a ClusterIP Service with sessionAffinity ClientIP.

The lab prints what node-1's kube-proxy loads in iptables mode (the nat table, as
`iptables-save` shows it: what `svclab rules --node node-1` prints) and walks through it:

1. KUBE-SERVICES: PREROUTING (traffic from pods and the wire) and OUTPUT (the node's own)
   jump to it; it holds one rule per ClusterIP and port, jumping to that Service port's
   KUBE-SVC chain. Chain names are hashes: KUBE-SVC- + the first 16 characters of
   base32(sha256("default/web:http" + "tcp")).
2. KUBE-SVC-…: a source outside the pod CIDR is marked for masquerade, then one rule per
   endpoint picks it at random. With n endpoints the first is taken with probability
   1/n, the next with 1/(n-1) of what is left, ...; the last takes the rest.
3. KUBE-SEP-…: one chain per endpoint; DNAT to the pod's IP and port (and a pod that
   reaches itself through the Service is marked for masquerade: hairpin).
4. KUBE-MARK-MASQ sets mark 0x4000; KUBE-POSTROUTING masquerades marked packets.
5. externalTrafficPolicy Local: KUBE-NODEPORTS -> KUBE-EXT-…, which sends pod and
   node-local traffic to the cluster-wide KUBE-SVC and everything else to KUBE-SVL-…:
   this node's endpoints only, and no masquerade, so the pod sees the client's address.
6. sessionAffinity ClientIP: `-m recent --rcheck` rules ahead of the random ones send a
   client back to the endpoint whose KUBE-SEP chain recorded it (`-m recent --set`).

Each claim is checked on the rules, then on traffic (the emulator, or the kernel with
``--real``). Last, the same Services as kube-proxy's nftables mode (a `service-ips`
verdict map, `numgen` for the random pick) and IPVS mode (a virtual server per
ClusterIP with its real servers; IPVS is emulated only: this kernel has no IPVS) render
them, each excerpt checked too.

Run with ``--real`` to realise the cluster on real network namespaces (needs root):
node-1's own `iptables-save` then prints the same nat and filter tables, line for line,
and the traffic checks run on the kernel.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Checks, backend, parse_real_flag

from app.cli.rules_cmd import node_rules
from control.session import Session
from dataplane.backends import EmulatorBackend, RealBackend
from dataplane.proxy.iptables import IptablesRender
from dataplane.proxy.ipvs import IpvsRender
from dataplane.proxy.naming import sep_chain, svc_chain
from dataplane.proxy.normalize import Table, parse_tables, rule_target
from netmodel.manifests import load_text
from netmodel.objects import Node, Pod, Service
from netmodel.rulesets import IptablesRules

CLIENT = "203.0.113.5"
NODE_PORT = 30081
POD_CIDR = "10.244.0.0/16"

MANIFEST = f"""
apiVersion: svclab.dev/v1alpha1
kind: Cluster
metadata: {{name: lab05}}
spec: {{nodes: 2}}
---
apiVersion: v1
kind: Pod
metadata: {{name: web-1, labels: {{app: web}}}}
spec:
  nodeName: node-1
  containers: [{{name: web, image: nginx, ports: [{{containerPort: 8080}}]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: web-2, labels: {{app: web}}}}
spec:
  nodeName: node-2
  containers: [{{name: web, image: nginx, ports: [{{containerPort: 8080}}]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: client}}
spec:
  nodeName: node-1
  containers: [{{name: c, image: curl}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web}}
spec:
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web-local}}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080, nodePort: {NODE_PORT}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web-sticky}}
spec:
  selector: {{app: web}}
  sessionAffinity: ClientIP
  ports: [{{name: http, port: 80, targetPort: 8080}}]
"""


def section(text: str, table: str) -> list[str]:
    """One table of iptables-save text: ``*table`` to ``COMMIT``, comments left out."""
    out: list[str] = []
    for line in text.splitlines():
        if line == f"*{table}" or out:
            out.append(line)
        if out and line == "COMMIT":
            break
    return out


def say(text: str) -> None:
    """A sentence of the walk-through, wrapped."""
    print(textwrap.fill(text, 96, initial_indent="  ", subsequent_indent="  "))


def show(*rules: str) -> None:
    for r in rules:
        print(f"    {r}")


def find(nat: Table, chain: str, *needles: str) -> str:
    """The first rule of ``chain`` that contains every needle ("" if none)."""
    for r in nat.rules.get(chain, []):
        if all(n in r for n in needles):
            return r
    return ""


def nft_block(text: str, header: str) -> list[str]:
    """The lines of one ``chain``/``map``/``set`` block of ``nft list ruleset`` text."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == f"{header} {{":
            end = next(j for j in range(i, len(lines)) if lines[j] == "\t}")
            return [x.replace("\t", "  ")[2:] for x in lines[i : end + 1]]
    return []


# ---------------------------------------------------------------------------- iptables


def walk_iptables(
    c: Checks, nat: Table, nat2: Table, ip: dict[str, str], svc_ip: dict[str, str]
) -> None:
    web, web1, web2 = svc_ip["web"], f"{ip['web-1']}:8080", f"{ip['web-2']}:8080"

    print("\n== 1. KUBE-SERVICES: where every Service packet starts")
    say(
        "The nat table's PREROUTING and OUTPUT chains jump to KUBE-SERVICES, which matches "
        "each ClusterIP:port and jumps to that Service port's KUBE-SVC chain; whatever is "
        "addressed to the node itself falls through to KUBE-NODEPORTS."
    )
    entry = find(nat, "KUBE-SERVICES", f"-d {web}/32", "--dport 80 ")
    show(find(nat, "PREROUTING", "KUBE-SERVICES"), find(nat, "OUTPUT", "KUBE-SERVICES"))
    show(entry, nat.rules["KUBE-SERVICES"][-1])
    c.check(
        bool(
            find(nat, "PREROUTING", "-j KUBE-SERVICES") and find(nat, "OUTPUT", "-j KUBE-SERVICES")
        ),
        "PREROUTING (pods, the wire) and OUTPUT (the node itself) both jump to KUBE-SERVICES",
    )
    svc = svc_chain("default/web:http", "tcp")
    c.check(
        rule_target(entry) == svc,
        f'svc/web {web}:80 jumps to {svc} = KUBE-SVC- + hash16("default/web:http" + "tcp")',
    )
    c.check(
        "--dst-type LOCAL -j KUBE-NODEPORTS" in nat.rules["KUBE-SERVICES"][-1],
        "the last KUBE-SERVICES rule sends what is addressed to the node to KUBE-NODEPORTS",
    )

    print(f"\n== 2. {svc}: masquerade from outside, then a random endpoint")
    say(
        "With n endpoints the first rule matches with probability 1/n, the next with 1/(n-1) "
        "of what is left, ..., the last always: each endpoint gets 1/n of the connections. "
        "conntrack remembers the choice, so only a connection's first packet is load-balanced."
    )
    rules = nat.rules[svc]
    show(*rules)
    c.check(
        f"! -s {POD_CIDR} -d {web}/32" in rules[0] and rule_target(rules[0]) == "KUBE-MARK-MASQ",
        f"the first rule marks sources outside the pod CIDR {POD_CIDR} for masquerade",
    )
    eps = [r for r in rules if (rule_target(r) or "").startswith("KUBE-SEP-")]
    c.check(
        len(eps) == 2 and "--probability 0.50000000000 " in eps[0],
        "two endpoint rules; the first picks its endpoint with probability 0.50000000000",
    )
    c.check(
        "-m statistic" not in eps[-1],
        "the last endpoint rule has no statistic match: it takes the remaining half",
    )

    print("\n== 3. KUBE-SEP-…: one chain per endpoint, DNAT to the pod")
    say(
        "The DNAT rewrites the destination to the pod's IP and targetPort; a pod that reached "
        "itself through the Service must be masqueraded, or it would answer itself directly."
    )
    dnat = {}
    for r in eps:
        sep = rule_target(r) or ""
        show(*nat.rules[sep])
        target = find(nat, sep, "-j DNAT").rpartition("--to-destination ")[2]
        dnat[sep] = target
        c.check(
            sep == sep_chain("default/web:http", "tcp", target),
            f'{sep} = KUBE-SEP- + hash16("default/web:http" + "tcp" + "{target}")',
        )
        pod_ip = target.split(":")[0]
        c.check(
            rule_target(nat.rules[sep][0]) == "KUBE-MARK-MASQ"
            and f"-s {pod_ip}/32" in nat.rules[sep][0],
            f"{sep} marks its own pod ({pod_ip}) for masquerade: hairpin through the Service",
        )
    c.check(
        sorted(dnat.values()) == sorted([web1, web2]),
        f"the two SEP chains DNAT to web-1 ({web1}) and web-2 ({web2})",
    )

    print("\n== 4. KUBE-MARK-MASQ marks, KUBE-POSTROUTING masquerades")
    say(
        "Marking happens on the way in (nat PREROUTING/OUTPUT); the source is rewritten on "
        "the way out, once the route is known (nat POSTROUTING)."
    )
    show(*nat.rules["KUBE-MARK-MASQ"], find(nat, "POSTROUTING", "KUBE-POSTROUTING"))
    show(*nat.rules["KUBE-POSTROUTING"])
    post = nat.rules["KUBE-POSTROUTING"]
    c.check(
        nat.rules["KUBE-MARK-MASQ"] == ["-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000"],
        "KUBE-MARK-MASQ only sets mark 0x4000",
    )
    c.check(
        len(post) == 3
        and "! --mark 0x4000/0x4000 -j RETURN" in post[0]
        and post[1].endswith("--set-xmark 0x4000/0x0")
        and post[2].endswith("-j MASQUERADE --random-fully"),
        "KUBE-POSTROUTING: unmarked packets return; marked ones lose the mark and are masqueraded",
    )

    print(f"\n== 5. web-local: NodePort {NODE_PORT}, externalTrafficPolicy Local")
    say(
        "External traffic stays on the node it arrived at (KUBE-SVL: local endpoints only), "
        "so it need not be masqueraded and the pod sees the client's address. Pods and the "
        "node itself still reach every endpoint through KUBE-SVC."
    )
    nps = [r for r in nat.rules["KUBE-NODEPORTS"] if f"--dport {NODE_PORT} " in r]
    ext = rule_target(nps[-1]) or ""
    svl = ext.replace("KUBE-EXT-", "KUBE-SVL-")
    show(*nps, *nat.rules.get(ext, []), *nat.rules.get(svl, []))
    c.check(
        len(nps) == 2 and "-d 127.0.0.0/8" in nps[0] and ext.startswith("KUBE-EXT-"),
        f"KUBE-NODEPORTS sends port {NODE_PORT} (on any node address, and on localhost) to {ext}",
    )
    ext_rules = nat.rules.get(ext, [])
    c.check(
        len(ext_rules) == 4
        and f"-s {POD_CIDR}" in ext_rules[0]
        and rule_target(ext_rules[0]) == ext.replace("KUBE-EXT-", "KUBE-SVC-")
        and all("--src-type LOCAL" in r for r in ext_rules[1:3])
        and rule_target(ext_rules[3]) == svl,
        f"{ext}: pods and the node itself go to KUBE-SVC (every endpoint), the rest to {svl}",
    )
    c.check(
        all("--src-type LOCAL" in r for r in ext_rules if rule_target(r) == "KUBE-MARK-MASQ"),
        "only node-local sources are marked for masquerade: an external client keeps its address",
    )
    local = [find(nat, rule_target(r) or "", "-j DNAT") for r in nat.rules.get(svl, [])]
    c.check(
        len(local) == 1 and local[0].endswith(web1),
        f"node-1's {svl} has one endpoint, node-1's own pod web-1 ({web1})",
    )
    local2 = [find(nat2, rule_target(r) or "", "-j DNAT") for r in nat2.rules.get(svl, [])]
    show(*nat2.rules.get(svl, []))
    c.check(
        len(local2) == 1 and local2[0].endswith(web2),
        f"node-2's {svl} (above, from node-2's rules) has only web-2 ({web2})",
    )

    print("\n== 6. web-sticky: sessionAffinity ClientIP with -m recent")
    say(
        "Each endpoint's KUBE-SEP chain records the client's address in a list named after "
        "the chain; the KUBE-SVC chain checks those lists before it picks at random."
    )
    sticky = svc_chain("default/web-sticky:http", "tcp")
    rules = nat.rules[sticky]
    show(*rules)
    recent = [r for r in rules if "--rcheck" in r]
    random = [i for i, r in enumerate(rules) if "-m statistic" in r]
    c.check(
        len(recent) == 2
        and all(f"--seconds 10800 --reap --name {rule_target(r)} " in r for r in recent)
        and max(rules.index(r) for r in recent) < min(random),
        "first one --rcheck rule per endpoint (a list named after its SEP chain, 10800 s = 3 h), "
        "then the random pick",
    )
    seps = [rule_target(r) or "" for r in recent]
    sets = [find(nat, s, "--set", "-j DNAT") for s in seps]
    show(*sets)
    c.check(
        all(
            f"-m recent --set --name {s} --mask 255.255.255.255 --rsource" in r
            for s, r in zip(seps, sets, strict=True)
        ),
        "each SEP chain's DNAT rule records the client's address in its own list (--set --rsource)",
    )


# ---------------------------------------------------------------------------- traffic


def traffic(
    c: Checks,
    be: EmulatorBackend | RealBackend,
    node_ip: dict[str, str],
    ip: dict[str, str],
    svc_ip: dict[str, str],
) -> None:
    print(f"\n== the same claims, on traffic ({be.name})")
    plain = be.connect("pod/default/client", svc_ip["web"], 80, "tcp", 40)
    own = be.connect("node/node-1", svc_ip["web"], 80, "tcp", 10)
    ext = {n: be.connect(f"ext/{CLIENT}", node_ip[n], NODE_PORT, "tcp", 5) for n in node_ip}
    sticky = be.connect("pod/default/client", svc_ip["web-sticky"], 80, "tcp", 20)
    pods = {o.pod for o in plain}
    print(f"  client -> web {svc_ip['web']}:80, 40 connections: {sorted(map(str, pods))}")
    c.check(pods == {"default/web-1", "default/web-2"}, "the random pick reaches both web pods")
    c.check(
        all(
            o.verdict == "delivered" and not o.masquerade and o.source_seen == ip["client"]
            for o in plain
        ),
        "from a pod (inside the pod CIDR): no masquerade, the web pods see the client's IP",
    )
    print(f"  node-1 -> web: sources seen {sorted({str(o.source_seen) for o in own})}")
    c.check(
        all(o.verdict == "delivered" and o.masquerade for o in own),
        "from node-1 itself (outside the pod CIDR): masqueraded",
    )
    for n, outs in sorted(ext.items()):
        print(
            f"  {CLIENT} -> {n} {node_ip[n]}:{NODE_PORT}: "
            f"{sorted({str(o.pod) for o in outs})}, source seen {sorted({str(o.source_seen) for o in outs})}"
        )
        want = "default/web-1" if n == "node-1" else "default/web-2"
        c.check(
            all(o.pod == want and o.source_seen == CLIENT for o in outs),
            f"NodePort on {n}: only its own pod ({want}), the client's address kept",
        )
    print(f"  client -> web-sticky, 20 connections: {sorted({str(o.pod) for o in sticky})}")
    c.check(
        len({o.pod for o in sticky}) == 1 and all(o.verdict == "delivered" for o in sticky),
        "ClientIP affinity: every connection of the client lands on one pod",
    )


def kernel(c: Checks, be: RealBackend, save_text: str) -> None:
    """What node-1's own iptables-save prints, now that its rules are loaded, compared
    with what iptables-restore was given and with the text printed above."""
    from dataplane.backends.realise import kernel_holds
    from dataplane.linux import rules as linux_rules

    print("\n== on the kernel: node-1's own iptables-save")
    say(
        "The cluster realised on network namespaces, node-1's rules loaded with "
        "iptables-restore; what iptables-save prints back for svc/web's KUBE-SVC chain:"
    )
    loaded = be.view.rulesets["node-1"]
    assert isinstance(loaded, IptablesRules)
    netns = be.cluster.node_netns("node-1")
    holds = kernel_holds(netns, loaded.text)
    kernel_save = linux_rules.iptables_save(netns, counters=False)
    svc = svc_chain("default/web:http", "tcp")
    show(
        *[
            line
            for line in section(kernel_save, "nat")
            if svc in line and line.startswith("-A " + svc)
        ]
    )
    c.check(holds, "node-1 holds exactly the tables given to iptables-restore (kernel_holds)")

    def policies_zeroed(lines: list[str]) -> list[str]:  # built-in chains' packet counters
        return [
            line.rsplit(" [", 1)[0] + " [0:0]" if line.startswith(":") else line for line in lines
        ]

    for table in ("nat", "filter"):
        same = policies_zeroed(section(kernel_save, table)) == section(save_text, table)
        c.check(same, f"its iptables-save -t {table} is line for line what svclab rules printed")


# ---------------------------------------------------------------------------- nft, ipvs


def other_modes(c: Checks, session: Session, ip: dict[str, str], svc_ip: dict[str, str]) -> None:
    web, web1, web2 = svc_ip["web"], f"{ip['web-1']}:8080", f"{ip['web-2']}:8080"
    nft = node_rules(session, "node-1", "nftables").save_text
    print("\n== nftables mode (svclab rules --node node-1 --mode nftables), svc/web")
    say(
        "One lookup in a verdict map replaces KUBE-SERVICES' list of rules; numgen draws "
        "the endpoint in one step instead of a cascade of probabilities."
    )
    elements = " ".join(nft_block(nft, "map service-ips"))
    element = next(
        (
            e.strip(" {}")
            for e in elements.split(",")
            if e.strip(" {}").startswith(f"{web} . tcp . 80 ")
        ),
        "",
    )
    show(f"map service-ips {{ ... {element} ... }}")
    chain = element.rpartition("goto ")[2]
    block = nft_block(nft, f"chain {chain}")
    show(*block)
    c.check(
        bool(chain) and chain.startswith("service-") and chain.endswith("-default/web/tcp/http"),
        f"the service-ips map sends {web} . tcp . 80 to the Service's chain",
    )
    pick = next((r for r in block if r.strip().startswith("numgen random mod 2 vmap")), "")
    targets = [t.split(" ")[0].rstrip(",}") for t in pick.split("goto ")[1:]]
    c.check(
        len(targets) == 2,
        "numgen random mod 2 picks one of two endpoint chains (one draw, no probabilities)",
    )
    dnats = []
    for t in targets:
        ep = nft_block(nft, f"chain {t}")
        dnats += [r.rpartition("dnat to ")[2] for r in ep if "dnat to" in r]
    show(*nft_block(nft, f"chain {targets[0]}") if targets else [])
    c.check(sorted(dnats) == sorted([web1, web2]), "the endpoint chains DNAT to web-1 and web-2")
    c.check(
        "timeout 3h" in nft and "update @affinity-" in nft,
        "web-sticky: per-endpoint affinity sets (timeout 3h) updated with the client's address",
    )

    r = node_rules(session, "node-1", "ipvs")
    assert isinstance(r, IpvsRender)
    print("\n== IPVS mode (svclab rules --node node-1 --mode ipvs): ipvsadm-save -n excerpt")
    say(
        "Each ClusterIP and NodePort address is an IPVS virtual server; its endpoints are real "
        "servers reached by NAT (-m). iptables keeps only glue (ipsets, masquerade)."
    )
    vs = {(v.ip, v.port): v for v in r.virtual_servers}
    plain, sticky = vs.get((web, 80)), vs.get((svc_ip["web-sticky"], 80))
    nodeport = next(
        (v for v in r.virtual_servers if v.port == NODE_PORT and v.ip != "127.0.0.1"), None
    )
    for v in (plain, sticky, nodeport):
        if v is not None:
            show(*v.save_lines())
    c.check(
        plain is not None
        and plain.scheduler == "rr"
        and sorted(rs.address for rs in plain.real_servers) == sorted([web1, web2]),
        f"virtual server {web}:80, round robin over the real servers web-1 and web-2 (masq, -m)",
    )
    c.check(
        sticky is not None and sticky.persistence == 10800,
        "web-sticky: ClientIP affinity is IPVS persistence, -p 10800",
    )
    c.check(
        nodeport is not None and [rs.address for rs in nodeport.real_servers] == [web1],
        f"NodePort {NODE_PORT} on node-1 (eTP Local): the local pod web-1 is the only real server",
    )
    c.check(
        f"add KUBE-CLUSTER-IP {web},tcp:80" in r.ipset_text,
        "ipset KUBE-CLUSTER-IP lists the ClusterIP:port (the iptables glue matches on it)",
    )


def main() -> None:
    real = parse_real_flag(__doc__ or "")
    c = Checks("lab 05" + (" (real)" if real else ""))
    session = Session.ephemeral(load_text(MANIFEST, source="lab05"))
    ip = {p.name: p.status.pod_ip or "" for p in session.store.list("Pod") if isinstance(p, Pod)}
    svc_ip = {
        s.name: s.spec.cluster_ip or ""
        for s in session.store.list("Service")
        if isinstance(s, Service)
    }
    rendered = node_rules(session, "node-1")
    rendered2 = node_rules(session, "node-2")
    assert isinstance(rendered, IptablesRender) and isinstance(rendered2, IptablesRender)
    save_text = rendered.save_text
    print("== svclab rules --node node-1: the nat table (iptables-save form)\n")
    print("\n".join(section(save_text, "nat")))
    nat = parse_tables(save_text)["nat"]
    nat2 = parse_tables(rendered2.save_text)["nat"]
    walk_iptables(c, nat, nat2, ip, svc_ip)
    node_ip = {n.name: n.internal_ips[0] for n in session.store.list("Node") if isinstance(n, Node)}
    with backend(session, real=real, external_clients=[CLIENT], seed=5) as be:
        if isinstance(be, RealBackend):
            kernel(c, be, save_text)
        traffic(c, be, node_ip, ip, svc_ip)
    other_modes(c, session, ip, svc_ip)
    c.finish()


if __name__ == "__main__":
    main()
