"""Authentication: who sends a request (kube-apiserver's x509 and static-token
authenticators).

* A client certificate the cluster CA signed (the TLS layer verified it): user = CN,
  groups = the O attributes.
* ``Authorization: Bearer TOKEN`` found in the ``--token-auth-file`` CSV
  (``token,user,uid,"group1,group2"``, kube-apiserver's format).
* Anything else is anonymous; the app answers 401 (anonymous auth is off, as with
  ``--anonymous-auth=false``). A bearer token not in the file is 401 even when a
  certificate is given too (kube-apiserver tries every authenticator; a wrong token
  never falls through to a weaker identity here).

Every authenticated user is also in ``system:authenticated``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from control.apiserver.http import pki
from netmodel.errors import InputError

AUTHENTICATED = "system:authenticated"


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: dict[str, list[str]] = field(default_factory=dict)

    def in_group(self, group: str) -> bool:
        return group in self.groups


class Unauthorized(Exception):
    """The credentials were given but are not valid (401)."""


def with_authenticated(name: str, groups: list[str], uid: str = "") -> User:
    gs = [g for g in groups if g]
    if AUTHENTICATED not in gs:
        gs.append(AUTHENTICATED)
    return User(name, tuple(gs), uid)


def load_token_file(path: Path) -> dict[str, User]:
    """Read a static token CSV; InputError naming the file and line for a bad row."""
    tokens: dict[str, User] = {}
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"cannot read token file: {e.strerror}", file=str(path)) from None
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        if not row or (len(row) == 1 and not row[0].strip()) or row[0].startswith("#"):
            continue
        if len(row) < 3:
            raise InputError(
                f'line {lineno}: expected token,user,uid[,"groups"], got {len(row)} column(s)',
                file=str(path),
            )
        token, user, uid = (c.strip() for c in row[:3])
        if not token or not user:
            raise InputError(f"line {lineno}: empty token or user name", file=str(path))
        groups = [g.strip() for g in row[3].split(",")] if len(row) > 3 else []
        if token in tokens:
            raise InputError(f"line {lineno}: duplicate token", file=str(path))
        tokens[token] = with_authenticated(user, groups, uid)
    return tokens


class Authenticator:
    """Resolves a request's credentials to a :class:`User` (see module docstring)."""

    def __init__(self, tokens: dict[str, User] | None = None) -> None:
        self.tokens = tokens or {}
        self._cert_cache: dict[bytes, User] = {}

    def authenticate(self, authorization: str | None, peer_cert_der: bytes | None) -> User | None:
        """The user, None for an anonymous request; Unauthorized for bad credentials."""
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthorized("unsupported authorization scheme")
            user = self.tokens.get(token.strip())
            if user is None:
                raise Unauthorized("invalid bearer token")
            return user
        if peer_cert_der:
            user = self._cert_cache.get(peer_cert_der)
            if user is None:
                name, groups = pki.identity(peer_cert_der)
                if not name:
                    raise Unauthorized("client certificate without a common name")
                user = with_authenticated(name, groups)
                if len(self._cert_cache) > 1024:
                    self._cert_cache.clear()
                self._cert_cache[peer_cert_der] = user
            return user
        return None
