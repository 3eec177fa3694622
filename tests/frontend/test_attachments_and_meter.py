"""Attachments by drag-and-drop with upload progress, and the context meter as a chat grows."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.frontend.actions import (
    ahead_trigger,
    composer,
    conversation_id,
    meter_used,
    send,
    start,
    stored,
    wait_finished,
)
from tests.frontend.conftest import screenshot
from tests.support.api import make_operator
from tests.support.browser import Stack, run_off_loop
from tests.support.files import picture_png

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
    # The chip goes at once and the DELETE after it: wait for that answer ("networkidle" on a
    # page already loaded returns at once, so it raced the DELETE under load).
    with page.expect_response(
        lambda answer: answer.request.method == "DELETE" and f"/api/attachments/{extra_id}" in answer.url
    ):
        extra.get_by_role("button", name="Remove extra.csv").click()
    expect(page.locator("#pending-attachments .chip")).to_have_count(0)
    assert client.get(f"/api/attachments/{extra_id}").status_code == 404


def test_the_model_is_shown_the_dropped_file(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    drop_file(page, "packing.txt", NOTES)
    expect(page.locator("#pending-attachments .chip")).to_contain_text("ready")
    send(page, "What is item 7 on my list?")
    wait_finished(page)
    seen = " ".join(str(m.get("content")) for m in stack.provider.last_request["messages"])
    assert "item 7: umbrella number 7" in seen


def test_the_meter_moves_as_the_conversation_grows(page: Page, stack: Stack, username: str) -> None:
    start(page, stack, username)
    meter = page.locator("#context-meter")
    expect(meter).to_have_attribute("data-state", "empty")
    used = []
    # Three turns that stay under the pre-trigger of compaction ahead of time.
    for words in (20, 200, 400):
        send(page, " ".join(f"fact{n}" for n in range(words)))
        wait_finished(page)
        used.append(meter_used(page))
    assert used[0] < used[1] < used[2], used
    expect(meter).to_have_attribute("data-state", "normal")
    expect(meter.locator(".meter-text")).to_contain_text("/ 4.1k input")
    assert used[-1] < ahead_trigger(page), used
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


def tokens_label(tokens: int) -> str:
    """The compact figure the pill and the dashboard show (format.js `formatTokens`)."""
    if tokens < 1000:
        return str(tokens)
    return f"{tokens / 1000:.1f}k" if tokens < 100_000 else f"{round(tokens / 1000)}k"


def test_one_total_in_the_pill_the_panel_and_the_dashboard(page: Page, stack: Stack, username: str) -> None:
    client = start(page, stack, username)
    run_off_loop(make_operator(stack.database_url, username))
    send(page, " ".join(f"fact{n}" for n in range(400)))
    wait_finished(page)
    cid = conversation_id(page)
    (reply,) = [m for m in stored(client, cid) if m["role"] == "assistant"]
    metrics = reply["result"]["context_metrics"]
    used, available, window = metrics["used_input"], metrics["available_input"], metrics["context_window"]
    assert available < window

    meter = page.locator("#context-meter")
    expect(meter.locator("[role=meter]")).to_have_attribute("aria-valuenow", str(used))
    expect(meter.locator("[role=meter]")).to_have_attribute("aria-valuemax", str(available))
    expect(meter.locator(".meter-text")).to_contain_text(
        f"{tokens_label(used)} / {tokens_label(available)} input"
    )
    meter.locator(".meter-button").focus()
    details = page.locator("#meter-details")
    expect(details.locator(".meter-used-of")).to_have_text(
        f"{used:,} of {available:,} input tokens; window {window:,}"
    )
    cells = details.locator("tr[data-source] td.num").all_inner_texts()
    assert sum(int(cell.replace(",", "")) for cell in cells) == used
    # The provider's fixed overhead is its own source; no system prompt is configured here.
    expect(details.locator('tr[data-source="overhead"] td.num')).not_to_have_text("0")
    expect(details.locator('tr[data-source="system"] td.num')).to_have_text(
        str(metrics["breakdown"]["system"])
    )

    # The dashboard's drill-down of this conversation (other tests' conversations may fill the
    # pressure table's top rows).
    page.goto(f"{stack.base_url}/operators?window=1h&conversation={cid}")
    latest = page.locator("#drill-tiles .tile", has_text="Latest used / available")
    expect(latest).to_contain_text(f"{tokens_label(used)} / {tokens_label(available)}")


def test_sent_images_show_a_thumbnail_and_other_files_their_type(
    sized: Page, stack: Stack, username: str
) -> None:
    page = sized
    start(page, stack, username)
    page.locator("#file-input").set_input_files(
        files=[
            {"name": "dot.png", "mimeType": "image/png", "buffer": picture_png()},
            {"name": "table.csv", "mimeType": "text/csv", "buffer": b"a,b\n1,2\n"},
        ]
    )
    expect(page.locator("#pending-attachments .chip", has_text="dot.png")).to_contain_text("ready")
    expect(page.locator("#pending-attachments .chip", has_text="table.csv")).to_contain_text("ready")
    # The test stack's model takes no images, and the composer says so before the send.
    expect(page.locator("#pending-attachments .chip", has_text="dot.png")).to_contain_text(
        "this model cannot see images"
    )
    expect(page.locator("#pending-attachments .chip", has_text="table.csv")).not_to_contain_text("images")
    send(page, "Here are two files.")
    wait_finished(page)
    sent = page.locator(".msg.user").last
    thumb = sent.locator(".chip", has_text="dot.png").locator("img.chip-thumb")
    expect(thumb).to_have_count(1)
    # The thumbnail is the stored image itself, loaded (a broken one has no natural size).
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=thumb.element_handle())
    table = sent.locator(".chip", has_text="table.csv")
    expect(table.locator("img")).to_have_count(0)
    expect(table.locator("svg.icon")).to_have_count(1)
    screenshot(page, f"attachment-chips-{page.viewport_size['width']}")  # type: ignore[index]
