"""Authentication: who sends a request (kube-apiserver's x509 and static-token
authenticators).

* A client certificate: the TLS layer (:mod:`.tls`) accepts any, and
  :class:`ClientCertVerifier` verifies it here as kube-apiserver's x509 authenticator
  does (the chain the client sent, up to the cluster CA, valid now, and valid for
  client authentication: no extended key usage, or one that includes clientAuth), with
  ``cryptography``'s X.509 path validation. user = CN, groups = the O attributes. A
  certificate that fails is 401, as is one without a common name.
* ``Authorization: Bearer TOKEN`` found in the ``--token-auth-file`` CSV
  (``token,user,uid,"group1,group2"``, kube-apiserver's format).
* Anything else is anonymous; the app answers 401 (anonymous auth is off, as with
  ``--anonymous-auth=false``).

kube-apiserver's union authenticator tries the client certificate first, then the
bearer token, and takes the first that names a user; each failure only counts when no
authenticator succeeds. So here too a valid certificate wins over a wrong token (kubectl
sends its kubeconfig's certificate along with ``--token``), a valid token over a
certificate that fails verification, and a request is 401 when it has credentials and
none of them is valid, or has none.

Every authenticated user is also in ``system:authenticated``.
"""

from __future__ import annotations

import csv
import datetime as dt
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.x509 import verification

from control.apiserver.http import pki
from netmodel.errors import InputError

log = logging.getLogger("svclab.authn")

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


class ClientCertVerifier:
    """kube-apiserver's x509 authenticator over the CAs of ``--client-ca-file``.

    The extension checks are ``cryptography``'s Web PKI defaults for a client
    certificate, less two that Go's ``x509.Verify`` (kube-apiserver's) does not make
    either: a subject alternative name and an authority key identifier may be absent
    (kubeadm's and ``openssl req``'s client certificates carry none). An extended key
    usage, when present, must include clientAuth, as with Go.

    A verified chain is remembered with the span its certificates are all valid in, so a
    keep-alive connection's requests cost a dictionary look-up, and a certificate that
    expires on an open connection is refused from then on."""

    #: verified chains kept (a new one past this empties the cache)
    CACHE_SIZE = 1024

    def __init__(self, roots: Sequence[x509.Certificate]) -> None:
        self._store = verification.Store(list(roots))
        self._ee_policy = (
            verification.ExtensionPolicy.webpki_defaults_ee()
            .may_be_present(x509.SubjectAlternativeName, verification.Criticality.AGNOSTIC, None)
            .may_be_present(x509.AuthorityKeyIdentifier, verification.Criticality.AGNOSTIC, None)
        )
        self._cache: dict[tuple[str, ...], tuple[User, float, float]] = {}

    def user(self, chain: Sequence[str]) -> User:
        """The user of CHAIN (PEM, the client's certificate first); Unauthorized when it
        does not verify or names no user."""
        key = tuple(chain)
        now = time.time()
        hit = self._cache.get(key)
        if hit is not None and hit[1] <= now <= hit[2]:
            return hit[0]
        try:
            certs = [x509.load_pem_x509_certificate(pem.encode()) for pem in chain]
        except ValueError as e:
            raise Unauthorized(f"unreadable client certificate: {e}") from None
        verifier = (
            verification.PolicyBuilder()
            .store(self._store)
            .time(dt.datetime.fromtimestamp(now, dt.UTC))
            .extension_policies(
                ca_policy=verification.ExtensionPolicy.webpki_defaults_ca(),
                ee_policy=self._ee_policy,
            )
            .build_client_verifier()
        )
        try:
            verified = verifier.verify(certs[0], certs[1:])
        except verification.VerificationError as e:
            msg = f"verifying certificate {certs[0].subject.rfc4514_string()!r} failed: {e}"
            log.info("unable to authenticate the request: %s", msg)
            raise Unauthorized(msg) from None
        name, groups = pki.identity(certs[0])
        if not name:
            raise Unauthorized("client certificate without a common name")
        user = with_authenticated(name, groups)
        valid_from = max(c.not_valid_before_utc for c in verified.chain).timestamp()
        valid_until = min(c.not_valid_after_utc for c in verified.chain).timestamp()
        if len(self._cache) >= self.CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = (user, valid_from, valid_until)
        return user


class Authenticator:
    """Resolves a request's credentials to a :class:`User` (see module docstring)."""

    def __init__(
        self,
        tokens: dict[str, User] | None = None,
        client_cas: Sequence[x509.Certificate] = (),
    ) -> None:
        """TOKENS: the static token file's users by token; CLIENT_CAS: the CAs client
        certificates must chain to (none: certificates identify nobody)."""
        self.tokens = tokens or {}
        self.certs = ClientCertVerifier(client_cas) if client_cas else None

    def authenticate(
        self, authorization: str | None, peer_chain: Sequence[str] | None
    ) -> User | None:
        """The user, None for an anonymous request; Unauthorized for bad credentials.
        PEER_CHAIN: the client's certificate chain as the TLS layer got it (PEM, its own
        certificate first)."""
        failure: Unauthorized | None = None
        if peer_chain and self.certs is not None:
            try:
                return self.certs.user(peer_chain)
            except Unauthorized as e:
                failure = e
        if authorization:
            scheme, _, token = authorization.partition(" ")
            token = token.strip()
            if scheme.lower() == "bearer" and token:  # any other scheme is no credential
                user = self.tokens.get(token)
                if user is not None:
                    return user
                failure = failure or Unauthorized("invalid bearer token")
        if failure is not None:
            raise failure
        return None
