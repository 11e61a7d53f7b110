"""``svclab node-dump collect DIR``: record this host's (or this network namespace's)
dataplane state with the standard tools, in the layout of
:mod:`dataplane.nodedump.layout`.

Each command runs once, read-only. A tool that is not installed (or fails) is skipped
and noted in ``manifest.json`` with the reason; the other files are still written. Run
it on a node, or inside a namespace with ``ip netns exec NAME svclab node-dump collect
DIR``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["collect"]

_COMMANDS: list[tuple[str, list[str]]] = [
    ("iptables-nft-save.txt", ["iptables-nft-save", "-c"]),
    ("iptables-legacy-save.txt", ["iptables-legacy-save", "-c"]),
    ("nft-ruleset.txt", ["nft", "list", "ruleset"]),
    ("ip-addr.json", ["ip", "-j", "addr"]),
    ("ip-route.json", ["ip", "-j", "route", "show", "table", "all"]),
    ("ip-rule.json", ["ip", "-j", "rule"]),
    ("ip-neigh.json", ["ip", "-j", "neigh"]),
    ("ipset.txt", ["ipset", "save"]),
    ("ipvsadm.txt", ["ipvsadm", "-Sn"]),
    ("conntrack.txt", ["conntrack", "-L"]),
]


def _meaningful(text: str) -> bool:
    """True when save output holds a table (not only ``#`` comments)."""
    return any(line.startswith("*") for line in text.splitlines())


def _sysctls() -> list[str]:
    """``name = value`` lines for the forwarding sysctls (see the layout)."""
    root = Path("/proc/sys")
    paths = [root / "net/ipv4/ip_forward", root / "net/bridge/bridge-nf-call-iptables"]
    conf = root / "net/ipv4/conf"
    if conf.is_dir():
        for dev in sorted(conf.iterdir()):
            paths += [dev / "route_localnet", dev / "rp_filter"]
    out = []
    for p in paths:
        try:
            value = p.read_text().strip()
        except OSError:
            continue
        out.append(f"{'.'.join(p.relative_to(root).parts)} = {value}")
    return out


def collect(directory: str) -> dict[str, Any]:
    """Write the dump into ``directory`` (created if needed); return the manifest."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for name, argv in _COMMANDS:
        cmd = " ".join(argv)
        if shutil.which(argv[0]) is None:
            skipped[name] = f"{cmd}: {argv[0]} not installed"
            continue
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            skipped[name] = f"{cmd}: {e}"
            continue
        if res.returncode != 0:
            why = (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[-1]
            skipped[name] = f"{cmd}: {why}"
            continue
        if name.startswith("iptables-") and not _meaningful(res.stdout):
            skipped[name] = f"{cmd}: no tables in this back end"
            continue
        (root / name).write_text(res.stdout)
        written[name] = cmd
    if not any(n.startswith("iptables-") for n in written) and shutil.which("iptables-save"):
        res = subprocess.run(["iptables-save", "-c"], capture_output=True, text=True, check=False)
        if res.returncode == 0 and _meaningful(res.stdout):
            (root / "iptables-save.txt").write_text(res.stdout)
            written["iptables-save.txt"] = "iptables-save -c"
    (root / "sysctl.txt").write_text("\n".join(_sysctls()) + "\n")
    written["sysctl.txt"] = "/proc/sys/net (ip_forward, route_localnet, rp_filter, bridge-nf)"
    manifest = {
        "collected_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "written": written,
        "skipped": skipped,
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
