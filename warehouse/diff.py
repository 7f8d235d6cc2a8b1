"""What changed from one release to another: rows added, removed and changed per table, the
inputs that made the difference, distributions before and after.

    from warehouse import diff
    diff()                      # the release before the current one -> the current one
    diff("62e8…", "76ad…")      # any two, older first

Rows are matched by each table's key, the columns of its contract's `unique` rule: a key only in
the newer release is added, only in the older one removed, in both with any other column distinct
changed. A table whose contract names no key (or whose key turns out not unique) is compared as a
multiset of whole rows: added and removed, never changed. Everything is counted by DuckDB over the
two releases' Parquet files; only counts, and the rows `rows` is asked for, reach Python. Tables
whose files have the same checksum are not read at all.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from pipeline import env
from pipeline.settings import Layout, quiet_duckdb
from warehouse.store import Manifest, ReleaseStore

if TYPE_CHECKING:  # imported when a diff runs: `import warehouse` stays as quick as `load` needs
    import duckdb

# The manifest fields that are the release's inputs; the rest (tables, files, summary) are its outputs.
INPUT_FIELDS = ("code_version", "sources", "settings")
# Shared tables whose added and removed rows are worth a line of their own, in the words of a reviewer.
GAINED_LOST = {
    "contamination": "train images that copy an eval image",
    "record_contamination": "leaks: train records that copy an eval record",
    "duplicate_clusters": "images in a duplicate cluster",
    "quarantine": "records, images and files refused",
}
# Bounds DuckDB's own memory (it spills beyond it), so a diff of two big releases stays well under 1 GB.
MEMORY_LIMIT = "500MB"
SIDE = "__rewardhouse_side"  # marks which release a joined row came from


@dataclass(frozen=True)
class Releases:
    """Where the releases of one data root are: their manifests (newest first), the current one,
    and how DuckDB names a release's file."""

    where: str
    manifests: list[Manifest]
    current: str | None
    locate: Callable[[str, str], str]
    setup: Callable[[duckdb.DuckDBPyConnection], None] = lambda con: None
    tags: dict = field(default_factory=dict)  # tag name -> release id: a tag works wherever an id does

    def pick(self, a: str | None, b: str | None) -> tuple[Manifest, Manifest]:
        """(older, newer): `b` defaults to the current release, `a` to the one listed before `b`."""
        by_id = {m.release_id: m for m in self.manifests}
        known = ", ".join(by_id) or "none"
        a, b = (self.tags.get(r, r) if r is not None else None for r in (a, b))
        for rid in (a, b):
            if rid is not None and rid not in by_id:
                raise LookupError(f"no release {rid!r} under {self.where}; releases: {known}")
        b = b or self.current
        if b is None:
            raise LookupError(f"no current release under {self.where}; run `rewardhouse run` first")
        if a is None:
            ids = list(by_id)
            older = ids[ids.index(b) + 1:]
            if not older:
                raise LookupError(f"release {b} is the oldest under {self.where} (releases: {known}); "
                                  "nothing before it to compare with")
            a = older[0]
        return by_id[a], by_id[b]


def releases(home: str | Path | None = None) -> Releases:
    """The releases under the data root `home` (else REWARDHOUSE_HOME, else data/): a folder, or an
    `s3://` root read in place through the bucket filesystem `rewardhouse sql` uses."""
    layout = Layout(home)
    if layout.remote:
        from warehouse.objectstore import Root
        from warehouse.remote import FS_PROTOCOL, _BucketFS, manifests

        from warehouse.objectstore import ObjectReleaseStore

        root = Root.parse(layout.remote)
        found, current = manifests(layout.remote)
        return Releases(layout.remote, found, current,
                        lambda rid, file: f"{FS_PROTOCOL}://{root.bucket}/{root.key('releases', rid, file)}",
                        lambda con: con.register_filesystem(_BucketFS.make()), ObjectReleaseStore(root).tags())
    store = ReleaseStore(layout.releases)
    return Releases(str(layout.releases), store.list(), store.current(), lambda rid, file: str(store.path(rid) / file),
                    tags=store.tags())


# Tables the publish step writes itself, with no contract: their keys. A column naming the release
# a row belongs to (RELEASE_COLUMN) is not compared: it differs in every row of two releases.
OWN_KEYS = {"quality_results": ("check",)}
RELEASE_COLUMN = "release_id"


def table_keys(contracts: dict | None = None) -> dict[str, tuple[str, ...] | None]:
    """Each table's key columns, from its contract (the registry's by default)."""
    return {**OWN_KEYS, **{name: c.row_key for name, c in _contracts(contracts).items()}}


def _contracts(contracts: dict | None) -> dict:
    if contracts is None:
        from pipeline.datasets import table_contracts

        contracts = table_contracts()
    return contracts


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@contextlib.contextmanager
def _session(rel: Releases) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB session of bounded memory that spills to a folder of its own under the system temp
    folder (REWARDHOUSE_SQL_TEMP), never into the working directory."""
    import duckdb

    from warehouse.duck import spill_folder

    with spill_folder(Path(env.sql_temp_dir() or tempfile.gettempdir())) as spill, quiet_duckdb(duckdb.connect()) as con:
        con.execute(f"set memory_limit = {_lit(MEMORY_LIMIT)}")
        con.execute(f"set temp_directory = {_lit(str(spill))}")
        con.execute("set preserve_insertion_order = false")
        rel.setup(con)
        yield con


@dataclass(frozen=True)
class _Pair:
    """One table in two releases: how to read each side (None: absent there) and how to match rows."""

    table: str
    a: str | None
    b: str | None
    columns: list[str]  # compared: those both sides have
    cast: set[str]  # compared as text: their type differs between the sides
    key: tuple[str, ...] | None  # None: whole rows
    note: str | None
    added_columns: list[str]
    removed_columns: list[str]

    def side(self, which: str, marker: bool = False) -> str:
        """The compared columns of one side (`a` or `b`), with a marker column when joined."""
        cols = ", ".join(f"{self._col('', c)} as {_q(c)}" for c in self.columns)
        return f"(select {cols}{f', true as {SIDE}' if marker else ''} from read_parquet({_lit(getattr(self, which))}))"

    def _col(self, side: str, c: str) -> str:
        return f"{side}{_q(c)}" + ("::varchar" if c in self.cast else "")

    def on(self) -> str:
        return " and ".join(f"{self._col('a.', k)} is not distinct from {self._col('b.', k)}" for k in self.key)

    def differs(self) -> str:
        rest = [c for c in self.columns if c not in self.key]
        return " or ".join(f"{self._col('a.', c)} is distinct from {self._col('b.', c)}" for c in rest) or "false"


def _one(con: duckdb.DuckDBPyConnection, query: str) -> tuple:
    """The one row of a query, its result fetched whole (a result left open blocks the connection)."""
    return con.execute(query).fetchall()[0]


def _schema(con: duckdb.DuckDBPyConnection, path: str) -> dict[str, str]:
    return {r[0]: r[1] for r in con.execute(f"describe select * from read_parquet({_lit(path)})").fetchall()}


def _pair(con, table: str, a: str | None, b: str | None, key: tuple[str, ...] | None) -> _Pair:
    if a is None or b is None:  # a table only one release has: all its rows are added, or removed
        return _Pair(table, a, b, list(_schema(con, a or b)), set(), None, None, [], [])
    sa, sb = _schema(con, a), _schema(con, b)
    both = [c for c in sb if c in sa and not (c == RELEASE_COLUMN and table in OWN_KEYS)]
    note = None
    if key is None:
        note = "no key in its contract: compared as whole rows"
    elif not set(key) <= set(both):
        key, note = None, f"key ({', '.join(key)}) not in both releases: compared as whole rows"
    else:
        dupes = sum(_one(con, f"select count(*) from (select 1 from read_parquet({_lit(p)}) group by "
                               f"{', '.join(map(_q, key))} having count(*) > 1)")[0] for p in (a, b))
        if dupes:
            key, note = None, f"key ({', '.join(key)}) not unique: compared as whole rows"
    return _Pair(table, a, b, both, {c for c in both if sa[c] != sb[c]}, key, note,
                 [c for c in sb if c not in sa], [c for c in sa if c not in sb])


def _count(con, p: _Pair) -> tuple[int, int, int | None]:
    """(added, removed, changed) rows; changed is None when rows are compared whole."""
    if p.a is None or p.b is None:
        n = _one(con, f"select count(*) from read_parquet({_lit(p.a or p.b)})")[0]
        return (n, 0, None) if p.a is None else (0, n, None)
    if p.key is None:
        a, b = p.side("a"), p.side("b")
        added, removed = _one(con, f"select (select count(*) from ({b} except all {a})), "
                                   f"(select count(*) from ({a} except all {b}))")
        return added, removed, None
    return _one(con, f"select count(*) filter (where a.{SIDE} is null), count(*) filter (where b.{SIDE} is null), "
                     f"count(*) filter (where a.{SIDE} and b.{SIDE} and ({p.differs()})) "
                     f"from {p.side('a', True)} a full join {p.side('b', True)} b on {p.on()}")


def _flatten(value, prefix: str = "") -> dict:
    if isinstance(value, dict) and value:
        return {k: v for key, inner in value.items() for k, v in _flatten(inner, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def input_changes(a: Manifest, b: Manifest) -> dict[str, dict]:
    """Every input field of the manifests (code version, sources with their revisions and file
    checksums, settings with the overrides' revision) that differs, by dotted path."""
    before = _flatten({f: getattr(a, f) for f in INPUT_FIELDS})
    after = _flatten({f: getattr(b, f) for f in INPUT_FIELDS})
    return {path: {"before": before.get(path), "after": after.get(path)}
            for path in sorted(before.keys() | after.keys()) if before.get(path) != after.get(path)}


def _distribution(con, path: str, columns: tuple[str, ...], per: str | None) -> dict:
    out = {}
    for col in columns:
        rows = con.execute(f"select {_q(col)}, count(*) from read_parquet({_lit(path)}) group by 1 order by 1").fetchall()
        out[col] = {("null" if v is None else str(v)): n for v, n in rows}
    if per:
        row = _one(con, f"select count(*), min(n), quantile_disc(n, 0.25), median(n)::double, quantile_disc(n, 0.75), "
                        f"max(n), round(avg(n), 3) from (select count(*) as n from read_parquet({_lit(path)}) "
                        f"group by {_q(per)})")
        out[f"rows per {per}"] = dict(zip(("records", "min", "p25", "median", "p75", "max", "mean"), row))
    return out


def diff(a: str | None = None, b: str | None = None, home: str | Path | None = None, *,
         tables: list[str] | None = None, contracts: dict | None = None) -> dict:
    """What changed from release `a` to release `b` (default: the release before the current one,
    and the current one), as plain data (JSON-ready): `tables` (per table: status, rows before and
    after, added / removed / changed, how rows were matched, columns added or removed), `inputs`
    (the manifests' differing inputs), `distributions` (of the tables whose contract declares
    one), `gained_lost` (contamination, leaks, duplicate cluster members, quarantine). `tables`
    limits it to those tables. LookupError (one line) for a release that is not there."""
    rel = releases(home)
    ma, mb = rel.pick(a, b)
    return between(ma, mb, rel.locate, rel.setup, tables=tables, contracts=contracts)


def between(ma: Manifest, mb: Manifest, locate: Callable[[str, str], str],
            setup: Callable[[duckdb.DuckDBPyConnection], None] = lambda con: None, *,
            tables: list[str] | None = None, contracts: dict | None = None) -> dict:
    """`diff` of two manifests whose files `locate(release_id, file)` finds (a release being
    published is compared from its folder before it is in place: its changelog)."""
    rel = Releases("", [], None, locate, setup)
    contracts = _contracts(contracts)
    keys = table_keys(contracts)
    names = sorted(ma.tables.keys() | mb.tables.keys())
    if tables is not None:
        unknown = sorted(set(tables) - set(names))
        if unknown:
            raise KeyError(f"no table {', '.join(unknown)} in release {ma.release_id} or {mb.release_id}; "
                           f"tables: {', '.join(names)}")
        names = [n for n in names if n in tables]
    out: dict = {"before": _about(ma), "after": _about(mb), "tables": {}, "inputs": input_changes(ma, mb),
                 "distributions": {}, "gained_lost": {}}
    with _session(rel) as con:
        for name in names:
            entry = out["tables"][name] = _table(con, rel, ma, mb, name, keys.get(name))
            contract = contracts.get(name)
            if contract is not None and contract.distribution:
                out["distributions"][name] = {
                    side: _distribution(con, rel.locate(m.release_id, m.tables[name]["file"]), contract.distribution,
                                        contract.record_key) if name in m.tables else None
                    for side, m in (("before", ma), ("after", mb))}
            if name in GAINED_LOST:
                out["gained_lost"][name] = {"what": GAINED_LOST[name], "gained": entry["added"], "lost": entry["removed"]}
    return out


def _table(con, rel: Releases, ma: Manifest, mb: Manifest, name: str, key: tuple[str, ...] | None) -> dict:
    ea, eb = ma.tables.get(name), mb.tables.get(name)
    entry = {"status": "added" if ea is None else "removed" if eb is None else "unchanged",
             "rows_before": ea["rows"] if ea else 0, "rows_after": eb["rows"] if eb else 0,
             "added": 0, "removed": 0, "changed": 0, "key": list(key) if key else None,
             "note": None, "columns_added": [], "columns_removed": []}
    if ea and eb and ea["sha256"] == eb["sha256"]:  # the same file: nothing to read
        return entry
    p = _pair(con, name, ea and rel.locate(ma.release_id, ea["file"]), eb and rel.locate(mb.release_id, eb["file"]), key)
    entry["added"], entry["removed"], entry["changed"] = _count(con, p)
    entry.update(key=list(p.key) if p.key else None, note=p.note, columns_added=p.added_columns,
                 columns_removed=p.removed_columns)
    if ea and eb and (entry["added"] or entry["removed"] or entry["changed"] or p.added_columns or p.removed_columns):
        entry["status"] = "changed"
    return entry


def _about(m: Manifest) -> dict:
    return {"release_id": m.release_id, "created_at": m.created_at}


CHANGES = ("removed", "added", "changed from", "changed to")


def rows(a: str | None, b: str | None, table: str, home: str | Path | None = None, limit: int | None = None, *,
         contracts: dict | None = None):
    """The rows of `table` that differ from release `a` to `b` (defaults as for `diff`), as a
    pyarrow Table: a `change` column (removed, added, changed from, changed to; a changed row comes
    as its two versions) then the table's columns (both releases' columns, when they differ),
    ordered by key; at most `limit` rows. Only those rows leave DuckDB."""
    rel = releases(home)
    ma, mb = rel.pick(a, b)
    ea, eb = ma.tables.get(table), mb.tables.get(table)
    if ea is None and eb is None:
        raise KeyError(f"no table {table} in release {ma.release_id} or {mb.release_id}; "
                       f"tables: {', '.join(sorted(ma.tables.keys() | mb.tables.keys()))}")
    with _session(rel) as con:
        p = _pair(con, table, ea and rel.locate(ma.release_id, ea["file"]), eb and rel.locate(mb.release_id, eb["file"]),
                  table_keys(contracts).get(table))
        query = _rows_query(p)
        order = "".join(f"{_q(k)}, " for k in p.key) if p.key else ""
        case = " ".join(f"when {_lit(c)} then {i}" for i, c in enumerate(CHANGES))
        cut = f" limit {int(limit)}" if limit is not None else ""
        return con.sql(f"select * from ({query}) order by {order}case change {case} end{cut}").to_arrow_table()


def _rows_query(p: _Pair) -> str:
    if p.a is None or p.b is None:
        change = "added" if p.a is None else "removed"
        return f"select {_lit(change)} as change, * from read_parquet({_lit(p.a or p.b)})"
    if p.key is None:  # whole rows: the columns both have
        a, b = p.side("a"), p.side("b")
        return (f"select 'removed' as change, * from ({a} except all {b}) "
                f"union all select 'added' as change, * from ({b} except all {a})")
    on = p.on()
    same = f"{on} and ({p.differs()})"
    # Each side's rows are shown whole, as they are; the join compares the common columns.
    a, b = f"read_parquet({_lit(p.a)}) a", f"read_parquet({_lit(p.b)}) b"
    parts = [f"select 'removed' as change, a.* from {a} anti join {p.side('b')} b on {on}",
             f"select 'added' as change, b.* from {b} anti join {p.side('a')} a on {on}",
             f"select 'changed from' as change, a.* from {a} semi join {p.side('b')} b on {same}",
             f"select 'changed to' as change, b.* from {b} semi join {p.side('a')} a on {same}"]
    return " union all by name ".join(parts)


def changelog(changes: dict) -> dict:
    """What a release's manifest keeps of its diff against the release it replaces (`changes`):
    the tables that changed, with their counts, and everything else `diff` says."""
    return {"against": changes["before"]["release_id"],
            "tables": {t: {k: e[k] for k in ("status", "rows_before", "rows_after", "added", "removed", "changed")}
                       for t, e in changes["tables"].items() if e["status"] != "unchanged"},
            **{k: changes[k] for k in ("inputs", "distributions", "gained_lost")}}


def summary_line(log: dict) -> str:
    """One line of a changelog, for `rewardhouse releases`."""
    if not log:
        return "first release: nothing to compare with"
    parts = []
    for t, e in log["tables"].items():
        if e["status"] in ("added", "removed"):
            parts.append(f"{t} {e['status']}")
        else:
            counts = [f"+{e['added']}" if e["added"] else "", f"-{e['removed']}" if e["removed"] else "",
                      f"~{e['changed']}" if e["changed"] else ""]
            parts.append(f"{t} {' '.join(c for c in counts if c)}".strip())
    inputs = sorted({path.split(".")[0] if not path.startswith("settings.") else path for path in log["inputs"]})
    return (f"vs {log['against']}: {len(log['tables'])} table(s) changed" + (f" ({'; '.join(parts)})" if parts else "")
            + (f"; inputs: {', '.join(inputs)}" if inputs else ""))


def changelog_markdown(log: dict) -> str:
    """A changelog as markdown: the Dagster UI's metadata and the release's CHANGES.md."""
    if not log:
        return "First release: nothing to compare with.\n"
    lines = [f"Changes against release `{log['against']}`.", "", "| table | before | after | added | removed | changed |",
             "|---|---:|---:|---:|---:|---:|"]
    for t, e in log["tables"].items():
        lines.append(f"| {t} ({e['status']}) | {e['rows_before']} | {e['rows_after']} | {e['added']} | {e['removed']} | "
                     f"{'-' if e['changed'] is None else e['changed']} |")
    if not log["tables"]:
        lines.append("| (no table changed) | | | | | |")
    if log["inputs"]:
        lines += ["", "Inputs that changed:", ""]
        lines += [f"- `{path}`: `{json.dumps(v['before'], default=str, sort_keys=True)}` -> `{json.dumps(v['after'], default=str, sort_keys=True)}`"
                  for path, v in log["inputs"].items()]
    if log["gained_lost"]:
        lines += ["", "Gained and lost:", ""]
        lines += [f"- {g['what']} (`{t}`): +{g['gained']} -{g['lost']}" for t, g in log["gained_lost"].items()]
    for t, sides in log["distributions"].items():
        lines += ["", f"`{t}` before -> after:", ""]
        before, after = sides.get("before") or {}, sides.get("after") or {}
        for col in sorted(before.keys() | after.keys()):
            lines.append(f"- {col}: `{json.dumps(before.get(col), default=str, sort_keys=True)}` -> `{json.dumps(after.get(col), default=str, sort_keys=True)}`")
    return "\n".join(lines) + "\n"


def changelog_hook(store: ReleaseStore, release_id: str, publish_args: dict) -> Callable[[Path, dict], tuple[dict, bytes]]:
    """For warehouse.duck.publish_release: the changelog of a release being written, against the
    release current when the publish took the writer lock (read once, here)."""
    previous = store.current()

    def changes(folder: Path, entries: dict) -> tuple[dict, bytes]:
        log = {}
        if previous is not None and previous != release_id:
            plain = json.loads(json.dumps({k: publish_args[k] for k in ("sources", "settings")}))  # as a manifest reads
            new = Manifest(release_id, "", publish_args["code_version"], plain["sources"], plain["settings"], entries)
            log = changelog(between(store.manifest(previous), new,
                                    lambda rid, file: str((folder if rid == release_id else store.path(rid)) / file)))
        return log, changelog_markdown(log).encode()

    return changes
