"""Takes the README's screenshot: a conversation with the context meter and a compaction boundary.

    PYTHONPATH=. TIKTOKEN_CACHE_DIR=.cache/tiktoken .venv/bin/python scripts/screenshot.py [out.png]

It reuses the browser tests' harness (`tests/support/browser.py`, `tests/frontend/actions.py`):
the backend and the scripted provider on loopback ports, a conversation stored directly whose
last turn compacted, and Debian's Chromium through Playwright. Nothing is downloaded.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from tests.frontend.actions import compacted_reply, compaction_record, start
from tests.support import databases
from tests.support.browser import assistant, launch_chromium, seed_conversation, serve_fresh_stack, user

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "images" / "conversation.png"
# The browser tests' window: small, so the seeded conversation fills the meter.
CONTEXT_WINDOW = 8192

SUMMARY = (
    "Summary of earlier turns: the user plans a 5-day trip to Kyoto in April with a budget of "
    "1,200 EUR; no flights before 9:00; wants temples and a tea ceremony."
)
EARLIER = [
    ("Plan 5 days in Kyoto in April, 1,200 EUR all in.", "Day 1: Fushimi Inari at dawn, then Tofuku-ji."),
    ("No flights before 9:00, please.", "Noted: the 10:40 arrival at Kansai fits, with the Haruka to Kyoto."),
    ("Which temples are worth the queue?", "Kiyomizu-dera early, Ginkaku-ji, and the moss garden."),
    ("Where should we stay?", "Near Shijo-Karasuma: 95 EUR a night keeps you within the budget."),
]


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        template = databases.sqlite_template(directory)
        with (
            serve_fresh_stack(template, directory, context_window=CONTEXT_WINDOW) as stack,
            sync_playwright() as playwright,
        ):
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            start(page, stack, "ada")
            done = compaction_record("completed", after_tokens=1500, summary_text=SUMMARY, duration_ms=2100.0)
            messages = [item for q, a in EARLIER for item in (user(q), assistant(a))]
            cid = seed_conversation(
                stack.database_url,
                "ada",
                "Kyoto in April",
                [
                    *messages,
                    user("And the tea ceremony?"),
                    compacted_reply("Book the tea ceremony for day 3, at Camellia in Gion.", done),
                ],
            )
            page.goto(f"{stack.base_url}/c/{cid}")
            expect(page.locator(".boundary")).to_have_count(1)
            expect(page.locator("#context-meter")).to_have_attribute("data-state", "compacted")
            page.locator(".boundary").scroll_into_view_if_needed()
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out))
            browser.close()
    print(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
