"""`chat-shell ...` as a subprocess of the test, from the repository's root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
