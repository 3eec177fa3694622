"""The page's message catalogs (docs/features.md "Languages"), without a browser: every message the
templates and ES modules use is in every catalog, translated, with the same placeholders; the
catalogs hold the same messages; and no template or module shows a user-visible literal that
bypasses the catalog.

What counts as a user-visible literal:
- templates: a text node, or an `aria-label`, `title`, `placeholder` or `alt` value, that has a
  letter and is not inside `{{ _(...) }}`; a quoted English phrase in a Jinja expression that is
  not the argument of `_()`.
- modules, unless it is the message of `t()`/`tn()` or a product name (`PROPER_NAMES`):
  - any word as an element's text, title or label (`text:`, `title:`, `"aria-label":`,
    `.textContent =`), or as the text child of `h(tag, attrs, "word")`;
  - more than one lower-case word, or a capitalised one, handed to another sink: `say(`,
    `announce(`, `flash(`, `finishTurn(`, `tile(`, `setBlocked(`, `label:`, `placeholder:`,
    `new ApiError(status, code, ...)`, `return`, after `||` or `??`, a later argument of `h()`,
    either branch of `?:`;
  - a capitalised word, or a phrase, as the value of an object key (label tables), or a
    capitalised word as a first argument;
  - a template literal that writes words around its values ("${name} can log in again.");
  - any literal that reads as a sentence (a capital letter, then a space and a lower-case word).
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from io import BytesIO
from pathlib import Path

import pytest
from babel.messages.extract import extract, extract_javascript
from babel.messages.pofile import read_po
from jinja2.ext import babel_extract

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "frontend" / "templates"
MODULES = ROOT / "frontend" / "static" / "js"
LOCALES = ROOT / "frontend" / "locale"
# Swagger UI's page: its words are the bundled Swagger UI's, in English.
NOT_PAGE_TEMPLATES = {"api_docs.html"}
# Modules that show no words of their own (the API docs loader, the browser-side tracing).
NO_WORDS = {"api-docs.js", "instrumentation.js"}
PROPER_NAMES = {"Android", "Chrome", "Edge", "Firefox", "Linux", "Safari", "Windows", "iOS", "macOS"}
JS_KEYWORDS = {"t": None, "tn": (1, 2)}


def _catalogs() -> dict[str, dict[str, object]]:
    found = {}
    for path in sorted(LOCALES.glob("*/LC_MESSAGES/messages.po")):
        with path.open("rb") as handle:
            catalog = read_po(handle)
        found[path.parents[1].name] = {
            message.id if isinstance(message.id, str) else message.id[0]: message
            for message in catalog
            if message.id
        }
    return found


def _used() -> dict[str, str]:
    """Every message the templates and modules ask for, with where it is used."""
    used: dict[str, str] = {}
    for path in sorted(TEMPLATES.glob("*.html")):
        with path.open("rb") as handle:
            for line, _, message, _ in babel_extract(handle, ("_", "gettext", "ngettext"), [], {}):
                ids = message if isinstance(message, tuple) else (message,)
                if ids[0]:
                    used.setdefault(ids[0], f"{path.name}:{line}")
    for path in sorted(MODULES.glob("*.js")):
        messages = extract(
            extract_javascript, BytesIO(path.read_bytes()), keywords=JS_KEYWORDS, comment_tags=(), options={}
        )
        for line, message, _, _ in messages:
            ids = message if isinstance(message, tuple) else (message,)
            used.setdefault(ids[0], f"{path.name}:{line}")
        # Babel's extractor does not see a t() nested in the arguments of another.
        for match in _TRANSLATED.finditer(path.read_text()):
            used.setdefault(json.loads(match.group(1)), path.name)
    return used


def test_there_is_an_english_and_a_chinese_catalog() -> None:
    assert {"en", "zh_CN"} <= set(_catalogs())


def test_every_catalog_has_every_message_the_page_uses() -> None:
    used = _used()
    for locale, messages in _catalogs().items():
        missing = {message: where for message, where in used.items() if message not in messages}
        assert not missing, f"{locale} lacks: {missing}"
        untranslated = [message for message, entry in messages.items() if not all(_strings(entry))]
        assert not untranslated, f"{locale} has no translation for: {untranslated}"


def test_the_catalogs_hold_the_same_messages() -> None:
    catalogs = _catalogs()
    ids = {locale: set(messages) for locale, messages in catalogs.items()}
    union = set().union(*ids.values())
    for locale, have in ids.items():
        assert not union - have, f"{locale} lacks what another catalog has: {sorted(union - have)}"
    plural = {
        locale: {m for m, entry in messages.items() if entry.pluralizable}
        for locale, messages in catalogs.items()
    }
    assert len({frozenset(p) for p in plural.values()}) == 1, "a message is plural in one catalog only"


def test_translations_keep_the_placeholders() -> None:
    placeholder = re.compile(r"\{\w+\}|%\(\w+\)s")
    for locale, messages in _catalogs().items():
        for message, entry in messages.items():
            wanted = set(placeholder.findall(message))
            if entry.pluralizable:
                wanted |= set(placeholder.findall(entry.id[1]))
            for text in _strings(entry):
                assert set(placeholder.findall(text)) == wanted, f"{locale}: {message!r} -> {text!r}"
    unused = set(_catalogs()["en"]) - set(_used())
    assert not unused, f"messages no page uses: {sorted(unused)}"


def _strings(entry: object) -> list[str]:
    string = entry.string  # type: ignore[attr-defined]
    return list(string) if isinstance(string, tuple) else [string]


# -- literals that bypass the catalog ------------------------------------------------------------

_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)
_WORDS = re.compile(r"[A-Za-z]")
_BODY_CLASS = re.compile(r"\{% block body_class %\}.*?\{% endblock %\}")
_VISIBLE_ATTRIBUTES = {"aria-label", "title", "placeholder", "alt"}
_JINJA_PHRASE = re.compile(r"""(?<!_\()(["'])([A-Z][a-z]*(?: [^"'{}]*)?[a-z.…?!])\1""")


class _Literals(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self.skip += 1
        for name, value in attrs:
            if name in _VISIBLE_ATTRIBUTES and value and _WORDS.search(value):
                self.found.append(f'{name}="{value}"')

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if not self.skip and _WORDS.search(data):
            self.found.append(data.strip())


def template_literals(source: str) -> list[str]:
    found = [
        m.group(2)
        for tag in re.findall(r"\{\{.*?\}\}|\{%.*?%\}", source, re.S)
        for m in _JINJA_PHRASE.finditer(tag)
    ]
    parser = _Literals()
    parser.feed(_JINJA.sub("", _BODY_CLASS.sub("", source)))
    return found + parser.found


_STRING = r"""("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`(?:[^`\\]|\\.)*`)"""
_SINK = re.compile(
    r"""(?:\b(?:say|announce|finishTurn|setBlocked|tile|flash\([^,()]+,)\(?\s*"""
    r"""|\b(?:text|title|label|placeholder|"aria-label"):\s*|\.textContent\s*=\s*"""
    r"""|\bnew ApiError\([^,()]+,[^,()]+,\s*|\},\s*|\?\s*|\s:\s*|\breturn\s+|\|\|\s*|\?\?\s*)""" + _STRING
)
_ANY = re.compile(_STRING)
# A media query is CSS, not words: `link.media = theme === "system" ? `(prefers-…)` : "all"`.
_CSS = re.compile(r"\.media\s*=[^;]*;")
# (not the arguments of the DOM's own calls: a header name, a drag-and-drop type)
_LABEL = re.compile(r'(?:\b\w+:\s*|(?<!setRequestHeader)(?<!includes)\(\s*)"([A-Z][a-z][^"]*)"')
# A phrase as the value of an object key: `"user.create": "created the account"`.
_PHRASE_VALUE = re.compile(r'(?:\b(\w+)|"[^"\n]*"):\s*"([a-z][a-z\']* [^"\n]*[a-z][^"\n]*)"')
# Where even one lower-case word is text: an element's text, title or label.
_TEXT_SINK = re.compile(
    r'(?:\btext:\s*|\btitle:\s*|"aria-label":\s*|\.textContent\s*=\s*)("[^"\n]*"|`[^`]*`)'
)
# One word as the text of an element: `h("span", {...}, "operator")`.
_CHILD_WORD = re.compile(r'\},\s*"([a-z]{2,})"\)')
# A template literal that writes words around its values ("${name} can log in again.").
_TEMPLATE_WORDS = re.compile(r"[A-Za-z]{2,}[,;:]? [A-Za-z]{2,}")
_SENTENCE = re.compile(r"^\s*[A-Z][A-Za-z']*[ ,:;] ?[a-z]")
_TRANSLATED = re.compile(r"\b(?:t|tn)\(\s*" + _STRING + r"(?:\s*,\s*" + _STRING + ")?")
_COMMENT = re.compile(r"^\s*//[^\n]*$|/\*.*?\*/", re.M | re.S)


def _visible(text: str) -> bool:
    body = re.sub(r"\$\{[^}]*\}", "", text).strip()
    if not re.search(r"[A-Za-z]{2,}", body) or body.startswith(("/", "#", ".", "[", "http", "<")):
        return False
    if "${" in text:
        return True
    # one lower-case word is a state, a class or a key; capitals only are a constant ("GET")
    return not re.fullmatch(r"[a-z0-9_\-.:/]+|[A-Z0-9_\-]+|[a-z]+[A-Z][A-Za-z]*", body)


def module_literals(source: str) -> list[str]:
    source = _TRANSLATED.sub("t()", _COMMENT.sub("", source))
    source = _CSS.sub("", source)
    found = [m.group(1)[1:-1] for m in _SINK.finditer(source) if _visible(m.group(1)[1:-1])]
    found += [m.group(1)[1:-1] for m in _ANY.finditer(source) if _SENTENCE.match(m.group(1)[1:-1])]
    found += [m.group(1) for m in _LABEL.finditer(source)]
    found += [m.group(1)[1:-1] for m in _TEXT_SINK.finditer(source) if re.search(r"[A-Za-z]{2,}", m.group(1))]
    found += _CHILD_WORD.findall(source)
    found += [m.group(2) for m in _PHRASE_VALUE.finditer(source) if m.group(1) != "class"]
    for m in _ANY.finditer(source):
        text = m.group(1)[1:-1]
        body = re.sub(r"\$\{(?:[^{}]|\{[^{}]*\})*\}", " ", text)
        sentence = re.search(r"[A-Z]|[.,;:?!]", body)
        if (
            m.group(1)[0] == "`"
            and sentence
            and "/" not in body
            and "-" not in body
            and (_TEMPLATE_WORDS.search(body) or re.match(r"\s*[A-Z][a-z]+ ", body))
        ):
            found.append(text)
    return sorted(set(found) - PROPER_NAMES)


@pytest.mark.parametrize(
    "name", sorted(p.name for p in TEMPLATES.glob("*.html") if p.name not in NOT_PAGE_TEMPLATES)
)
def test_templates_show_only_catalog_messages(name: str) -> None:
    assert template_literals((TEMPLATES / name).read_text()) == []


@pytest.mark.parametrize("name", sorted(p.name for p in MODULES.glob("*.js") if p.name not in NO_WORDS))
def test_modules_show_only_catalog_messages(name: str) -> None:
    assert module_literals((MODULES / name).read_text()) == []
