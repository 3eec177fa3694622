"""Attachments by drag-and-drop with upload progress, and the context meter as a chat grows."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import (
    composer,
    conversation_id,
    send,
    start,
    stored,
    wait_finished,
)
from tests.frontend.conftest import screenshot
from tests.support.browser import Stack

pytestmark = pytest.mark.browser

NOTES = "Packing list for Kyoto\n" + "".join(f"item {n}: umbrella number {n}\n" for n in range(1, 4000))


def drop_file(page: Page, name: str, content: str) -> None:
    """Drags a file from the desktop onto the chat area and drops it."""
    transfer = page.evaluate_handle(
        """([name, content]) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([content], name, { type: "text/plain" }));
            return transfer;
        }""",
        [name, content],
    )
    page.dispatch_event("#chat", "dragenter", {"dataTransfer": transfer})
    expect(page.locator("#drop-overlay")).to_be_visible()
    page.dispatch_event("#chat", "dragover", {"dataTransfer": transfer})
    page.dispatch_event("#chat", "drop", {"dataTransfer": transfer})
    expect(page.locator("#drop-overlay")).to_be_hidden()


def test_drop_a_file_watch_it_upload_and_ask_about_it(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    # A slow uplink, so the upload's progress is visible.
    network = page.context.new_cdp_session(page)
    network.send("Network.enable")
    network.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": 40 * 1024},
    )
    drop_file(page, "packing.txt", NOTES)
    chip = page.locator("#pending-attachments .chip")
    expect(chip).to_contain_text("packing.txt")
    expect(chip.locator("progress")).to_be_visible()
    expect(chip).to_contain_text("uploading")
    expect(page.locator("#send")).to_be_disabled()
    screenshot(page, "upload-progress")
    network.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    expect(chip).to_contain_text("ready", timeout=20_000)
    expect(chip.locator("progress")).to_have_count(0)

    send(page, "What is item 7 on my list?")
    wait_finished(page)
    sent = page.locator(".msg.user").last
    expect(sent.locator(".chip")).to_contain_text("packing.txt")
    expect(sent.locator(".chip-meta")).to_contain_text("KB · ready")
    expect(page.locator("#pending-attachments .chip")).to_have_count(0)
    screenshot(page, "attachment-sent")
    # The file was sent with the question, and a reload shows it from the stored message.
    message = stored(client, conversation_id(page))[0]
    assert message["content"] == "What is item 7 on my list?"
    assert [(a["filename"], a["status"]) for a in message["attachments"]] == [("packing.txt", "ready")]
    page.reload()
    expect(page.locator(".msg.user").last.locator(".chip")).to_contain_text("packing.txt")

    # The picker works too, and a chip can be removed before sending (the upload is deleted).
    page.locator("#file-input").set_input_files(
        files=[{"name": "extra.csv", "mimeType": "text/csv", "buffer": b"a,b\n1,2\n"}]
    )
    extra = page.locator("#pending-attachments .chip", has_text="extra.csv")
    expect(extra).to_contain_text("ready")
    extra_id = extra.get_attribute("data-attachment-id")
    assert client.get(f"/api/attachments/{extra_id}").status_code == 200
    extra.get_by_role("button", name="Remove extra.csv").click()
    expect(page.locator("#pending-attachments .chip")).to_have_count(0)
    page.wait_for_load_state("networkidle")
    assert client.get(f"/api/attachments/{extra_id}").status_code == 404


def test_the_model_is_shown_the_dropped_file(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    drop_file(page, "packing.txt", NOTES)
    expect(page.locator("#pending-attachments .chip")).to_contain_text("ready")
    send(page, "What is item 7 on my list?")
    wait_finished(page)
    seen = " ".join(str(m.get("content")) for m in stack.provider.last_request["messages"])
    assert "item 7: umbrella number 7" in seen


def meter_used(page: Page) -> int:
    value = page.locator("#context-meter [role=meter]").get_attribute("aria-valuenow")
    assert value is not None
    return int(value)


def test_the_meter_moves_as_the_conversation_grows(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    meter = page.locator("#context-meter")
    expect(meter).to_have_attribute("data-state", "empty")
    used = []
    for words in (20, 300, 600):
        send(page, " ".join(f"fact{n}" for n in range(words)))
        wait_finished(page)
        used.append(meter_used(page))
    assert used[0] < used[1] < used[2], used
    expect(meter).to_have_attribute("data-state", "normal")
    expect(meter.locator(".meter-text")).to_contain_text("/ 8.2k")
    # Near the compaction threshold the meter turns to its warning colour.
    threshold = int(page.locator("#context-meter .meter-trigger").get_attribute("data-trigger") or 0)
    send(page, "apple " * (int(threshold * 0.94) - used[-1]))
    wait_finished(page)
    expect(meter).to_have_attribute("data-state", "warning")
    page.locator("#context-meter .meter-button").hover()
    details = page.locator("#meter-details")
    expect(details).to_be_visible()
    expect(details.locator('tr[data-source="history"] td.num')).not_to_have_text("0")
    expect(details).to_contain_text("Nearing the compaction threshold")
    screenshot(page, "meter-warning-breakdown")
    # A reload restores the meter from the stored final snapshot.
    before = meter_used(page)
    page.reload()
    expect(meter).to_have_attribute("data-state", "warning")
    assert meter_used(page) == before
    composer(page).focus()
