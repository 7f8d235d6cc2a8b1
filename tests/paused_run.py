"""`rewardhouse run` with a pause point at its publish, so a test can act at that moment (fill the
disk, send a signal) instead of guessing it with a timer.

    python tests/paused_run.py before|after [rewardhouse run arguments...]

The publish of the `warehouse_release` step (`warehouse.duck.publish_release`) prints
`paused before publish` (or `paused after publish`, once it returned) on stdout and waits for a
line on stdin before it goes on; everything else is the real command, in this process.
"""

from __future__ import annotations

import select
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import warehouse.duck as duck  # noqa: E402


def pause_at_publish(where: str) -> None:
    """Wrap publish_release before the assets import it (they bind it by name)."""
    publish = duck.publish_release

    def pause() -> None:
        print(f"paused {where} publish", flush=True)
        # Wait in short slices: a signal the kernel hands to another thread of the process is
        # run by Python in the main thread only once it is back in Python code, which a blocking
        # read never is (a real run's main thread always comes back within moments).
        while not select.select([sys.stdin], [], [], 0.05)[0]:
            pass
        sys.stdin.readline()

    def paused(*args, **kwargs):
        if where == "before":
            pause()
        out = publish(*args, **kwargs)
        if where == "after":
            pause()
        return out

    duck.publish_release = paused


if __name__ == "__main__":
    pause_at_publish(sys.argv[1])
    from pipeline.cli import main

    sys.exit(main(["run", *sys.argv[2:]]))
