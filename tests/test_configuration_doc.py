"""docs/configuration.md is the settings as the code has them: every field, its variable, type,
default and description. A setting added, removed or changed without regenerating the page fails
here, naming the command that rewrites it."""

from __future__ import annotations

from backend.settings import Settings
from scripts.configuration_doc import COMMAND, OUT, render


def test_the_configuration_page_is_up_to_date() -> None:
    assert OUT.read_text(encoding="utf-8") == render(), (
        f"docs/configuration.md is out of date with backend/settings.py; regenerate it: {COMMAND}"
    )


def test_the_page_lists_every_setting_with_its_default_and_description() -> None:
    page = render()
    for name, field in Settings.model_fields.items():
        assert field.description, f"Settings.{name} has no docstring, so the page cannot describe it"
    rows = {line.split(" | ")[0].removeprefix("| ") for line in page.splitlines() if line.startswith("| `")}
    expected = {"`OPENAI_BASE_URL`", "`OPENAI_API_KEY`"}
    expected |= {f"`CHAT_SHELL_{name.upper()}`" for name in Settings.model_fields if "openai" not in name}
    assert rows == expected
    assert "| `CHAT_SHELL_TOKEN_DAYS` | integer (> 0, ≤ 3650) | `90` | Lifetime of an API token" in page
