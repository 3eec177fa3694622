"""Installing the local model: the build's progress as a user reads it, the wheel cache's key,
and a disk too full to build on."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.local_model.installer import BuildProgress, InstallError, build_wheel, wheel_cache_dir

# Lines of a real `pip wheel --verbose llama-cpp-python` run, abridged.
PIP_OUTPUT = [
    "Collecting llama-cpp-python==0.3.36",
    "  Downloading llama_cpp_python-0.3.36.tar.gz (76.6 MB)",
    "  Installing build dependencies: started",
    "    Downloading scikit_build_core-1.1.2-py3-none-any.whl (295 kB)",
    "  -- The C compiler identification is GNU 12.2.0",
    *(f"  [{i}/140] /usr/bin/g++ -O3 -c ggml.cpp" for i in range(1, 141)),
    "  Created wheel for llama_cpp_python: filename=llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl",
]


def test_the_build_shows_its_phases_and_progress_in_a_few_lines() -> None:
    said: list[str] = []
    progress = BuildProgress(said.append)
    for line in PIP_OUTPUT[:5]:
        progress.feed(line)
    progress.feed(None)  # a silent stretch
    for line in PIP_OUTPUT[5:]:
        progress.feed(line)

    shown = [line.split("] ", 1)[1] for line in said]
    assert shown == [
        "downloading the llama-cpp-python source (77 MB)",
        "installing the build tools (scikit-build-core, cmake)",
        "configuring llama.cpp",
        "configuring llama.cpp (still working)",
        *(
            f"compiling llama.cpp: {n}/140 files ({100 * n // 140}%)"
            for n in (1, 14, 28, 42, 56, 70, 84, 98, 112, 126, 140)
        ),
        "wheel built",
    ]


def test_the_wheel_cache_is_keyed_by_platform_and_python(tmp_path: Path) -> None:
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel_cache_dir(tmp_path).parent == tmp_path
    assert wheel_cache_dir(tmp_path).name.endswith(f"-{tag}")
    assert wheel_cache_dir(None).parts[-3:-1] == ("chat-shell", "wheels")


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB filesystem (tmpfs; needs root, as `make test` runs)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_disk_too_full_to_build_on_is_refused_before_building(tiny_disk: Path) -> None:
    said: list[str] = []
    with pytest.raises(InstallError) as refused:
        build_wheel(tiny_disk / "wheels", said.append, tiny_disk / "build.log")
    message = str(refused.value)
    assert message.startswith("Not enough disk space to build the local model server: 1000 MB needed in ")
    assert "MB free. Free some space (or set CHAT_SHELL_WHEEL_CACHE" in message
    assert "OPENAI_BASE_URL" in message
    assert said == [] and not (tiny_disk / "build.log").exists()
