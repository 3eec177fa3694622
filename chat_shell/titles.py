"""Generated conversation titles (issue 22): the prompt, its bounded input, the answer's cleanup.

After a conversation's first reply the runtime asks the summarizer's model (a small, cheap call,
never streamed) for a title of a few words. The exchange it sees is cut to a fixed token budget,
so a 100,000-character first message costs what a short one does. Models decorate titles
("Title: **Trip to Lisbon**."), so the answer is cleaned to one plain line of at most
`MAX_TITLE_CHARS` characters; an answer with nothing left is no title, and the conversation
keeps its first line.
"""

from __future__ import annotations

import re

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from chat_shell.accounting.text_counter import TextCounter
from chat_shell.contracts import TitleRequest

MAX_TITLE_CHARS = 60
# What the title writer sees of each side of the exchange, in tokens.
TITLE_INPUT_TOKENS = 400
# Enough for a few words in any script; a longer answer is cut by the cleanup anyway.
TITLE_OUTPUT_TOKENS = 32

TITLE_ROLE = "You name conversations between a user and an AI assistant."
TITLE_INSTRUCTIONS = f"""{TITLE_ROLE}
Reply with a title of at most six words for the conversation below: what the user wants, in the
language the user wrote in. Output only the title: no quotes, no Markdown, no trailing period."""

_LABEL = re.compile(r"^\s*(title|标题)\s*[:：]\s*", re.IGNORECASE)
_HEADING = re.compile(r"^\s*(?:#{1,6}|>+|[-*+]|\d+[.)])\s+")
# Emphasis and code marks; an underscore inside a word (`read_file`) is kept.
_MARKUP = re.compile(r"`+|\*+|~~|(?<!\w)_+|_+(?!\w)")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_QUOTES = "\"'“”‘’«»「」『』"
_TRAILING = ".。,，;；:：、…- "  # a question or an exclamation keeps its mark


def title_messages(request: TitleRequest, counter: TextCounter) -> list[BaseMessage]:
    """The title writer's request: its instructions, then the start of each side of the exchange
    (the user's side names the message's files after its text)."""
    files = f"Files: {', '.join(request.file_names)}" if request.file_names else ""
    user = "\n".join(part for part in (request.user_text, files) if part)
    exchange = (
        f"User:\n{counter.head(user, TITLE_INPUT_TOKENS)}\n\n"
        f"Assistant:\n{counter.head(request.reply_text, TITLE_INPUT_TOKENS)}"
    )
    return [SystemMessage(TITLE_INSTRUCTIONS), HumanMessage(exchange)]


def clean_title(answer: str) -> str | None:
    """The model's answer as a title: its first non-empty line without a "Title:" label,
    Markdown, quotes or trailing punctuation, cut at a word to `MAX_TITLE_CHARS`; None if
    nothing is left."""
    line = next((line for line in answer.splitlines() if line.strip()), "")
    line = _LINK.sub(r"\1", _LABEL.sub("", _HEADING.sub("", line)))
    line = " ".join(_MARKUP.sub("", line).split()).strip(_QUOTES + " ").rstrip(_TRAILING).strip(_QUOTES)
    if len(line) > MAX_TITLE_CHARS:
        cut = line[: MAX_TITLE_CHARS + 1]
        # At the last space when there is one (Chinese has none: cut at the limit).
        line = (cut.rsplit(" ", 1)[0] if " " in cut else cut[:MAX_TITLE_CHARS]).rstrip(_TRAILING)
    return line or None
