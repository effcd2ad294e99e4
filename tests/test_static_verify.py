"""The static KV cache and its fixed-shape forwards (dart_client/static_verify.py,
kv_cache.StaticKVCache): under greedy decoding in float32 they give the
dynamic cache's tokens and accepted lengths in every mode (the target alone,
proposals, DART; one prompt and ragged batches whose rows finish at
different steps), with a random target (its answers depend on every cache
entry) and with the oracle target; nothing is allocated per step; a forward
past a fixed capacity is an error, and a capacity left to the generator
grows; the fixed-shape forwards a CUDA graph captures read no device value
on the host (checked on the meta device). The CUDA-graph test runs where torch sees a GPU
(``python -m pytest -m cuda tests/test_static_verify.py``)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import SAMPLE_CORPUS, SAMPLE_TOKENIZER, require_module

torch = require_module("torch")
transformers = require_module("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from dart_client import DartGenerator, LocalPruner  # noqa: E402
from dart_client.generate import ProposalGenerator  # noqa: E402
from dart_client.kv_cache import CacheOverflowError  # noqa: E402
from dart_client.oracle import OracleDrafter, OracleTarget  # noqa: E402
from dart_client.proposer import LocalProposer, LookupProposer  # noqa: E402
from dart_client.random_models import random_drafter, random_sample_target, random_target  # noqa: E402
from tests.dart_testbed import (  # noqa: E402
    encode_prompts,
    fitted_drafter,
    one_torch_thread,  # noqa: F401  (autouse)
    write_count_trie,
)

MAX_NEW = 24
#: The kinds of static forward checked against the dynamic cache: in place over the used positions, and the
#: CUDA graphs' padded shapes over the whole capacity (run eagerly here).
STATIC = [pytest.param(dict(kv_cache="static"), id="static"),
          pytest.param(dict(kv_cache="static", fixed_shapes=True), id="static-fixed-shapes")]


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return encode_prompts()


@pytest.fixture(scope="module")
def target() -> Any:
    return random_target("tiny", seed=3, eos_token_id=0, bos_token_id=0)


@pytest.fixture(scope="module")
def refs(target: Any, prompts: list[list[int]]) -> list[list[int]]:
    """transformers' own greedy continuations (no EOS stop)."""
    return [target.generate(torch.tensor([p]), max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=None,
                            pad_token_id=0)[0, len(p):].tolist() for p in prompts]


@pytest.fixture(scope="module")
def trie(tmp_path_factory: pytest.TempPathFactory, prompts: list[list[int]], refs: list[list[int]]) -> Path:
    """The target's own continuations of half the prompts (long accepted
    paths), random ones of the others (rejected trees)."""
    rng = np.random.default_rng(0)
    docs = [p + (r if i % 2 == 0 else [int(t) for t in rng.integers(1, 4096, MAX_NEW)])
            for i, (p, r) in enumerate(zip(prompts, refs))]
    return write_count_trie(tmp_path_factory.mktemp("static") / "known.ngt", docs, "static-verify-test")


def _decode(gen: Any, prompts: list[list[int]], new: int = MAX_NEW) -> list[tuple[list[int], list[int]]]:
    """(tokens, accepted per step) of each prompt alone, then of all of them as one ragged batch."""
    one = [gen.generate(p, new, stop_at_eos=False) for p in prompts]
    batch = gen.generate(prompts, new, stop_at_eos=False)
    return [(r.output_ids, [s.accepted for s in r.steps]) for r in one + batch]


@pytest.mark.parametrize("static", STATIC)
def test_autoregressive(target: Any, prompts: list[list[int]], refs: list[list[int]], static: dict[str, Any]) -> None:
    gen = ProposalGenerator(target, LookupProposer(), eos_token_id=[], **static)
    assert static["kv_cache"] == "static" and gen.kv_cache == "static"
    assert [gen.autoregressive(p, MAX_NEW, stop_at_eos=False).output_ids for p in prompts] == refs


@pytest.mark.parametrize("cache", [*STATIC, pytest.param(dict(kv_cache="dynamic"), id="dynamic")])
def test_autoregressive_batch(target: Any, prompts: list[list[int]], refs: list[list[int]],
                              cache: dict[str, Any]) -> None:
    """The target alone on a ragged batch (the B > 1 baseline): each row's
    tokens are its own greedy continuation; with an EOS that some rows say
    at different steps, those rows stop there (and leave the batch) while
    the others go on to the end."""
    assert len({len(p) for p in prompts}) > 1  # ragged
    gen = ProposalGenerator(target, LookupProposer(), eos_token_id=[], **cache)
    batch = gen.autoregressive(prompts, MAX_NEW, stop_at_eos=False)
    assert [r.output_ids for r in batch] == refs
    assert [len(r.steps) for r in batch] == [MAX_NEW - 1] * len(prompts)  # the prefill gives the first token
    assert batch[0].steps[0].batch_size == len(prompts)
    # an EOS that rows reach at different steps, and one row that never does
    def stops_at(t: int) -> list[int]:
        return [r.index(t) + 1 if t in r else MAX_NEW for r in refs]

    eos = max(sorted({t for r in refs for t in r}), key=lambda t: len(set(stops_at(t))))
    stops = stops_at(eos)
    assert len(set(stops)) > 2 and MAX_NEW in stops
    eos_gen = ProposalGenerator(target, LookupProposer(), eos_token_id=eos, **cache)
    got = eos_gen.autoregressive(prompts, MAX_NEW)
    assert [r.output_ids for r in got] == [r[:n] for r, n in zip(refs, stops)]
    assert [len(r.steps) for r in got] == [n - 1 for n in stops]  # a finished row leaves the batch
    assert min(r.steps[-1].batch_size for r in got if r.steps) < len(prompts)
    assert [eos_gen.autoregressive(p, MAX_NEW).output_ids for p in prompts] == [r.output_ids for r in got]


@pytest.mark.parametrize("static", STATIC)
def test_proposals(target: Any, prompts: list[list[int]], refs: list[list[int]], trie: Path,
                   static: dict[str, Any]) -> None:
    """Proposals from a trie that knows half the continuations: long paths
    accepted (compaction moves them), others rejected; the tokens are the
    target's own and each step accepts what the dynamic cache's accepts."""
    dynamic = _decode(ProposalGenerator(target, LocalProposer(trie), eos_token_id=[], kv_cache="dynamic"), prompts)
    got = _decode(ProposalGenerator(target, LocalProposer(trie), eos_token_id=[], **static), prompts)
    assert [t for t, _ in dynamic] == refs + refs
    assert got == dynamic
    assert max(a for _, acc in got for a in acc) >= 3  # paths of several nodes were compacted


@pytest.mark.parametrize("static", STATIC)
def test_dart(target: Any, prompts: list[list[int]], refs: list[list[int]], trie: Path,
              static: dict[str, Any]) -> None:
    """DART: the drafter reads the verification forward's hidden states of
    the accepted nodes, so those must be the dynamic cache's too."""
    drafter = fitted_drafter(target, refs)
    dynamic = _decode(DartGenerator(target, drafter, LocalPruner(trie), eos_token_id=[], kv_cache="dynamic"), prompts)
    got = _decode(DartGenerator(target, drafter, LocalPruner(trie), eos_token_id=[], **static), prompts)
    assert [t for t, _ in dynamic] == refs + refs
    assert got == dynamic


@pytest.fixture(scope="module")
def references() -> list[list[int]]:
    """Three documents of the sample corpus (the sample trie's own text)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(SAMPLE_TOKENIZER))
    with gzip.open(next(SAMPLE_CORPUS.glob("*.jsonl.gz")), "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    return [tok.encode(t).ids[:140] for t in texts[-3:]]


@pytest.mark.parametrize("static", STATIC)
def test_oracle_every_mode(sample_trie: Path, references: list[list[int]], static: dict[str, Any]) -> None:
    """The oracle target reproduces its text with the static cache in every
    mode, each step accepting what it accepts with the dynamic cache."""
    from ngram_eval.synthetic import LogitModel, TextLattices

    oracle = OracleTarget(random_sample_target(), references)
    prompts = [r[:40] for r in references]
    lattices = TextLattices([np.asarray(r) for r in references], LogitModel(depth=4, topk=8), seed=1)
    drafter = OracleDrafter(random_drafter(oracle, draft_length=3, draft_vocab_size=4096), references, lattices)
    modes = {"proposals": lambda **kw: ProposalGenerator(oracle, LocalProposer(sample_trie), eos_token_id=[], **kw),
             "lookup": lambda **kw: ProposalGenerator(oracle, LookupProposer(), eos_token_id=[], **kw),
             "dart": lambda **kw: DartGenerator(oracle, drafter, LocalPruner(sample_trie), eos_token_id=[], **kw)}
    for mode, make in modes.items():
        dynamic, got = _decode(make(kv_cache="dynamic"), prompts, 80), _decode(make(**static), prompts, 80)
        assert [t for t, _ in got] == [r[40:120] for r in references] * 2, mode
        assert got == dynamic, mode
        if mode != "lookup":
            assert sum(a for _, acc in got for a in acc) > 40, mode  # drafts were accepted
    ar = modes["lookup"](**static)
    assert [ar.autoregressive(p, 30, stop_at_eos=False).output_ids for p in prompts] == [r[40:70] for r in references]
    assert [r.output_ids for r in ar.autoregressive(prompts, 30, stop_at_eos=False)] == [r[40:70] for r in references]


def test_nothing_is_allocated_per_step(target: Any, prompts: list[list[int]], trie: Path) -> None:
    """The cache, the mask and the fixed-shape inputs keep their addresses
    through a call's steps and from call to call needing no more room."""
    gen = ProposalGenerator(target, LocalProposer(trie), eos_token_id=[], kv_cache="static", fixed_shapes=True)
    static = gen._static
    assert static is not None
    seen: set[tuple[int, ...]] = set()

    def addresses(_step: int, _res: Any) -> None:
        assert static.cache is not None and static._mask is not None and static._ids is not None
        seen.add((static.cache.kv.data_ptr(), static._mask.data_ptr(), static._ids.data_ptr()))

    for p in sorted(prompts, key=len, reverse=True)[:4]:
        gen.generate(p, MAX_NEW, stop_at_eos=False, on_step=addresses)
    assert len(seen) == 1


@pytest.mark.parametrize("static", STATIC)
def test_a_fixed_capacity_overflows_with_an_error(target: Any, prompts: list[list[int]], refs: list[list[int]],
                                                  trie: Path, static: dict[str, Any]) -> None:
    """kv_capacity fixes the cache's positions: a step past it raises
    (naming the capacity), never writes out of place; without it the cache
    grows for a longer call and the tokens stay the target's."""
    p = prompts[0]
    small = ProposalGenerator(target, LocalProposer(trie), eos_token_id=[], kv_capacity=len(p) + 8, **static)
    with pytest.raises(CacheOverflowError, match=rf"holds {len(p) + 8} positions"):
        small.generate(p, MAX_NEW, stop_at_eos=False)
    with pytest.raises(CacheOverflowError, match=rf"holds {len(p) + 8} positions"):
        small.autoregressive(p, MAX_NEW, stop_at_eos=False)
    with pytest.raises(CacheOverflowError, match="the prompt has"):
        ProposalGenerator(target, LookupProposer(), kv_capacity=len(p) - 1, **static).generate(p, 4)
    grows = ProposalGenerator(target, LocalProposer(trie), eos_token_id=[], **static)
    assert grows.generate(p, 4, stop_at_eos=False).output_ids == refs[0][:4]
    assert grows._static is not None and grows._static.cache is not None
    first = grows._static.cache.capacity
    assert grows.generate(prompts, MAX_NEW, stop_at_eos=False)[0].output_ids == refs[0]
    assert grows._static.cache.capacity > first or grows._static.cache.max_batch == len(prompts)


def test_mask_sizes_take_either_transformers_form() -> None:
    """transformers asks the cache for the mask's key length with the
    query's cache positions (4.56 on) or with its length (later versions):
    both give the entries the forward will see."""
    from dart_client.kv_cache import StaticKVCache

    cache = StaticKVCache(2, 1, 4, 64)
    cache.write_at(10)
    assert cache.get_mask_sizes(3, 0) == cache.get_mask_sizes(torch.arange(10, 13), 0) == (13, 0)
    cache.write_index(torch.arange(20, 23))
    assert cache.get_mask_sizes(3, 0) == cache.get_mask_sizes(torch.arange(20, 23), 0) == (64, 0)


def test_options_are_checked(target: Any) -> None:
    with pytest.raises(ValueError, match="kv_cache must be one of"):
        ProposalGenerator(target, LookupProposer(), kv_cache="paged")
    with pytest.raises(ValueError, match="need kv_cache='static'"):
        ProposalGenerator(target, LookupProposer(), kv_cache="dynamic", cuda_graphs=True)
    assert ProposalGenerator(target, LookupProposer()).kv_cache == "static"  # the default
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA graphs need a CUDA device; the target is on cpu"):
            ProposalGenerator(target, LookupProposer(), kv_cache="static", cuda_graphs=True)


def _to_meta(static: Any, target: Any) -> None:
    """The target, its cache and the forward's buffers moved to the meta
    device, where tensors have shapes and no data."""
    target.to("meta")
    if isinstance(target, OracleTarget):  # the tensors it keeps besides the model's, whatever their names
        for name, value in list(vars(target).items()):
            if isinstance(value, torch.Tensor):
                setattr(target, name, value.to("meta"))
            elif name != "_modules" and isinstance(value, dict) and value and all(
                    isinstance(v, torch.Tensor) for v in value.values()):
                setattr(target, name, {k: v.to("meta") for k, v in value.items()})
    static.cache.kv = static.cache.kv.to("meta")
    static.cache._views()
    for name in ("_mask", "_ids", "_pos", "_index", "_arange"):
        setattr(static, name, getattr(static, name).to("meta"))
    static.device = torch.device("meta")


class _HostTensorOps(TorchDispatchMode):
    """Records every op that takes a CPU tensor: under a capture, a copy from
    host memory (torch.tensor(..., device=cuda), .to(cuda)) is refused, and a
    CPU value read as a scalar is frozen into the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        leaves = torch.utils._pytree.tree_leaves((args, kwargs or {}))
        if any(isinstance(a, torch.Tensor) and a.device.type == "cpu" for a in leaves):
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("family", ["qwen3", "llama"])
@pytest.mark.parametrize("oracle", [False, True], ids=["random", "oracle"])
def test_fixed_shape_forwards_read_no_device_value(family: str, oracle: bool) -> None:
    """What a CUDA graph can capture: a fixed-shape forward (the target's,
    the oracle's forced answers, the cache's writes, the mask) never reads a
    device value on the host (.item(), bool(), .tolist()), which would stop
    a capture, and takes no tensor from host memory. On the meta device any
    such read raises, and a dispatch mode sees every op's tensors; every
    step shape the graphs capture runs there (one row or two, one token or
    a tree, with and without hidden states)."""
    for rows, nodes in ((1, 1), (1, 13), (2, 1), (2, 13)):
        model = random_target("tiny", family=family, seed=3, eos_token_id=0, bos_token_id=0)
        ids = torch.randint(1, 4000, (rows, 20), generator=torch.Generator().manual_seed(1))
        target = OracleTarget(model, [r.tolist() + [5] * 100 for r in ids]) if oracle else model
        static = ProposalGenerator(target, LookupProposer(), eos_token_id=[], fixed_shapes=True)._static
        assert static is not None
        lens = torch.tensor([20, 15][:rows])
        static.begin(rows, 100)
        static.prefill(ids, lens.tolist(), keep=1, hidden=True)  # eager, on the CPU: it may read values
        _to_meta(static, target)
        tree = torch.tril(torch.ones(rows, nodes, nodes, dtype=torch.bool))
        ids, pos = torch.ones(rows, nodes, dtype=torch.long, device="meta"), (torch.arange(nodes) + lens[:, None])
        args = (pos.to("meta"), tree.to("meta"), lens.to("meta"))
        for hidden in (False, True):
            with _HostTensorOps() as host:
                try:
                    out = static.forward(ids, *args, 20, hidden)
                except RuntimeError as e:  # transformers 4.x: its rotary embedding opens an autocast there
                    if "unsupported scalarType" not in str(e):
                        raise
                    pytest.skip(f"transformers {transformers.__version__} cannot run on the meta device ({e})")
            assert host.ops == []
            assert out.logits.shape == (rows, nodes, 4096) and out.logits.device.type == "meta"
            assert (out.hidden_states is not None) == hidden


@pytest.mark.cuda
def test_cuda_graphs_give_the_dynamic_tokens(prompts: list[list[int]], trie: Path) -> None:
    """On a GPU in float32: the graphs' replays give the dynamic cache's
    tokens and accepted lengths, each (rows, bucket) captured once."""
    gpu = random_target("tiny", seed=3, eos_token_id=0, bos_token_id=0, device="cuda")
    refs = [gpu.generate(torch.tensor([p], device="cuda"), max_new_tokens=MAX_NEW, do_sample=False,
                         eos_token_id=None, pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    dynamic = _decode(ProposalGenerator(gpu, LocalProposer(trie), eos_token_id=[], kv_cache="dynamic"), prompts)
    gen = ProposalGenerator(gpu, LocalProposer(trie), eos_token_id=[], kv_cache="static", cuda_graphs=True)
    got = _decode(gen, prompts)
    assert [t for t, _ in dynamic] == refs + refs
    assert got == dynamic
    assert gen._static is not None and gen._static.cuda_graphs and 0 < gen._static.captures
    assert [gen.autoregressive(p, MAX_NEW, stop_at_eos=False).output_ids for p in prompts] == refs
    assert [r.output_ids for r in gen.autoregressive(prompts, MAX_NEW, stop_at_eos=False)] == refs


def test_dart_generate_options() -> None:
    """dart-generate --kv-cache static decodes as the dynamic cache does
    (--compare: the target alone, with the same cache, identical); the
    static cache's options are refused without it, --cuda-graphs without CUDA."""
    from click.testing import CliRunner

    from dart_client.cli import main

    run = CliRunner().invoke
    args = ["--random-models", "--drafter", "none", "-p", "def fibonacci(n):", "--max-new-tokens", "12", "--json"]
    outs = {}
    for kind in ("dynamic", "static"):
        r = run(main, args + ["--kv-cache", kind, "--compare"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.stdout)
        assert out["kv_cache"] == kind and out["identical_to_target"] is True
        outs[kind] = out["text"]
    assert outs["dynamic"] == outs["static"]
    r = run(main, args + ["--kv-cache", "dynamic", "--kv-capacity", "64"])
    assert r.exit_code == 2 and "--kv-capacity: only with --kv-cache static" in r.output
    if not torch.cuda.is_available():
        r = run(main, args + ["--kv-cache", "static", "--cuda-graphs", "--device", "cpu"])
        assert r.exit_code == 2 and "CUDA graphs need a CUDA device" in r.output
