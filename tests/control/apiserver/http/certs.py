"""Certificates for the authentication tests, made with ``cryptography`` as any CA tool
would make them (a CA of :mod:`control.apiserver.http.pki` signs them)."""

from __future__ import annotations

import datetime as dt

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from control.apiserver.http import pki


def issue(
    issuer: pki.CA,
    cn: str,
    *,
    orgs: tuple[str, ...] = (),
    ca: bool = False,
    eku: list[x509.ObjectIdentifier] | None = None,
    not_before: dt.timedelta = dt.timedelta(minutes=-5),
    not_after: dt.timedelta = dt.timedelta(days=1),
) -> tuple[pki.CA, str]:
    """A certificate ISSUER signs (built with cryptography, as any CA tool would), with its
    key, and its PEM text. NOT_BEFORE/NOT_AFTER: offsets from now."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
        + ([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else [])
    )
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + not_before)
        .not_valid_after(now + not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()),
            critical=False,
        )
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, False, False, False),
            critical=True,
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    if eku is not None:
        b = b.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    cert = b.sign(issuer.key, hashes.SHA256())
    return pki.CA(cert, key), cert.public_bytes(serialization.Encoding.PEM).decode()


def key_pem(ca: pki.CA) -> bytes:
    """The private key of ISSUE's first result, PEM (PKCS#8)."""
    return ca.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
