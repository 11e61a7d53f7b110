"""Record what the real network tools print, for tests/dataplane/podtools/.

Run as root on a Debian 12 machine (``python3 tests/data/podtools/record.py``; needs
iproute2, curl, wget, busybox, netcat-openbsd, iputils-ping, bind9-dnsutils, and
dnspython for the test DNS server). It builds a tiny "node" in network namespaces:

    svpt-node   bridge cni0 10.244.1.1/24 (the pods' gateway)
    svpt-client eth0 10.244.1.5/24, default via 10.244.1.1 (the pod we exec into)
    svpt-server eth0 10.244.1.6/24: an HTTP server on 8080 answering as svclab's pod
                server model does, a DNS server on 53/udp (web.default.svc.cluster.local
                A 10.244.1.6, everything else NXDOMAIN), and INPUT DROP on 81/tcp

with kubelet's resolv.conf and hosts in /etc/netns/svpt-client/, runs every tool in
svpt-client (``ip netns exec``), writes each output to ``<name>.out`` (stdout, stderr
and the exit code, in the layout of :func:`save`) and removes everything again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NS = ("svpt-node", "svpt-client", "svpt-server")

RESOLV = "nameserver 10.244.1.6\nsearch default.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
HOSTS = (
    "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost "
    "ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n10.244.1.5\tclient\n"
)

SERVER = textwrap.dedent(
    """
    import socket, socketserver, threading, dns.message, dns.rrset, dns.rcode, dns.flags
    class H(socketserver.StreamRequestHandler):
        def handle(self):
            req = b""
            body = f"default/web-1 {self.client_address[0]} {self.client_address[1]}\\n".encode()
            self.connection.settimeout(0.5)
            try:
                while not req.endswith(b"\\r\\n\\r\\n"):
                    got = self.connection.recv(4096)
                    if not got:
                        return
                    req += got
            except socket.timeout:
                self.wfile.write(body)
                return
            head = b"HTTP/1.1 200 OK\\r\\nContent-Type: text/plain; charset=utf-8\\r\\n"
            if not req.startswith(b"HEAD "):
                pass
            head += b"Content-Length: %d\\r\\nConnection: close\\r\\n\\r\\n" % len(body)
            self.wfile.write(head + (b"" if req.startswith(b"HEAD ") else body))
    class T(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
    def dns_loop():
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", 53))
        while True:
            data, peer = s.recvfrom(4096)
            q = dns.message.from_wire(data)
            r = dns.message.make_response(q)
            r.flags |= dns.flags.AA
            name = q.question[0].name.to_text().lower()
            if name == "web.default.svc.cluster.local." and q.question[0].rdtype == 1:
                r.answer.append(dns.rrset.from_text(name, 30, "IN", "A", "10.244.1.6"))
            elif name != "web.default.svc.cluster.local.":
                r.set_rcode(dns.rcode.NXDOMAIN)
                r.authority.append(dns.rrset.from_text("cluster.local.", 30, "IN", "SOA",
                    "ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30"))
            s.sendto(r.to_wire(), peer)
    threading.Thread(target=dns_loop, daemon=True).start()
    T(("0.0.0.0", 8080), H).serve_forever()
    """
)

#: name -> shell command run in svpt-client
COMMANDS = {
    "curl-s": "curl -s http://web:8080/",
    "curl-plain": "curl http://web:8080/",
    "curl-v": "curl -v http://web:8080/",
    "curl-sv": "curl -sv http://web:8080/",
    "curl-w-code": "curl -s -o /dev/null -w '%{http_code}' http://web:8080/",
    "curl-I": "curl -sI http://web:8080/",
    "curl-refused": "curl -s http://10.244.1.6:9/",
    "curl-refused-loud": "curl http://10.244.1.6:9/",
    "curl-resolve": "curl -s http://nosuch/",
    "curl-resolve-loud": "curl http://nosuch/",
    "curl-timeout": "curl -s -m 2 http://10.244.1.6:81/",
    "curl-timeout-loud": "curl -m 2 http://10.244.1.6:81/",
    "curl-v-refused": "curl -v http://10.244.1.6:9/",
    "curl-syn-timeout": "sysctl -qw net.ipv4.tcp_syn_retries=1; curl -s http://10.244.1.6:81/",
    "curl-syn-timeout-loud": "sysctl -qw net.ipv4.tcp_syn_retries=1; curl http://10.244.1.6:81/",
    "curl-v-timeout": "curl -v -m 2 http://10.244.1.6:81/",
    "curl-v-resolve": "curl -v http://nosuch/",
    "curl-head-v": "curl -v -I http://web:8080/",
    "curl-path": "curl -s http://web:8080/x/y?z=1",
    "curl-connect-timeout": "curl -sS --connect-timeout 2 http://10.244.1.6:81/",
    "curl-sS-refused": "curl -sS http://10.244.1.6:9/",
    "curl-i": "curl -si http://web:8080/",
    "curl-unreachable": "curl -sS http://10.244.1.99/",
    "curl-https": "curl -sS https://web:8080/",
    "curl-w-fail": "curl -s -o /dev/null -w '%{http_code}' http://10.244.1.6:9/",
    "curl-w-vars": "curl -s -o /dev/null -w '%{http_code} %{remote_ip}:%{remote_port}\\n' http://web:8080/",
    "curl-bad-option": "curl --nosuch http://web:8080/",
    "wget-gnu": "wget -qO- http://web:8080/",
    "wget-gnu-refused": "wget -qO- http://10.244.1.6:9/",
    "wget-busybox": "busybox wget -qO- http://web:8080/",
    "wget-busybox-refused": "busybox wget -qO- http://10.244.1.6:9/",
    "wget-busybox-resolve": "busybox wget -qO- http://nosuch/",
    "nc-z": "nc -z 10.244.1.6 8080",
    "nc-vz": "nc -vz 10.244.1.6 8080",
    "nc-vz-name": "nc -vz web 8080",
    "nc-vz-refused": "nc -vz 10.244.1.6 9",
    "nc-z-refused": "nc -z 10.244.1.6 9",
    "nc-vz-timeout": "nc -vz -w 2 10.244.1.6 81",
    "nc-vz-resolve": "nc -vz nosuch 80",
    "nc-plain": "nc 10.244.1.6 8080",
    "nc-unreachable": "nc -vz 10.244.1.99 80",
    "nc-vz-unnamed-port": "nc -vz 10.244.1.6 8081",
    "ping-refused-name": "ping -c 1 -W 1 client",
    "getent-ip": "getent hosts 10.244.1.6",
    "hostname": "hostname",
    "nc-syn-timeout": "sysctl -qw net.ipv4.tcp_syn_retries=1; nc -vz 10.244.1.6 81",
    "ping-c3": "ping -c 3 10.244.1.6",
    "ping-name": "ping -c 1 web",
    "ping-unreachable": "ping -c 2 -W 1 10.244.1.99",
    "ping-resolve": "ping -c 1 nosuch",
    "nslookup": "nslookup web",
    "nslookup-fqdn": "nslookup web.default.svc.cluster.local",
    "nslookup-nx": "nslookup nosuch",
    "busybox-nslookup": "busybox nslookup web.default.svc.cluster.local",
    "dig": "dig web.default.svc.cluster.local",
    "dig-short": "dig +short web.default.svc.cluster.local",
    "dig-nx": "dig nosuch.default.svc.cluster.local",
    "getent": "getent hosts web",
    "getent-nx": "getent hosts nosuch",
    "getent-local": "getent hosts client",
    "ip-addr": "ip addr",
    "ip-route": "ip route",
    "ip-neigh": "ip neigh",
    "ip-rule": "ip rule",
    "cat-resolv": "cat /etc/resolv.conf",
    "cat-hosts": "cat /etc/hosts",
}


def sh(cmd: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["bash", "-c", cmd], capture_output=True, check=check)


def save(name: str, p: subprocess.CompletedProcess[bytes], cmd: str) -> None:
    """``# cmd``, the exit code, then stdout and stderr each after a marker line."""
    data = (
        f"# {cmd}\n# exit {p.returncode}\n".encode()
        + b"#---- stdout\n" + p.stdout
        + b"#---- stderr\n" + p.stderr
    )
    (HERE / f"{name}.out").write_bytes(data)


def setup() -> None:
    for n in NS:
        sh(f"ip netns add {n}")
    sh("ip -n svpt-node link add cni0 type bridge && ip -n svpt-node addr add 10.244.1.1/24 dev cni0"
       " && ip -n svpt-node link set cni0 up && ip -n svpt-node link set lo up")
    for pod, ip, mac in (("client", "10.244.1.5", "0a:58:0a:f4:01:05"), ("server", "10.244.1.6", "0a:58:0a:f4:01:06")):
        sh(f"ip link add veth-{pod} netns svpt-node type veth peer name eth0 netns svpt-{pod}")
        sh(f"ip -n svpt-{pod} link set eth0 address {mac} mtu 1450 && ip -n svpt-{pod} addr add {ip}/24 dev eth0"
           f" && ip -n svpt-{pod} link set eth0 up && ip -n svpt-{pod} link set lo up"
           f" && ip -n svpt-{pod} route add default via 10.244.1.1"
           f" && ip -n svpt-node link set veth-{pod} master cni0 mtu 1450 up")
    sh("ip netns exec svpt-server iptables -A INPUT -p tcp --dport 81 -j DROP")
    d = Path("/etc/netns/svpt-client")
    d.mkdir(parents=True, exist_ok=True)
    (d / "resolv.conf").write_text(RESOLV)
    (d / "hosts").write_text(HOSTS)


def teardown() -> None:
    for n in NS:
        sh(f"ip netns pids {n} | xargs -r kill", check=False)
        sh(f"ip netns del {n}", check=False)
    shutil.rmtree("/etc/netns/svpt-client", ignore_errors=True)


def main() -> int:
    if os.geteuid() != 0:
        print("run as root", file=sys.stderr)
        return 1
    teardown()
    setup()
    server = subprocess.Popen(["ip", "netns", "exec", "svpt-server", sys.executable, "-c", SERVER])
    try:
        time.sleep(1.5)
        for name, cmd in COMMANDS.items():
            p = sh(f"timeout 20 ip netns exec svpt-client bash -c {cmd!r} < /dev/null", check=False)
            save(name, p, cmd)
        versions = sh("curl --version | head -1; wget --version | head -1; busybox | head -1;"
                      " ping -V; dig -v 2>&1; ip -V; dpkg -s netcat-openbsd | grep ^Version", check=False)
        (HERE / "VERSIONS").write_bytes(versions.stdout)
    finally:
        server.kill()
        teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
