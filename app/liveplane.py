"""The live control plane's process, as the application composes it:
``python -m app.liveplane [--real] STATE_DIR SERVER [--no-kube-proxies]``.

It is :func:`control.live.main` with the nodes' host chosen here
(:func:`app.livehost.node_host`): with ``--real`` the kubelets and kube-proxies act on
the kernel's nodes of the cluster ``svclab up --real`` built from STATE_DIR (``svclab
serve --real`` starts this); without, on emulated nodes. The control package cannot
import the application layer, so the composition lives here."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial

from app.livehost import node_host
from control.live import main as live_main


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    real = "--real" in args
    rest = [a for a in args if a != "--real"]
    return live_main(rest, make_host=partial(node_host, real=real))


if __name__ == "__main__":
    raise SystemExit(main())
