"""What the request stages of one guard work on (the emergency trim and the tail drop): the
view, its accountant, the source stages and the turn's budget."""

from __future__ import annotations

from dataclasses import dataclass

from chat_shell.accounting.accountant import Accountant
from chat_shell.accounting.budget import Budget
from chat_shell.accounting.view import ContextView
from chat_shell.guard.stages.source import SourceStages


@dataclass(frozen=True)
class RequestContext:
    view: ContextView
    account: Accountant
    sources: SourceStages
    budget: Budget
