"""What every command module of the CLI shares: the context object (``--state``,
``--store``), the error handler and the one-line usage error. Command modules import
this, never :mod:`app.cli.main`, which imports them all and registers their commands
explicitly (so that the import order never matters).
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable, Sequence
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from netmodel.errors import SvclabError

if TYPE_CHECKING:
    from control.session import Session

F = TypeVar("F", bound=Callable[..., Any])

#: ``--state`` when not given: :data:`control.session.DEFAULT_STATE`, repeated here so
#: that ``--help`` does not import the session (a test checks that the two agree)
DEFAULT_STATE = ".svclab"


class Context:
    def __init__(self, state: str, store: str | None = None) -> None:
        self.state = Path(state)
        #: ``--store URL`` / SVCLAB_STORE (None: what the state directory remembers, else
        #: DIR/state.db); pass it to :meth:`control.session.Session.open` as store_url
        self.store = store

    def session(self, files: Sequence[str] = (), *, read_only: bool = True) -> Session:
        """A throw-away session from ``files`` if given, else the persistent one
        (``read_only``: the kube-proxies' syncs are not recorded as events)."""
        from control.session import Session

        if files:
            return Session.from_files(list(files))
        return Session.open(self.state, read_only=read_only, store_url=self.store)


def handle_errors(fn: F) -> F:
    """Turn svclab errors into one line on stderr and their exit code; an OSError that
    escapes a command (a file that went away, a full disk) likewise, exit 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SvclabError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)
        except OSError as e:
            if e.errno == errno.EPIPE:
                raise
            where = f"{e.filename}: " if e.filename else ""
            click.echo(f"error: {where}{e.strerror or e}", err=True)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


class OneLineUsageError(click.ClickException):
    """A usage error printed as one line, ``error: WHY (see 'svclab CMD --help')``,
    exit 2 (click's own report is a usage block of four lines)."""

    exit_code = 2

    def __init__(self, error: click.UsageError) -> None:
        super().__init__(error.format_message())
        self.command_path = error.ctx.command_path if error.ctx is not None else "svclab"

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message} (see '{self.command_path} --help')", err=True)
