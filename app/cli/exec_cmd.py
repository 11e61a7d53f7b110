"""``svclab exec POD [-n NS] [-c CONTAINER] -- COMMAND [ARGS...]``: run a network tool in
an emulated pod (:mod:`dataplane.podtools`): curl, wget, nc, ping, nslookup, dig, getent,
ip, cat, hostname; on hostNetwork pods also iptables-save, nft, ipvsadm, ipset,
conntrack. The tool's stdout and stderr are written as they are and its exit code is
svclab's (127: no such tool), as ``kubectl exec`` passes them through.
``SVCLAB_TRACE=1`` in svclab's environment (or curl's ``-v``/``--trace``) appends
svclab's explanation to stderr: the hops, and the rule and Service that chose the
endpoint. A connection a NetworkPolicy refused adds, unasked, a ``* svclab: refused by
policy ...`` line naming it. As kubectl, the command must follow ``--``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from app.cli.context import Context, handle_errors


class _ExecCommand(click.Command):
    """Everything after ``--`` is the pod's command, never svclab's options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" not in args:
            try:
                return super().parse_args(ctx, args)
            except click.UsageError as e:
                if "unexpected extra argument" not in e.format_message():
                    raise
                raise click.UsageError(
                    "exec POD COMMAND is not supported: use exec POD -- COMMAND", ctx
                ) from None
        i = args.index("--")
        ctx.meta["svclab.exec.argv"] = args[i + 1 :]
        return super().parse_args(ctx, args[:i])


@click.command("exec", cls=_ExecCommand)
@click.argument("pod")
@click.option("-n", "--namespace", default="default", show_default=True)
@click.option("-c", "--container", default=None, help="Container name (checked; one network)")
@click.option("-f", "--filename", "files", multiple=True, help="Throw-away cluster from manifests")
@click.pass_context
def exec_(
    click_ctx: click.Context,
    pod: str,
    namespace: str,
    container: str | None,
    files: tuple[str, ...],
) -> None:
    """Run COMMAND in an emulated pod (after --), its output as the real tool's."""
    argv: list[str] = click_ctx.meta.get("svclab.exec.argv", [])
    if not argv:
        raise click.UsageError("you must specify at least one command for the container")
    _run(click_ctx.obj, pod, namespace, container, files, argv)


@handle_errors
def _run(
    ctx: Context,
    pod: str,
    namespace: str,
    container: str | None,
    files: tuple[str, ...],
    argv: list[str],
) -> None:
    from app import podexec
    from dataplane.podtools import run

    name = pod.split("/", 1)[1] if pod.startswith(("pod/", "pods/")) else pod
    session = ctx.session(files)
    try:
        world = podexec.world(session)
        target = podexec.target(session, world, namespace, name, container)
        env: dict[str, Any] = {k: v for k, v in os.environ.items() if k == "SVCLAB_TRACE"}
        code, out, err = run(world, target, argv, env)
    finally:
        session.close()
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    sys.stderr.buffer.write(err)
    sys.stderr.flush()
    sys.exit(code)


COMMANDS = [exec_]
