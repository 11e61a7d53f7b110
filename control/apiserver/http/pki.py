"""The cluster's certificates, made with ``cryptography`` (as ``kubeadm init phase certs``).

Layout under ``DIR/pki/``::

    ca.crt, ca.key            the cluster CA (self-signed, 10 years)
    apiserver.crt, .key       the serving certificate (SANs: 127.0.0.1, localhost, the
                              listen host, kubernetes.default.svc...)
    admin.crt, .key           the client certificate DIR/kubeconfig uses
                              (CN=kubernetes-admin, O=system:masters)

Contract: :func:`ensure_pki` creates what is missing and never replaces an existing
CA (a restart keeps every issued credential valid); a serving certificate that does
not cover the listen host is issued again. Keys are EC P-256, files mode 0600.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CLUSTER_NAME = "svclab"
ADMIN_USER = "kubernetes-admin"
MASTERS_GROUP = "system:masters"


@dataclass(frozen=True)
class CA:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    if private:
        tmp.chmod(0o600)
    tmp.replace(path)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    *,
    days: int,
    ca: bool,
) -> x509.CertificateBuilder:
    """What a CA and a leaf certificate share: SUBJECT's KEY issued by ISSUER, valid from
    five minutes ago (clock skew) for DAYS, basic constraints and key usage (digital
    signature, key encipherment, and certificate signing for a CA only), both critical."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - dt.timedelta(minutes=5))
        .not_valid_after(_now() + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


def new_ca(common_name: str = "kubernetes") -> CA:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        _builder(name, name, key, days=3650, ca=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CA(cert, key)


def _leaf(
    ca: CA,
    subject: x509.Name,
    *,
    server_names: list[str] | None = None,
    days: int = 365,
) -> tuple[bytes, bytes]:
    key = _key()
    builder = _builder(subject, ca.cert.subject, key, days=days, ca=False).add_extension(
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
        critical=False,
    )
    if server_names is not None:
        alt: list[x509.GeneralName] = []
        for n in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                alt.append(x509.DNSName(n))
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        ).add_extension(x509.SubjectAlternativeName(alt), critical=False)
    else:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    cert = builder.sign(ca.key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def client_cert(ca: CA, user: str, groups: list[str], *, days: int = 365) -> tuple[bytes, bytes]:
    """A client certificate as kube-apiserver reads it: CN = user, one O per group.
    Returns (cert PEM, key PEM)."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
    return _leaf(ca, x509.Name(attrs), days=days)


def server_names(host: str) -> list[str]:
    names = [
        "127.0.0.1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    if host and host not in names and host not in ("0.0.0.0", "::"):
        names.append(host)
    return names


def load_ca(pki: Path) -> CA:
    cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return CA(cert, key)


def _covers(cert_path: Path, names: list[str]) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have = {str(v) for v in san.get_values_for_type(x509.IPAddress)}
    have |= set(san.get_values_for_type(x509.DNSName))
    return set(names) <= have and cert.not_valid_after_utc > _now()


@dataclass(frozen=True)
class Paths:
    pki: Path

    @property
    def ca_crt(self) -> Path:
        return self.pki / "ca.crt"

    @property
    def server_crt(self) -> Path:
        return self.pki / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.pki / "apiserver.key"


def adopt_ca(state_dir: Path, ca_dir: Path) -> None:
    """Make ``ca_dir``'s CA (``ca.crt`` and ``ca.key``, e.g. another replica's
    ``DIR/pki``) the CA of ``state_dir``: copied into ``DIR/pki`` when that holds none
    yet; an InputError naming the file when it holds another CA already (the
    certificates issued by it would stop working) or ``ca_dir`` holds no CA."""
    from netmodel.errors import InputError

    try:
        ca = load_ca(ca_dir)
    except (OSError, ValueError, AssertionError) as e:
        raise InputError(
            f"{ca_dir}: no usable CA here (ca.crt and ca.key): {e}", field="--ca"
        ) from None
    pki = state_dir / "pki"
    have = pki / "ca.crt"
    if have.exists():
        if have.read_bytes().strip() != ca.pem.strip():
            raise InputError(
                f"{have} holds another CA than {ca_dir / 'ca.crt'} (use a fresh state "
                "directory for a replica)",
                field="--ca",
            )
        return
    pki.mkdir(parents=True, exist_ok=True)
    _write(pki / "ca.key", (ca_dir / "ca.key").read_bytes(), private=True)
    _write(pki / "ca.crt", ca.pem)


def ensure_pki(state_dir: Path, host: str, port: int) -> Paths:
    """Create the CA, the serving certificate and ``DIR/kubeconfig`` when missing (see
    the module docstring). The kubeconfig is (re)written when it points elsewhere."""
    pki = state_dir / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    paths = Paths(pki)
    if not (pki / "ca.crt").exists() or not (pki / "ca.key").exists():
        ca = new_ca()
        _write(pki / "ca.key", _key_pem(ca.key), private=True)
        _write(pki / "ca.crt", ca.pem)
    ca = load_ca(pki)
    names = server_names(host)
    if not _covers(paths.server_crt, names):
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
        crt, key = _leaf(ca, subject, server_names=names)
        _write(paths.server_key, key, private=True)
        _write(paths.server_crt, crt)
    if not (pki / "admin.crt").exists():
        crt, key = client_cert(ca, ADMIN_USER, [MASTERS_GROUP], days=3650)
        _write(pki / "admin.key", key, private=True)
        _write(pki / "admin.crt", crt)
    server = server_url(host, port)
    kc = state_dir / "kubeconfig"
    current = kubeconfig(
        ca.pem,
        server,
        ADMIN_USER,
        (pki / "admin.crt").read_bytes(),
        (pki / "admin.key").read_bytes(),
    )
    if not kc.exists() or kc.read_text() != current:
        _write(kc, current.encode(), private=True)
    return paths


def server_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}"


def kubeconfig(ca_pem: bytes, server: str, user: str, cert_pem: bytes, key_pem: bytes) -> str:
    """A kubeconfig (YAML) with one cluster, one user, one context (``user@svclab``)."""

    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    context = f"{user}@{CLUSTER_NAME}"
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(cert_pem),
                    "client-key-data": b64(key_pem),
                },
            }
        ],
        "contexts": [{"name": context, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def user_kubeconfig(state_dir: Path, user: str, groups: list[str], server: str) -> str:
    """Issue a client certificate signed by the cluster CA and return its kubeconfig
    (``kubeadm kubeconfig user``)."""
    ca = load_ca(state_dir / "pki")
    crt, key = client_cert(ca, user, groups)
    return kubeconfig(ca.pem, server, user, crt, key)


def identity(cert: x509.Certificate) -> tuple[str, list[str]]:
    """(user, groups) of a client certificate: CN and the O attributes."""
    cn = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return (str(cn[0]) if cn else "", [str(o) for o in orgs])
