"""``svclab diff --node NAME --node-dump DIR``: the kube-proxy rules node NAME should hold
given the cluster's objects, against what a dump of the real node shows
(:mod:`dataplane.nodedump.drift`), grouped by Service with the rule text.

Exit status as ``kubectl diff``: 0 when the node holds what kube-proxy would write, 1
when it differs (or on bad input, with a one-line error), 2 for bad usage.
"""

from __future__ import annotations

import json
import sys

import click

from app.cli.context import Context, handle_errors

__all__ = ["COMMANDS"]


@click.command("diff")
@click.option("--node", "node_name", required=True, help="The node whose rules to compare")
@click.option(
    "--node-dump",
    "node_dump",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="A dump of that node (see `svclab node-dump --help`)",
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.option("-f", "--filename", "files", multiple=True, help="Throw-away cluster from manifests")
@click.pass_obj
@handle_errors
def diff(ctx: Context, node_name: str, node_dump: str, output: str, files: tuple[str, ...]) -> None:
    """Show what kube-proxy on NODE should hold (from the cluster's objects) against what
    the node dump holds: missing Service chains, stale endpoints, a wrong masquerade
    mark, extra rules, and (IPVS mode) ipset members."""
    from app.cli.rules_cmd import node_rules
    from control.proxyenv import proxy_mode
    from dataplane.netfilter.ipset import parse_ipset_save
    from dataplane.netfilter.parse import parse_save
    from dataplane.netfilter.rules import Ruleset
    from dataplane.nodedump import load_node_dump
    from dataplane.nodedump.drift import diff_ipsets, diff_rules, group_by_service

    session = ctx.session(files)
    try:
        mode = proxy_mode(session.proxy_config, session.cluster.spec)
        if mode == "nftables":
            raise click.UsageError("diff compares iptables and IPVS mode rules; nftables is not")
        rendered = node_rules(session, node_name)
    finally:
        session.close()
    dump = load_node_dump(node_dump)
    actual = dump.iptables or Ruleset()
    if mode == "ipvs":
        expected = parse_save(rendered.iptables_save_text, source="<expected>")
        findings = diff_rules(expected, actual)
        findings += diff_ipsets(parse_ipset_save(rendered.ipset_text, "<expected>"), dump.ipsets)
    else:
        findings = diff_rules(parse_save(rendered.save_text, source="<expected>"), actual)
    groups = group_by_service(findings)
    if output == "json":
        click.echo(
            json.dumps(
                {
                    "node": node_name,
                    "mode": mode,
                    "in_sync": not findings,
                    "services": {s: [f.to_dict() for f in fs] for s, fs in groups.items()},
                },
                indent=2,
            )
        )
    elif not findings:
        click.echo(f"node {node_name} holds what kube-proxy ({mode}) would write")
    else:
        for svc, fs in groups.items():
            click.echo(f"{svc}:")
            for f in fs:
                where = f"{f.table} {f.chain}"
                click.echo(f"  {f.kind:<15} {where}" + (f"\n      {f.rule}" if f.rule else ""))
    if findings:
        sys.exit(1)


COMMANDS = [diff]
