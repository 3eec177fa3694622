"""Tools offered per attempt: a tool registered with a condition is bound to the model (and
counted by the guard) only in turns that satisfy it; graphs are still compiled once."""

from __future__ import annotations

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import tool

from chat_shell.contracts import ChainMessage, ChainMetadata
from chat_shell.messages.markers import MARKER_KEY
from chat_shell.tools.registry import ToolRegistry, TurnFacts, default_tools
from tests.chat_shell.conftest import MakeShell
from tests.support.report_tool import generate_report
from tests.support.scripted_provider import ScriptedProvider, text
from tests.support.turns import collect, make_request


@tool
async def recall(topic: str) -> str:
    """Recall what the summary left out about `topic`."""
    return f"nothing more about {topic}"


def _registry() -> ToolRegistry:
    registry = ToolRegistry([generate_report])
    registry.register(recall, offered_when=lambda facts: facts.has_checkpoint)
    return registry


SUMMARIZED = [
    ChainMessage(
        role="user", content="Summary: we planned Kyoto.", metadata=ChainMetadata(summary_compacted=True)
    ),
    ChainMessage(role="assistant", content="Yes."),
]
# Starts like a summary but carries no marker: the history holds no checkpoint.
LOOK_ALIKE = [
    ChainMessage(role="user", content="Summary: we planned Kyoto."),
    ChainMessage(role="assistant", content="Yes."),
]


def _names(body: dict) -> list[str]:
    return [entry["function"]["name"] for entry in body.get("tools", [])]


def test_offered_sets_follow_the_conditions_and_are_cached() -> None:
    registry = _registry()
    plain, summarized = registry.offered(TurnFacts()), registry.offered(TurnFacts(has_checkpoint=True))
    assert plain.names == ("generate_report",) and summarized.names == ("generate_report", "recall")
    assert registry.offered(TurnFacts(has_checkpoint=True)) is summarized
    assert [s["function"]["name"] for s in summarized.schemas] == ["generate_report", "recall"]


def test_production_turns_offer_only_the_real_tools() -> None:
    builtin = default_tools()
    assert builtin.names == ["read_attachment", "list_history", "read_message"]
    assert builtin.offered(TurnFacts(has_checkpoint=True)).names == ()
    assert builtin.offered(TurnFacts(has_attachments=True)).names == ("read_attachment",)
    assert builtin.offered(TurnFacts(has_checkpoint=True, can_browse_history=True)).names == (
        "list_history",
        "read_message",
    )


async def test_a_conditional_tool_is_bound_and_counted_only_when_its_condition_holds(
    make_shell: MakeShell, scripted_provider: ScriptedProvider
) -> None:
    shell = make_shell(tools=_registry())
    scripted_provider.script(text("a"), text("b"), text("c"))
    runs = []
    for turn_id, history in enumerate((LOOK_ALIKE, SUMMARIZED, LOOK_ALIKE), start=1):
        events = await collect(shell, make_request(turn_id, "go on", history=history))
        metrics = [e.snapshot for e in events if e.type == "context.metrics"]  # type: ignore[union-attr]
        runs.append((_names(scripted_provider.requests[-1]), metrics[0].breakdown["tool_schemas"]))
    assert [names for names, _ in runs] == [
        ["generate_report"],
        ["generate_report", "recall"],
        ["generate_report"],
    ]
    assert runs[1][1] > runs[0][1] == runs[2][1]  # the guard counts the schemas actually sent
    assert len(shell._graphs) == 1  # one compiled graph serves every tool set
    assert await shell.checkpoint_count() == 0


def test_read_attachment_follows_a_summary_that_names_an_attachment_by_id() -> None:
    builtin = default_tools()

    def offered(*messages: BaseMessage) -> tuple[str, ...]:
        return builtin.offered(TurnFacts.of_view(messages, can_browse_history=True)).names

    summary = {MARKER_KEY: {"summary_compacted": True}}
    naming = HumanMessage("The budget is in attachment ID 41 (notes.txt).", additional_kwargs=summary)
    copied_header = HumanMessage(
        "Read [Attachment 1/1 | ID: 41 | Name: a.log] later.", additional_kwargs=summary
    )
    silent = HumanMessage("The budget is 8000 EUR.", additional_kwargs=summary)
    # The same words typed by the user name nothing: only a summary stands in for lost messages.
    typed = HumanMessage("What is in attachment ID 41?")
    assert offered(naming) == offered(copied_header) == ("read_attachment", "list_history", "read_message")
    assert offered(silent) == ("list_history", "read_message")
    assert offered(typed) == ()
