"""Who holds something, and whether they are still alive.

A holder is a process: its pid, the host and boot it runs on, and the moment the kernel started
it (so a recycled pid is not taken for the holder). On this host and boot a holder is alive while
that exact process exists. Anywhere else (another machine sharing the data root) it is alive while
its heartbeat, the mtime of its lease file, is fresh. A reboot changes the boot id, so every
holder from before it is dead at once.

Plain Python, no Dagster: lock files, run leases and the reaper all use it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

HEARTBEAT_SECONDS = 5.0
# A holder on another host whose heartbeat is older than this is taken for dead.
STALE_AFTER_SECONDS = 30.0


class Busy(RuntimeError):
    """What a caller needs is held by a live holder, and it asked not to wait; the message says
    what, who holds it and since when."""


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def process_start(pid: int) -> float | None:
    """When the kernel started process `pid` (epoch seconds), or None if it does not exist or this
    system does not say (no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields count from the last ')'.
    fields = stat[stat.rindex(")") + 2:].split()
    boot = _boot_time()
    return None if boot is None else boot + int(fields[19]) / _CLOCK_TICKS


def pid_exists(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    if Path("/proc").is_dir():  # a zombie has exited: it holds nothing any more
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            return state not in ("Z", "X")
        except (OSError, IndexError):
            return False
    return True


BOOT_ID = _boot_id()
HOST = socket.gethostname()
# What this process is, for the holders it writes without a label of their own ("rewardhouse run,
# run 1a2b3c4d"); set once by the command or the run that owns the process.
_process_label = {"text": ""}


def set_process_label(text: str) -> None:
    _process_label["text"] = text


@dataclass(frozen=True)
class Holder:
    """One process holding something: `label` says what it is (`rewardhouse run`, a run id, ...)."""

    pid: int
    host: str
    boot_id: str
    started: float | None  # process start (epoch seconds), None where the system does not say
    since: float  # when it took what it holds
    label: str = ""

    @classmethod
    def me(cls, label: str = "") -> "Holder":
        pid = os.getpid()
        return cls(pid=pid, host=HOST, boot_id=BOOT_ID, started=process_start(pid), since=time.time(),
                   label=label or _process_label["text"])

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Holder | None":
        try:
            data = json.loads(text)
            return cls(**{k: data[k] for k in ("pid", "host", "boot_id", "started", "since")}, label=data.get("label", ""))
        except (ValueError, TypeError, KeyError):
            return None

    @property
    def local(self) -> bool:
        return self.host == HOST and (self.boot_id == BOOT_ID or not (self.boot_id and BOOT_ID))

    def alive(self, heartbeat: float | None = None, now: float | None = None) -> bool:
        """On this host: the very process exists. Elsewhere: its heartbeat is fresh."""
        if self.host == HOST and self.boot_id and BOOT_ID and self.boot_id != BOOT_ID:
            return False  # this host rebooted since
        if self.local:
            if not pid_exists(self.pid):
                return False
            start = process_start(self.pid)
            return self.started is None or start is None or abs(start - self.started) < 1.0
        now = time.time() if now is None else now
        return heartbeat is not None and now - heartbeat < STALE_AFTER_SECONDS

    def why_dead(self, heartbeat: float | None = None) -> str:
        if self.host == HOST and self.boot_id and BOOT_ID and self.boot_id != BOOT_ID:
            return f"host {self.host} rebooted since process {self.pid} started"
        if self.local:
            return f"process {self.pid} on {self.host} is gone"
        age = "never" if heartbeat is None else f"{time.time() - heartbeat:.0f}s ago"
        return f"process {self.pid} on {self.host} stopped its heartbeat (last {age})"

    def describe(self) -> str:
        """`pid 4242 on host-a (rewardhouse run) since 12:03:04`."""
        when = datetime.fromtimestamp(self.since, timezone.utc).astimezone().strftime("%H:%M:%S")
        what = f" ({self.label})" if self.label else ""
        return f"pid {self.pid} on {self.host}{what} since {when}"


def read_holder(path: Path) -> Holder | None:
    try:
        return Holder.from_json(path.read_text())
    except OSError:
        return None


class Heartbeat:
    """Touch `path` every HEARTBEAT_SECONDS from a daemon thread, so holders on other hosts can
    tell this process is alive; `stop()` ends it. The file's content is never rewritten."""

    def __init__(self, path: Path, every: float = HEARTBEAT_SECONDS):
        self.path, self.every = path, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat {path.name}", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            try:
                os.utime(self.path)
            except OSError:
                return  # the lease was removed: nothing to keep alive

    def stop(self) -> None:
        self._stop.set()


def heartbeat_of(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
