"""MMRB2's own command, `rewardhouse score`: judge outputs scored against the release's pairs.

The CLI adds the commands a dataset's `cli` module declares (`add_commands(sub, command)`);
`command(handler)` turns `handler(args, connect) -> (exit status, text)` into a sub-command, where
`connect()` opens the current release read-only, as `rewardhouse sql` reads it.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.mmrb2.scoring import JudgementFileError, format_report, load_judgements, score
from pipeline.settings import MMRB2_TASKS


def add_commands(sub, command) -> None:
    sc = sub.add_parser("score", help="score judge outputs (official judgement format) against the benchmark")
    sc.add_argument("files", nargs="+", help="judgement files in the official format, one JSON object of pair ids (docs/scoring.md)")
    sc.set_defaults(func=command(score_files))


def score_files(args, connect) -> tuple[int, str]:
    """The report on `args.files`, or what stops it: an unreadable file or release, or judgements
    of none of the release's pairs."""
    import duckdb

    try:
        judgements = load_judgements([Path(f) for f in args.files])
    except JudgementFileError as exc:
        return 2, str(exc)
    try:
        with connect() as con:
            truth = con.execute("select pair_id, task, chosen from mmrb2_pairs").fetchall()
    except (FileNotFoundError, duckdb.Error) as exc:
        return 1, str(exc).splitlines()[0]
    order = {task: i for i, task in enumerate(MMRB2_TASKS)}
    truth.sort(key=lambda row: (order.get(row[1], len(order)), row[1]))
    scores, unknown = score(truth, judgements)
    if not scores:
        return 2, (f"none of the {len(judgements)} judged pair ids is among the {len(truth)} MMRB2 pairs of the "
                   "current release (a release of the embedded sample holds only the sample's pairs): load the "
                   "whole benchmark with `rewardhouse run --source hf` (or `--source local --path DIR`) and score "
                   "again")
    return 0, format_report(scores, unknown)
