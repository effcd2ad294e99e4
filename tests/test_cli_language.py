"""One option language across the six tools (docs/CLI.md): the file as the
tools describe themselves, the rules it states checked against the tools,
and the old spellings that still work with one warning line.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from conftest import REPO, SAMPLE_TOKENIZER, server_binary

from ngram_service.cli_options import HOST_OPTIONS
from ngram_service.params import LATTICE_TOPK, PROPOSE_PARAMS, PRUNE_PARAMS


def _make_cli_md() -> Any:
    spec = importlib.util.spec_from_file_location("make_cli_md", REPO / "docs" / "make_cli_md.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


make_cli_md = _make_cli_md()


@pytest.fixture(scope="module")
def rows() -> list[Any]:
    """Every visible option of every tool, ngram-serve's read from its --help when the server is built."""
    out = make_cli_md.click_rows()
    if server_binary() is not None:
        out += make_cli_md.serve_rows(make_cli_md.serve_help())
    return out


@pytest.mark.needs_server
def test_cli_md_is_what_the_tools_say() -> None:
    committed = (REPO / "docs" / "CLI.md").read_text()
    assert committed == make_cli_md.render(), "docs/CLI.md is stale: run python docs/make_cli_md.py --write"


def test_a_short_flag_means_one_thing_in_every_tool(rows: list[Any]) -> None:
    meaning: dict[str, set[str]] = {}
    for r in rows:
        longs = [n for n in r.names if n.startswith("--")]
        for short in (n for n in r.names if len(n) == 2):
            meaning.setdefault(short, set()).add(longs[0] if longs else short)
    assert {s: m for s, m in meaning.items() if len(m) > 1} == {}
    assert meaning["-t"] == {"--tokenizer"} and meaning["-j"] == {"--threads"} and meaning["-q"] == {"--quiet"}


def test_one_name_for_the_host_and_its_connection(rows: list[Any]) -> None:
    by_tool: dict[str, set[str]] = {}
    for r in rows:
        by_tool.setdefault(r.tool.split()[0], set()).update(r.names)
    connecting = {tool for tool, names in by_tool.items() if "--target" in names}
    assert connecting == {"ngram-query", "dart-generate"}
    for tool in connecting:  # the same connection options, TLS included, wherever a tool connects
        assert set(HOST_OPTIONS.values()) <= by_tool[tool], tool
        assert "--host" not in by_tool[tool] and "--timeout" not in by_tool[tool]
    listening = {tool for tool, names in by_tool.items() if "--host" in names or "--port" in names}
    assert listening <= {"ngram-serve"}


def test_deadlines_carry_their_unit(rows: list[Any]) -> None:
    timed = [n for r in rows for n in r.names if any(w in n for w in ("deadline", "timeout", "wait", "drain"))]
    assert timed and all(n.endswith(("-ms", "-seconds")) for n in timed), timed


def test_json_is_a_switch_everywhere(rows: list[Any]) -> None:
    json_rows = [r for r in rows if "--json" in r.names]
    assert {r.tool for r in json_rows} == {"ngram-info", "ngram-query propose", "ngram-eval", "dart-generate"}
    assert all(r.is_flag and "instead of" in r.help for r in json_rows)


def test_search_options_come_from_the_parameter_tables() -> None:
    """A search parameter's flag has the table's range (checked by the parser) and default wherever it appears."""
    table: dict[str, list[Any]] = {}
    for p in (*PRUNE_PARAMS, *PROPOSE_PARAMS, LATTICE_TOPK):
        table.setdefault(p.flag, []).append(p)
    seen = set()
    for tool, cmd in make_cli_md.click_commands().items():
        for name, c, ctx in make_cli_md._walk(tool, cmd):
            for o in c.params:
                if not isinstance(o, click.Option) or max(o.opts, key=len) not in table:
                    continue
                rows = table[max(o.opts, key=len)]  # max_nodes is in both sets: one range, two defaults
                p = rows[0]
                seen.add(p.flag)
                assert {(q.low, q.high) for q in rows} == {(p.low, p.high)}
                if p.type is bool:
                    assert o.default == p.default, (name, p.flag)
                elif isinstance(o.type, (click.IntRange, click.FloatRange)):  # one value
                    assert (o.type.min, o.type.max) == (p.low, p.high), (name, p.flag)
                    assert o.default in [q.default for q in rows] + [None], (name, p.flag)  # None: the mode's
                else:  # a comma-separated grid (ngram-eval): each value is checked against the range
                    assert f"each {p.describe_range()}" in (o.help or ""), (name, p.flag)
    assert seen == set(table)


# ---- old spellings ------------------------------------------------------------------------------

def _command(name: str) -> click.Command:
    return make_cli_md.click_commands()[name]


def _parsed(name: str, args: list[str]) -> tuple[dict[str, Any], click.Context]:
    cmd = _command(name)
    ctx = cmd.make_context(name, args)
    return ctx.params, ctx


@pytest.mark.parametrize("tool, old, new, param, value", [
    ("ngram-build", ["--workers", "3"], ["--threads", "3"], "threads", 3),
    ("ngram-query", ["-t", "h:1", "-t", "h:2"], ["--target", "h:1", "--target", "h:2"], "targets", ("h:1", "h:2")),
    ("ngram-query", ["--timeout", "2.5"], ["--deadline-ms", "2500"], "deadline_ms", 2500.0),
    ("ngram-eval", ["--topk", "7"], ["--lattice-topk", "7"], "topk", 7),
    ("dart-generate", ["--host", "h:1"], ["--target", "h:1"], "targets", ("h:1",)),
    ("dart-generate", ["-n", "9"], ["--max-new-tokens", "9"], "max_new_tokens", 9),
    ("dart-generate", ["--topk", "7"], ["--lattice-topk", "7"], "topk", 7),
])
def test_an_old_spelling_works_with_one_warning_line(capsys: pytest.CaptureFixture[str], tool: str, old: list[str],
                                                      new: list[str], param: str, value: Any) -> None:
    rest = ["--out", "x.ngt"] if tool == "ngram-build" else ([__file__] if tool == "ngram-eval" else [])
    rest += ["info"] if tool == "ngram-query" else []
    params, _ = _parsed(tool, [*old, *rest])
    assert params[param] == value
    new_flag = new[0]
    assert capsys.readouterr().err == f"{tool}: {old[0]} is deprecated: use {new_flag}" + (
        " (milliseconds; --timeout was in seconds)" if old[0] == "--timeout" else "") + "\n"
    params, _ = _parsed(tool, [*new, *rest])
    assert params[param] == value and capsys.readouterr().err == ""
    with pytest.raises(click.UsageError, match=f"{old[0]} and {new_flag}: give one"):
        _parsed(tool, [*old, *new, *rest])


def test_an_old_spelling_counts_as_given(sample_trie: Path) -> None:
    """`ngram-query --trie F -t H` is refused like `--target H`: the host options do not apply."""
    from ngram_service.query_cli import main

    r = CliRunner().invoke(main, ["--trie", str(sample_trie), "-t", "h:1", "info"])
    assert r.exit_code == 2 and "options for a host given: --target" in r.stderr


def test_ngram_eval_json_file_still_writes_the_file(sample_trie: Path, tmp_path: Path) -> None:
    from conftest import SAMPLE_CORPUS

    from ngram_eval.cli import main

    out = tmp_path / "r.json"
    args = [str(sample_trie), "--text", str(SAMPLE_CORPUS), "--tokenizer", str(SAMPLE_TOKENIZER), "--steps", "20",
            "--depth", "3", "--lattice-topk", "4", "-q"]
    r = CliRunner().invoke(main, [*args, "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stderr == ("ngram-eval: --json FILE is deprecated: use --json (the JSON on stdout instead of the table: "
                        "--json > FILE)\n")
    assert "headline" in r.stdout and json.loads(out.read_text())["lattices"]["steps"] == 20  # the table, and the file
    r = CliRunner().invoke(main, [*args, "--json"])
    assert r.exit_code == 0 and r.stderr == ""
    assert json.loads(r.stdout)["settings"] == json.loads(out.read_text())["settings"]
