"""`generate_report`: a harmless, deterministic data tool whose output size the caller chooses.

It exists so tool loops and large tool outputs happen for real in demos, tests and benchmarks.
"""

from __future__ import annotations

import random

from langchain_core.tools import tool

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
