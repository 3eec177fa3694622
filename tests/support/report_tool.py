"""`generate_report`: a harmless, deterministic data tool whose output size the test chooses.

It exists so tool loops and large tool outputs happen for real in tests and benchmarks; it is
never offered in production (`chat_shell.tools.registry.default_tools`). Runtimes built in tests
offer it beside the real tools (`with_report_tool`, and `offer_report_tool` for the runtimes an
app builds itself).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from langchain_core.tools import tool

import chat_shell.runtime
from chat_shell.tools.registry import ToolRegistry, default_tools

MAX_ROWS = 50_000
_REGIONS = ("north", "south", "east", "west", "central")
_PRODUCTS = ("widget", "gadget", "gizmo", "sprocket", "flange", "bracket")


@tool
async def generate_report(rows: int = 10, seed: int = 0) -> str:
    """Generate a deterministic sales report with `rows` lines (1..50000) from random `seed`.

    Each line holds an order id, date, region, product, quantity and amount; the same
    arguments always give the same report.
    """
    if not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"rows must be between 1 and {MAX_ROWS}, got {rows}")
    rng = random.Random(seed)
    lines = [f"sales report seed={seed} rows={rows}", "order_id | date | region | product | qty | amount"]
    for index in range(1, rows + 1):
        month, day = rng.randint(1, 12), rng.randint(1, 28)
        quantity = rng.randint(1, 500)
        amount = quantity * rng.randint(199, 9999) / 100
        lines.append(
            f"ORD-{seed:04d}-{index:06d} | 2025-{month:02d}-{day:02d} | {rng.choice(_REGIONS)} | "
            f"{rng.choice(_PRODUCTS)} | {quantity} | {amount:.2f}"
        )
    lines.append(f"total rows: {rows}")
    return "\n".join(lines)


def with_report_tool() -> ToolRegistry:
    """The production tools, and `generate_report`."""
    registry = default_tools()
    registry.register(generate_report)
    return registry


@contextmanager
def report_tool_offered() -> Iterator[None]:
    """Runtimes built inside (by `create_app` or `ChatShell` without `tools`) offer it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(chat_shell.runtime, "default_tools", with_report_tool)
        yield
