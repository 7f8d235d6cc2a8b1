"""Every environment variable the project reads, in one module: its name, default and parsing.

Settings come from the `rewardhouse` resource (launchpad, `--set`); these variables give its
defaults, so the UI, the schedule and the CLI agree. Plain Python, no Dagster.
"""

from __future__ import annotations

import os

TRUE = ("1", "true", "yes", "on")


def _get(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or default


def _flag(name: str) -> bool:
    return (_get(name) or "").lower() in TRUE


def _number(name: str, default: str, cast: type):
    """A numeric variable; a value that is not one is a SettingError naming the variable (one line)."""
    text = _get(name, default)
    try:
        return cast(text)
    except ValueError:
        what = "a whole number" if cast is int else "a number"
        raise SettingError(f"{name}={text!r}: expected {what}") from None


# --- the data root and the run -------------------------------------------------------------------
def home() -> str | None:
    """REWARDHOUSE_HOME: the data root (default: data/ at the repository root)."""
    return _get("REWARDHOUSE_HOME")


def scratch() -> str | None:
    """REWARDHOUSE_SCRATCH: the local working folder when the data root is in a bucket (downloads
    in progress, the Dagster home, the build of a release before it is uploaded); default: under
    the system temp folder."""
    return _get("REWARDHOUSE_SCRATCH")


def ray_address() -> str | None:
    """REWARDHOUSE_RAY_ADDRESS: the Ray cluster the image work runs on ("auto", "host:port",
    "ray://host:10001"); unset: the local process pool."""
    return _get("REWARDHOUSE_RAY_ADDRESS")


def image_roots() -> list[str]:
    """REWARDHOUSE_IMAGE_ROOTS: VisualPRM image roots (folders, zips, split zips by first part),
    separated by os.pathsep."""
    return [r for r in (_get("REWARDHOUSE_IMAGE_ROOTS") or "").split(os.pathsep) if r]


def overrides() -> str | None:
    """REWARDHOUSE_OVERRIDES: the reviewers' overrides file (default: overrides.json in the data root)."""
    return _get("REWARDHOUSE_OVERRIDES")


def dagster_home() -> str | None:
    """DAGSTER_HOME: Dagster's instance folder (default: <data root>/dagster)."""
    return _get("DAGSTER_HOME")


def source() -> str:
    return _get("REWARDHOUSE_SOURCE", "sample")


def local_path() -> str | None:
    return _get("REWARDHOUSE_LOCAL_PATH")


def prm_label_threshold() -> float:
    return _number("REWARDHOUSE_PRM_LABEL_THRESHOLD", "0.0", float)


def dedupe_max_distance(default: int) -> int:
    return _number("REWARDHOUSE_DEDUPE_MAX_DISTANCE", str(default), int)


def workers() -> int:
    return _number("REWARDHOUSE_WORKERS", "0", int)


def max_image_pixels(default: int) -> int:
    return _number("REWARDHOUSE_MAX_IMAGE_PIXELS", str(default), int)


def allow_unusable_files() -> bool:
    return _flag("REWARDHOUSE_ALLOW_UNUSABLE_FILES")


# --- automation -----------------------------------------------------------------------------------
def schedules_on() -> bool:
    return _flag("REWARDHOUSE_SCHEDULES_ON")


def nightly_cron(default: str) -> str:
    return _get("REWARDHOUSE_NIGHTLY_CRON", default)


def upstream_poll_seconds(default: int) -> int:
    return _number("REWARDHOUSE_UPSTREAM_POLL_SECONDS", str(default), int)


def notify_command() -> str:
    return _get("REWARDHOUSE_NOTIFY_COMMAND", "")


# --- upstream hosts -------------------------------------------------------------------------------
def hf_endpoint() -> str | None:
    """HF_ENDPOINT, as huggingface_hub reads it (HF_TOKEN is read by huggingface_hub itself)."""
    value = _get("HF_ENDPOINT")
    return value.rstrip("/") if value else None


def github_raw(default: str) -> str:
    """REWARDHOUSE_GITHUB_RAW: the raw-file host for GitHub annotation files (a mirror, or a test server)."""
    return _get("REWARDHOUSE_GITHUB_RAW", default)


def github_api(default: str) -> str:
    return _get("REWARDHOUSE_GITHUB_API", default)


def github_token() -> str | None:
    return _get("GITHUB_TOKEN")


# --- object storage (the standard AWS variables) --------------------------------------------------
def aws_endpoint_url() -> str | None:
    return _get("AWS_ENDPOINT_URL")


def aws_region() -> str | None:
    return _get("AWS_REGION") or _get("AWS_DEFAULT_REGION")


# --- readers (`rewardhouse sql`) ------------------------------------------------------------------
class SettingError(ValueError):
    """An environment variable or option holds a value it cannot take; the message names it."""


_SIZE = r"^\s*\d+(\.\d+)?\s*(%|[KMGT]i?B|bytes)\s*$"


def size_value(name: str, text: str) -> str:
    """A DuckDB size (`4GB`, `512MiB`, `25%`), checked here so a typo is one line naming `name`."""
    import re

    if not re.match(_SIZE, text, re.IGNORECASE):
        raise SettingError(f"{name}={text!r}: expected a size such as 4GB, 512MiB or 25% (of this machine's memory)")
    return text.strip()


def seconds_value(name: str, text: str) -> float | None:
    """Seconds (> 0), or None for no limit (`0`, `none`)."""
    if text.strip().lower() in ("0", "none", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise SettingError(f"{name}={text!r}: expected seconds (a number above 0), or 0 for no limit")
    return value


SQL_TIMEOUT_DEFAULT = "60"
SQL_MEMORY_DEFAULT = "25%"
SQL_TEMP_LIMIT_DEFAULT = "4GB"


def sql_timeout() -> float | None:
    """REWARDHOUSE_SQL_TIMEOUT: seconds a `rewardhouse sql` query may run (default 60; 0: no limit)."""
    return seconds_value("REWARDHOUSE_SQL_TIMEOUT", _get("REWARDHOUSE_SQL_TIMEOUT", SQL_TIMEOUT_DEFAULT))


def sql_memory_limit() -> str:
    """REWARDHOUSE_SQL_MEMORY_LIMIT: DuckDB's memory limit for a reader (default 25% of memory)."""
    return size_value("REWARDHOUSE_SQL_MEMORY_LIMIT", _get("REWARDHOUSE_SQL_MEMORY_LIMIT", SQL_MEMORY_DEFAULT))


def sql_temp_dir() -> str | None:
    """REWARDHOUSE_SQL_TEMP: where a reader's query spills (default: the system temp folder, never
    the data root)."""
    return _get("REWARDHOUSE_SQL_TEMP")


def sql_temp_limit() -> str:
    """REWARDHOUSE_SQL_TEMP_LIMIT: how much a reader's query may spill (default 4GB)."""
    return size_value("REWARDHOUSE_SQL_TEMP_LIMIT", _get("REWARDHOUSE_SQL_TEMP_LIMIT", SQL_TEMP_LIMIT_DEFAULT))
