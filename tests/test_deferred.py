"""checks/deferred.py: the modules GX imports but the suites never use are imported on first use.

Each case runs in a new interpreter (what a module import does is process-wide)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_validation_leaves_scipy_stats_and_altair_unimported_and_both_work_for_gx_and_for_everyone_else():
    out = _run("""
        import json, sys, tempfile
        from pathlib import Path
        import pyarrow as pa
        from checks.suites import validate_tables
        from checks.deferred import deferred
        with tempfile.TemporaryDirectory() as d:
            results, docs = validate_tables({"leak_overrides": pa.table({"x": [1]})}, Path(d), "t-1")
        assert "leak_overrides" in results and docs is not None
        kl = sys.modules["great_expectations.expectations.core.expect_column_kl_divergence_to_be_less_than"]
        before = {"in_sys_modules": [n for n in ("scipy.stats", "altair") if n in sys.modules],
                  "gx_holds_stand_ins": [deferred(kl.stats), deferred(kl.alt)]}
        from scipy import stats  # an ordinary import, for everyone else
        real = type(stats) is type(sys) and not deferred(stats)
        via_gx = float(kl.stats.entropy([0.5, 0.5], [0.25, 0.75]))
        import altair
        chart = type(kl.alt.Chart()).__name__
        print(json.dumps({"before": before, "real": real, "via_gx": via_gx, "chart": chart,
                          "same_class": kl.stats.rv_continuous is stats.rv_continuous,
                          "altair_same": kl.alt.Chart is altair.Chart,
                          "parent": sys.modules["scipy"].stats is stats}))
    """)
    assert out["before"] == {"in_sys_modules": [], "gx_holds_stand_ins": [True, True]}
    assert out["real"] is True
    # KL(p || q) of (1/2, 1/2) against (1/4, 3/4): 1/2 ln 2 + 1/2 ln(2/3)
    assert abs(out["via_gx"] - 0.14384103622589045) < 1e-12
    assert out["chart"] == "Chart"
    assert out["same_class"] is True and out["altair_same"] is True and out["parent"] is True


def test_a_stand_in_imports_its_module_once_whichever_thread_reads_it_first(tmp_path):
    (tmp_path / "slowmod.py").write_text(textwrap.dedent("""
        import builtins, time
        builtins.__dict__.setdefault("_slowmod_runs", []).append(1)
        time.sleep(0.2)
        VALUE = 42
    """))
    out = _run(f"""
        import builtins, json, sys, threading
        sys.path.insert(0, {str(tmp_path)!r})
        import json as already
        from checks.deferred import deferring, deferred
        with deferring(("slowmod", "no_such_module_anywhere", "json")) as done:
            import slowmod
        after_window = "slowmod" in sys.modules
        runs_before = len(getattr(builtins, "_slowmod_runs", []))
        got = []
        threads = [threading.Thread(target=lambda: got.append(slowmod.VALUE)) for _ in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        import slowmod as real
        print(json.dumps({{"done": done, "stand_in": type(slowmod).__name__, "after_window": after_window,
                          "runs_before": runs_before, "got": got, "runs": len(builtins._slowmod_runs),
                          "real": type(real).__name__, "deferred": deferred(slowmod),
                          "json_untouched": sys.modules["json"] is already}}))
    """)
    assert out["done"] == ["slowmod"]  # not installed, or imported already: left alone
    assert out["json_untouched"] is True
    assert out["stand_in"] == "Deferred" and out["after_window"] is False and out["runs_before"] == 0
    assert out["got"] == [42] * 4 and out["runs"] == 1
    assert out["real"] == "module" and out["deferred"] is False


def test_a_stand_in_used_while_deferring_is_held_leaves_the_real_module_in_place(tmp_path):
    (tmp_path / "quickmod.py").write_text("VALUE = 7\n")
    out = _run(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from checks.deferred import deferring
        with deferring(("quickmod",)):
            import quickmod
            value = quickmod.VALUE
            inside = type(sys.modules["quickmod"]).__name__
        print(json.dumps({{"value": value, "inside": inside, "after": type(sys.modules["quickmod"]).__name__}}))
    """)
    assert out == {"value": 7, "inside": "module", "after": "module"}


def test_a_stand_in_whose_module_fails_to_import_raises_each_time_it_is_used(tmp_path):
    (tmp_path / "brokenmod.py").write_text("raise RuntimeError('broken on purpose')\n")
    out = _run(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from checks.deferred import deferring, deferred
        with deferring(("brokenmod",)):
            import brokenmod
        errors = []
        for _ in range(2):
            try:
                brokenmod.anything
            except RuntimeError as exc:
                errors.append(str(exc))
        print(json.dumps({{"errors": errors, "still_deferred": deferred(brokenmod),
                          "in_sys_modules": "brokenmod" in sys.modules}}))
    """)
    assert out == {"errors": ["broken on purpose"] * 2, "still_deferred": True, "in_sys_modules": False}
