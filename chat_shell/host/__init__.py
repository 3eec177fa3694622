"""What chat_shell asks of its host for one turn: history, attachments, the user-visible record.

Package mode gives the runtime in-process readers, the same for every turn (`FixedHost`); its
requests carry their resolved history. Service mode builds clients of the backend's HTTP API,
history loader included, from the access each request carries
(`chat_shell.host.remote.RemoteHost`). The runtime code is the same either way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from chat_shell.contracts import AttachmentReader, HistoryBrowser, HistoryLoader, TurnRequest


@dataclass(frozen=True)
class TurnServices:
    # Loads the model-visible history when the request carries none (service mode).
    history: HistoryLoader | None = None
    # Attachment text for previews and `read_attachment`.
    attachments: AttachmentReader | None = None
    # The user-visible record for `list_history` and `read_message`.
    originals: HistoryBrowser | None = None


class Host(Protocol):
    def services(self, request: TurnRequest) -> TurnServices: ...


@dataclass(frozen=True)
class FixedHost:
    """The same services for every turn (package mode, tests)."""

    fixed: TurnServices

    def services(self, request: TurnRequest) -> TurnServices:
        return self.fixed
