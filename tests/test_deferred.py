"""checks/deferred.py: modules GX imports but the suites never use are imported on first use.

Each case runs in a new interpreter (what a module import does is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(code: str, cwd: Path = REPO) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_validation_with_gx_leaves_scipy_stats_and_altair_unimported_and_they_work_when_used():
    out = _run("""
        import json, sys, tempfile
        from pathlib import Path
        import pyarrow as pa
        from checks.suites import validate_tables
        from checks.deferred import deferred, Deferred
        with tempfile.TemporaryDirectory() as d:
            results, docs = validate_tables({"leak_overrides": pa.table({"x": [1]})}, Path(d), "t-1")
        assert "leak_overrides" in results and docs is not None
        before = {n: deferred(n) for n in ("scipy.stats", "altair")}
        real_before = "scipy.stats._stats_py" in sys.modules or "altair.vegalite" in sys.modules
        from scipy import stats
        entropy = float(stats.entropy([0.5, 0.5], [0.25, 0.75]))
        import altair
        chart = type(altair.Chart()).__name__
        after = {n: deferred(n) for n in ("scipy.stats", "altair")}
        print(json.dumps({"before": before, "real_before": real_before, "entropy": entropy, "chart": chart,
                          "after": after, "stand_in_left": isinstance(sys.modules["scipy.stats"], Deferred),
                          "parent": sys.modules["scipy"].stats is sys.modules["scipy.stats"]}))
    """)
    assert out["before"] == {"scipy.stats": True, "altair": True}
    assert out["real_before"] is False
    # KL(p || q) of (1/2, 1/2) against (1/4, 3/4): 1/2 ln 2 + 1/2 ln(2/3)
    assert abs(out["entropy"] - 0.14384103622589045) < 1e-12
    assert out["chart"] == "Chart"
    assert out["after"] == {"scipy.stats": False, "altair": False}
    assert out["stand_in_left"] is False and out["parent"] is True


def test_a_deferred_module_runs_once_on_first_use_whichever_thread_asks_first(tmp_path):
    (tmp_path / "slowmod.py").write_text(textwrap.dedent("""
        import time
        RUNS = __import__("builtins").__dict__.setdefault("_slowmod_runs", [])
        RUNS.append(1)
        time.sleep(0.2)
        VALUE = 42
    """))
    out = _run(f"""
        import json, sys, threading, builtins
        sys.path.insert(0, {str(tmp_path)!r})
        from checks.deferred import defer, deferred
        done = defer(("slowmod", "no_such_module_anywhere", "json"))
        import slowmod
        stand_in = deferred("slowmod")
        runs_before = len(getattr(builtins, "_slowmod_runs", []))
        got = []
        threads = [threading.Thread(target=lambda: got.append(slowmod.VALUE)) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        import slowmod as again
        print(json.dumps({{"done": done, "stand_in": stand_in, "runs_before": runs_before, "got": got,
                          "runs": len(builtins._slowmod_runs), "value": again.VALUE,
                          "real": sys.modules["slowmod"].__name__, "deferred_after": deferred("slowmod")}}))
    """)
    assert out["done"] == ["slowmod"]  # not installed, or imported already: left alone
    assert out["stand_in"] is True and out["runs_before"] == 0
    assert out["got"] == [42] * 4 and out["runs"] == 1 and out["value"] == 42
    assert out["deferred_after"] is False


def test_a_deferred_module_that_fails_to_import_raises_each_time_it_is_used(tmp_path):
    (tmp_path / "brokenmod.py").write_text("raise RuntimeError('broken on purpose')\n")
    out = _run(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from checks.deferred import defer, deferred
        defer(("brokenmod",))
        import brokenmod
        errors = []
        for _ in range(2):
            try:
                brokenmod.anything
            except RuntimeError as exc:
                errors.append(str(exc))
        print(json.dumps({{"errors": errors, "still_deferred": deferred("brokenmod")}}))
    """)
    assert out["errors"] == ["broken on purpose"] * 2
    assert out["still_deferred"] is True
