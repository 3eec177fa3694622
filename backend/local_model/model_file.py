"""The model file the local server loads: a catalog model assembled into the model cache
(`~/.cache/chat-shell/models/`, outside the checkout), or a GGUF file the operator names with
`CHAT_SHELL_LOCAL_MODEL_FILE`.

A catalog file is served only once its size, sha256 and GGUF metadata match the catalog. The
full check (hashing 1.1 GB takes seconds) runs when the file is installed; it leaves a stamp
beside the file recording the size and modification time it verified, so later starts re-hash
only a file that changed since. Anything missing, damaged or not a GGUF file is refused before a
server starts, with an error naming the file and the fix.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from backend.local_model.catalog import LocalModel
from backend.local_model.gguf_header import GgufError, Value, read_metadata

INSTALL_FIX = "run `chat-shell local-model install` (or `make run`, which does it)"
REINSTALL_FIX = "run `chat-shell local-model install --force` to download it again"
NAME_KEY, ARCHITECTURE_KEY = "general.name", "general.architecture"
_CHUNK = 8 * 1024 * 1024


class ModelFileError(RuntimeError):
    """The local model file cannot be served; the message names the file and the fix."""


@dataclass(frozen=True)
class ModelFile:
    path: Path
    # The model id the server answers to, which is also the runtime's profile name.
    model_id: str
    # None for the operator's own file.
    catalog: LocalModel | None


def default_cache_dir() -> Path:
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache_home / "chat-shell" / "models"


def catalog_path(model: LocalModel, cache: Path) -> Path:
    return cache / model.filename


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fingerprint(path: Path) -> dict[str, int]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _metadata(path: Path, fix: str) -> dict[str, Value]:
    try:
        metadata = read_metadata(path, (NAME_KEY, ARCHITECTURE_KEY))
    except GgufError as exc:
        raise ModelFileError(f"The local model file {path} is not a GGUF model ({exc}): {fix}.") from None
    if ARCHITECTURE_KEY not in metadata:
        raise ModelFileError(f"The local model file {path} names no model architecture: {fix}.")
    return metadata


def verify_catalog_file(model: LocalModel, path: Path, *, sha256: str | None = None) -> None:
    """The full check of an assembled file (`sha256` when the caller hashed it while writing);
    on success the stamp is written, so later starts skip the hashing."""
    size = path.stat().st_size
    if size != model.size_bytes:
        raise ModelFileError(
            f"The local model file {path} is damaged ({size} bytes instead of {model.size_bytes}): "
            f"{REINSTALL_FIX}."
        )
    actual = sha256 or sha256_of(path)
    if actual != model.sha256:
        raise ModelFileError(
            f"The local model file {path} is corrupt (sha256 {actual}, expected {model.sha256}): "
            f"{REINSTALL_FIX}."
        )
    metadata = _metadata(path, REINSTALL_FIX)
    expected = {NAME_KEY: model.gguf_name, ARCHITECTURE_KEY: model.gguf_architecture}
    if {key: metadata.get(key) for key in expected} != expected:
        raise ModelFileError(
            f"The local model file {path} is not {model.title} (its GGUF metadata says "
            f"{metadata.get(NAME_KEY)!r}, architecture {metadata.get(ARCHITECTURE_KEY)!r}): {REINSTALL_FIX}."
        )
    _stamp_path(path).write_text(json.dumps({"sha256": model.sha256, **_fingerprint(path)}))


def is_verified(model: LocalModel, path: Path) -> bool:
    """Whether `path` is the file a full check stamped, unchanged since."""
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        return bool(stamp == {"sha256": model.sha256, **_fingerprint(path)})
    except (OSError, ValueError):
        return False


def check_catalog_file(model: LocalModel, path: Path) -> None:
    if not path.is_file():
        raise ModelFileError(
            f"The local model {model.title} is not installed (no {path}): {INSTALL_FIX}, or set "
            "OPENAI_BASE_URL to use a provider instead."
        )
    if not is_verified(model, path):
        verify_catalog_file(model, path)


def check_operator_file(path: Path) -> None:
    fix = "set CHAT_SHELL_LOCAL_MODEL_FILE to a GGUF model file, or unset it to use a catalog model"
    if not path.is_file():
        raise ModelFileError(f"The local model file {path} does not exist: {fix}.")
    _metadata(path, fix)


def resolve_model_file(model: LocalModel, cache: Path, configured: Path | None, model_id: str) -> ModelFile:
    """The checked file to serve: the operator's `configured` file, else the catalog model's."""
    if configured is not None:
        check_operator_file(configured)
        return ModelFile(configured, model_id, None)
    path = catalog_path(model, cache)
    check_catalog_file(model, path)
    return ModelFile(path, model_id, model)
