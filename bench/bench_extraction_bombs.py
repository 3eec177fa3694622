"""Untrusted files (issue 17): how each bomb ends, how fast, and at what memory.

Each bomb is uploaded alone over real HTTP to a backend on the default extraction limits (after
one small upload has started the workers), and the table shows its outcome, the seconds from
upload to that outcome and the peak RSS any extraction worker reached meanwhile (VmHWM, sampled
every 10 ms). Then all bombs are uploaded at
once while logins are timed. Target: every bomb ends as expected within its limit, no worker
above the memory limit, every login under 1 s. `--quick` runs the test suite's small sizes and
limits instead.

For scale, the dimension bomb is also read the old way (openpyxl iterating the declared grid)
for a few hundred rows, and that rate extrapolated to the whole sheet.

Top-level imports stay light: multiprocessing imports this main module again in every worker.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import verdict
from tests.support.bombs import (
    MB,
    docx_with_lying_sizes,
    docx_zip_bomb,
    empty_pages_pdf,
    nested_html,
    xlsx_dimension_bomb,
)
from tests.support.sandbox import PeakMemory

LOGIN_TARGET_S = 1.0
GRID_ROWS = 1_048_576


@dataclass(frozen=True)
class Bomb:
    name: str
    data: bytes
    expected: str  # "ready", or the limit that stops it ("any" for whichever comes first)


def bombs(quick: bool, html_cap_mb: int) -> list[Bomb]:
    big = 64 if quick else 1024
    return [
        Bomb("grid.xlsx", xlsx_dimension_bomb(), "ready"),
        Bomb("bomb.docx", docx_zip_bomb(big * MB), "max_unpacked_mb"),
        Bomb("dense.docx", docx_zip_bomb((8 if quick else 150) * MB), "max_compression_ratio"),
        Bomb("liar.docx", docx_with_lying_sizes(50_000, big * MB), "memory_mb"),
        Bomb("deep.html", nested_html(html_cap_mb * MB - 1000), "any"),
        Bomb("empty.pdf", empty_pages_pdf(10_000), "max_pdf_pages"),
    ]


def declared_grid_seconds(data: bytes, rows: int = 300) -> float:
    """Seconds the former sheet loop (the declared dimension kept) took for the first `rows`."""
    import openpyxl

    sheet = openpyxl.load_workbook(io.BytesIO(data), read_only=True).worksheets[0]
    started = time.perf_counter()
    for count, values in enumerate(sheet.iter_rows(values_only=True), start=1):
        cells = ["" if value is None else str(value) for value in values]
        while cells and not cells[-1]:
            cells.pop()
        if count == rows:
            break
    return time.perf_counter() - started


def line(*cells: object) -> None:
    print(f"{cells[0]!s:<26}{cells[1]!s:>8}  {cells[2]!s:<22}{cells[3]!s:>9}{cells[4]!s:>13}", flush=True)


async def run(quick: bool) -> bool:
    import httpx

    from backend.app import create_app
    from backend.settings import Settings
    from tests.support import databases
    from tests.support.api import ROOMY_LIMITS, login, new_user
    from tests.support.servers import serve
    from tests.support.uploads import upload_ok

    limits: dict[str, object] = {}
    if quick:
        limits = {
            "extraction_timeout_seconds": 8.0,
            "extraction_cpu_seconds": 8,
            "extraction_memory_mb": 160,
            "extraction_max_unpacked_mb": 16,
            "extraction_max_html_mb": 2,
            "extraction_max_pdf_pages": 1000,
        }
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        await asyncio.to_thread(databases.migrate, url)
        settings = Settings(
            _env_file=None,
            data_dir=Path(tmp) / "data",
            database_url=url,
            local_model="off",
            openai_base_url="http://127.0.0.1:9/v1",
            telemetry_enabled=False,
            password_hash_profile="CHEAPEST",
            # The bench logs in every 0.25 s from one address while the bombs run.
            **ROOMY_LIMITS,
            **limits,
        )  # type: ignore[call-arg]
        memory_limit = settings.extraction_memory_mb * MB
        deadline = settings.extraction_timeout_seconds
        print(
            f"limits: {settings.extraction_timeout_seconds:g} s wall clock, "
            f"{settings.extraction_cpu_seconds} s CPU, {settings.extraction_memory_mb} MB address space, "
            f"{settings.extraction_max_unpacked_mb} MB unpacked, ratio "
            f"{settings.extraction_max_compression_ratio:g}, HTML {settings.extraction_max_html_mb} MB, "
            f"{settings.extraction_max_pdf_pages:,} PDF pages; {settings.extraction_workers} workers"
        )
        cases = bombs(quick, settings.extraction_max_html_mb)
        ok = True
        async with serve(create_app(settings)) as base_url:
            client = await new_user(base_url, "bench")
            client.timeout = httpx.Timeout(600)  # uploads queue behind bombs that run for a minute
            started = time.perf_counter()
            await upload_ok(client, "warm-up.txt", b"the first upload starts the forkserver\n")
            print(
                f"first upload (starts the forkserver and its workers): {time.perf_counter() - started:.2f} s"
            )
            line("bomb (upload size)", "outcome", "stopped by", "seconds", "peak RSS MB")
            for bomb in cases:
                with PeakMemory() as memory:
                    started = time.perf_counter()
                    made = await upload_ok(client, bomb.name, bomb.data)
                    elapsed = time.perf_counter() - started
                stopped = made["parse_notes"].get("stopped_by", "-")
                expected = (
                    made["status"] == "ready" if bomb.expected == "ready" else made["status"] == "failed"
                )
                if bomb.expected not in ("ready", "any"):
                    expected = expected and stopped == bomb.expected
                within = elapsed <= deadline + 5 and memory.peak_bytes <= memory_limit
                ok = ok and expected and within
                line(
                    f"{bomb.name} ({len(bomb.data) / 1024:,.0f} KB)",
                    made["status"],
                    stopped,
                    f"{elapsed:.2f}",
                    f"{memory.peak_bytes / MB:.0f}",
                )
                if made["status"] == "failed":
                    print(f"    reason: {made['parse_notes']['error']}")

            logins: list[float] = []
            started = time.perf_counter()
            with PeakMemory() as memory:
                uploads = [asyncio.create_task(upload_ok(client, b.name, b.data)) for b in cases]
                while not all(task.done() for task in uploads):
                    begun = time.perf_counter()
                    session: httpx.AsyncClient = await login(base_url, "bench")
                    logins.append(time.perf_counter() - begun)
                    await session.aclose()
                    await asyncio.sleep(0.25)
                outcomes = await asyncio.gather(*uploads)
            together = time.perf_counter() - started
            await client.aclose()
        statuses = [made["status"] for made in outcomes]
        print(
            f"all {len(cases)} at once: done in {together:.1f} s, peak RSS {memory.peak_bytes / MB:.0f} MB; "
            f"{len(logins)} logins meanwhile: median {statistics.median(logins) * 1000:.0f} ms, "
            f"max {max(logins) * 1000:.0f} ms (target < {LOGIN_TARGET_S * 1000:.0f} ms)"
        )
        ok = ok and max(logins) < LOGIN_TARGET_S and memory.peak_bytes <= memory_limit
        ok = ok and statuses == ["ready"] + ["failed"] * (len(cases) - 1)

    per_row = declared_grid_seconds(cases[0].data) / 300
    print(
        f"grid.xlsx read the old way (every declared row): {per_row * 1000:.2f} ms a row, "
        f"about {per_row * GRID_ROWS / 60:.0f} minutes for its {GRID_ROWS:,} rows"
    )
    print("machine shared with other work: times are indicative")
    print(f"verdict: {verdict(ok)}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    if not asyncio.run(run(parser.parse_args().quick)):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
