"""The page's languages (docs/features.md "Languages"): one gettext catalog per language under
`frontend/locale/<locale>/LC_MESSAGES/messages.po`, read once at import. The templates get them
through Jinja2's i18n extension; the ES modules get the same messages as JSON (`page_catalog`)
and read them with `frontend/static/js/i18n.js`. The language is the user's choice, or else the
best match of `Accept-Language`, or else English.
"""

from __future__ import annotations

from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from babel import Locale
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.support import Translations
from jinja2 import Environment, pass_context
from jinja2.runtime import Context

LOCALE_DIR = Path(__file__).resolve().parents[1] / "frontend" / "locale"
DEFAULT = "en"
# gettext numbers a message's plural forms in this order of CLDR categories (as Babel does).
_CATEGORY_ORDER = ("zero", "one", "two", "few", "many", "other")


@dataclass(frozen=True)
class Language:
    tag: str  # BCP 47, as the page, `Intl` and the stored choice spell it: "zh-CN"
    name: str  # in its own language, for the language menu
    translations: Translations
    messages: dict[str, Any]  # msgid -> text, or CLDR category -> text for a plural message
    categories: tuple[str, ...]


def _load(directory: Path) -> Language:
    with (directory / "LC_MESSAGES" / "messages.po").open("rb") as handle:
        catalog = read_po(handle, locale=directory.name)
    # Compiled in memory: nothing binary is committed and there is no build step.
    compiled = BytesIO()
    write_mo(compiled, catalog)
    compiled.seek(0)
    locale = Locale.parse(directory.name)
    # Babel's rules name the categories they define; "other" is always there, last.
    categories = tuple(tag for tag in _CATEGORY_ORDER if tag in locale.plural_form.tags | {"other"})
    messages: dict[str, Any] = {}
    for message in catalog:
        if not message.id:
            continue
        if isinstance(message.id, str):
            messages[message.id] = message.string
        else:  # pluralizable: the singular and plural ids, a translation per category
            messages[message.id[0]] = dict(zip(categories, message.string or (), strict=True))
    tag = directory.name.replace("_", "-")  # as written, not Babel's fuller "zh-Hans-CN"
    name = locale.get_display_name(locale) or tag
    return Language(tag, name, Translations(compiled), messages, categories)


LANGUAGES: dict[str, Language] = {
    language.tag: language
    for language in sorted(
        (_load(path) for path in LOCALE_DIR.iterdir() if (path / "LC_MESSAGES").is_dir()),
        key=lambda language: language.tag,
    )
}


def _match(tag: str) -> str | None:
    wanted = tag.strip().lower()
    for known in LANGUAGES:
        if known.lower() == wanted:
            return known
    primary = wanted.split("-")[0]
    for known in LANGUAGES:
        if known.lower().split("-")[0] == primary:
            return known
    return None


def negotiate(accept_language: str | None, chosen: str | None = None) -> str:
    """The page's language: the stored choice if it still exists, else the first language of
    `Accept-Language` (by its q-values) that a catalog has, else English."""
    if chosen in LANGUAGES:
        return chosen
    ranked: list[tuple[float, int, str]] = []
    for position, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                continue
        if tag.strip() and tag.strip() != "*" and quality > 0:
            ranked.append((-quality, position, tag))
    for _, _, tag in sorted(ranked):
        found = _match(tag)
        if found:
            return found
    return DEFAULT


def is_known(tag: str) -> bool:
    return tag in LANGUAGES


def page_catalog(tag: str) -> dict[str, Any]:
    """What `i18n.js` reads: the language, its plural categories and its messages."""
    language = LANGUAGES[tag]
    return {"locale": tag, "categories": list(language.categories), "messages": language.messages}


def choices() -> list[dict[str, str]]:
    return [{"tag": language.tag, "name": language.name} for language in LANGUAGES.values()]


@pass_context
def _gettext(context: Context, message: str) -> str:
    return LANGUAGES[context["lang"]].translations.gettext(message)


@pass_context
def _ngettext(context: Context, singular: str, plural: str, count: int) -> str:
    return LANGUAGES[context["lang"]].translations.ngettext(singular, plural, count)


def install(environment: Environment) -> None:
    """`{% trans %}` and `_()` in templates, in the language of the `lang` template variable."""
    environment.add_extension("jinja2.ext.i18n")
    environment.install_gettext_callables(_gettext, _ngettext, newstyle=True)  # type: ignore[attr-defined]
