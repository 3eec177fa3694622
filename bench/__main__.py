"""Runs every benchmark module in turn: `python -m bench [--quick] [name ...]`."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path


def main() -> None:
    args = sys.argv[1:]
    quick = ["--quick"] if "--quick" in args else []
    wanted = [a for a in args if a != "--quick"]
    names = sorted(
        m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name.startswith("bench_")
    )
    failed = []
    for name in names:
        if wanted and name not in wanted and name.removeprefix("bench_") not in wanted:
            continue
        print(f"\n===== {name} =====", flush=True)
        if subprocess.run([sys.executable, "-m", f"bench.{name}", *quick]).returncode != 0:
            failed.append(name)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
