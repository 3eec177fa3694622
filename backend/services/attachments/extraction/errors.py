"""Why a file's text could not be extracted, in words a user can read."""

from __future__ import annotations


class ExtractionFailed(Exception):
    """The file is stored but its text cannot be extracted; `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ExtractionStopped(ExtractionFailed):
    """Refused or stopped by a limit of the sandbox rather than by what the file holds.

    `stopped_by` names the limit (an `ExtractionLimits` field, or `worker_exit` for a worker
    that died on its own). Such an outcome depends on the limits in force, so a later upload of
    the same bytes is extracted afresh instead of reusing it.
    """

    def __init__(self, reason: str, stopped_by: str) -> None:
        super().__init__(reason)
        self.stopped_by = stopped_by
