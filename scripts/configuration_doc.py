"""Writes docs/configuration.md, every setting of `backend/settings.py`, from the settings themselves.

    PYTHONPATH=. .venv/bin/python scripts/configuration_doc.py

Each field gives its environment variable, type, range, default and description (its docstring),
so the page cannot say something the code does not; `tests/test_configuration_doc.py` fails when
the page is older than the settings.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import AliasChoices
from pydantic.fields import FieldInfo

from backend.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "configuration.md"
COMMAND = "PYTHONPATH=. .venv/bin/python scripts/configuration_doc.py"

# The page's sections, each starting at a field (in the order of `Settings`) and running to the next.
GROUPS: tuple[tuple[str, str], ...] = (
    ("Storage", "data_dir"),
    ("Models and providers", "models"),
    ("The embedded local model", "local_model"),
    ("Summary compaction and titles", "summary_timeout_seconds"),
    ("Where chat_shell runs", "runtime_mode"),
    ("Accounts and HTTP", "password_hash_profile"),
    ("HTTPS and proxies", "https_only"),
    ("Abuse limits", "registration"),
    ("Attachments", "max_upload_bytes"),
    ("Turns, workers and streams", "worker_in_process"),
    ("Operators", "telemetry_enabled"),
)

HEADER = f"""# Configuration

Every setting of the service, generated from `backend/settings.py` by `scripts/configuration_doc.py`
(do not edit this page; change the settings and run `{COMMAND}`).

Settings are environment variables, or lines of a `.env` file in the working directory (see
`.env.example`). Names are case-insensitive. A blank value of an optional setting counts as unset.
The OpenTelemetry SDK's own `OTEL_*` variables are in [deployment.md](deployment.md#opentelemetry).
"""


def env_names(name: str, field: FieldInfo) -> list[str]:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [str(choice) for choice in alias.choices]
    if isinstance(alias, str):
        return [alias]
    return [f"{Settings.model_config.get('env_prefix', '')}{name}".upper()]


def type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{value}`" for value in get_args(annotation))
    if origin in (Union, types.UnionType):
        return " \\| ".join(type_name(arg) for arg in get_args(annotation) if arg is not type(None))
    if origin is dict:
        return "JSON object"
    return {bool: "boolean", int: "integer", float: "number", str: "text", Path: "path"}[annotation]


def bounds(field: FieldInfo) -> str:
    signs = ((Gt, "gt", ">"), (Ge, "ge", "≥"), (Lt, "lt", "<"), (Le, "le", "≤"))
    found = [
        f"{sign} {number(getattr(item, attr))}"
        for item in field.metadata
        for kind, attr, sign in signs
        if isinstance(item, kind)
    ]
    return ", ".join(found)


def number(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def default(field: FieldInfo) -> str:
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"`{number(value)}`"
    return f"`{value}`"


def cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def row(name: str, field: FieldInfo) -> str:
    names = ", ".join(f"`{env}`" for env in env_names(name, field))
    kind = type_name(field.annotation)
    if limits := bounds(field):
        kind = f"{kind} ({limits})"
    return f"| {names} | {kind} | {default(field)} | {cell(field.description or '')} |"


def render() -> str:
    """The page as the settings describe it now."""
    fields = list(Settings.model_fields.items())
    starts = [[name for name, _ in fields].index(first) for _, first in GROUPS]
    ends = [*starts[1:], len(fields)]
    parts = [HEADER]
    for (title, _), start, end in zip(GROUPS, starts, ends, strict=True):
        parts.append(f"\n## {title}\n\n| Variable | Type | Default | Description |\n|---|---|---|---|\n")
        parts.extend(row(name, field) + "\n" for name, field in fields[start:end])
    return "".join(parts)


def main() -> int:
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
