"""Each emulated tool's output against the real tool's, recorded on Debian 12 by
tests/data/podtools/record.py (versions in tests/data/podtools/VERSIONS): a pod
10.244.1.5 on a bridge with a server pod 10.244.1.6 answering as the pod server model
does, and a DNS server. The emulator runs the same command in the examples' cluster;
names, pod names and every number (addresses, ports, ids, timings) are masked in both
(podtools_helpers.mask), so what is compared is the layout byte for byte: words,
spaces, tabs, CRs, blank lines, order, stream and exit code."""

from __future__ import annotations

import re
from ipaddress import IPv4Interface, ip_address, ip_network

import dns.flags
import dns.message
import dns.rrset
import pytest
from podtools_helpers import Shell, mask, recorded

from dataplane.podtools import curl, dnstools, iproute
from netmodel.network import ClusterNetwork, Interface, Netns, Route

POD = rb"default/web-[a-z0-9]+-[a-z0-9]+"


@pytest.fixture(scope="module")
def shell() -> Shell:
    return Shell()


def _pod_masked(data: bytes) -> bytes:
    return re.sub(POD, b"default/web-1", data)


# (recording, the emulator's command, replacements applied to the emulator's output)
SAME = [
    ("curl-s", ["curl", "-s", "http://web-headless:8080/"], [(b"web-headless", b"web")]),
    ("curl-plain", ["curl", "http://web-headless:8080/"], [(b"web-headless", b"web")]),
    ("curl-sv", ["curl", "-sv", "http://web-headless:8080/"], [(b"web-headless", b"web")]),
    ("curl-v", ["curl", "-v", "http://web-headless:8080/"], [(b"web-headless", b"web")]),
    ("curl-I", ["curl", "-sI", "http://web-headless:8080/"], []),
    ("curl-i", ["curl", "-si", "http://web-headless:8080/"], []),
    ("curl-w-code", ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "web"], []),
    ("curl-w-vars", ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{remote_ip}:%{remote_port}\\n", "web"], []),
    ("curl-resolve", ["curl", "-s", "http://nosuch/"], []),
    ("curl-resolve-loud", ["curl", "http://nosuch/"], []),
    ("curl-v-resolve", ["curl", "-v", "http://nosuch/"], []),
    ("curl-refused", ["curl", "-s", "http://10.244.0.4:9/"], []),
    ("curl-sS-refused", ["curl", "-sS", "http://10.244.0.4:9/"], []),
    ("curl-refused-loud", ["curl", "http://10.244.0.4:9/"], []),
    ("curl-v-refused", ["curl", "-v", "http://10.244.0.4:9/"], []),
    ("curl-w-fail", ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://10.244.0.4:9/"], []),
    ("curl-timeout", ["curl", "-s", "-m", "2", "http://10.96.0.5:81/"], []),
    ("curl-timeout-loud", ["curl", "-m", "2", "http://10.96.0.5:81/"], []),
    ("curl-v-timeout", ["curl", "-v", "-m", "2", "http://10.96.0.5:81/"], []),
    ("curl-connect-timeout", ["curl", "-sS", "--connect-timeout", "2", "http://10.96.0.5:81/"], []),
    ("curl-https", ["curl", "-sS", "https://web-headless:8080/"], []),
    ("curl-bad-option", ["curl", "--nosuch", "http://web:8080/"], []),
    ("wget-busybox", ["wget", "-qO-", "http://web-headless:8080/"], []),
    ("wget-busybox-refused", ["wget", "-qO-", "http://10.244.0.4:9/"], []),
    ("wget-busybox-resolve", ["wget", "-qO-", "http://nosuch/"], []),
    ("nc-z", ["nc", "-z", "10.244.0.4", "8080"], []),
    ("nc-vz", ["nc", "-vz", "10.244.0.4", "8080"], []),
    ("nc-vz-name", ["nc", "-vz", "web-headless", "8080"], [(b"web-headless", b"web")]),
    ("nc-vz-refused", ["nc", "-vz", "10.244.0.4", "9"], []),
    ("nc-z-refused", ["nc", "-z", "10.244.0.4", "9"], []),
    ("nc-vz-timeout", ["nc", "-vz", "-w", "2", "10.96.0.5", "81"], []),
    ("nc-syn-timeout", ["nc", "-vz", "10.96.0.5", "81"], []),
    ("nc-vz-resolve", ["nc", "-vz", "nosuch", "80"], []),
    ("nc-plain", ["nc", "10.244.0.4", "8080"], []),
    ("ping-c3", ["ping", "-c", "3", "10.244.0.4"], []),
    ("ping-resolve", ["ping", "-c", "1", "nosuch"], []),
    ("ping-refused-name", ["ping", "-c", "1", "client"], []),
    ("nslookup", ["nslookup", "web"], [(b"10.96.0.10", b"10.244.1.6")]),
    ("nslookup-nx", ["nslookup", "nosuch"], [(b"10.96.0.10", b"10.244.1.6")]),
    ("dig-short", ["dig", "+short", "web.default.svc.cluster.local"], []),
    ("getent", ["getent", "hosts", "web"], []),
    ("getent-nx", ["getent", "hosts", "nosuch"], []),
    ("getent-local", ["getent", "hosts", "client"], []),
    ("ip-route", ["ip", "route"], []),
    ("ip-rule", ["ip", "rule"], []),
    ("cat-resolv", ["cat", "/etc/resolv.conf"], [(b"10.96.0.10", b"10.244.1.6")]),
    ("cat-hosts", ["cat", "/etc/hosts"], []),
]


@pytest.mark.parametrize(("name", "argv", "pairs"), SAME, ids=[s[0] for s in SAME])
def test_the_emulated_tool_prints_what_the_real_one_did(
    shell: Shell, name: str, argv: list[str], pairs: list[tuple[bytes, bytes]]
) -> None:
    rec = recorded(name)
    code, out, err = shell.run("client", argv)
    err = err.split(b"* svclab: ")[0]  # -v appends svclab's explanation: not curl's
    # the recording server ran without recursion: BIND's nslookup says so, CoreDNS
    # (and the emulated one) offers it
    want_out = b"".join(
        ln for ln in rec.stdout.splitlines(keepends=True) if not ln.startswith(b";; Got recursion")
    )
    assert code == rec.exit_code, (code, out, err)
    assert mask(_pod_masked(out), *pairs) == mask(want_out), out
    assert mask(_pod_masked(err), *pairs) == mask(rec.stderr), err


def test_ip_addr_of_the_recorded_namespace() -> None:
    """The recorded pod namespace as a Netns: the same text, but for what the recording
    did differently from kubelet's CNI (no broadcast address given) and from a real
    cluster (its node namespace had a name, so ``link-netns NAME``)."""
    node = Netns(
        "node",
        "node",
        (
            Interface("cni0", "bridge", "aa:aa:aa:aa:aa:aa", (IPv4Interface("10.244.1.1/24"),)),
            Interface("veth-client", "veth", "ee:ee:ee:ee:ee:ee", peer=("pod", "eth0"), master="cni0"),
        ),
    )
    pod = Netns(
        "pod",
        "pod",
        (Interface("eth0", "veth", "0a:58:0a:f4:01:05", (IPv4Interface("10.244.1.5/24"),), mtu=1450, peer=("node", "veth-client")),),
    )
    net = ClusterNetwork({"node": node, "pod": pod})
    rec = recorded("ip-addr").stdout
    rec = rec.replace(b"link-netns svpt-node", b"link-netnsid 0")
    rec = rec.replace(b"10.244.1.5/24 scope", b"10.244.1.5/24 brd 10.244.1.255 scope")
    assert iproute.ip_addr(net, "pod").encode() == rec


def test_ip_route_of_the_recorded_namespace() -> None:
    ns = Netns(
        "pod",
        "pod",
        routes=(
            Route(ip_network("10.244.1.0/24"), "eth0", src=ip_address("10.244.1.5"), scope="link", proto="kernel"),
            Route(ip_network("0.0.0.0/0"), "eth0", via=ip_address("10.244.1.1")),
        ),
    )
    assert iproute.ip_route(ns).encode() == recorded("ip-route").stdout


def test_link_local_is_the_kernels_eui64() -> None:
    assert iproute.link_local("0a:58:0a:f4:01:05") == "fe80::858:aff:fef4:105"


def test_curl_meter_line_is_curls() -> None:
    rec = recorded("curl-plain").stderr
    last = rec.split(b"\r")[-1]
    f = last.split()
    total, speed, current = int(f[1]), int(f[6]), int(f[-1])
    assert curl.meter(total, total, speed, 0.017, current).encode() + b"\n" == b"\r" + last
    assert rec.startswith(curl.METER_HEAD.encode())


def _recorded_answer(name: str, rcode: int = 0) -> bytes:
    """The answer the recording's DNS server gave (dnspython's make_response)."""
    q = dns.message.make_query(name, "A", use_edns=0, payload=1232)
    r = dns.message.make_response(q)
    r.flags |= dns.flags.AA
    r.id = 4191
    if rcode:
        r.set_rcode(rcode)
        r.authority.append(dns.rrset.from_text("cluster.local.", 30, "IN", "SOA", "ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30"))
    else:
        r.answer.append(dns.rrset.from_text(name, 30, "IN", "A", "10.244.1.6"))
    return r.to_wire()


@pytest.mark.parametrize(("rec", "name", "rcode"), [("dig", "web.default.svc.cluster.local.", 0), ("dig-nx", "nosuch.default.svc.cluster.local.", 3)])
def test_dig_text_is_digs(rec: str, name: str, rcode: int) -> None:
    """dig's layout for the same answer: columns, sections, warnings (the id, query time
    and WHEN differ between any two runs: masked)."""
    want = recorded(rec).stdout
    got = dnstools.dig_text(name.rstrip("."), _recorded_answer(name, rcode), "10.244.1.6", name, 16, 0).encode()

    def fix(b: bytes) -> bytes:
        b = re.sub(rb"id: \d+", b"id: N", b)
        b = re.sub(rb"Query time: \d+ msec", b"Query time: N msec", b)
        b = re.sub(rb"WHEN: [^\n]*", b"WHEN: T", b)
        return b.replace(b"udp: 1232", b"udp: 8192")

    assert fix(got) == fix(want)
