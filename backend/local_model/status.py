"""The local model server's one account of itself (`LocalModelStatus`), which the page,
`/readyz`, the send route, the turn errors and the log all read, and its error."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

State = Literal["starting", "ready", "restarting", "failed"]
_CODES: dict[State, str] = {
    "starting": "local_model_starting",
    "restarting": "local_model_starting",
    "ready": "local_model_ready",
    "failed": "local_model_failed",
}


class LocalModelError(RuntimeError):
    """The local model server cannot run; the message says why and where its log is."""


@dataclass(frozen=True)
class LocalModelStatus:
    state: State
    model_id: str
    log_path: Path
    reason: str | None = None

    @property
    def code(self) -> str:
        return _CODES[self.state]

    @property
    def message(self) -> str:
        name = f"The local model ({self.model_id})"
        if self.state == "starting":
            return f"{name} is starting…"
        if self.state == "restarting":
            return f"{name} stopped ({self.reason}) and is restarting…"
        if self.state == "failed":
            return f"{name} failed: {self.reason}. Its log is {self.log_path}."
        return f"{name} is ready."

    def as_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "code": self.code,
            "model": self.model_id,
            "message": self.message,
            "reason": self.reason,
            "log_path": str(self.log_path),
        }
