"""The per-query entry points (prune, propose, conditional_probs) are fast-call
functions (cpp/python/fastcall.h): Python's argument rules, arrays read where
they lie (in any byte order), the same answers by every route; prune's and
propose's parameters named in every signature from the engine's tables."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from conftest import GOLDEN
from ngram_service import NgramIndex, _engine, proposals
from ngram_service import tree as tree_module
from ngram_service.client import AsyncNgramClient, NgramClient
from ngram_service.index import Propose
from ngram_service.tree import prune as tree_prune


@pytest.fixture(scope="module")
def golden(corpus_trie) -> tuple[NgramIndex, list, dict]:
    idx = NgramIndex.open(corpus_trie)
    g = dict(np.load(GOLDEN / "tree_sample.npz"))
    off = g["prompt_offsets"]
    reqs = [(g["prompt_flat"][off[i]:off[i + 1]], g["topk_tokens"][i], g["topk_probs"][i]) for i in range(8)]
    params = dict(beam_width=int(g["beam_width"]), max_nodes=int(g["remain_total"]),
                  ngram_weight=float(g["ngram_weight"]), level_weights=g["level_weights"],
                  logit_weights=g["logit_weights"], eos_token_id=int(g["eos_token"]))
    return idx, reqs, params


def same_tree(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f))
               for f in ("tokens", "parents", "scores", "tree_mask", "retrieve_indices"))


def test_every_route_gives_the_same_tree(golden) -> None:
    idx, reqs, params = golden
    batch = idx.prune_batch(reqs, threads=1, **params)
    for r, want in zip(reqs, batch):
        for tree in (idx.prune(*r, **params), tree_prune(idx.engine, *r, **params),
                     _engine.prune(idx.engine, *r, **params), idx.engine.prune(*r, **params),
                     idx.prune(prefix=r[0], topk_tokens=r[1], topk_probs=r[2], **params)):
            assert same_tree(tree, want)


def test_keywords_built_at_run_time_match(golden) -> None:
    """A keyword name that is not the interned string (built at run time) is matched by value."""
    idx, reqs, _ = golden
    name = "".join(["beam", "_width"])
    assert same_tree(idx.prune(*reqs[0], **{name: 3}), idx.prune(*reqs[0], beam_width=3))
    assert not same_tree(idx.prune(*reqs[0], beam_width=3), idx.prune(*reqs[0]))  # the keyword did something


@pytest.mark.parametrize("call, message", [
    (lambda i, r: i.prune(*r, beam=4), r"prune\(\) got an unexpected keyword argument 'beam'"),
    (lambda i, r: i.prune(*r, 20), r"prune\(\) takes 3 positional arguments but 4 were given"),
    (lambda i, r: _engine.prune(i.engine, *r, 20), r"prune\(\) takes 4 positional arguments but 5 were given"),
    (lambda i, r: i.prune(r[0], r[1]), r"prune\(\) missing required argument 'topk_probs'"),
    (lambda i, r: i.prune(*r, prefix=r[0]), r"prune\(\) got multiple values for argument 'prefix'"),
    (lambda i, r: _engine.prune("trie", *r), r"trie must be an _engine.Trie, got str"),
    (lambda i, r: i.conditional_probs([[1]]), r"conditional_probs\(\) missing required argument 'candidates'"),
    (lambda i, r: i.conditional_probs([[1]], [[2]], [[3]]), r"takes 2 positional arguments but 3 were given"),
    (lambda i, r: i.conditional_probs([[1]], candidate=[[2]]), r"unexpected keyword argument 'candidate'"),
])
def test_python_argument_rules(golden, call, message) -> None:
    idx, reqs, _ = golden
    with pytest.raises(TypeError, match=message):
        call(idx, reqs[0])


def test_values_are_still_the_engines_to_check(golden) -> None:
    idx, reqs, params = golden
    with pytest.raises(ValueError, match="beam_width"):
        idx.prune(*reqs[0], beam_width=0)
    with pytest.raises(ValueError, match="ngram_weight must be a number"):
        idx.prune(*reqs[0], ngram_weight="high")
    with pytest.raises(ValueError, match="level_weights"):
        idx.prune(*reqs[0], level_weights=np.ones(3, np.float32))


def test_any_byte_order_and_layout(golden) -> None:
    """Arrays not in this machine's byte order, or not contiguous, are converted, never read raw."""
    idx, reqs, params = golden
    z = np.load(GOLDEN / "prob_sample.npz")
    ctx, cand = z["contexts"][:200], z["candidates"][:200]
    want = idx.conditional_probs(ctx, cand)
    for c, w in ((ctx.astype(">i8"), cand.astype(">i4")), (ctx.astype("<i8"), cand.astype("<u4")),
                 (np.asfortranarray(ctx), cand[:, ::-1][:, ::-1]), (ctx.tolist(), cand.tolist())):
        got = idx.conditional_probs(c, w)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    prefix, toks, probs = reqs[0]
    want_tree = idx.prune(prefix, toks, probs, **params)
    swapped = {**params, "level_weights": params["level_weights"].astype(">f4"),
               "logit_weights": params["logit_weights"].astype(">f4")}
    for args in ((prefix.astype(">i4"), toks.astype(">i8"), probs.astype(">f4")),
                 (prefix, np.asfortranarray(toks), np.asfortranarray(probs))):
        assert same_tree(idx.prune(*args, **swapped), want_tree)


# ---- prune's parameters: named, from the engine's table ------------------------------

FIELDS = [row["name"] for row in _engine.PRUNE_FIELDS]


def _keywords(f, fields: list[str] = FIELDS) -> dict[str, object]:
    """The table's parameters among f's keyword-only ones, in order, with their defaults."""
    ps = inspect.signature(f).parameters.values()
    return {p.name: p.default for p in ps if p.kind is p.KEYWORD_ONLY and p.name in fields}


def test_prune_signatures_name_every_parameter_of_the_engine_table(golden) -> None:
    """help() and IDEs show prune's parameters by name with the engine's defaults (None for a client:
    the host's), and no route takes **kwargs."""
    idx = golden[0]
    defaults = {row["name"]: row["default"] for row in _engine.PRUNE_FIELDS}
    in_process = (tree_module.prune, tree_module.prune_batch, tree_module.prune_params, NgramIndex.prune_batch,
                  idx.prune, idx.prune_batch, _engine.prune, _engine.prune_batch, _engine.prune_params,
                  _engine.LatticeBatch.prune)
    for f in in_process:
        assert _keywords(f) == defaults, f
    for f in (NgramClient.prune, NgramClient.prune_batch, AsyncNgramClient.prune, AsyncNgramClient.prune_batch):
        assert _keywords(f) == dict.fromkeys(FIELDS), f
    for f in in_process + (NgramClient.prune, NgramClient.prune_batch):
        assert all(p.kind is not p.VAR_KEYWORD for p in inspect.signature(f).parameters.values()), f
    assert tree_module.DEFAULTS == {k: defaults[k] for k in tree_module.DEFAULTS}


@pytest.mark.parametrize("call", [
    lambda idx, r: idx.prune(*r, beam=4),
    lambda idx, r: idx.prune_batch([r], beam=4),
    lambda idx, r: tree_module.prune(idx.engine, *r, beam=4),
    lambda idx, r: tree_module.prune_batch(idx.engine, [r], beam=4),
    lambda idx, r: tree_module.prune_params(beam=4),
    lambda idx, r: NgramClient("127.0.0.1:1").prune(*r, beam=4),
])
def test_an_unknown_prune_keyword_is_a_type_error_naming_it(golden, call) -> None:
    idx, reqs, _ = golden
    with pytest.raises(TypeError, match="unexpected keyword argument 'beam'"):
        call(idx, reqs[0])


def test_none_is_the_default_everywhere(golden) -> None:
    """A parameter given as None is its default from the engine's table, by every in-process route."""
    idx, reqs, _ = golden
    nones = dict.fromkeys(FIELDS)
    want = [idx.prune(*r) for r in reqs]
    for r, w in zip(reqs, want):
        assert same_tree(idx.prune(*r, **nones), w)
        assert same_tree(tree_module.prune(idx.engine, *r, **nones), w)
    for got in (idx.prune_batch(reqs, **nones), tree_module.prune_batch(idx.engine, reqs, **nones)):
        assert all(same_tree(g, w) for g, w in zip(got, want))
    assert tree_module.prune_params(**nones) == tree_module.prune_params()


# ---- propose's parameters: named, from the engine's table ----------------------------

PROPOSE_FIELDS = [row["name"] for row in _engine.PROPOSE_FIELDS]
PROPOSE_DEFAULTS = {row["name"]: row["default"] for row in _engine.PROPOSE_FIELDS}


def _no_var_keyword(f) -> bool:
    return all(p.kind is not p.VAR_KEYWORD for p in inspect.signature(f).parameters.values())


def test_propose_signatures_name_every_parameter_of_the_engine_table(golden) -> None:
    """help() and IDEs show propose's parameters by name with the engine's defaults (None for a
    client: the host's), and no route takes **kwargs: a row of kProposeFields missing from any
    signature fails here."""
    idx = golden[0]
    in_process = (proposals.propose, proposals.propose_batch, proposals.propose_lookup, proposals.propose_params,
                  NgramIndex.propose_batch, idx.propose, idx.propose_batch, Propose.__call__, _engine.propose,
                  _engine.Trie.propose, _engine.propose_batch, _engine.propose_lookup, _engine.propose_params)
    typed = {k: (v, type(v)) for k, v in PROPOSE_DEFAULTS.items()}  # 1.0 a float in help(), not 1
    for f in in_process:
        got = _keywords(f, PROPOSE_FIELDS)
        assert {k: (v, type(v)) for k, v in got.items()} == typed, f
        assert list(got) == PROPOSE_FIELDS, f  # the table's order
    clients = (NgramClient.propose, NgramClient.propose_batch, AsyncNgramClient.propose,
               AsyncNgramClient.propose_batch)
    for f in clients:
        assert _keywords(f, PROPOSE_FIELDS) == dict.fromkeys(PROPOSE_FIELDS), f
    for f in in_process + clients:
        assert _no_var_keyword(f), f
    assert proposals.DEFAULTS == PROPOSE_DEFAULTS == _engine.PROPOSE_DEFAULTS


def test_the_proposers_name_every_parameter_of_the_engine_table() -> None:
    pytest.importorskip("torch")
    from dart_client.proposer import LocalProposer, LookupProposer, RemoteProposer

    for cls in (LocalProposer, LookupProposer, RemoteProposer):
        assert _keywords(cls, PROPOSE_FIELDS) == PROPOSE_DEFAULTS, cls
    assert _no_var_keyword(LocalProposer) and _no_var_keyword(LookupProposer)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nodes'"):
        LookupProposer(nodes=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'nodes'"):
        RemoteProposer("127.0.0.1:1", nodes=3)
    assert LookupProposer(**dict.fromkeys(PROPOSE_FIELDS)).params == PROPOSE_DEFAULTS


@pytest.mark.parametrize("call", [
    lambda idx, c: idx.propose(c, nodes=4),
    lambda idx, c: idx.propose_batch([c], nodes=4),
    lambda idx, c: _engine.propose(idx.engine, c, nodes=4),
    lambda idx, c: proposals.propose(idx.engine, c, nodes=4),
    lambda idx, c: proposals.propose_batch(idx.engine, [c], nodes=4),
    lambda idx, c: proposals.propose_lookup(c, 4096, nodes=4),
    lambda idx, c: proposals.propose_params(nodes=4),
    lambda idx, c: NgramClient("127.0.0.1:1").propose(c, nodes=4),
    lambda idx, c: NgramClient("127.0.0.1:1").propose_batch([c], nodes=4),
])
def test_an_unknown_propose_keyword_is_a_type_error_naming_it(golden, call) -> None:
    idx, reqs, _ = golden
    with pytest.raises(TypeError, match="unexpected keyword argument 'nodes'"):
        call(idx, reqs[0][0])


def test_none_is_propose_default_everywhere(golden) -> None:
    """A propose parameter given as None is its default from the engine's table, by every in-process route."""
    idx, reqs, _ = golden
    nones = dict.fromkeys(PROPOSE_FIELDS)
    contexts = [r[0] for r in reqs]
    want = [idx.propose(c) for c in contexts]
    for c, w in zip(contexts, want):
        assert same_tree(idx.propose(c, **nones), w)
        assert same_tree(proposals.propose(idx.engine, c, **nones), w)
        assert same_tree(proposals.propose_lookup(c, idx.vocab_size, **nones),
                         proposals.propose_lookup(c, idx.vocab_size))
    for got in (idx.propose_batch(contexts, **nones), proposals.propose_batch(idx.engine, contexts, **nones)):
        assert all(same_tree(g, w) for g, w in zip(got, want))
    assert proposals.propose_params(**nones) == proposals.propose_params()
    assert not same_tree(idx.propose(contexts[0], max_nodes=2), want[0])  # the keyword does something
