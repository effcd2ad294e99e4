"""The prune defaults and the maximum order are the engine's: every command
and library default outside cpp/ takes them from its exports."""
from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

import numpy as np

from ngram_service import NgramIndex, _engine
from ngram_service import params
from ngram_service.params import PRUNE_PARAMS
from ngram_service.tree import DEFAULTS, LIMITS, prune_params


def _defaults(command: click.Command) -> dict[str, object]:
    return {p.name: p.default for p in command.params}


def test_the_engine_exports_dart_settings() -> None:
    assert DEFAULTS == {"beam_width": 20, "max_nodes": 60, "ngram_weight": 0.5}
    assert _engine.MAX_ORDER == 16


def test_prune_defaults_everywhere_are_the_engine_s() -> None:
    from dart_client import pruner
    from dart_client.cli import main as dart_generate
    from ngram_eval.cli import main as ngram_eval
    from ngram_eval.replay import PruneSetting

    assert (pruner.DART_BEAM_WIDTH, pruner.DART_MAX_NODES, pruner.DART_NGRAM_WEIGHT) == tuple(DEFAULTS.values())
    assert PruneSetting().as_dict() == DEFAULTS
    # the table every command builds its options from
    assert {p.name: p.default for p in PRUNE_PARAMS if p.name in DEFAULTS} == DEFAULTS
    assert params.DART_TOPK == pruner.DART_TOPK  # the commands' copy, importable without torch
    generate = _defaults(dart_generate)
    # max_nodes: None, the mode's default (DART's, or the proposals' with --drafter none)
    assert {k: generate[k] for k in DEFAULTS} == {**DEFAULTS, "max_nodes": None}
    evaluate = _defaults(ngram_eval)
    assert {k: type(v)(evaluate[k]) for k, v in DEFAULTS.items() if k != "max_nodes"} == {
        k: v for k, v in DEFAULTS.items() if k != "max_nodes"}
    assert evaluate["max_nodes"] is None  # 60, or 16,64 with --proposals
    assert evaluate["depth"] <= LIMITS["max_depth"]


def test_query_help_states_the_engine_s_defaults() -> None:
    from ngram_service.query_cli import main as ngram_query

    text = " ".join(CliRunner().invoke(ngram_query, ["prune", "--help"]).output.split())
    for p in PRUNE_PARAMS:
        if p.name in DEFAULTS:
            assert f"[default: {p.default}; " in text, p.name
        assert p.flag in text, p.name  # every parameter of the engine's table is an option


def test_prune_without_parameters_uses_the_exported_defaults(sample_trie: Path) -> None:
    """What a caller gets leaving prune's parameters out is DEFAULTS: prune_params() (the parameters as
    prune converts them) reports them, and NgramIndex.prune gives the trees it gives with DEFAULTS spelled
    out; each of them matters (another value gives another tree for some lattice), so a default that
    differed from its export would show."""
    assert {k: prune_params()[k] for k in DEFAULTS} == DEFAULTS
    idx = NgramIndex.open(sample_trie)
    rng = np.random.default_rng(0)
    common = idx.topk([], 40).tokens  # frequent tokens, so that the n-gram scores matter
    lattices = [(rng.choice(common, 4), np.stack([rng.permutation(common)[:30] for _ in range(4)]),
                 rng.random((4, 30), dtype=np.float32)) for _ in range(20)]

    def tree(lattice: tuple, **params: object) -> tuple[list[int], list[int]]:
        t = idx.prune(*lattice, **params)
        return t.tokens.tolist(), t.parents.tolist()

    for lattice in lattices:
        assert tree(lattice) == tree(lattice, **DEFAULTS)
    for key, other in (("beam_width", 2), ("max_nodes", 10), ("ngram_weight", 0.0)):
        assert any(tree(lattice) != tree(lattice, **{**DEFAULTS, key: other}) for lattice in lattices), key


def test_maximum_order_is_the_engine_s(tmp_path: Path) -> None:
    from dart_client.lattice_log import DEFAULT_TAIL
    from indexer.build_config import BuildConfig, BuildError, check_config
    from indexer.cli import main as ngram_build

    assert DEFAULT_TAIL >= _engine.MAX_ORDER - 1  # a logged lattice keeps the context of any trie
    out = str(tmp_path / "t.ngt")
    r = CliRunner().invoke(ngram_build, ["--order", str(_engine.MAX_ORDER + 1), "--out", out])
    assert r.exit_code == 2 and f"1<=x<={_engine.MAX_ORDER}" in r.output
    try:
        check_config(BuildConfig(inputs=[], out=out, tokenizer="t", order=_engine.MAX_ORDER + 1))
    except BuildError as e:
        assert str(e) == f"--order must be in 1..{_engine.MAX_ORDER}, got {_engine.MAX_ORDER + 1}"
    else:
        raise AssertionError("an order above the engine's maximum was accepted")


def test_the_parameter_tables_are_the_engine_s() -> None:
    """ngram_service.params is the engine's tables, row for row: names, defaults, ranges, help."""
    from ngram_service.params import PROPOSE_PARAMS
    from ngram_service.proposals import DEFAULTS as PROPOSE_DEFAULTS
    from ngram_service.proposals import LIMITS as PROPOSE_LIMITS

    for table, rows in ((PRUNE_PARAMS, _engine.PRUNE_FIELDS), (PROPOSE_PARAMS, _engine.PROPOSE_FIELDS)):
        assert [(p.name, p.type, p.default, p.low, p.high) for p in table] == [
            (r["name"], r["type"], r["default"], r["low"], r["high"]) for r in rows]
        assert all(p.help.endswith(".") and p.help[0].isupper() for p in table)
    assert {p.name: p.default for p in PROPOSE_PARAMS} == PROPOSE_DEFAULTS
    by_name = {p.name: p for p in PRUNE_PARAMS}
    assert (by_name["beam_width"].high, by_name["max_nodes"].high) == (LIMITS["max_beam_width"], LIMITS["max_nodes"])
    assert by_name["ngram_weight"].high == LIMITS["max_weight"] and by_name["eos_token_id"].low == -1
    assert {p.name: p.high for p in PROPOSE_PARAMS if p.type is int} == {
        "max_nodes": PROPOSE_LIMITS["max_nodes"], "max_depth": PROPOSE_LIMITS["max_depth"],
        "max_branch": PROPOSE_LIMITS["max_branch"], "lookup_min_match": PROPOSE_LIMITS["max_match"],
        "root_branch": PROPOSE_LIMITS["max_branch"]}
