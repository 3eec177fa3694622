"""What the summarizer is told, and the line that opens every summary (SPEC 5.3)."""

from __future__ import annotations

from chat_shell.guard.stages.attachment_preview.wording import ATTACHMENT_REFERENCE

SUMMARY_VERSION = 1
# The first line of every summary message: tells the model what it is reading. Code never
# recognizes a summary by it (a user may type the same words); the marker decides.
SUMMARY_OPENING = (
    "[Summary of earlier turns] The earlier part of this conversation is no longer shown; this "
    "summary replaces it. Treat it as background and continue from the messages after it."
)
# The first line of every summarizer request (the scripted test provider recognizes it).
SUMMARIZER_ROLE = "You are compacting a long conversation between a user and an AI assistant."
SUMMARY_INSTRUCTIONS = f"""{SUMMARIZER_ROLE}
Write a structured summary that another assistant will rely on instead of the transcript.

Keep, with every number, date, amount, count, id, name and path copied verbatim:
1. Hard constraints the user stated: budgets, deadlines, dates, quantities, prohibitions, allergies.
2. Preferences and dislikes.
3. Decisions reached and things already done (so they are not repeated).
4. Open questions and the current task or next step.
5. Key entities: people, products, places, order ids, file paths, URLs, identifiers. Name
   every attachment as "{ATTACHMENT_REFERENCE.format(id="<ID>")} (<file name>)", its ID as shown.
6. Findings from tool results (what was looked up and what it showed).
Copy values exactly: a value replaced by a word for it ("the order", "the file") is lost. End
with a key values section: one line per number, date, id, name and path the points above use.

Drop greetings, chit-chat, repetition and long explanations. If a previous summary is given,
fold it in: keep all of its facts unless the newer transcript overrides them, and do not repeat
it word for word. Write in the language the conversation is written in. Use short headed
sections and bullet points. Stay under {{cap}} tokens. Output only the summary."""
SHORTEN_INSTRUCTIONS = f"""{SUMMARIZER_ROLE}
The summary below is too long. Rewrite it in at most {{cap}} tokens. Keep every hard
constraint, number, date, id and name verbatim; drop the least important details first. Keep
its language and structure. Output only the summary."""
# Room for the instructions and the labels of one summarizer request.
INSTRUCTION_TOKENS = 400
