"""Writes docs/CLI.md: every option of every tool, as the tools themselves describe them.

    python docs/make_cli_md.py            # print it
    python docs/make_cli_md.py --write    # write docs/CLI.md

The click tools' options come from their commands (each option's help
record: what `--help` prints), ngram-serve's from `ngram-serve --help` (the
native server's flags, then the wrapper's, in one format: two spaces, the
flag, an optional metavar in capitals, the help from column 28), the old
spellings from the commands' hidden deprecated options. Needs the native
server built (for ngram-serve's part). tests/test_cli_language.py fails when the
committed file differs from what this prints, and checks the rules the file
states.
"""
from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: The click tools, by name: the module whose ``main`` is the command (pyproject.toml's scripts).
CLICK_TOOLS = {
    "ngram-build": "indexer.cli",
    "ngram-info": "ngram_service.cli_info",
    "ngram-query": "ngram_service.query_cli",
    "ngram-eval": "ngram_eval.cli",
    "dart-generate": "dart_client.cli",
}
TOOLS = ["ngram-build", "ngram-info", "ngram-serve", "ngram-query", "ngram-eval", "dart-generate"]
SERVE_HELP_COLUMN = 27


@dataclass(frozen=True)
class Row:
    """One option as a tool states it."""

    tool: str  # "ngram-query" or "ngram-query prune"
    names: tuple[str, ...]  # every spelling: long, short, the --no- form
    metavar: str
    help: str
    is_flag: bool


@dataclass(frozen=True)
class OldSpelling:
    tool: str
    old: str
    new: str


def click_commands() -> dict[str, click.Command]:
    return {name: importlib.import_module(module).main for name, module in CLICK_TOOLS.items()}


def _walk(name: str, cmd: click.Command, parent: click.Context | None = None):
    ctx = click.Context(cmd, info_name=name.split()[-1], parent=parent, **cmd.context_settings)
    yield name, cmd, ctx
    if isinstance(cmd, click.Group):
        for sub in sorted(cmd.commands):
            yield from _walk(f"{name} {sub}", cmd.commands[sub], ctx)


def click_rows() -> list[Row]:
    rows = []
    for tool, cmd in click_commands().items():
        for name, c, ctx in _walk(tool, cmd):
            for p in c.get_params(ctx):
                if not isinstance(p, click.Option) or p.hidden or p is c.get_help_option(ctx):
                    continue
                record = p.get_help_record(ctx)
                assert record is not None
                spelled, text = record
                metavar = "" if p.is_flag else p.make_metavar(ctx)
                rows.append(Row(name, tuple(p.opts + p.secondary_opts), metavar, text, bool(p.is_flag)))
    return rows


def old_spellings() -> list[OldSpelling]:
    from ngram_service.cli_options import deprecations

    out = []
    for tool, cmd in click_commands().items():
        for name, c, ctx in _walk(tool, cmd):
            out += [OldSpelling(name, d.old, d.new + d.note) for d in deprecations(c)]
    return out


def serve_help() -> str:
    r = subprocess.run([sys.executable, "-m", "ngram_service.serve", "--help"], capture_output=True, text=True,
                       check=False, cwd=REPO)
    if r.returncode != 0:
        raise RuntimeError(f"ngram-serve --help failed (is the native server built?):\n{r.stderr}")
    return r.stdout


def serve_rows(text: str) -> list[Row]:
    """ngram-serve --help's options: a row per line that starts with two
    spaces and a flag (or FILE), its help continued on the lines indented to
    the help column."""
    rows: list[Row] = []
    for line in text.splitlines():
        m = re.match(r"  (--?[a-z][a-z0-9-]*|FILE)(?: ([A-Z][A-Z0-9_|]*))?\s", line)
        if m and len(line) > SERVE_HELP_COLUMN and line[SERVE_HELP_COLUMN - 1] == " ":
            flag, metavar = m.group(1), m.group(2) or ""
            rows.append(Row("ngram-serve", (flag,), metavar, line[SERVE_HELP_COLUMN:].strip(), not metavar))
        elif rows and line.startswith(" " * SERVE_HELP_COLUMN) and line.strip():
            last = rows[-1]
            rows[-1] = Row(last.tool, last.names, last.metavar, f"{last.help} {line.strip()}", last.is_flag)
        elif not line.strip() or not line.startswith("  "):
            continue
    return rows


def serve_old_spellings(rows: list[Row]) -> list[OldSpelling]:
    return [OldSpelling("ngram-serve", r.names[0] + (f" {r.metavar}" if r.metavar else ""),
                        r.help.removeprefix("deprecated:").strip())
            for r in rows if r.help.startswith("deprecated:")]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _spelling(r: Row) -> str:
    longs = [n for n in r.names if n.startswith("--")]
    shorts = [n for n in r.names if not n.startswith("--")]
    first = ", ".join(f"`{n}`" for n in longs[:1] + shorts + longs[1:])
    return first + (f" {r.metavar}" if r.metavar else "")


PREAMBLE = """\
# Command-line tools: one option language

Generated by `python docs/make_cli_md.py --write` from the tools themselves
(each click command's options, and `ngram-serve --help`);
`tests/test_cli_language.py` fails when this file differs from what the tools
say, and checks the rules below against them. Change a tool, then
regenerate.

## The rules

- **A short flag means one thing in every tool** (the table below). `-h`
  is `--help` everywhere.
- **One name per concept.** The address of a trie host is `--target
  HOST:PORT` (repeat it for replicas) in every tool that connects to one
  (`ngram-query`, `dart-generate`), with the same `--index`,
  `--deadline-ms` and TLS options: `--ca` (use TLS, verifying the host
  with this CA), `--cert` and `--key` (a client certificate, mutual TLS),
  `--server-name`. `--host` and `--port` are only where a server listens
  (`ngram-serve`, whose own TLS options are the server's side:
  `--tls-cert`, `--tls-key`, `--tls-client-ca`). A local trie file is
  `--trie FILE` where a tool can also ask a host, the tokenizer
  `-t/--tokenizer` (`ngram-query --tokenizer` has no `-t` while `-t` is
  its deprecated spelling of `--target`), the text field of JSON or
  Parquet input `--text-field`.
- **A deadline or timeout carries its unit in its name**: `--deadline-ms`,
  `--max-queue-wait-ms`, `--drain-seconds`.
- **`--json` is a switch with one meaning**: the command's output as JSON
  on stdout instead of its text form (`ngram-info`, `ngram-query propose`,
  `ngram-eval`, `dart-generate`; `ngram-query`'s other commands print JSON
  always). Progress and warnings stay on stderr.
- **`-q/--quiet`** turns progress lines off (`ngram-build`, `ngram-eval`);
  **`-j/--threads N`** is how much of a command runs at once
  (`ngram-build`: tasks, each in a worker process; `ngram-eval`: pruning
  threads; `ngram-serve --threads`: compute workers).
- **Values are checked where they are parsed**: a number outside its range
  is a usage error (exit 2) naming the flag (`Invalid value for '-k':
  99999999999 is not in the range 1<=x<=4294967295.`); the search
  parameters' names, defaults, ranges and help are written once, in the
  engine's tables (`kPruneFields`, `kProposeFields`; presented by
  `ngram_service/params.py`), and `ngram-query`, `ngram-eval` and
  `dart-generate` build their options from them. An option that does not apply to the mode chosen is refused
  by name (`dart-generate`: the DART options with `--drafter none` and the
  proposal options without it, the host options without `--target`;
  `ngram-eval`: the DART options with `--proposals`, `--sources` and
  `--discount` without it, the synthetic-lattice options with `--lattices`
  or `--proposals`; `ngram-query --trie`: the host options). A
  comma-separated list refuses an empty item (`1,,2`); a file a tool
  writes (`--plot`, `--json FILE`, `--log-lattices`) is checked before
  any work (its folder exists and can be written); `--target` is
  HOST:PORT, [IPv6]:PORT or dns:///NAME:PORT with a port in 1..65535;
  `--deadline-ms` is at most a day.
- **Old spellings keep working for now**, each with one warning line on
  stderr naming the new one (`ngram-query: -t is deprecated: use
  --target`); giving both is a usage error. They are listed at the end.
"""


def render() -> str:
    rows = click_rows()
    serve = serve_rows(serve_help())
    rows += serve
    by_tool: dict[str, list[Row]] = {}
    for r in rows:
        by_tool.setdefault(r.tool, []).append(r)
    out = [PREAMBLE]
    out += ["## Short flags", "", "| flag | means | in |", "|---|---|---|"]
    shorts: dict[str, dict[str, list[str]]] = {}
    for r in rows:
        longs = [n for n in r.names if n.startswith("--")]
        for s in (n for n in r.names if re.fullmatch(r"-[A-Za-z]", n)):
            shorts.setdefault(s, {}).setdefault(longs[0] if longs else s, []).append(r.tool)
    for s in sorted(shorts, key=str.lower):
        for long, tools in shorts[s].items():
            out.append(f"| `{s}` | `{long}` | {', '.join(dict.fromkeys(tools))} |")
    out.append("")
    commands = click_commands()
    for tool in TOOLS:
        out += [f"## {tool}", ""]
        if tool in commands:
            for name, cmd, ctx in _walk(tool, commands[tool]):
                pieces = " ".join(cmd.collect_usage_pieces(ctx))
                if name != tool:
                    out += [f"### {name}", ""]
                out += [f"`{name} {pieces}`: {_cell(_first_paragraph(cmd))}", ""]
                out += _table(by_tool.get(name, []))
        else:
            out += ["`ngram-serve FILE [FILE ...] [options]`: the native gRPC server (its flags) behind the "
                    "ngram-serve wrapper (its own options last).", ""]
            out += _table(by_tool.get(tool, []))
    olds = old_spellings() + serve_old_spellings(serve)
    out += ["## Deprecated spellings", "", "| tool | old | new |", "|---|---|---|"]
    out += [f"| {o.tool} | `{o.old}` | {_cell(o.new)} |" for o in olds]
    return "\n".join(out) + "\n"


def _first_paragraph(cmd: click.Command) -> str:
    return " ".join(inspect.cleandoc(cmd.help or "").split("\n\n")[0].split())


def _table(rows: list[Row]) -> list[str]:
    if not rows:
        return []
    lines = ["| option | meaning |", "|---|---|"]
    lines += [f"| {_spelling(r)} | {_cell(r.help)} |" for r in rows]
    return lines + [""]


def main() -> None:
    text = render()
    if "--write" in sys.argv[1:]:
        (REPO / "docs" / "CLI.md").write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
