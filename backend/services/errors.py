"""What services refuse, as types: one small hierarchy that `backend.api.errors` maps to HTTP.

Each error carries a stable `code` (the API sends it as is, SPEC 6.1) and a message a person
can act on. Services and the readers chat_shell calls raise these; nothing below the API layer
knows a status code.
"""

from __future__ import annotations


class DomainError(Exception):
    """A request the service cannot carry out; `code` says which rule it broke."""

    def __init__(self, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        # Seconds after which asking again makes sense, when the refusal is temporary.
        self.retry_after = retry_after


class NotFound(DomainError, LookupError):
    """Missing, deleted, or someone else's: the three read alike (SPEC 6.5). A `LookupError`,
    as chat_shell's reader contracts expect of an unknown id."""

    def __init__(self, message: str, code: str = "not_found") -> None:
        super().__init__(code, message)

    @classmethod
    def of(cls, what: str) -> NotFound:
        return cls(f"{what} not found")


class Malformed(DomainError):
    """Input that cannot be read at all (a paging cursor, a `Last-Event-ID`)."""


class Invalid(DomainError):
    """Input that can be read but is refused (an empty message, a weak password)."""


class Conflict(DomainError):
    """Refused in the current state; it may succeed later (a reply is still being written)."""


class Unauthenticated(DomainError):
    """Who is asking is unknown: no, wrong or expired credentials."""


class Forbidden(DomainError):
    """Known, but not allowed to do this."""


class TooLarge(DomainError):
    """Over a size limit; nothing was stored."""


class RateLimited(DomainError):
    """Over a rate or a count limit (attempts, turns or streams at once); `retry_after` says
    when asking again makes sense."""

    def __init__(self, code: str, message: str, retry_after: int = 1) -> None:
        super().__init__(code, message, retry_after)


class UnsupportedMedia(DomainError):
    """A body in a form the endpoint does not take."""


class Unavailable(DomainError):
    """Cannot be served right now (a local model still starting)."""


class Corrupt(DomainError):
    """Stored data breaks an invariant (a fork lineage with a cycle): not the caller's fault."""
