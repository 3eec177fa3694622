"""A backend process under cProfile (CPU-time clock), for `bench_token_cost --profile`.

    python -m bench.profiled_serve OUT -- python -m backend.cli serve ...

The profiler starts on SIGUSR1 and stops and writes OUT on SIGUSR2, so only the measured turn
is profiled, not start-up or the warm-up turn.
"""

from __future__ import annotations

import cProfile
import runpy
import signal
import sys
import time


def main() -> None:
    out, separator, *command = sys.argv[1:]
    assert separator == "--" and command[1:3] == ["-m", "backend.cli"], command
    profile = cProfile.Profile(time.process_time)

    def stop(*_: object) -> None:
        profile.disable()
        profile.dump_stats(out)

    signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = ["backend.cli", *command[3:]]
    runpy.run_module("backend.cli", run_name="__main__")


if __name__ == "__main__":
    main()
