"""svclab's error tree. Every error a user can cause is one of these.

::

    SvclabError                    exit code 1 unless stated
    ├── InputError                 bad manifest / flag value: names file, document, object, field
    │   └── SchemaError            unknown kind or field, wrong type (strict field validation)
    ├── InvalidError               the apiserver refused an object (validation / admission)
    │   └── AllocationError        no free ClusterIP / NodePort / podCIDR / LB IP, or one taken
    ├── ConflictError              resourceVersion compare-and-swap failed, or already exists
    ├── NotFoundError              no such object
    ├── CompactedError             watch from a revision older than the store keeps
    ├── UnsupportedRuleError       a netfilter match/target svclab cannot evaluate (names the line)
    └── BackendError               the real kernel backend failed (names the operation)

    UsageError (exit code 2) is the CLI's (click.UsageError); it is not part of this tree.

Each error renders as one line (``str(err)``), which is what the CLI prints.
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
