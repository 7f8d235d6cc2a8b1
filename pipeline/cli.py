"""`rewardhouse`: run the pipeline, list releases, query the warehouse, score judge outputs."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import sys
from pathlib import Path

from pipeline import env
from pipeline.settings import DEFAULT_MAX_DISTANCE, REPO_ROOT, Layout

PROGRESS_EVERY = 5.0  # seconds between progress lines when stderr is a log, not a terminal
EXAMPLE_SQL = "select task, count(*) as pairs, round(avg((chosen = 'A')::int) * 100, 1) as chosen_a_pct from mmrb2_pairs group by task order by task"


def _fail(message: str, code: int = 1) -> int:
    print(f"rewardhouse: {message}", file=sys.stderr)
    return code


def prepare_dagster_home(layout: Layout) -> Path:
    """Use a persistent DAGSTER_HOME inside the data root (unless one is set) with the repo's dagster.yaml."""
    home = Path(env.dagster_home() or layout.dagster_home)
    home.mkdir(parents=True, exist_ok=True)
    src, dst = REPO_ROOT / "dagster.yaml", home / "dagster.yaml"
    if src.is_file() and (not dst.is_file() or dst.read_bytes() != src.read_bytes()):
        # The repository's instance settings win over an older copy; tmp + rename, as two runs may start at once.
        tmp = home / f".dagster.yaml.{os.getpid()}.tmp"
        try:
            shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        except OSError:  # a full disk: leave no half-copied file behind
            tmp.unlink(missing_ok=True)
            raise
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def _failure_messages(result) -> list[str]:
    messages = []
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            err = event.step_failure_data.error
            # A dg.Failure carries the user-facing description; anything else: its message line.
            while err.cause is not None and err.cls_name in ("DagsterExecutionStepExecutionError",):
                err = err.cause
            if err.cls_name == "DagsterAssetCheckFailedError":  # the failed checks have a line each already
                continue
            text = err.message.strip()
            if err.cls_name in ("Failure", "PublishError"):  # written for the user: no class name in front
                text = text.partition(": ")[2] or text
            messages.append(f"{event.step_key}: {text}")
    return messages


def _publish_outcome_unknown(result) -> bool:
    """Whether the publish to a bucket failed without knowing if CURRENT moved (see warehouse_release)."""
    return any(e.is_step_failure and e.step_failure_data and e.step_failure_data.user_failure_data
               and "publish_outcome" in (e.step_failure_data.user_failure_data.metadata or {})
               for e in result.all_events)


def _check_summary(evaluation) -> str:
    """The first violation or failing expectation of a check, in one line."""
    details = evaluation.metadata.get("details")
    value = getattr(details, "value", None) or getattr(details, "data", None) or {}
    if value.get("violations"):
        name, v = next(iter(value["violations"].items()))
        return f"{name} ({v['count']}, e.g. {v['sample'][:3]})"
    if value.get("failures"):
        f = value["failures"][0]
        return f"{f['expectation']} on {f.get('column')} (e.g. {f.get('sample', [])[:3]})"
    return str(value)[:200]


def _unusable_files(result) -> tuple[list[str], bool]:
    """One line per whole upstream file the run refused (from the `upstream_files` check), and
    whether they blocked the release."""
    for e in result.get_asset_check_evaluations():
        if e.check_name != "upstream_files" or e.passed:
            continue
        details = e.metadata.get("details")
        value = getattr(details, "value", None) or getattr(details, "data", None) or {}
        lines = [f"unusable upstream file: {f['dataset']} {f['file']}: {f['reason']}" for f in value.get("unusable_files", [])]
        return lines, e.severity.name == "ERROR"
    return [], False


def _parse_value(text: str):
    if text.lstrip().startswith("{"):  # a mapping setting, e.g. hf_revisions={"org/name": "<sha>"}
        try:
            return json.loads(text)
        except ValueError:
            pass
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


RUN_LOCK = ".run.lock"
# Exit status of `rewardhouse run --no-wait` when another run holds the data root (EX_TEMPFAIL).
EXIT_BUSY = 75
# Exit status of `rewardhouse sql` when its query ran out of time (as timeout(1)).
EXIT_TIMEOUT = 124


def _say(message: str) -> None:
    print(f"rewardhouse: {message}", file=sys.stderr, flush=True)


def _one_run_at_a_time(layout: Layout, wait: bool = True):
    """`rewardhouse run` executes in process, outside Dagster's run queue, so runs on one data root
    take turns on a lock file: they share the Dagster home's SQLite files, staging and the raw
    downloads. A waiting run says every few seconds who holds it."""
    from warehouse.store import exclusive_lock

    return exclusive_lock(layout.root / RUN_LOCK, f"the data root {layout.root}", _say, wait=wait)


def cmd_run(args) -> int:
    """SIGTERM/SIGINT are owned by a SignalOwner for the whole command (pipeline.stopping): the
    first stops the run at a safe point and marks it canceled, the second stops it at once."""
    import signal

    from pipeline.stopping import SignalOwner, Stopped

    import threading

    # The stop request is marked from a helper thread while the run goes on in this one: the lock
    # keeps the mark from landing after the run has ended (a finished run left CANCELING).
    state: dict = {"lock": threading.Lock()}

    def first(signum: int) -> None:
        name = signal.Signals(signum).name
        state["stopped_by"] = signum
        _say(f"{name} received: stopping at the next safe point (a publish under way finishes first); "
             f"send it again to stop at once")
        with state["lock"]:
            if state.get("run_id") and not state.get("ended"):
                from pipeline.runs import mark_canceling

                mark_canceling(state["instance"], state["run_id"], f"{name} received by rewardhouse run (pid {os.getpid()})")

    def second(signum: int) -> None:
        name = signal.Signals(signum).name
        _say(f"second {name}: stopping now; a release being published stays whole, and the next run cleans up")
        if state.get("run_id"):
            from pipeline.runs import abandon

            abandon(state["instance"], state["run_id"], f"stopped at once by a second {name}")

    with SignalOwner(first, second):
        try:
            return _run(args, state)
        except Stopped as exc:  # before the run was created
            _say(f"stopped by {signal.Signals(exc.signum).name} before the run started; nothing was changed")
            return 128 + exc.signum
        except Exception as exc:  # a full disk in Dagster's own storage raises out of the run
            from pipeline import unwritable

            problem = unwritable.find(exc)
            if problem is None:
                raise
            return _unwritable(problem, state)


def _release_outcome(state: dict) -> str:
    """What the run did to CURRENT, against the release that was current when it started."""
    from warehouse.store import ReleaseStore

    current = ReleaseStore(Layout().releases).current()
    if current and current != state.get("before", current):
        return f"release {current} was published and is current"
    return f"nothing was published; release {current} stays current" if current else "nothing was published"


def _unwritable(problem, state: dict, step: str | None = None) -> int:
    """A run that could not write its data root or Dagster home (a full disk, a quota, a
    read-only file system), wherever it happened: one line naming the path, the run
    marked failed and its pool slots freed (its disk reserve is free by now, see runs.Lease), or
    said to be left for the next run when even that cannot be written."""
    from pipeline.runs import fail_run

    noticed = state.get("problem")
    if noticed is not None and (noticed.path or not problem.path):
        problem = noticed
    layout = Layout()
    home = Path(env.dagster_home() or layout.dagster_home)  # as prepare_dagster_home chose it
    where = problem.where(str(layout.root), str(home))
    run_id = state.get("run_id")
    fate = "no run was started"
    if run_id:
        try:
            with _cli_instance(home) as instance:
                created = fail_run(instance, run_id, f"{problem.reason}: {where}")
            fate = f"run {run_id} is marked failed" if created else "no run was started"
        except Exception:  # the storage is still full: the dead-run cleanup of the next run does it
            fate = f"run {run_id} could not be marked failed in {home} (no room there either): the next `rewardhouse run` cleans it up"
    in_step = f" (in {step})" if step else ""
    _say(f"{problem.reason}: {where}{in_step}; {fate}; {_release_outcome(state)}. "
         f"Free space there (or make it writable) and run again")
    return 1


class _WithoutStorageNoise:
    """Stderr while a run executes, minus Dagster's report of each event it could not store (a
    many-line SQL dump per event once the disk is full); the run's end says what happened, once."""

    NOISE = "Exception while writing logger call to event log"

    def __init__(self, target):
        self._target = target

    def write(self, text: str) -> int:
        return len(text) if text.startswith(self.NOISE) else self._target.write(text)

    def __getattr__(self, name: str):
        return getattr(self._target, name)

    def __enter__(self) -> "_WithoutStorageNoise":
        sys.stderr = self
        return self

    def __exit__(self, *exc) -> None:
        sys.stderr = self._target


def _step_error_texts(result) -> list[tuple[str, str]]:
    """(step, message) of every error in the chain of every failed step."""
    out = []
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            stack = [event.step_failure_data.error]
            while stack:
                err = stack.pop()
                out.append((event.step_key, err.message))
                stack += [e for e in (err.cause, err.context) if e is not None]
    return out


def _leak_lines(result) -> list[str]:
    """What record_contamination found (pairs of records per class) and what each training export
    left out for it, from the run's materializations (none when the steps were not in the run)."""
    from pipeline import datasets

    def metadata(node: str) -> dict:
        out = {}
        for mat in result.asset_materializations_for_node(node):
            out = {k: v.value for k, v in mat.metadata.items()}
        return out

    lines = []
    found = metadata("record_contamination")
    if found:
        per = {}
        for k, v in found.items():
            if k.startswith("leaks_"):
                ev, _, leak = k[len("leaks_"):].rpartition("_")
                per.setdefault(leak, []).append(f"{v} of {ev}")
        shown = "; ".join(f"{leak} {', '.join(per[leak])}" for leak in ("full", "image", "text") if leak in per)
        lines.append(f"leaks (record_contamination, pairs of records): {shown or 'none'}")
    for spec in datasets.DATASETS:
        if not spec.export_asset:
            continue
        md = metadata(spec.export_asset)
        if not md:
            continue
        order = {c: i for i, c in enumerate(("full", "image", "text"))}
        left = [f"{k[len('removed_'):].replace('_leak_of_', ' leak of ')} {v}"
                for k, v in sorted(md.items(), key=lambda kv: (order.get(kv[0][len("removed_"):].split("_")[0], 9), kv[0]))
                if "_leak_of_" in k and v]
        lines.append(f"{spec.name} training export: {md.get('rows', 0)} rows; left out for leaks: "
                     f"{md.get('removed_contaminated', 0)} ({', '.join(left) or 'none'}), duplicates "
                     f"{md.get('removed_duplicate', 0)}, images unavailable {md.get('removed_image_unavailable', 0)} "
                     f"({spec.record_table}.excluded_reason says why)")
    return lines


def _settings_problem(args, config: dict) -> str | None:
    """What is wrong with the run's settings, found before any run is created: a --path that is
    not a folder, and the resource's own validation (field types, then the Settings it makes)."""
    from pydantic import ValidationError

    from pipeline.dedupe.executor import Executor
    from pipeline.resources import RewardhouseResource

    if config.get("local_path") and args.source == "local" and not Path(config["local_path"]).is_dir():
        return f"--path {args.path}: no such folder ({config['local_path']}); --source local reads a folder mirroring the upstream layout"
    try:
        Executor.from_settings(RewardhouseResource(**config).settings())
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(part) for part in err["loc"])
        return f"invalid setting {field}={err.get('input')!r}: {err['msg']}"
    except ValueError as exc:
        return f"invalid setting: {exc}"
    return None


def _overrides_problem(config: dict) -> str | None:
    """The reviewers' overrides file, if the run could not use it. The dedupe step reads it again
    (that read is the one applied) and stops with the same line if it broke in between."""
    from pipeline.resources import RewardhouseResource
    from pipeline.review.overrides import OverridesError, load, unusable_overrides

    try:
        load(RewardhouseResource(**config).settings().overrides)
    except OverridesError as exc:
        return unusable_overrides(exc)
    return None


def _cli_instance(home: Path):
    """The instance of dagster.yaml, but without capturing the steps' stdout/stderr: for a run in
    this process that capture swaps the terminal's file descriptors for log files and mirrors them
    back through `tail` helpers, which would swallow what this command says while a step runs and
    print their own tracebacks on Ctrl-C. The run's events and logs are in the instance as usual."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    no_capture = {"module": "dagster._core.storage.noop_compute_log_manager", "class": "NoOpComputeLogManager"}
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home), overrides={"compute_logs": no_capture}))


def _current_release_line() -> str:
    from warehouse.store import ReleaseStore

    current = ReleaseStore(Layout().releases).current()
    return f"release {current} is current and whole" if current else "no release is current"


def _run(args, state: dict) -> int:
    import signal

    import dagster as dg
    from dagster._core.utils import make_new_run_id

    from pipeline.liveness import Busy, set_process_label
    from pipeline.resources import RewardhouseResource
    from pipeline import unwritable
    from pipeline.runs import Lease, abandon, reap_dead_runs, run_outcome, settle_finished, wait_for_other_runs
    from pipeline.schedules import all_partitions_tags
    from pipeline.stopping import Stopped, stop_point
    from warehouse.store import ReleaseStore

    layout = Layout()
    state["before"] = ReleaseStore(layout.releases).current()  # to say what the run changed, however it ends
    home = prepare_dagster_home(layout)
    stop_point()  # a stop that came during the imports
    if args.source == "local" and not args.path:
        return _fail("--source local needs --path DIR (a folder mirroring the upstream layout)", 2)
    config = {"source": args.source, "home": layout.where}
    if args.path:
        config["local_path"] = str(Path(args.path).expanduser().resolve())
    if args.prm_label_threshold is not None:
        config["prm_label_threshold"] = args.prm_label_threshold
    if args.max_distance is not None:
        config["dedupe_max_distance"] = args.max_distance
    if args.workers:
        config["workers"] = args.workers
    if args.hf_images:
        config["hf_images"] = True
    roots = args.images or env.image_roots()
    if roots:
        config["image_roots"] = [r if r.startswith("s3://") else str(Path(r).expanduser().resolve()) for r in roots]
    if env.overrides():
        config["overrides"] = env.overrides()
    config["executor"] = args.executor or ("ray" if env.ray_address() else "local")
    if env.ray_address():
        config["ray_address"] = env.ray_address()
    config["export_keep_duplicates"] = args.keep_duplicates
    config["export_keep_contaminated"] = args.keep_contaminated
    if args.keep_leaks:
        config["export_keep_leaks"] = [c.strip() for c in args.keep_leaks.split(",") if c.strip()]
    for item in args.set or []:
        key, _, value = item.partition("=")
        if not _ or key not in RewardhouseResource.model_fields:
            known = ", ".join(sorted(RewardhouseResource.model_fields))
            return _fail(f"--set {item!r}: expected KEY=VALUE with KEY one of {known}", 2)
        config[key] = _parse_value(value)
    problem = _settings_problem(args, config) or _overrides_problem(config)
    if problem:  # at once, before the job is loaded or a run created
        return _fail(problem, 2)
    from pipeline.definitions import defs

    job = defs.resolve_job_def("refresh")
    run_id = make_new_run_id()
    me = f"rewardhouse run {run_id[:8]}"
    set_process_label(f"rewardhouse run, run {run_id[:8]}")
    try:
        # The lock first: runs on one data root take turns, from creating the instance's storage on.
        with _one_run_at_a_time(layout, wait=not args.no_wait), _cli_instance(home) as instance:
            try:
                # Runs that died (killed, OOM, reboot) are cleaned up first.
                for line in reap_dead_runs(instance, by=me):
                    _say(line)
                # Runs launched from the UI do not take the lock: wait for them in the instance.
                wait_for_other_runs(instance, run_id, _say, wait=not args.no_wait, by=me)
                with Lease(instance, run_id, "rewardhouse run") as lease:
                    stop_point()
                    state.update(instance=instance, run_id=run_id)

                    def out_of_room(problem) -> None:  # free the reserve now: Dagster can record the failure
                        state.setdefault("problem", problem)
                        lease.free_reserve()

                    with _WithoutStorageNoise(sys.stderr), unwritable.watching(out_of_room):
                        result = job.execute_in_process(
                            instance=instance,
                            run_id=run_id,
                            tags=all_partitions_tags(),
                            run_config={
                                "resources": {"rewardhouse": {"config": config}},
                                # The full event log (with tracebacks) is in the Dagster UI; the terminal gets a summary.
                                "loggers": {"console": {"config": {"log_level": "INFO" if args.verbose else "CRITICAL"}}},
                            },
                            raise_on_error=False,
                        )
                    with state["lock"]:
                        state["ended"] = True
                        # a stop marked between the run's last safe point and its end: it finished
                        settle_finished(instance, run_id, run_outcome(result.all_events))
                    run = instance.get_run_by_id(run_id)
            except Stopped as exc:  # at a stop point outside the run's steps
                name = signal.Signals(exc.signum).name
                if not state.get("run_id"):
                    _say(f"stopped by {name} before the run started; nothing was changed")
                else:
                    abandon(instance, run_id, f"stopped by {name}")
                    _say(f"stopped by {name}: run {run_id} canceled; {_current_release_line()}")
                return 128 + exc.signum
    except Busy as exc:
        _say(f"{exc}; not waiting (--no-wait)")
        return EXIT_BUSY
    signum = state.get("stopped_by")
    if run is not None and run.status == dg.DagsterRunStatus.CANCELED:
        name = signal.Signals(signum).name if signum else "a cancel request"
        _say(f"stopped by {name}: run {run_id} canceled at a safe point; {_release_outcome(state)}")
        return 128 + signum if signum else 1
    errors = _step_error_texts(result)
    problem = unwritable.find_in_texts(text for _, text in errors)
    if problem is not None:  # a step could not write: one line, whichever step it was
        step = next(step for step, text in errors if unwritable.find_in_text(text) == problem)
        return _unwritable(problem, state, step)
    failed_checks = [
        e for e in result.get_asset_check_evaluations() if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR
    ]
    warned = [e.check_name for e in result.get_asset_check_evaluations() if not e.passed and e.severity != dg.AssetCheckSeverity.ERROR]
    md = {}
    for mat in result.asset_materializations_for_node("warehouse_release"):
        md = {k: v.value for k, v in mat.metadata.items()}
    unusable, blocked_by_files = _unusable_files(result)
    if failed_checks or not md:
        for e in failed_checks:
            if e.check_name != "upstream_files":
                print(f"rewardhouse: check {e.check_name} failed: {_check_summary(e)}", file=sys.stderr)
        for line in _failure_messages(result):
            print(f"rewardhouse: {line}", file=sys.stderr)
        why = "blocking checks failed" if failed_checks else "the run failed"
        if _publish_outcome_unknown(result):  # its line says how to find out; claim nothing about CURRENT
            print(f"Run {result.run_id} is in the Dagster UI (make dev; Dagster home {home})", file=sys.stderr)
        else:
            print(f"no release published ({why}); the previous release stays current. "
                  f"Run {result.run_id} is in the Dagster UI (make dev; Dagster home {home})", file=sys.stderr)
        if unusable:  # the last lines: each file that could not be used, and why
            if blocked_by_files:
                print("rewardhouse: blocked by upstream files that could not be used (fix them, or publish "
                      "without them: --set allow_unusable_files=true):", file=sys.stderr)
            for line in unusable:
                print(f"rewardhouse: {line}", file=sys.stderr)
        return 1
    if warned:
        print(f"warnings from checks: {', '.join(sorted(warned))} (see quality_results)", file=sys.stderr)

    status = "published" if md.get("published") else "unchanged (no new release)"
    print(f"release {md.get('release_id')}: {status}")
    if md.get("warning"):  # published, but something after the swap failed
        print(f"rewardhouse: warning: {md['warning']}", file=sys.stderr)
    for line in _contents_lines(layout):
        print(line)
    review = f"{layout.remote}/releases/{md.get('release_id')}/review/index.html" if layout.remote else md.get("review_page")
    if review:
        print(f"review the dedupe and contamination decisions: {review}  (rewardhouse review)")
    for line in _leak_lines(result):
        print(line)
    # commands that work as printed in a new shell: this environment's own console script and
    # Python (a `make run` leaves them in .venv, not on PATH; the duckdb CLI is not installed)
    script = Path(sys.executable).with_name("rewardhouse")
    cli = shlex.quote(str(script)) if script.exists() else "rewardhouse"
    sql = _shell_word(EXAMPLE_SQL)
    if layout.remote:
        print(f"data root: {layout.remote} (scratch: {layout.root})")
        print("try, from any machine with the bucket's URL and credentials:")
        print(f"  REWARDHOUSE_HOME={layout.remote} {cli} sql {sql}")
    else:
        print(f"warehouse: {layout.warehouse}")
        print("try:")
        print(f"  REWARDHOUSE_HOME={shlex.quote(str(layout.root))} {cli} sql {sql}")
        code = "import duckdb, sys; duckdb.connect(sys.argv[1], read_only=True).sql(sys.argv[2]).show()"
        print(f"  {shlex.quote(sys.executable)} -c \"{code}\" {shlex.quote(str(layout.warehouse))} {sql}")
    if unusable:  # published without them (allow_unusable_files): still the last lines
        print("rewardhouse: published WITHOUT these upstream files (allow_unusable_files):", file=sys.stderr)
        for line in unusable:
            print(f"rewardhouse: {line}", file=sys.stderr)
    if signum:  # the stop came after the run's last safe point: it finished, and says so
        _say(f"stopped by {signal.Signals(signum).name}: run {run_id} had passed its last safe point and finished; "
             f"{_release_outcome(state)}")
        return 128 + signum
    return 0


def _shell_word(text: str) -> str:
    """`text` as one shell word, in double quotes when it holds nothing a shell expands there."""
    return f'"{text}"' if not any(c in text for c in '"$`\\!') else shlex.quote(text)


def _contents_lines(layout: Layout) -> list[str]:
    """What the current release holds: records per dataset, and the quarantine per dataset and
    stage (read from the warehouse; nothing when it cannot be read)."""
    from pipeline import datasets

    try:
        with _connect_readonly(layout) as con:
            tables = {r[0] for r in con.execute("select table_name from information_schema.tables").fetchall()}
            held = [f"{d.name}: {con.execute(f'select count(*) from {d.record_table}').fetchone()[0]} {d.record_noun}"
                    if d.record_table in tables else f"{d.name}: absent" for d in datasets.DATASETS]
            rows = (con.execute("select dataset, stage, count(*) from quarantine group by all order by all").fetchall()
                    if "quarantine" in tables else [])
    except Exception:  # the release is published; this is only a summary of it
        return []
    out = [f"published: {'; '.join(held)}"]
    by_dataset: dict[str, list[tuple[str, int]]] = {}
    for dataset, stage, n in rows:
        by_dataset.setdefault(dataset, []).append((stage, n))
    if by_dataset:
        parts = [f"{d} {sum(n for _, n in st)} ({', '.join(f'{s} {n}' for s, n in st)})" for d, st in by_dataset.items()]
        out.append(f"quarantined (kept out, with stage and reason in the quarantine table): {'; '.join(parts)}")
    return out


def _connect_readonly(layout: Layout, limits=None, release: str | None = None):
    """A read-only session on the warehouse: the current release's tables and views, or with
    `release` (an id or a tag) that release's tables, and the derived views over them."""
    import duckdb

    from warehouse.duck import SQL_DIR, connect_readonly, lock_session, schema_for
    from warehouse.lifecycle import resolve
    from warehouse.objectstore import ObjectStoreError

    try:
        rid = resolve(release, layout) if release else None
    except (LookupError, ObjectStoreError) as exc:  # nothing to read there: one line, as for a missing file
        raise FileNotFoundError(str(exc).splitlines()[0]) from None
    if layout.remote:  # the bucket's current release (or the one asked for), attached read-only
        from warehouse.remote import connect_remote

        try:
            con, _ = connect_remote(layout.remote, rid)
        except (LookupError, ObjectStoreError) as exc:
            raise FileNotFoundError(str(exc)) from None
        return lock_session(con, limits)
    if not layout.warehouse.is_file():
        raise FileNotFoundError(f"no warehouse at {layout.warehouse}; run `rewardhouse run` first")
    con = connect_readonly(layout.warehouse, limits)
    if rid is not None:
        try:
            con.execute(f'use "{schema_for(rid)}"')
        except duckdb.CatalogException as exc:
            con.close()
            raise FileNotFoundError(str(exc).splitlines()[0]) from None
        for file in sorted(SQL_DIR.glob("*.sql")):  # the derived views, over this release's tables
            try:
                con.execute(f'create temp view "{file.stem}" as {file.read_text()}')
            except duckdb.CatalogException:
                continue
    return con


def _dataset_line(manifest, spec) -> str:
    source = manifest.sources.get(spec.name)
    if not source or source.get("absent"):
        return f"{spec.name}: absent"
    return f"{spec.name}: {manifest.row_counts.get(spec.record_table, 0)} {spec.record_noun}"


def cmd_releases(args) -> int:
    from warehouse.store import ReleaseStore

    layout = Layout()
    if layout.remote:
        from warehouse.objectstore import ObjectStoreError
        from warehouse.remote import manifests as remote_manifests

        try:
            manifests, current = remote_manifests(layout.remote)
        except ObjectStoreError as exc:
            return _fail(str(exc))
    else:
        store = ReleaseStore(layout.releases)
        manifests, current = store.list(), store.current()
    if not manifests:
        print(f"no releases under {layout.remote or layout.releases}; run `rewardhouse run` first")
        return 0
    from pipeline import datasets
    from warehouse import lifecycle
    from warehouse.diff import summary_line
    from warehouse.store import CHANGES

    try:
        tags, pin = lifecycle.tags(layout), lifecycle.pin(layout)
    except Exception as exc:  # a bucket that cannot be read: said once, as for the listing
        return _fail(str(exc).splitlines()[0])
    names: dict[str, list[str]] = {}
    for name, rid in tags.items():
        names.setdefault(rid, []).append(name)
    if pin is not None:
        print(pin.line())
    for m in manifests:
        mark = "*" if m.release_id == current else " "
        per_dataset = "; ".join(_dataset_line(m, d) for d in datasets.DATASETS)
        counts = ", ".join(f"{t}={n}" for t, n in sorted(m.row_counts.items()))
        labels = ", ".join(sorted(names.get(m.release_id, [])) + (["pinned"] if pin and pin.release == m.release_id else []))
        print(f"{mark} {m.release_id}{f' [{labels}]' if labels else ''}  {m.created_at}  {per_dataset}")
        print(f"    {counts}")
        if CHANGES in m.files:  # published with a changelog (CHANGES.md beside the manifest)
            print(f"    {summary_line(m.changes)}")
    return 0


def cmd_tag(args) -> int:
    from warehouse import lifecycle

    layout = Layout()
    try:
        rid, new = lifecycle.tag(layout, args.name, args.release)
    except (LookupError, ValueError) as exc:
        return _fail(str(exc).splitlines()[0], 2)
    except Exception as exc:  # the store (a busy lock is waited for; a bucket that cannot be read is one line)
        return _fail(str(exc).splitlines()[0])
    print(f"tag {args.name} {'names' if new else 'already names'} release {rid}")
    return 0


def cmd_untag(args) -> int:
    from warehouse import lifecycle

    try:
        rid = lifecycle.untag(Layout(), args.name)
    except KeyError as exc:
        return _fail(str(exc.args[0]), 2)
    except Exception as exc:
        return _fail(str(exc).splitlines()[0])
    print(f"tag {args.name} removed (it named release {rid})")
    return 0


def cmd_rollback(args) -> int:
    from warehouse import lifecycle

    layout = Layout()
    if args.unpin == bool(args.release):
        return _fail("name the release to roll back to, or --unpin (not both)", 2)
    on_wait = lambda line: print(f"rewardhouse: {line}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        if args.unpin:
            pin = lifecycle.unpin(layout, on_wait)
            print(f"unpinned (was pinned to release {pin.release}); the next run makes its release current"
                  if pin else "not pinned: nothing to do")
            return 0
        rolled = lifecycle.rollback(layout, args.release, on_wait)
    except (LookupError, lifecycle.RollbackRefused) as exc:
        return _fail(str(exc).splitlines()[0], 2)
    except Exception as exc:
        return _fail(str(exc).splitlines()[0])
    print(f"release {rolled.release} is current again (was {rolled.previous or 'none'}); pinned: runs write their "
          f"releases but leave it current until `rewardhouse rollback --unpin`")
    return 0


def cmd_diff(args) -> int:
    """Two releases compared (warehouse/diff.py): a table of row changes, the inputs that changed,
    the distributions; with --rows, the rows of one table."""
    import duckdb

    from pipeline.sources.objects import ObjectStoreError
    from warehouse.diff import diff, rows

    if args.rows and not args.table:
        return _fail("--rows lists the rows of one table: name it with --table T", 2)
    if args.limit < 0:
        return _fail("--limit must be 0 (all rows) or more", 2)
    try:
        if args.rows:
            found = rows(args.a, args.b, args.table, limit=args.limit + 1 if args.limit else None)
            shown = found.slice(0, args.limit) if args.limit else found
            if args.format == "json":
                print(json.dumps(shown.to_pylist(), default=str, indent=1))
            else:
                print(format_rows(shown.column_names, [tuple(r.values()) for r in shown.to_pylist()]))
                if shown.num_rows < found.num_rows:
                    print(f"(the first {args.limit}; --limit 0 lists them all)")
            return 0
        result = diff(args.a, args.b, tables=[args.table] if args.table else None)
    except LookupError as exc:  # no such release or table (a KeyError's text is its one argument)
        return _fail(str(exc.args[0]) if exc.args else str(exc), 2)
    except ObjectStoreError as exc:
        return _fail(str(exc))
    except duckdb.Error as exc:
        return _fail(f"diff failed: {(str(exc).splitlines() or [''])[0]}")
    print(json.dumps(result, default=str, indent=1) if args.format == "json" else "\n".join(diff_lines(result)))
    return 0


def _shown(value) -> str:
    return "-" if value is None else value if isinstance(value, str) else json.dumps(value, default=str)


def diff_lines(result: dict) -> list[str]:
    """`rewardhouse diff` for a terminal: one aligned line per table, then the inputs that changed,
    the rows gained and lost that matter most, and the distributions before and after."""
    ends = [f"{r['release_id']} ({r['created_at'][:16].replace('T', ' ')})" for r in (result["before"], result["after"])]
    lines = [f"release {ends[0]} -> {ends[1]}", ""]
    head = ("table", "status", "before", "after", "+added", "-removed", "~changed", "")
    body = []
    for name, t in result["tables"].items():
        notes = [f"columns added: {', '.join(t['columns_added'])}"] if t["columns_added"] else []
        notes += [f"columns removed: {', '.join(t['columns_removed'])}"] if t["columns_removed"] else []
        notes += [t["note"]] if t["note"] and t["status"] == "changed" else []
        changed = "-" if t["changed"] is None else f"~{t['changed']}"
        body.append((name, t["status"], str(t["rows_before"]), str(t["rows_after"]), f"+{t['added']}", f"-{t['removed']}",
                     changed, "; ".join(notes)))
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    for r in [head, *body]:  # words and notes read from the left, numbers line up on the right
        cells = (v.ljust(w) if i in (0, 1, 7) else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
        lines.append("  ".join(cells).rstrip())
    lines += ["", "inputs that changed:" + ("" if result["inputs"] else " none")]
    lines += [f"  {path}: {_shown(v['before'])} -> {_shown(v['after'])}" for path, v in result["inputs"].items()]
    if result["gained_lost"]:
        lines += ["", "gained / lost:"]
        lines += [f"  {name} ({g['what']}): gained {g['gained']}, lost {g['lost']}"
                  for name, g in result["gained_lost"].items()]
    for name, sides in result["distributions"].items():
        lines += ["", f"{name}, before -> after:"]
        b, a = sides["before"] or {}, sides["after"] or {}
        for what in dict.fromkeys([*b, *a]):
            x, y = b.get(what) or {}, a.get(what) or {}
            lines.append(f"  {what}: " + ", ".join(f"{k} {_shown(x.get(k))} -> {_shown(y.get(k))}"
                                                   for k in dict.fromkeys([*x, *y])))
    return lines


# What `rewardhouse sql` runs: queries. Any other statement (CREATE, INSERT, DROP, ATTACH, COPY,
# EXPORT, INSTALL/LOAD, SET ...) is refused before it reaches DuckDB.
_SQL_QUERY_STATEMENTS = frozenset({"SELECT", "EXPLAIN", "PRAGMA", "CALL"})
_SQL_QUERY_FORMS = "SELECT/WITH/FROM, SHOW, DESCRIBE, SUMMARIZE, EXPLAIN, PRAGMA, CALL"


def _sql_limits(args):
    """The reader's limits from its options, else the environment: (timeout, memory, spill base,
    spill size); SettingError naming the option or variable."""
    import tempfile

    timeout = env.seconds_value("--timeout", args.timeout) if args.timeout is not None else env.sql_timeout()
    memory = env.size_value("--memory-limit", args.memory_limit) if args.memory_limit else env.sql_memory_limit()
    spill = Path(env.sql_temp_dir() or tempfile.gettempdir())
    return timeout, memory, spill, env.sql_temp_limit()


def cmd_sql(args) -> int:
    import duckdb

    from warehouse.duck import QueryStopped, SessionLimits, spill_folder

    layout = Layout()
    try:
        timeout, memory, spill, spill_size = _sql_limits(args)
    except env.SettingError as exc:
        return _fail(str(exc), 2)
    if layout.remote is None and spill.resolve().is_relative_to(layout.root.resolve()):
        return _fail(f"REWARDHOUSE_SQL_TEMP={spill} is inside the data root {layout.root}: a reader's spill files "
                     "must not fill the disk a publish needs; name a folder elsewhere", 2)
    with contextlib.ExitStack() as stack:
        try:
            temp = stack.enter_context(spill_folder(spill))
        except OSError as exc:
            return _fail(f"cannot make a spill folder under {spill}: {exc.strerror or exc}; set "
                         "REWARDHOUSE_SQL_TEMP to a writable folder", 1)
        try:
            return _sql(args, layout, SessionLimits(memory, temp, spill_size), timeout)
        except QueryStopped as exc:
            if exc.reason == "timeout":
                return _fail(f"query stopped after {exc.seconds:.0f} s (timeout {timeout:g} s): narrow it, or allow "
                             "longer with --timeout SECONDS or REWARDHOUSE_SQL_TIMEOUT (0: no limit)", EXIT_TIMEOUT)
            if isinstance(exc.by, Terminated):
                return _fail(f"query stopped by SIGTERM after {exc.seconds:.1f} s", 143)
            return _fail(f"query interrupted after {exc.seconds:.1f} s", 130)
        except duckdb.OutOfMemoryException as exc:
            return _fail(f"query ran out of memory (limit {memory}; --memory-limit or REWARDHOUSE_SQL_MEMORY_LIMIT "
                         f"raises it): {str(exc).splitlines()[0]}", 2)


def _sql(args, layout: Layout, limits, timeout: float | None) -> int:
    import duckdb

    from warehouse.duck import run_query

    try:
        con = _connect_readonly(layout, limits, args.release)  # read-only, no other file, configuration locked
    except FileNotFoundError as exc:
        return _fail(str(exc))
    try:
        with con:
            kinds = [statement.type.name for statement in con.extract_statements(args.query)]
            refused = sorted({"INSTALL/LOAD" if k == "LOAD" else k for k in kinds} - _SQL_QUERY_STATEMENTS)
            if refused:
                return _fail(
                    f"refused: the warehouse is read-only and `rewardhouse sql` runs queries only "
                    f"({_SQL_QUERY_FORMS}), not {' or '.join(refused)}; `rewardhouse run` writes it",
                    2,
                )
            result = run_query(con, args.query, timeout)
            if result is None:
                return 0
            columns, rows = result
    except duckdb.PermissionException as exc:
        return _fail(f"refused: the warehouse session reads the warehouse only ({str(exc).splitlines()[0]})", 2)
    except duckdb.OutOfMemoryException:
        raise
    except duckdb.Error as exc:
        lines = str(exc).splitlines()
        hint = next((line.strip() for line in lines[1:] if line.strip().startswith(("Did you mean", "Candidate"))), None)
        return _fail(f"query failed: {lines[0]}" + (f" {hint}" if hint else ""), 2)
    print(format_rows(columns, rows, fmt=args.format))
    return 0


def format_rows(columns: list[str], rows: list[tuple], fmt: str = "table") -> str:
    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows(rows)
        return buf.getvalue().rstrip("\n")
    cells = [[("NULL" if v is None else str(v)) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    line = lambda vals: " | ".join(v.ljust(w) for v, w in zip(vals, widths))  # noqa: E731
    out = [line(columns), "-+-".join("-" * w for w in widths)] + [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def _without_pandas() -> None:
    """pyarrow imports pandas the first time it converts data, if pandas is installed: 0.8 s here,
    for nothing in a command that never makes a DataFrame. A stand-in that pyarrow reads as a
    pandas too old to use (and that DuckDB never needs) keeps it out of the process. Only for a
    `rewardhouse dedupe` process: pyarrow remembers the answer for the rest of the process."""
    if "pandas" in sys.modules:
        return
    import types
    import warnings

    stand_in = types.ModuleType("pandas")
    stand_in.__version__ = "0"
    sys.modules["pandas"] = stand_in
    warnings.filterwarnings("ignore", message="pyarrow requires pandas", category=UserWarning)


def _more_files_than(root: Path, n: int) -> bool:
    """Whether a folder holds more than n files, counted until it does (not only images: a guess
    that costs a directory walk cut short)."""
    seen = 0
    try:
        for _, _, names in os.walk(root):
            seen += len(names)
            if seen > n:
                return True
    except OSError:
        return False
    return False


def cmd_dedupe(args) -> int:
    import time

    from pipeline import env

    if not args.explain and (args.workers or os.cpu_count() or 1) > 1 and not (args.executor == "ray" or env.ray_address()):
        # a folder of more images than one process hashes faster alone (forkserver.SMALL_BATCH) is
        # hashed by a pool whose fork server is started here, ready by the time the images are listed
        # (forkserver imports neither NumPy nor Pillow: the fork server starts before they load here)
        from pipeline.dedupe import forkserver

        if _more_files_than(Path(args.dir), forkserver.SMALL_BATCH - 1):  # SMALL_BATCH images or more
            forkserver.start()
    from pipeline.dedupe.folder import dedupe_folder, explain_pair

    root = Path(args.dir)
    if not root.is_dir():
        return _fail(f"{root} is not a directory", 2)
    if args.explain:
        a, b = (p if p.is_absolute() or p.exists() else root / p for p in map(Path, args.explain))
        for path in (a, b):
            if not path.is_file():
                return _fail(f"{path} is not a file", 2)
        lines, duplicate = explain_pair(a, b, args.max_distance)
        print("\n".join(lines))
        return 0 if duplicate is not None else 1
    started = time.perf_counter()

    terminal = sys.stderr.isatty()
    last = [0.0]

    def progress(done: int, total: int, rate: float) -> None:
        text = f"hashed {done}/{total} images ({rate:.0f}/s)"
        if terminal:  # one line rewritten in place
            print(f"\r{text}", end="", file=sys.stderr, flush=True)
        elif done == total or time.perf_counter() - last[0] >= PROGRESS_EVERY:  # a log: whole lines, now and then
            last[0] = time.perf_counter()
            print(text, file=sys.stderr, flush=True)

    from pipeline.dedupe.executor import Executor
    from pipeline.dedupe.ray_executor import RayUnavailable

    kind = args.executor or ("ray" if env.ray_address() else "local")
    executor = Executor(kind, env.ray_address(), args.workers) if kind == "ray" else None
    try:
        result = dedupe_folder(root, args.max_distance, workers=args.workers or None, progress=progress,
                               executor=executor)
    except RayUnavailable as exc:
        if terminal:
            print(file=sys.stderr)
        return _fail(str(exc))
    if terminal:
        print(file=sys.stderr)
    for path, reason in result.errors:
        print(f"rewardhouse: skipped unreadable {path}: {reason}", file=sys.stderr)
    if args.report:
        from pipeline.dedupe.folder import write_report

        stats = write_report(root, result, Path(args.report))
        print(f"wrote {stats.path} ({stats.clusters_shown} of {stats.clusters} clusters shown, "
              f"{stats.thumbnails_made} thumbnails made, {stats.seconds:.1f}s)", file=sys.stderr)
    text = result.to_csv()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    kinds = result.kinds()
    print(
        f"{len(result.rows)} images, {result.clusters} clusters, {result.duplicates} duplicates"
        + (f" ({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})" if kinds else "")
        + f", {len(result.errors)} unreadable ({time.perf_counter() - started:.1f}s)"
        + (f"; wrote {args.output}" if args.output else ""),
        file=sys.stderr,
    )
    return 0


def _open_in_browser(target: str) -> bool:
    """Open a page when there is a screen to show it on (never on a headless machine or in CI)."""
    import webbrowser

    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or sys.platform in ("darwin", "win32")):
        return False
    try:
        return webbrowser.open(target)
    except webbrowser.Error:
        return False


def cmd_review(args) -> int:
    from warehouse.store import ReleaseStore

    layout = Layout()
    if layout.remote:
        from warehouse.objectstore import ObjectStoreError
        from warehouse.remote import manifests

        try:
            found, current = manifests(layout.remote)
        except ObjectStoreError as exc:
            return _fail(str(exc))
        ids = [m.release_id for m in found]
        from warehouse.lifecycle import tags as tag_names

        release = tag_names(layout).get(args.release, args.release) if args.release else current
        if release is None or release not in ids:
            return _fail(f"no release {args.release or ''} in {layout.remote}".replace("  ", " "), 2)
        print(f"{layout.remote}/releases/{release}/review/index.html")
        print("(in the bucket: open it through your store's web endpoint, or copy the review/ folder and open index.html)")
        return 0
    store = ReleaseStore(layout.releases)
    release = store.tags().get(args.release, args.release) if args.release else store.current()
    if release is None:
        return _fail(f"no release in {layout.releases}; run `rewardhouse run` first", 2)
    if not store.exists(release):
        known = ", ".join(m.release_id for m in store.list()[:5])
        return _fail(f"no release {release} in {layout.releases} (known: {known or 'none'})", 2)
    page = store.path(release) / "review" / "index.html"
    if not page.is_file():
        return _fail(f"release {release} has no review page (published before review pages existed); "
                     "the next `rewardhouse run` publishes one", 1)
    print(page)
    if not args.no_open and _open_in_browser(page.as_uri()):
        print("opened in your browser", file=sys.stderr)
    return 0


def _image_exists(layout: Layout, ref: str) -> bool | None:
    """Whether the current release hashed an image of that name (None: no warehouse to ask)."""
    try:
        con = _connect_readonly(layout)
    except (FileNotFoundError, OSError):
        return None
    try:
        head, _, rest = ref.partition(":")
        if head == "sha256":
            row = con.execute("select count(*) from image_hashes where sha256 = ?", [rest.lower()]).fetchone()
        else:
            row = con.execute("select count(*) from image_hashes where dataset = ? and image_key = ?", [head, rest]).fetchone()
        return bool(row and row[0])
    except Exception:
        return None
    finally:
        con.close()


def _text_leak_exists(layout: Layout, train: str, eval_: str | None) -> bool | None:
    """Whether the current release has a text leak of that train record (against that eval record);
    None: no warehouse, or a release from before record_contamination, to ask."""
    try:
        con = _connect_readonly(layout)
    except (FileNotFoundError, OSError):
        return None
    try:
        dataset, _, key = train.partition(":")
        query = ("select count(*) from record_contamination where train_dataset = ? and train_key = ? "
                 "and leak in ('text', 'full')")
        params = [dataset, key]
        if eval_:
            e_dataset, _, e_key = eval_.partition(":")
            query += " and eval_dataset = ? and eval_key = ?"
            params += [e_dataset, e_key]
        row = con.execute(query, params).fetchone()
        return bool(row and row[0])
    except Exception:
        return None
    finally:
        con.close()


def cmd_override(args) -> int:
    from pipeline.review import overrides as ov

    layout = Layout()
    path = args.file or env.overrides() or layout.overrides
    try:
        if args.action == "list":
            found = ov.load(path)
            if not found.decisions:
                print(f"no decisions in {path}")
            for i, d in enumerate(found.decisions, 1):
                print(f"{i}. {d.label}" + (f" — {d.reason}" if d.reason else "") + (f" ({d.by}, {d.at})" if d.by or d.at else ""))
            return 0
        if args.action == "remove":
            out = ov.remove(path, args.number)
            print(f"removed decision {args.number}; {path} is at revision {out.revision} "
                  f"({len(out.decisions)} decisions); the next `rewardhouse run` publishes a release without it")
            return 0
        decision = args.action.replace("-", "_")
        images = [args.a, args.b] if decision != "not_leak" else [args.train] + ([args.eval] if args.eval else [])
        of = "text" if decision == "not_leak" and args.text else "image"
        warnings = []  # said only once the decision is recorded: an unusable file is the one line
        if of == "text":
            if _text_leak_exists(layout, args.train, args.eval) is False:
                against = f" against {args.eval}" if args.eval else ""
                warnings.append(f"the current release has no text leak of {args.train}{against}")
        else:
            warnings += [f"the current release has no hashed image named {ref}" for ref in images
                         if _image_exists(layout, ref) is False]
        out = ov.add(path, decision, images, args.reason or "", of=of)
    except ov.OverridesError as exc:
        return _fail(str(exc), 2)
    for w in warnings:
        print(f"rewardhouse: warning: {w}; the decision is recorded and will show as not applied until one exists",
              file=sys.stderr)
    print(f"recorded: {out.decisions[-1].label}")
    print(f"{path} is at revision {out.revision} ({len(out.decisions)} decisions); "
          "the next `rewardhouse run` applies it in a new release")
    return 0


def cmd_gc(args) -> int:
    from pipeline.gc import collect_garbage
    from warehouse.store import ReleaseStore

    layout = Layout()
    if args.older_than < 0:
        return _fail("--older-than must be 0 or more days", 2)
    with _one_run_at_a_time(layout):  # not while a `rewardhouse run` uses the staged folders
        report = collect_garbage(layout, args.older_than, current_release=ReleaseStore(layout.releases).current(),
                                 dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for folder, size in report.removed:
        print(f"{verb} {folder.relative_to(layout.root)} ({size / 1e6:.1f} MB)")
    print(f"{verb} {len(report.removed)} folder(s) of staged work and validation results unused for {args.older_than:g} days, "
          f"{report.freed / 1e6:.1f} MB; kept {report.kept}")
    if args.keep_releases:
        from warehouse import lifecycle

        try:
            doomed = (lifecycle.prunable(layout, args.keep_releases, args.grace_minutes * 60) if args.dry_run else
                      lifecycle.prune(layout, args.keep_releases, args.grace_minutes * 60))
        except Exception as exc:
            return _fail(str(exc).splitlines()[0])
        print(f"{verb} {len(doomed)} release(s) beyond the newest {args.keep_releases} (never the current, pinned or a "
              f"tagged one; not within {args.grace_minutes:g} min of a change of CURRENT)"
              + (f": {', '.join(doomed)}" if doomed else ""))
    if layout.remote and not args.dry_run:  # the bucket's leftovers: releases whose publish was killed
        from warehouse.objectstore import ObjectStoreError
        from warehouse.remote import sweep

        try:
            swept = sweep(layout.remote, args.leftover_minutes * 60)
        except ObjectStoreError as exc:
            return _fail(str(exc))
        print(f"removed {len(swept)} leftover(s) of killed publishes from {layout.remote}"
              + (f": {', '.join(swept)}" if swept else "") + f" (older than {args.leftover_minutes:g} min)")
    return 0


IN_FLIGHT_STATUSES = ("STARTING", "STARTED", "CANCELING")  # pipeline.runs.IN_FLIGHT, by name (no Dagster import)


def _idle_status(home: Path) -> list[str] | None:
    """status's closing lines when the instance is idle (no run in flight, no pool slot taken), read
    from its SQLite files read-only; None whenever that is not certain (then Dagster reads them)."""
    import sqlite3

    runs_db, index_db = home / "history" / "runs.db", home / "history" / "runs" / "index.db"
    if not runs_db.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"{runs_db.as_uri()}?mode=ro", uri=True, timeout=1)) as con:
            marks = ",".join("?" * len(IN_FLIGHT_STATUSES))
            if con.execute(f"select count(*) from runs where status in ({marks})", IN_FLIGHT_STATUSES).fetchone()[0]:
                return None
        lines = ["runs in flight: none"]
        if not index_db.is_file():
            return lines
        with contextlib.closing(sqlite3.connect(f"{index_db.as_uri()}?mode=ro", uri=True, timeout=1)) as con:
            if con.execute("select count(*) from concurrency_slots where not deleted and run_id is not null").fetchone()[0]:
                return None
            if con.execute("select count(*) from pending_steps").fetchone()[0]:
                return None
            slots = dict(con.execute("select concurrency_key, count(*) from concurrency_slots where not deleted "
                                     "group by concurrency_key").fetchall())
    except sqlite3.Error:
        return None
    return lines + [f"pool `{pool}`: 0 of {slots[pool]} slots taken" for pool in sorted(slots)]


def cmd_status(args) -> int:
    """Who holds what on this data root: the lock files, the runs in flight (alive or dead) and the
    pool slots; `--clean` cleans up after dead runs now, as the next `rewardhouse run` would."""
    from warehouse.store import WRITER_LOCK, lock_holder

    layout = Layout()
    home = prepare_dagster_home(layout)
    for what, path in ((f"data root ({RUN_LOCK}: `rewardhouse run`, gc)", layout.root / RUN_LOCK),
                       (f"warehouse writer ({WRITER_LOCK})", layout.releases / WRITER_LOCK)):
        holder = lock_holder(path)
        print(f"{what}: {f'held by {holder.describe()}' if holder else 'free'}")
    idle = None if args.clean else _idle_status(home)
    if idle is not None:  # nothing in flight, no slot taken: said without loading Dagster (~1 s)
        print("\n".join(idle))
        return 0
    from pipeline.runs import describe_run, judge, reap_dead_runs, runs_in_flight

    with _cli_instance(home) as instance:
        if args.clean:
            for line in reap_dead_runs(instance, by="rewardhouse status --clean"):
                print(line)
        runs = runs_in_flight(instance)
        for record in runs:
            verdict = judge(instance, record)
            state = "alive" if verdict.alive else "DEAD (the next `rewardhouse run`, `rewardhouse status --clean` or the daemon cleans it up)"
            print(f"{describe_run(record, verdict)}: {state}")
        if not runs:
            print("runs in flight: none")
        storage = instance.event_log_storage
        for pool in sorted(storage.get_concurrency_keys()) if storage.supports_global_concurrency_limits else []:
            info = storage.get_concurrency_info(pool)
            holders = ", ".join(f"run {slot.run_id} ({slot.step_key})" for slot in info.claimed_slots)
            print(f"pool `{pool}`: {len(info.claimed_slots)} of {info.slot_count} slots taken" + (f" by {holders}" if holders else ""))
    return 0


def _dataset_command(handler):
    """A dataset's sub-command (see `_add_dataset_commands`): `handler(args, connect)` gives the
    exit status and the text, printed on success, else said as the one line of a failure."""
    def run(args) -> int:
        code, text = handler(args, lambda: _connect_readonly(Layout()))
        if code:
            return _fail(text, code)
        print(text)
        return 0

    return run


def _add_dataset_commands(sub) -> None:
    """The sub-commands the datasets of the registry bring: a dataset package with a `cli` module
    adds them with its `add_commands(sub, command)` (pipeline/mmrb2/cli.py: `score`)."""
    import importlib
    import importlib.util

    from pipeline import datasets

    for spec in datasets.DATASETS:
        package = spec.fetch.partition(":")[0].rpartition(".")[0]  # pipeline.<dataset>
        if importlib.util.find_spec(f"{package}.cli") is not None:
            importlib.import_module(f"{package}.cli").add_commands(sub, _dataset_command)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """Every command; the datasets' own (read from the registry) only when `argv` does not start with
    a built-in one, which then answers without that import (it would double `status`'s start-up)."""
    parser = argparse.ArgumentParser(prog="rewardhouse", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="materialize every asset and publish a release")
    run.add_argument("--source", choices=("sample", "local", "hf"), default=env.source(),
                     help="sample: the embedded offline miniature (default, or REWARDHOUSE_SOURCE); local: a mirror "
                          "of the upstream layout in --path (docs/sources.md); hf: download from the Hub")
    run.add_argument("--path", help="for --source local: a folder mirroring the upstream layout")
    run.add_argument("--prm-label-threshold", type=float, default=None,
                     help="VisualPRM raw form: a step is '+' iff its Monte-Carlo score is above this (default 0.0)")
    run.add_argument("--max-distance", type=int, default=None,
                     help=f"near-duplicate radius in pHash bits (default {DEFAULT_MAX_DISTANCE})")
    run.add_argument("--workers", type=int, default=0, help="hashing processes (default: every core)")
    run.add_argument("--images", action="append", metavar="ROOT",
                     help="where VisualPRM's path references resolve, repeatable, in order: a folder, a zip, or a "
                          "split zip named by its first part (images.zip_aa; read in place, never concatenated)")
    run.add_argument("--hf-images", action="store_true",
                     help="with --source hf: fetch the images that path references need from OpenGVLab's archives "
                          "on the Hub, by range (the log says what that costs first; bound it with "
                          "--set hf_images_budget_gb=N)")
    run.add_argument("--executor", choices=("local", "ray"), default=None,
                     help="where the image work runs: this machine's process pool, or Ray (the cluster at "
                          "REWARDHOUSE_RAY_ADDRESS, else a local Ray instance); default: ray when that is set")
    run.add_argument("--keep-duplicates", action="store_true", help="keep duplicate rollouts in the training export")
    run.add_argument("--keep-contaminated", action="store_true",
                     help="keep samples that copy an eval record (any leak class) in the training export")
    run.add_argument("--keep-leaks", metavar="CLASSES", default=None,
                     help="leak classes the training export keeps, comma-separated among text, image, full "
                          "(default: none; every leak is left out)")
    run.add_argument("--set", action="append", metavar="KEY=VALUE",
                     help="any setting of the rewardhouse resource, e.g. --set positive_rate_min=0.8 (repeatable)")
    run.add_argument("-v", "--verbose", action="store_true", help="stream Dagster's event log to the terminal")
    run.add_argument("--no-wait", action="store_true",
                     help=f"fail at once (exit {EXIT_BUSY}) if another run holds the data root, instead of waiting for it")
    run.set_defaults(func=cmd_run)

    rel = sub.add_parser("releases", help="list releases, newest first, with row counts, tags and the pin")
    rel.set_defaults(func=cmd_releases)

    tg = sub.add_parser("tag", help="name a release (unique names; a tagged release is never pruned)")
    tg.add_argument("name", help="letters, digits, '.', '_', '-'")
    tg.add_argument("release", nargs="?", help="a release id or tag (default: the current release)")
    tg.set_defaults(func=cmd_tag)
    ut = sub.add_parser("untag", help="remove a tag")
    ut.add_argument("name")
    ut.set_defaults(func=cmd_untag)
    rb = sub.add_parser("rollback", help="make an older release current again and pin it (runs then write their "
                                         "releases without making them current), or --unpin")
    rb.add_argument("release", nargs="?", help="a release id or tag")
    rb.add_argument("--unpin", action="store_true", help="end the pin: the next run makes its release current")
    rb.set_defaults(func=cmd_rollback)

    df = sub.add_parser("diff", help="what changed between two releases: rows added, removed and changed per table "
                                     "(by each table's key), the inputs that changed, distributions before and after")
    df.add_argument("a", nargs="?", metavar="A", help="the older release (default: the one before B)")
    df.add_argument("b", nargs="?", metavar="B", help="the newer release (default: the current release)")
    df.add_argument("--table", metavar="T", help="only this table")
    df.add_argument("--rows", action="store_true",
                    help="with --table: list its rows that were removed, added or changed (a changed row as its two "
                         "versions, `changed from` and `changed to`)")
    df.add_argument("--limit", type=int, default=100, metavar="N", help="with --rows: at most N rows (default 100; 0: all)")
    df.add_argument("--format", choices=("text", "json"), default="text",
                    help="text: aligned for a terminal (default); json: for other programs")
    df.set_defaults(func=cmd_diff)

    sql = sub.add_parser("sql", help="run a read-only SQL query on the warehouse")
    sql.add_argument("query", help="one SQL statement, read-only, over the warehouse's tables and views")
    sql.add_argument("--release", metavar="RELEASE",
                     help="query this release (an id or a tag) instead of the current one: its tables and the "
                          "derived views over them")
    sql.add_argument("--format", choices=("table", "csv"), default="table",
                     help="table: aligned columns for a terminal (default); csv: a header and rows for other programs")
    sql.add_argument("--timeout", metavar="SECONDS",
                     help=f"stop the query after this long (default REWARDHOUSE_SQL_TIMEOUT, else "
                          f"{env.SQL_TIMEOUT_DEFAULT}; 0: no limit)")
    sql.add_argument("--memory-limit", metavar="SIZE",
                     help=f"DuckDB's memory limit for the query, e.g. 4GB or 25%% (default REWARDHOUSE_SQL_MEMORY_LIMIT, "
                          f"else {env.SQL_MEMORY_DEFAULT.replace('%', '%%')}); spills go to the system temp folder "
                          f"(REWARDHOUSE_SQL_TEMP), at most REWARDHOUSE_SQL_TEMP_LIMIT (default {env.SQL_TEMP_LIMIT_DEFAULT})")
    sql.set_defaults(func=cmd_sql)

    dd = sub.add_parser("dedupe", help="find exact and near-duplicate images in any folder (CSV out)")
    dd.add_argument("dir", help="a folder of images, searched recursively (a review page's own thumbnails are skipped)")
    dd.add_argument("--max-distance", type=int, default=DEFAULT_MAX_DISTANCE,
                    help="candidate search radius in hash bits (every candidate is then verified)")
    dd.add_argument("--explain", nargs=2, metavar=("A", "B"),
                    help="print how the engine judges two files (paths relative to DIR or absolute) and exit")
    dd.add_argument("--output", help="CSV file to write (default: standard output)")
    dd.add_argument("--report", metavar="FILE.html",
                    help="also write a review page: clusters side by side and near-misses, with thumbnails in "
                         "FILE_files/ beside it")
    dd.add_argument("--workers", type=int, default=0, help="hashing processes (default: every core)")
    dd.add_argument("--executor", choices=("local", "ray"), default=None,
                    help="hash on this machine's process pool, or on Ray (REWARDHOUSE_RAY_ADDRESS, else a local "
                         "Ray instance; DIR must be readable on every node); default: ray when that is set")
    dd.set_defaults(func=cmd_dedupe)

    rv = sub.add_parser("review", help="print the path of a release's review page (dedupe clusters, contamination, "
                                       "near-misses, overrides) and open it when a browser is there")
    rv.add_argument("release", nargs="?", help="a release id or tag (default: the current release)")
    rv.add_argument("--no-open", action="store_true", help="only print the path")
    rv.set_defaults(func=cmd_review)

    ov = sub.add_parser("override", help="record a reviewer's decision on dedupe or leaks (applied by the next run, "
                                         "part of the release id); images are <dataset>:<image_key> or sha256:<hex>, "
                                         "records (not-leak --text) <dataset>:<record key>")
    ov.add_argument("--file", help="the overrides file (default: REWARDHOUSE_OVERRIDES, else overrides.json in the data root)")
    ovs = ov.add_subparsers(dest="action", required=True)
    for name, what in (("not-duplicates", "these two images are not duplicates"),
                       ("duplicates", "always treat these two images as duplicates")):
        p = ovs.add_parser(name, help=what)
        p.add_argument("a", help="one image: <dataset>:<image_key> or sha256:<hex>")
        p.add_argument("b", help="the other image, named the same way")
        p.add_argument("--reason", default="", help="why, kept with the decision (shown by `list` and in the release)")
    p = ovs.add_parser("not-leak", help="this train image is not a leak (of any eval image, or of --eval only); "
                                        "with --text: this train record's text is not a leak")
    p.add_argument("train", help="<dataset>:<image_key> or sha256:<hex>; with --text, a record: <dataset>:<record key>")
    p.add_argument("--eval", help="only against this eval image (with --text: this eval record)")
    p.add_argument("--text", action="store_true",
                   help="about records' texts: drop the text link of the train record's record_contamination rows "
                        "(a full leak keeps its image link); names are <dataset>:<record key>, e.g. "
                        "visualprm:<sample_id> --eval vlrb:<pair_id>")
    p.add_argument("--reason", default="", help="why, kept with the decision (shown by `list` and in the release)")
    ovs.add_parser("list", help="list the decisions")
    p = ovs.add_parser("remove", help="drop decision N (as `list` numbers them)")
    p.add_argument("number", type=int, help="the decision's number in `rewardhouse override list`")
    ov.set_defaults(func=cmd_override)

    gc = sub.add_parser("gc", help="remove staged work and GX validation results no run has used for a while "
                                   "(releases only with --keep-releases)")
    gc.add_argument("--keep-releases", type=int, default=0, metavar="N",
                    help="also prune all but the newest N releases, as a publish with keep_releases=N does "
                         "(never the current, pinned or a tagged one); default 0: releases are not touched")
    gc.add_argument("--grace-minutes", type=float, default=10.0, metavar="MIN",
                    help="prune no release while CURRENT changed less than MIN minutes ago (a reader may still "
                         "read the release it named; default 10)")
    gc.add_argument("--leftover-minutes", type=float, default=60.0, metavar="MIN",
                    help="object-store root: remove objects of releases that never got a manifest once this old "
                         "(younger ones may be a publish in flight elsewhere; default 60)")
    gc.add_argument("--older-than", type=float, default=7.0, metavar="DAYS",
                    help="remove staged folders last used more than DAYS days ago (default 7; 0: all but the current candidate)")
    gc.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    gc.set_defaults(func=cmd_gc)

    st = sub.add_parser("status", help="who holds what: lock files, runs in flight (alive or dead), pool slots")
    st.add_argument("--clean", action="store_true",
                    help="clean up after dead runs now (mark them failed, free their slots), as the next run would")
    st.set_defaults(func=cmd_status)

    if not argv or argv[0] not in sub.choices:
        _add_dataset_commands(sub)
    return parser


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


class Terminated(KeyboardInterrupt):
    """A SIGTERM (a job scheduler's or `timeout`'s stop) to a command other than `run` (which owns
    its signals, pipeline.stopping): raised where a Ctrl-C's KeyboardInterrupt would be, so the
    command winds down the same way (a hashing pool's queued work dropped, its workers ended) and
    says so in one line, exit 143, instead of dying mid-way with the pool's semaphores left for
    multiprocessing's resource tracker to warn about."""


def _terminated(signum, frame) -> None:
    raise Terminated()


def _stop_swallowed(info, previous=sys.unraisablehook) -> None:
    """sys.unraisablehook of the commands other than `run`: a Ctrl-C's KeyboardInterrupt or a
    SIGTERM's Terminated raised where Python cannot pass an exception on (a finalizer, a weakref
    callback, a C library's callback such as numba's compiled-code cache) would be printed as
    ignored and the stop lost; the signal is sent again 50 ms later instead, once that code has
    returned."""
    if not isinstance(info.exc_value, KeyboardInterrupt):
        previous(info)
        return
    import signal
    import threading

    again = signal.SIGTERM if isinstance(info.exc_value, Terminated) else signal.SIGINT
    timer = threading.Timer(0.05, signal.pthread_kill, (threading.main_thread().ident, again))
    timer.daemon = True
    timer.start()


def main(argv: list[str] | None = None) -> int:
    import signal
    import threading

    if argv is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminated)  # `run` puts its own owner in place (cmd_run)
    args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    if argv is None and args.func is not cmd_run:
        sys.unraisablehook = _stop_swallowed
    if argv is None and args.func is cmd_dedupe:
        _without_pandas()  # the whole process is this one command (not a caller's Python session)
    home = env.home()
    if args.func is not cmd_dedupe and home and "://" not in home and os.path.isfile(os.path.expanduser(home)):
        return _fail(f"REWARDHOUSE_HOME={home} is a file, not a folder: point it at a folder (created when "
                     "missing) or a bucket root (s3://...)", 2)
    if args.func is not cmd_dedupe and home and home.startswith("s3://") and not _has_module("obstore"):
        return _fail(f"REWARDHOUSE_HOME={home} is a bucket root, which needs the S3 client of the `scale` extra: "
                     "`uv sync --extra scale` (or `pip install 'rewardhouse[scale]'`)", 2)
    try:
        return args.func(args)
    except Terminated:
        return _fail("terminated", 143)
    except KeyboardInterrupt:  # Ctrl-C outside a run (a run owns its signals): no traceback
        return _fail("interrupted", 130)
    except env.SettingError as exc:  # an environment variable that cannot be read: the one line naming it
        return _fail(str(exc), 2)
    except BrokenPipeError:  # the reader stopped reading (`| head`): nothing to say, nothing left to print
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # an unwritable or full data root, outside any run: say which path, no traceback
        where = f"cannot use {exc.filename}: " if exc.filename else ""
        return _fail(f"{where}{exc.strerror or exc}")
    except Exception as exc:  # the same said by SQLite (the Dagster home) or DuckDB
        from pipeline import unwritable

        problem = unwritable.find(exc)
        if problem is None:
            raise
        layout = Layout()
        return _fail(f"{problem.reason}: {problem.where(str(layout.root), env.dagster_home() or str(layout.dagster_home))}")


def console() -> None:
    """The `rewardhouse` command: `main()`, then what the interpreter does when it exits (waits for
    the threads that are not daemons, runs the atexit handlers: child processes reaped, logs
    flushed, finalizers run), the event log's SQLite files closed and the output flushed, and the
    exit itself without tearing every module down object by object, which took about a second
    after a full-scale run (a sixth of an unchanged rerun) and writes nothing. A Ctrl-C is one
    line and exit 130 (pipeline/console.py covers the imports before this), a SIGTERM to a command
    other than `run` one line and exit 143 (`Terminated`); an exception `main` does not handle
    leaves the usual way, with its traceback."""
    try:
        code = main()
    except Terminated:
        code = _fail("terminated", 143)
    except KeyboardInterrupt:  # a Ctrl-C before main handles one itself (its arguments being read)
        code = _fail("interrupted", 130)
    import atexit
    import signal
    import threading

    if code in (130, 143):  # interrupted or terminated: what is left is ended, not waited for
        import multiprocessing

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C or stop: the command is ending already
        for child in multiprocessing.active_children():  # pool workers a second Ctrl-C left running
            child.kill()  # (they ignore SIGTERM: a run winds them down itself)
    else:  # done: a Ctrl-C or a stop now ends the exit at once, without an exception raised inside a finalizer
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
    threading._shutdown()  # noqa: SLF001  (what Py_Finalize runs first; there is no public call)
    atexit._run_exitfuncs()  # noqa: SLF001
    from pipeline import event_log

    event_log.close_all()  # each SQLite file checkpointed and closed, as a normal exit leaves it
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


if __name__ == "__main__":
    console()
