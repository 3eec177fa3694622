"""The accessibility audit of the browser tests: axe-core (vendored by scripts/vendor-axe.sh, test
only) run in the page, its violations of impact "serious" or "critical" returned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from playwright.sync_api import Page

AXE = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"
GATED = ("serious", "critical")


def audit(page: Page) -> list[dict[str, Any]]:
    """The page's serious and critical axe violations, each with its rule id, impact and the
    selectors of the elements that break it. The script is evaluated rather than added as a tag,
    so the page's Content-Security-Policy (no inline script) stays in force."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    violations: list[dict[str, Any]] = page.evaluate(
        """async () => (await axe.run(document, {resultTypes: ["violations"]})).violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            targets: v.nodes.map(n => n.target.join(" ")),
        }))"""
    )
    return [violation for violation in violations if violation["impact"] in GATED]


def describe(violations: list[dict[str, Any]]) -> str:
    """One line per violation: rule id, impact, help text and target selectors."""
    return "\n".join(
        f"{v['id']} ({v['impact']}): {v['help']} -> {', '.join(v['targets'])}" for v in violations
    )
