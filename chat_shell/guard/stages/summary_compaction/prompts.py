"""What the summarizer is told, and the line that opens every summary (SPEC 5.3)."""

from __future__ import annotations

from chat_shell.languages import CjkLanguage
from chat_shell.messages.attachment_names import ATTACHMENT_REFERENCE

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
# The summary's language, stated in that language after the transcript, the last thing the
# summarizer reads before it writes: a small model told only "the conversation's language" in
# its instructions summarized both Chinese conversations of bench_summary_facts in English.
LANGUAGE_REQUIREMENTS: dict[CjkLanguage, str] = {
    "zh": "请用中文撰写摘要：标题和要点都用中文，数字、日期、金额、编号、人名和路径照原样抄写。",
    "ja": (
        "要約は日本語で書いてください。"
        "見出しも要点も日本語で、数字・日付・金額・ID・名前・パスはそのまま写してください。"
    ),
    "ko": (
        "요약은 한국어로 작성하세요. "
        "제목과 요점도 한국어로 쓰고, 숫자·날짜·금액·ID·이름·경로는 그대로 옮겨 적으세요."
    ),
}
# One rewrite of a summary that came back in another language, instructed in the one wanted.
REWRITE_INSTRUCTIONS: dict[CjkLanguage, str] = {
    "zh": (
        f"{SUMMARIZER_ROLE}\n下面的摘要用错了语言。把它完整地改写成中文，保留它的结构和所有要点，"
        "每一个数字、日期、金额、编号、人名和路径都照原样抄写。只输出改写后的中文摘要。"
    ),
    "ja": (
        f"{SUMMARIZER_ROLE}\n次の要約は言語が違います。構成と要点をすべて保ったまま日本語に書き直し、"
        "数字・日付・金額・ID・名前・パスはそのまま写してください。書き直した要約だけを出力してください。"
    ),
    "ko": (
        f"{SUMMARIZER_ROLE}\n아래 요약은 다른 언어로 쓰였습니다. 구조와 요점을 모두 유지한 채 "
        "한국어로 다시 쓰고, 숫자·날짜·금액·ID·이름·경로는 그대로 옮겨 적으세요. "
        "다시 쓴 요약만 출력하세요."
    ),
}
# Room for the instructions, the labels and the language requirement of one summarizer request.
INSTRUCTION_TOKENS = 440
