"""Images in tool results (MCP `ImageContent`, embedded image resources): how a tool result that
holds them is carried, shown to the model and counted.

OpenAI-compatible chat APIs take only text in a `tool` message, so a picture a tool returned
reaches a model that accepts images in a `user` message of its own, right after that round's
tool messages. The design keeps every stage of the guard unaware of that extra message:

1. **At the tool boundary** (`tool_result_content`, called by the tool node's wrapper for every
   result) a result's parts become one text, its text parts then one placeholder line per
   media part (`[image image/png 12.3 KB]`; with the reason when it can never be shown:
   `[image image/png: not shown, its data is not valid base64]`), followed by an `image_url`
   part (a data URL) for each image a model could be shown: a type models take
   (`MODEL_IMAGE_TYPES`) that its bytes confirm, up to `MAX_MODEL_IMAGE_BYTES`. The user's tool
   block, the event log and the chain keep only the text (`tool_output_text`), never the bytes.
2. **In graph state and the guard's view** the tool message keeps that shape, so the view stays
   one entry per state message, and the counter counts the message as it goes out: its text in
   the tool message, and the user message that carries its pictures (framing, the label naming
   the call, `IMAGE_PART_TOKENS` per picture). The tool-output stage (`ToolOutputSource`)
   decides what the model is shown: for a model without image input, and for pictures past
   half the tool's output budget (the emergency policy's budget is smaller), only the
   placeholder, with the reason; the text is cut as for any tool output. Its output is a fixed
   point (re-running it changes nothing), and a summary's clones, a dropped round and a later
   hook call carry the pictures with the tool message they belong to, never apart.
3. **On the wire** (`move_tool_images`, on the request payload of every model call) the image
   parts leave their tool messages: after each run of tool messages, one user message per tool
   result with pictures, its label first. Every call of a turn, in package and service mode,
   sends the same.

A later turn sees the placeholders only: the chain stores text, never the bytes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import filetype

from chat_shell.contracts import IMAGE_PART_TYPES, MAX_MODEL_IMAGE_BYTES, MODEL_IMAGE_TYPES
from chat_shell.sizes import byte_size

_TYPE_NAMES = "PNG, JPEG, GIF or WebP"
NO_IMAGE_INPUT = "this model does not take images"


def image_url_part(mime_type: str, data_base64: str) -> dict[str, Any]:
    """An image as OpenAI's chat API takes it: an `image_url` part with a data URL."""
    return {"type": "image_url", "image_url": {"url": f"data:{mime_type};base64,{data_base64}"}}


def placeholder(
    kind: str, mime_type: str, size: int | None, reason: str | None = None, *, address: str | None = None
) -> str:
    """The stable line that stands for a media part in the text: kind, type, size (or the
    address it was sent as), and why the model is not shown it (None: it may be shown)."""
    shown = (kind, mime_type, byte_size(size) if size is not None else "", address or "")
    described = " ".join(part for part in shown if part)
    return f"[{described}: not shown, {reason}]" if reason else f"[{described}]"


@dataclass(frozen=True)
class _Media:
    line: str
    # The `image_url` part a model that accepts images may be shown (None: never shown).
    part: dict[str, Any] | None = None


def _decoded_size(data: str) -> int:
    return len(data) * 3 // 4 - data[-2:].count("=")


def _data_url(url: str) -> tuple[str, str] | None:
    """(MIME type, base64 data) of a base64 data URL."""
    head, comma, data = url.partition(",")
    if not (comma and head.startswith("data:") and head.endswith(";base64")):
        return None
    return head[5:-7], data


def _image(block: Mapping[str, Any]) -> _Media:
    mime = str(block.get("mime_type") or "")
    data = block.get("base64")
    url = block.get("url")
    if block.get("type") == "image_url":
        raw = block.get("image_url")
        url = raw.get("url") if isinstance(raw, Mapping) else raw
    if isinstance(url, str) and (found := _data_url(url)) is not None:
        mime, data = mime or found[0], found[1]
    elif isinstance(url, str):
        return _Media(placeholder("image", mime, None, "the tool sent only its address", address=url))
    if not isinstance(data, str) or not data:
        return _Media(placeholder("image", mime, None, "the tool sent no image data"))
    if not mime.startswith("image/"):
        return _Media(placeholder("image", mime or "(no type)", None, "its type is not an image type"))
    try:
        raw_bytes = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return _Media(placeholder("image", mime, None, "its data is not valid base64"))
    size = len(raw_bytes)
    if mime not in MODEL_IMAGE_TYPES:
        return _Media(placeholder("image", mime, size, f"models are shown {_TYPE_NAMES} images only"))
    if size > MAX_MODEL_IMAGE_BYTES:
        return _Media(
            placeholder(
                "image", mime, size, f"larger than the {byte_size(MAX_MODEL_IMAGE_BYTES)} models are shown"
            )
        )
    # The bytes decide the type the provider is told (a mislabelled PNG is still a PNG).
    sniffed = filetype.guess_mime(raw_bytes[:262])
    if sniffed not in MODEL_IMAGE_TYPES:
        return _Media(placeholder("image", mime, size, f"its data is not a {_TYPE_NAMES} image"))
    return _Media(placeholder("image", sniffed, size), image_url_part(sniffed, data))


def _media(block: Mapping[str, Any]) -> _Media:
    if block.get("type") in IMAGE_PART_TYPES:
        return _image(block)
    data, url = block.get("base64"), block.get("url")
    size = _decoded_size(data) if isinstance(data, str) and data else None
    kind, mime = str(block.get("type") or "media"), str(block.get("mime_type") or "")
    address = url if isinstance(url, str) else None
    return _Media(placeholder(kind, mime, size, "only images are shown to models", address=address))


def media_line(block: Mapping[str, Any]) -> str:
    """The one stand-in for a media block wherever only text may go (chains, tool outputs, the
    summarizer's input): the line a tool result shows for it. An image part already checked
    (one a request carries) gets the same line from `part_placeholder` without decoding."""
    return _media(block).line


def tool_result_content(content: Sequence[Any]) -> str | list[dict[str, Any]] | None:
    """A tool result's list of parts as the model-facing shape: one text (text parts, then a
    placeholder line per media part), followed by the image parts a model may be shown. None
    when the parts are not text and media (left as they are)."""
    lines: list[str] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, Mapping):
            return None
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            lines.append(block["text"])
        elif "base64" in block or "url" in block or block.get("type") in IMAGE_PART_TYPES:
            media = _media(block)
            lines.append(media.line)
            if media.part is not None:
                parts.append(media.part)
        else:
            return None
    return joined("\n".join(lines), parts)


def split(content: str | list[Any]) -> tuple[str, list[dict[str, Any]]] | None:
    """(text, image parts) of a tool result in the shape `tool_result_content` makes, or None."""
    if not isinstance(content, list) or len(content) < 2:
        return None
    first, *parts = content
    if not (
        isinstance(first, Mapping) and first.get("type") == "text" and isinstance(first.get("text"), str)
    ):
        return None
    if not all(isinstance(part, Mapping) and part.get("type") == "image_url" for part in parts):
        return None
    return first["text"], parts


def joined(text: str, parts: Sequence[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """The content of a tool result showing `text` and the image parts `parts`."""
    return [{"type": "text", "text": text}, *parts] if parts else text


def part_placeholder(part: Mapping[str, Any], reason: str | None = None) -> str:
    """The placeholder line of an image part (its type and size), with `reason` when given."""
    raw = part.get("image_url")
    url = raw.get("url") if isinstance(raw, Mapping) else raw
    found = _data_url(url) if isinstance(url, str) else None
    if found is None:
        return placeholder("image", "", None, reason)
    return placeholder("image", found[0], _decoded_size(found[1]), reason)


def without_pictures(text: str, dropped: Sequence[dict[str, Any]], reason: str) -> str:
    """`text` saying of each dropped picture why the model is not shown it: its placeholder line
    (the last one that still stands for a picture) gets the reason; a placeholder the text no
    longer holds (cut from a long output) is added at the end."""
    lines = text.split("\n")
    added: list[str] = []
    for part in reversed(dropped):
        line = part_placeholder(part)
        at = next((i for i in range(len(lines) - 1, -1, -1) if lines[i] == line), None)
        if at is None:
            added.insert(0, part_placeholder(part, reason))
        else:
            lines[at] = part_placeholder(part, reason)
    return "\n".join([*lines, *added])


def described(text: str, pictures: Sequence[dict[str, Any]]) -> str:
    """`text` with a placeholder line for each picture it does not describe yet (a result that
    did not pass the tool boundary, or whose lines a long output's cut left out)."""
    lines = set(text.split("\n"))
    missing = [line for line in map(part_placeholder, pictures) if line not in lines]
    return "\n".join([text, *missing])


def images_label(tool_call_id: str) -> str:
    """The text that opens the user message carrying a tool result's pictures."""
    return f"[the images of the tool result {tool_call_id} above, in the order of its placeholders]"


def move_tool_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request's messages (OpenAI's dicts) with each tool message's image parts moved into a
    user message of their own after that run of tool messages (chat APIs take only text in a
    tool message)."""
    if not any(m.get("role") == "tool" and isinstance(m.get("content"), list) for m in messages):
        return messages
    moved: list[dict[str, Any]] = []
    carried: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") != "tool":
            moved.extend(carried)
            carried = []
            moved.append(message)
            continue
        content = message.get("content")
        parts = content if isinstance(content, list) else []
        pictures = [p for p in parts if isinstance(p, dict) and p.get("type") == "image_url"]
        if pictures:
            text = [p for p in parts if not (isinstance(p, dict) and p.get("type") == "image_url")]
            message = {**message, "content": text}
            label = {"type": "text", "text": images_label(str(message.get("tool_call_id") or ""))}
            carried.append({"role": "user", "content": [label, *pictures]})
        moved.append(message)
    moved.extend(carried)
    return moved
