"""svclab's error tree, in one place. Every error a user can cause is a
:class:`SvclabError`; the CLI prints it as one line (``str(err)``) and exits with its
``exit_code`` (1 for all of them today).

The bases are defined here; the subclasses next to the code that raises them (they carry
its vocabulary), listed here with where each lives::

    SvclabError
    ├── InputError                 bad manifest / flag value: names file, document, object, field
    │   ├── SchemaError            unknown kind or field, wrong type (strict field validation)
    │   ├── InvalidError           the apiserver refused an object (validation / admission)
    │   │   ├── AllocationError    no free ClusterIP / NodePort / podCIDR / LB IP, or one taken
    │   │   └── SchemaInvalidError every problem of a custom resource against its schema
    │   │                          (netmodel.structural)
    │   ├── RestoreError           iptables-save/restore text refused (dataplane.netfilter.ruleparse)
    │   ├── NftError               nft text refused (dataplane.netfilter.nftrules)
    │   ├── TooManyNodesError      a picture of more nodes than it can draw (app.pictures.scene)
    │   └── CronError              a CronJob schedule svclab does not take (control.cron)
    ├── ConflictError              resourceVersion compare-and-swap failed, or already exists
    │   ├── BatchConflictError     writes of a batch another client overtook; the rest
    │   │                          landed (control.store.base)
    │   └── GuardMovedError        another API server replica moved the allocation guard;
    │                              nothing applied (control.store.base)
    ├── NotFoundError              no such object
    ├── CompactedError             watch from a revision older than the store keeps
    │   └── HistoryCompactedError  etcd compacted the revision asked for (control.store.etcd_watch)
    ├── UnsupportedRuleError       a netfilter match/target svclab cannot evaluate (names the line)
    ├── BackendError               the real kernel backend failed (names the operation)
    │   ├── CniError               a CNI plugin failed (dataplane.linux.cni)
    │   ├── NotReady               a realised cluster did not become ready (dataplane.linux.ready)
    │   ├── ConnectFailed          a kernel connection failed: its socket's verdict
    │   │                          (dataplane.linux.traffic)
    │   ├── PortInUse              the source port asked for is taken (dataplane.linux.traffic)
    │   └── IpamMismatch           the real host-local IPAM chose another address than the
    │                              model (app.realnet)
    ├── AddressNotAvailable        an emulated connect() found no free ephemeral port:
    │                              EADDRNOTAVAIL (dataplane.emulator.ports)
    ├── NoClusterError             no cluster in the state directory (control.session)
    ├── ConvergenceError           the runner found no fixed point (control.runner)
    ├── AlreadyServedError         the state directory is served already (control.serving)
    ├── StoreUnavailableError      no etcd member answers (control.store.etcd_client)
    ├── EtcdRequestError           etcd refused a request (control.store.etcd_client)
    ├── APIError                   the API server answered with an error status
    │   │                          (control.informers.http)
    │   ├── AccessError            ... 401 or 403 (control.informers.http)
    │   └── ServerUnavailableError the server could not be reached, or a write's connection
    │                              broke (maybe applied: re-read) (control.informers.http)
    ├── ReadOnlyError              a write through a read-only API client (control.informers.remote)
    ├── NoRealCluster              no real cluster recorded in the state directory (app.real)
    └── LookupFailed               a DNS name did not resolve (app.names)

Outside the tree, on purpose:

* ``UsageError`` (exit code 2) is the CLI's (``click.UsageError``, printed as one line by
  ``app.cli.context.OneLineUsageError``);
* the HTTP API server's own exceptions become Kubernetes ``Status`` responses, never CLI
  errors: ``control.apiserver.http.status.APIError``, ``.authn.Unauthorized``,
  ``.patch.PatchError``, ``.proto.ProtobufError``;
* warnings: ``control.apiserver.validation.APIWarning`` (what kube-apiserver returns as
  ``Warning`` headers), ``dataplane.backends.realise.DriftWarning``.
"""

from __future__ import annotations


class SvclabError(Exception):
    """Base of every svclab error; ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class InputError(SvclabError):
    """Bad user input. The message names where: ``FILE[doc N] Kind/ns/name: field.path: why``."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        document: int | None = None,
        obj: str | None = None,
        field: str | None = None,
    ) -> None:
        self.file = file
        self.document = document
        self.obj = obj
        self.field = field
        self.reason = message
        parts: list[str] = []
        where = ""
        if file is not None:
            where = file
            if document is not None:
                where += f" (document {document})"
        elif document is not None:
            where = f"document {document}"
        if where:
            parts.append(where)
        if obj:
            parts.append(obj)
        if field:
            parts.append(field)
        parts.append(message)
        super().__init__(": ".join(parts))

    def located(self, *, file: str | None = None, document: int | None = None) -> InputError:
        """The same error with the file / document filled in (used by the manifest loader)."""
        return type(self)(
            self.reason,
            file=self.file or file,
            document=self.document if self.document is not None else document,
            obj=self.obj,
            field=self.field,
        )


class SchemaError(InputError):
    """A field or kind that no Kubernetes schema has, or a value of the wrong type."""


class InvalidError(InputError):
    """The apiserver refused the object (validation or admission); nothing was stored."""


class AllocationError(InvalidError):
    """An address or port could not be allocated (range full, or the requested one is taken)."""


class ConflictError(SvclabError):
    """Compare-and-swap failed (stale resourceVersion) or the object already exists."""


class NotFoundError(SvclabError):
    """The object does not exist."""


class CompactedError(SvclabError):
    """A watch asked for a revision the store has compacted away."""


class UnsupportedRuleError(SvclabError):
    """A netfilter match or target svclab does not evaluate; names the rule line."""


class BackendError(SvclabError):
    """A real-kernel operation failed."""
