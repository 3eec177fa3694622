"""The shared benchmark workloads (`../shared/bench/workload.py`), generated once and cached.

The workload module lives beside the repository (a clean clone has `../shared` next to it; a
git worktree may sit deeper, so the parents are searched). Generated workloads are cached under
`.cache/bench/` by their manifest sha256, and a cached file is used only if its bytes still
hash to that value.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from types import ModuleType

from langchain_core.messages import BaseMessage

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench"


def _shared_bench() -> Path:
    for parent in ROOT.parents:
        candidate = parent / "shared" / "bench"
        if (candidate / "workload.py").exists():
            return candidate
    raise SystemExit("shared/bench/workload.py not found beside the repository (expected ../shared/bench)")


def workload_module() -> ModuleType:
    path = str(_shared_bench())
    if path not in sys.path:
        sys.path.insert(0, path)
    import workload  # type: ignore[import-not-found]

    return workload


def load(name: str) -> list[BaseMessage]:
    """The messages of workload `name`, checked against the manifest's sha256."""
    module = workload_module()
    manifest = json.loads((_shared_bench() / "manifest.json").read_text())
    want = manifest["workloads"][name]["sha256"]
    cached = CACHE / f"{name}-{want[:16]}.json"
    if cached.exists():
        data = cached.read_bytes()
        if hashlib.sha256(data).hexdigest() == want:
            return list(module.load(cached).messages)
    started = time.perf_counter()
    generated = module.generate(name)
    data = module.to_bytes(generated)
    if hashlib.sha256(data).hexdigest() != want:
        raise SystemExit(f"{name} does not match the shared manifest; the workload generator changed")
    CACHE.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(data)
    print(
        f"  generated {name} in {time.perf_counter() - started:.1f} s, cached at {cached.relative_to(ROOT)}"
    )
    return list(generated.messages)
