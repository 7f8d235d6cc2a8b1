"""The Dagster UI for end-to-end tests: `dagster-webserver` + `dagster-daemon run` as real
subprocesses on 127.0.0.1, with a throwaway DAGSTER_HOME and data root.

    with dagster_ui(tmp_path) as ui:
        ui.graphql("{ version }")

The code location comes from pyproject.toml ([tool.dagster] module_name, code_location_name
"rewardhouse"), exactly as `make dev` finds it. The daemon is started too: the instance uses the
queued run coordinator, so a run launched from the UI or the GraphQL API stays QUEUED until the
daemon dequeues it. Both processes run in their own process group and the whole group is killed on
exit, code servers and run workers included.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
LOCATION = "rewardhouse"
STARTUP_TIMEOUT = 180.0
# A whole run of the sample from the UI: about a minute alone on 2 cores, four times that beside
# another test file on a slow machine (the tests using it get 900 s). The limit catches a run
# that hangs, not a slow one.
RUN_TIMEOUT = 420.0

WORKSPACE_QUERY = """
{
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError {
          __typename
          ... on RepositoryLocation { name repositories { name } }
          ... on PythonError { message }
        }
      }
    }
    ... on PythonError { message }
  }
}
"""

# A run launched with the GraphQL API or the UI: its status and the messages of its last events.
RUN_QUERY = """
query Run($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run {
      runId status jobName
      eventConnection(afterCursor: null) {
        events {
          __typename
          ... on MessageEvent { message level }
          ... on ExecutionStepFailureEvent { error { message } }
          ... on RunFailureEvent { error { message } }
        }
      }
    }
    ... on RunNotFoundError { message }
    ... on PythonError { message }
  }
}
"""

RUNS_QUERY = """
{
  runsOrError(limit: 5) {
    __typename
    ... on Runs { results { runId status jobName creationTime } }
    ... on PythonError { message }
  }
}
"""

FINAL_STATUSES = {"SUCCESS", "FAILURE", "CANCELED"}

# Straight to 127.0.0.1, whatever *_proxy variables the environment has.
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def assert_release_published(data_root: Path) -> str:
    """`releases/CURRENT` names a release folder with a manifest, and the warehouse serves the
    sample's `mmrb2_pairs` with that release current. Returns the release id."""
    import duckdb


    current = data_root / "releases" / "CURRENT"
    assert current.is_file(), f"no release published under {data_root}"
    release_id = current.read_text().strip()
    manifest_path = data_root / "releases" / release_id / "manifest.json"
    assert manifest_path.is_file(), f"CURRENT names {release_id!r}, which has no manifest.json"
    assert json.loads(manifest_path.read_text()), "empty manifest"
    pairs = 29  # the embedded sample's MMRB2 pairs
    with duckdb.connect(str(data_root / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from mmrb2_pairs").fetchone()[0] == pairs
        assert con.execute("select release_id from releases where is_current").fetchall() == [(release_id,)]
    return release_id


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class DagsterUI:
    url: str
    port: int
    dagster_home: Path
    data_root: Path
    logs: dict[str, Path]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    repository: str = "__repository__"
    location: str = LOCATION

    # -- GraphQL ------------------------------------------------------------------------------
    def graphql(self, query: str, variables: Optional[dict] = None, timeout: float = 30.0) -> dict:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        req = urllib.request.Request(f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"})
        with _http.open(req, timeout=timeout) as resp:
            payload = json.loads(resp.read())
        if payload.get("errors"):
            raise AssertionError(f"GraphQL errors: {payload['errors']}\n{self.diagnostics()}")
        return payload["data"]

    def run(self, run_id: str) -> dict:
        return self.graphql(RUN_QUERY, {"runId": run_id})["runOrError"]

    def recent_runs(self) -> list[dict]:
        result = self.graphql(RUNS_QUERY)["runsOrError"]
        assert result["__typename"] == "Runs", result
        return result["results"]

    def wait_for_run(self, run_id: str, timeout: float = RUN_TIMEOUT) -> dict:
        """Poll until the run ends; fail with its last event messages unless it succeeded."""
        deadline = time.monotonic() + timeout
        run = self.run(run_id)
        while run.get("status") not in FINAL_STATUSES:
            self.assert_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} still {run.get('status')} after {timeout:.0f} s\n{self.describe_run(run)}\n{self.diagnostics()}")
            time.sleep(1.0)
            run = self.run(run_id)
        if run["status"] != "SUCCESS":
            raise AssertionError(f"run {run_id} ended {run['status']}\n{self.describe_run(run)}\n{self.diagnostics()}")
        return run

    @staticmethod
    def describe_run(run: dict, last: int = 25) -> str:
        events = (run.get("eventConnection") or {}).get("events") or []
        lines = []
        for e in events[-last:]:
            lines.append(f"  [{e.get('level', '')}] {e['__typename']}: {(e.get('message') or '')[:400]}")
            if (e.get("error") or {}).get("message"):
                lines.append("      " + e["error"]["message"].strip()[:800].replace("\n", "\n      "))
        return f"last events of run {run.get('runId')}:\n" + "\n".join(lines)

    # -- processes ----------------------------------------------------------------------------
    def assert_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with code {proc.returncode}\n{self.diagnostics()}")

    def diagnostics(self) -> str:
        return "\n".join(f"--- last lines of {name} log ({path}) ---\n{_tail(path)}" for name, path in self.logs.items())


def _wait_until_loaded(ui: DagsterUI, timeout: float) -> None:
    """Until the server answers and the code location is LOADED with its repository."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        ui.assert_alive()
        try:
            with _http.open(f"{ui.url}/server_info", timeout=5) as resp:
                resp.read()
            data = ui.graphql(WORKSPACE_QUERY, timeout=10)["workspaceOrError"]
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            entries = {e["name"]: e for e in data.get("locationEntries") or []}
            entry = entries.get(LOCATION)
            if entry is None:
                last = f"locations: {sorted(entries)} ({data.get('message', '')})"
            elif entry["loadStatus"] == "LOADED":
                loc = entry["locationOrLoadError"]
                if loc["__typename"] != "RepositoryLocation":
                    raise AssertionError(f"code location {LOCATION} failed to load: {loc.get('message')}\n{ui.diagnostics()}")
                ui.repository = loc["repositories"][0]["name"]
                return
            else:
                last = f"location {LOCATION} is {entry['loadStatus']}"
        time.sleep(0.5)
    raise AssertionError(f"Dagster UI not ready after {timeout:.0f} s ({last})\n{ui.diagnostics()}")


def _wait_for_daemon(ui: DagsterUI, timeout: float) -> None:
    """Until the daemon's run coordinator reports a heartbeat, so queued runs will be picked up."""
    query = "{ instance { daemonHealth { id daemonStatus(daemonType: \"QUEUED_RUN_COORDINATOR\") { healthy required } } } }"
    deadline = time.monotonic() + timeout
    status: dict = {}
    while time.monotonic() < deadline:
        ui.assert_alive()
        status = ui.graphql(query)["instance"]["daemonHealth"]["daemonStatus"]
        if status["healthy"]:
            return
        time.sleep(0.5)
    raise AssertionError(f"QUEUED_RUN_COORDINATOR daemon not healthy after {timeout:.0f} s ({status})\n{ui.diagnostics()}")


def _stop(proc: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM the process group, then SIGKILL whatever of it is left (code servers, run workers)."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        pgid = None
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    if pgid is not None:
        # Children may outlive the leader: sweep the group until it is empty.
        end = time.monotonic() + grace
        while time.monotonic() < end:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def dagster_ui(workdir: Path, *, startup_timeout: float = STARTUP_TIMEOUT, extra_env: Optional[dict] = None) -> Iterator[DagsterUI]:
    """Webserver + daemon on a free port, DAGSTER_HOME = workdir/dagster_home, data root =
    workdir/data (REWARDHOUSE_HOME), logs in workdir/logs. Yields once the code location is
    loaded and the daemon is healthy; on exit both process groups are ended."""
    workdir = Path(workdir)
    dagster_home = workdir / "dagster_home"
    data_root = workdir / "data"
    log_dir = workdir / "logs"
    for d in (dagster_home, data_root, log_dir):
        d.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", dagster_home / "dagster.yaml")
    # The UI's "Join the Dagster community" dialog (shown once per instance on localhost) would
    # cover the page: mark it seen, as clicking "Skip" does.
    (dagster_home / ".nux").mkdir(exist_ok=True)
    (dagster_home / ".nux" / "nux.yaml").write_text("seen: 1\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "REWARDHOUSE_"))}
    env.update(
        DAGSTER_HOME=str(dagster_home),
        REWARDHOUSE_HOME=str(data_root),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
        NO_PROXY="127.0.0.1,localhost",
    )
    env.update(extra_env or {})

    # Create the instance's SQLite storages once, before two processes race to create and stamp
    # them (seen: "Version table 'alembic_version' has more than one head present").
    init = subprocess.run([str(BIN / "dagster"), "instance", "migrate"], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, f"dagster instance migrate failed:\n{init.stdout[-3000:]}\n{init.stderr[-3000:]}"

    port = free_port()
    commands = {
        # No -m/-w: both read the code location from pyproject.toml's [tool.dagster], like `make dev`.
        "webserver": [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port)],
        "daemon": [str(BIN / "dagster-daemon"), "run"],
    }
    ui = DagsterUI(url=f"http://127.0.0.1:{port}", port=port, dagster_home=dagster_home, data_root=data_root,
                   logs={name: log_dir / f"{name}.log" for name in commands})
    try:
        for name, argv in commands.items():
            with open(ui.logs[name], "wb") as log:
                ui.procs[name] = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                                  stderr=subprocess.STDOUT, start_new_session=True)
        _wait_until_loaded(ui, startup_timeout)
        _wait_for_daemon(ui, startup_timeout)
        yield ui
    finally:
        for proc in ui.procs.values():
            _stop(proc)
