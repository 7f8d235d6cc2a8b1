"""The command reference, docs/cli.md, generated from the parser `pipeline.cli.build_parser` builds.

    python -m pipeline.cli_reference > docs/cli.md

tests/test_docs.py checks that the committed page equals `render()`, so the reference cannot
drift from the commands: change a command's help in pipeline/cli.py, regenerate the page.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import re
import sys
from collections.abc import Iterator

from pipeline import env
from pipeline.cli import build_parser

REGENERATE = "python -m pipeline.cli_reference > docs/cli.md"
PROBE = "97"  # a value any variable parses (a word, a number, a path) and no default equals


@contextlib.contextmanager
def _environment(**variables: str) -> Iterator[None]:
    """Only the given REWARDHOUSE_* variables set: some defaults follow the environment, and the
    page shows them as a fresh shell has them, whatever the shell that renders it has set."""
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("REWARDHOUSE_")}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name in variables:
            os.environ.pop(name, None)
        os.environ.update(saved)


def _parser(**variables: str) -> argparse.ArgumentParser:
    with _environment(**variables):
        return build_parser()


def _walk(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    for action in _arguments(parser):
        yield words, action
    for name, _, sub in _subcommands(parser):
        yield from _walk(sub, (*words, name))


def _defaults(parser: argparse.ArgumentParser) -> dict[tuple[tuple[str, ...], str], object]:
    return {(words, action.dest): action.default for words, action in _walk(parser)}


def _variables_behind_defaults() -> dict[tuple[tuple[str, ...], str], str]:
    """(command words, dest) -> the variable its default follows, found by building the parser with
    each variable pipeline/env.py reads set in turn and seeing which default moves."""
    plain = _defaults(_parser())
    found = {}
    for name in sorted(set(re.findall(r"\bREWARDHOUSE_[A-Z0-9_]+\b", inspect.getsource(env)))):
        try:
            probed = _defaults(_parser(**{name: PROBE}))
        except Exception:  # a variable the parser reads and refuses this value for: not one it shows
            continue
        found.update({key: name for key, default in probed.items() if default != plain.get(key)})
    return found


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each sub-command, in the order they were added. argparse has no
    public way to walk its parsers; its sub-parsers action keeps them (as sphinx-argparse reads them)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            found += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return found


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments a user types: neither -h nor the sub-command slot."""
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def _metavar(action: argparse.Action) -> str | tuple[str, ...]:
    if action.metavar is not None:
        return action.metavar
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper() if action.option_strings else action.dest  # as argparse names them


def _value(action: argparse.Action) -> str:
    """What follows the flag (or stands for the positional), as argparse's usage line writes it."""
    metavar = _metavar(action)
    names = list(metavar) if isinstance(metavar, tuple) else None
    one = metavar if isinstance(metavar, str) else metavar[0]
    if action.nargs == 0:
        return ""
    if action.nargs is None:
        return one
    if action.nargs == "?":
        return f"[{one}]"
    if action.nargs == "*":
        return f"[{one} ...]"
    if action.nargs == "+":
        return f"{one} [{one} ...]"
    if isinstance(action.nargs, int):
        return " ".join(names or [one] * action.nargs)
    return one


def _long_flag(action: argparse.Action) -> str:
    return max(action.option_strings, key=len)


def _synopsis(action: argparse.Action) -> str:
    value = _value(action)
    if not action.option_strings:
        return value
    return f"{_long_flag(action)} {value}".strip()


def _usage(words: list[str], parser: argparse.ArgumentParser, width: int = 100) -> str:
    """The synopsis, wrapped at `width` between arguments (a fixed width: argparse's own usage
    follows the terminal's, which would make the page differ from one shell to the next)."""
    head = " ".join(["rewardhouse", *words])
    parts = []
    for action in _arguments(parser):
        synopsis = _synopsis(action)
        parts.append(f"[{synopsis}]" if action.option_strings and not action.required else synopsis)
    if _subcommands(parser):
        parts.append("COMMAND ...")
    lines, line = [], head
    for part in parts:
        if len(line) + 1 + len(part) > width and line.strip():
            lines.append(line)
            line = " " * len(head)
        line += " " + part
    return "\n".join([*lines, line])


def _help(action: argparse.Action, prog: str) -> str:
    """The help as `--help` prints it: argparse expands `%(default)s` and `%%` the same way."""
    if not action.help:
        return ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    return " ".join((action.help % dict(params, prog=prog)).split())


def _default(action: argparse.Action) -> str | None:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return None  # a switch, or nothing unless given
    return f"`{action.default}`" if action.default != "" else '`""`'


def _markdown(text: str) -> str:
    """Plain help text inside Markdown: `<dataset>` would be read as an HTML tag, `|` is harmless here."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _section(words: tuple[str, ...], help_text: str, parser: argparse.ArgumentParser, level: int,
             variables: dict[tuple[tuple[str, ...], str], str]) -> list[str]:
    lines = [f"{'#' * level} `rewardhouse {' '.join(words)}`", ""]
    if help_text:
        lines += [_markdown(" ".join(help_text.split())), ""]
    lines += ["```", _usage(list(words), parser), "```", ""]
    for action in _arguments(parser):
        if action.option_strings:
            short = [f"`{name}`" for name in action.option_strings if name != _long_flag(action)]
            names = ", ".join([*short, f"`{_synopsis(action)}`"])
        else:
            names = f"`{_value(action)}`"
        help_text = _markdown(_help(action, parser.prog))
        notes = []
        default = _default(action)
        variable = variables.get((words, action.dest))
        if default and variable:
            notes.append(f"(default: `{variable}`, else {default})")
        elif default and "default" not in help_text:  # else the help says it already
            notes.append(f"(default: {default})")
        if action.option_strings and action.required:
            notes.append("(required)")
        lines.append(" ".join([f"- {names}" + (f": {help_text}" if help_text else ""), *notes]))
    if _arguments(parser):
        lines.append("")
    for name, sub_help, sub in _subcommands(parser):
        lines += _section((*words, name), sub_help, sub, level + 1, variables)
    return lines


def render() -> str:
    """docs/cli.md: every command and sub-command of `rewardhouse`, its help, its arguments with
    their help and defaults, in the order the parser declares them."""
    parser = _parser()
    variables = _variables_behind_defaults()
    commands = _subcommands(parser)
    lines = [
        "# `rewardhouse` command reference",
        "",
        f"<!-- Generated from the parser in pipeline/cli.py by `{REGENERATE}`; do not edit by hand",
        "     (tests/test_docs.py fails when this page and the parser differ). -->",
        "",
        _markdown(" ".join((parser.description or "").split())),
        "",
        "Every command also takes `-h`/`--help`. Run the commands as `rewardhouse …` in the activated",
        "environment, or as `.venv/bin/rewardhouse …` or `uv run rewardhouse …`.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    lines += [f"| [`{name}`](#rewardhouse-{name}) | {_markdown(' '.join(what.split())).replace('|', '&#124;')} |"
              for name, what, _ in commands]
    lines.append("")
    for name, what, sub in commands:
        lines += _section((name,), what, sub, 2, variables)
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
