"""What a container's command does, as far as svclab evaluates it: it ends (after some
seconds, with an exit code) or it runs as a long-running server.

svclab runs no images. A container's ``command`` + ``args`` (the image's entrypoint when
``command`` is unset) is classified by :func:`program`:

* evaluated (a :class:`Program`: it runs ``seconds`` and exits with ``code``):

  - ``true`` (0), ``false`` (1), ``sleep N`` (N seconds; GNU suffixes ``s``, ``m``,
    ``h``, ``d``; several operands add up), also as ``/bin/...`` or ``/usr/bin/...``;
  - ``sh -c SCRIPT`` (also ``/bin/sh``, ``bash``, ``/bin/bash``), where SCRIPT is a list
    of those commands and ``exit [N]`` / ``:`` joined by ``;``, newlines, ``&&`` and
    ``||``, with the shell's meaning (``exit`` ends the script; ``&&``/``||`` skip by
    the last status; the script's status is the last command's);

* a long-running server (:class:`Server`, with the reason), everything else: no
  ``command`` (the image's entrypoint), ``sleep infinity``, any other program
  (``nginx``, ``python app.py``), and scripts using anything outside the forms above
  (variables, redirections, pipes, ``&``, other commands such as ``echo``).

The emulator runs a :class:`Program` on the control plane's clock; the Linux backend
runs the same argv for real in the pod's network namespace (the forms above exist on
every host), so both backends evaluate exactly the same commands.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

#: programs svclab knows, by the name a command gives them (bare or under /bin, /usr/bin)
_DIRS = ("", "/bin/", "/usr/bin/")
_SHELLS = frozenset(d + s for d in _DIRS for s in ("sh", "bash"))
_SLEEP = frozenset(d + "sleep" for d in _DIRS)
_TRUE = frozenset(d + "true" for d in _DIRS)
_FALSE = frozenset(d + "false" for d in _DIRS)
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)")
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: characters that make a shell word something svclab does not evaluate
_SPECIAL = set("$`<>(){}*?[]~\\\"'=")
_OPERATORS = frozenset({";", "\n", "&&", "||"})


@dataclass(frozen=True, slots=True)
class Program:
    """A command that ends: ``seconds`` after it starts, with exit status ``code``.
    ``argv``: what the Linux backend runs for real."""

    seconds: float
    code: int
    argv: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Server:
    """A command svclab treats as a long-running server; ``why`` says which form it is."""

    why: str


class _NotEvaluated(Exception):
    """A command or script outside the evaluated forms (the message names it)."""


def program(command: Sequence[str] | None, args: Sequence[str] | None) -> Program | Server:
    """Classify a container's ``command`` and ``args`` (see the module docstring)."""
    if not command:
        return Server("no command: the image's entrypoint runs, a long-running server")
    argv = tuple(command) + tuple(args or ())
    try:
        if argv[0] in _SHELLS:
            if len(argv) < 3 or argv[1] != "-c":
                raise _NotEvaluated(f"{argv[0]} without -c SCRIPT")
            seconds, code, forever = _script(argv[2])
        else:
            seconds, code, forever = _simple(list(argv), in_shell=False)
    except _NotEvaluated as e:
        return Server(f"not evaluated ({e}): treated as a long-running server")
    if forever:
        return Server("sleep infinity: a long-running server")
    return Program(seconds, code, argv)


def _simple(words: list[str], *, in_shell: bool) -> tuple[float, int, bool]:
    """(seconds, status, runs forever) of one simple command."""
    name, rest = words[0], words[1:]
    if name in _TRUE or (in_shell and name == ":"):
        return 0.0, 0, False
    if name in _FALSE:
        return 0.0, 1, False
    if name in _SLEEP:
        if not rest:
            raise _NotEvaluated("sleep without an operand")
        if "infinity" in rest:
            return 0.0, 0, True
        total = 0.0
        for op in rest:
            m = _DURATION.fullmatch(op)
            if m is None:
                raise _NotEvaluated(f"sleep {op!r}")
            total += float(m.group(1)) * _UNIT[m.group(2)]
        return total, 0, False
    raise _NotEvaluated(f"command {name!r}")


def _exit_status(words: list[str], last: int) -> int:
    if len(words) == 1:
        return last
    if len(words) > 2 or not re.fullmatch(r"\d+", words[1]):
        raise _NotEvaluated(f"exit {' '.join(words[1:])!r}")
    return int(words[1]) % 256


def _tokens(script: str) -> list[str]:
    lex = shlex.shlex(script, posix=True, punctuation_chars=";&|")
    lex.whitespace = " \t\r"
    lex.commenters = ""
    lex.wordchars += "\n"  # newlines are split out below
    out: list[str] = []
    try:
        raw = list(lex)
    except ValueError as e:
        raise _NotEvaluated(f"script: {e}") from None
    for tok in raw:
        parts = tok.split("\n")
        for i, part in enumerate(parts):
            if i:
                out.append("\n")
            if part:
                out.append(part)
    return out


def _script(script: str) -> tuple[float, int, bool]:
    """(seconds, status, runs forever) of a ``sh -c`` script of the evaluated forms."""
    for ch in _SPECIAL:
        if ch in script:
            raise _NotEvaluated(f"script uses {ch!r}")
    seconds, status = 0.0, 0
    words: list[str] = []
    pending_op = ";"  # the operator before the command being read
    for tok in [*_tokens(script), ";"]:
        if tok in ("&", "|", ";;", "&;", "|&", ">&", "<&") or (
            tok.strip(";&|") == "" and tok not in _OPERATORS
        ):
            raise _NotEvaluated(f"script uses {tok!r}")
        if tok not in _OPERATORS:
            words.append(tok)
            continue
        if not words:
            if tok in ("&&", "||"):
                raise _NotEvaluated(f"script: {tok!r} without a command before it")
            pending_op = ";"
            continue
        skip = (pending_op == "&&" and status != 0) or (pending_op == "||" and status == 0)
        if not skip:
            if words[0] == "exit":
                return seconds, _exit_status(words, status), False
            secs, status, forever = _simple(words, in_shell=True)
            seconds += secs
            if forever:
                return seconds, 0, True
        words = []
        pending_op = tok if tok in ("&&", "||") else ";"
    return seconds, status, False
