"""Tests for indexer.tokenizer: loading, exact tiktoken backend, EOS, fingerprint."""

from __future__ import annotations

import base64
import json
import logging
import multiprocessing
import pickle
import unicodedata
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED
from tokenizers import (
    AddedToken,
    Regex,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from tokenizers import Tokenizer as HFTokenizer

from indexer.shards import ShardReader
from indexer.tokenizer import TRICKY_TEXTS, Tokenizer, TokenizerError, load_tokenizer

SHARED_DATA = SHARED / "data"
QWEN = SHARED_DATA / "qwen3-tokenizer.json"
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

TRAIN_TEXTS = [
    *TRICKY_TEXTS,
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def tokenize(text):\n    return [t for t in text.split()]\n",
    "Speculative decoding drafts tokens from an n-gram trie and verifies them.",
    "Numbers 2024, 3.5, 100000 and more numbers 42 17 9.",
    "Ünïcödé façade naïve café résumé — 東京 北京 😀😀",
]
CHECK_TEXTS = [*TRICKY_TEXTS, *TRAIN_TEXTS, "unseen words: zygote quixotic 𝔘𝔫𝔦 <think>x</think> A\u030angstr\u00f6m"]


def train_bpe(path: Path, *, qwen_style: bool, normalizer: object = None, vocab_size: int = 500) -> Path:
    """A tiny byte-level BPE trained by `tokenizers` itself, saved as JSON."""
    tok = HFTokenizer(models.BPE())
    if qwen_style:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAIN_TEXTS * 3, trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def gpt2_style(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_bpe(tmp_path_factory.mktemp("gpt2") / "tokenizer.json", qwen_style=False)


@pytest.fixture(scope="module")
def qwen_style(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Split+ByteLevel, NFC, plus non-special added tokens HF still cuts out."""
    path = train_bpe(tmp_path_factory.mktemp("qwen") / "tokenizer.json", qwen_style=True, normalizer=normalizers.NFC())
    tok = HFTokenizer.from_file(str(path))
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False), AddedToken("</think>", special=False, normalized=False)])
    tok.add_tokens([AddedToken("ångström", special=False, normalized=True)])
    tok.save(str(path))
    return path


def hf_ids(path: Path, texts: list[str]) -> list[list[int]]:
    ref = HFTokenizer.from_file(str(path))
    ref.encode_special_tokens = True
    return [ref.encode(t, add_special_tokens=False).ids for t in texts]


# --------------------------------------------------------------------------
# The fast backend is exact


@pytest.mark.parametrize("fixture", ["gpt2_style", "qwen_style"])
def test_auto_picks_tiktoken_and_matches_hf(request: pytest.FixtureRequest, fixture: str) -> None:
    path = request.getfixturevalue(fixture)
    tok = load_tokenizer(path)
    assert tok.backend == "tiktoken"
    assert tok.encode_batch(CHECK_TEXTS) == hf_ids(path, CHECK_TEXTS)
    assert tok.compare_backends(CHECK_TEXTS) == []


def test_non_special_added_tokens_are_cut_out_like_hf(qwen_style: Path) -> None:
    tok = load_tokenizer(qwen_style, backend="tiktoken")
    think = tok.encode_batch(["<think>"])[0]
    assert len(think) == 1  # an added token, as HF does it
    nfd = unicodedata.normalize("NFD", "ångström")  # matched after NFC
    texts = ["a<think>b</think>c", nfd, f"x{nfd}y<think>", "<think><think>"]
    assert tok.encode_batch(texts) == hf_ids(qwen_style, texts)


def test_special_token_strings_are_plain_text(gpt2_style: Path) -> None:
    for backend in ("hf", "tiktoken"):
        tok = load_tokenizer(gpt2_style, backend=backend)
        (ids,) = tok.encode_batch(["a <|endoftext|> b <|im_end|>"])
        assert tok.eos_id not in ids and len(ids) > 4
        assert tok.decode(ids) == "a <|endoftext|> b <|im_end|>"


def test_unsupported_normalizer_falls_back_to_hf(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = train_bpe(tmp_path / "tokenizer.json", qwen_style=False, normalizer=normalizers.Lowercase())
    with caplog.at_level(logging.INFO, logger="indexer.tokenizer"):
        tok = load_tokenizer(path)
    assert tok.backend == "hf"
    assert "normalizer 'Lowercase'" in caplog.text
    assert tok.encode_batch(["HeLLo"]) == hf_ids(path, ["HeLLo"])
    with pytest.raises(TokenizerError, match="cannot use the tiktoken backend: normalizer 'Lowercase'"):
        load_tokenizer(path, backend="tiktoken")


def test_mismatch_on_samples_falls_back_to_hf(gpt2_style: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A split regex both engines accept but read differently: [[:alpha:]] is
    # Unicode-aware in Oniguruma (HF) and ASCII-only in fancy-regex
    # (tiktoken), so accented words are cut differently.
    cfg = json.loads(gpt2_style.read_text())
    cfg["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r"[[:alpha:]]+|\s+|[^\s[:alpha:]]+"}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(cfg))
    with caplog.at_level(logging.INFO, logger="indexer.tokenizer"):
        tok = load_tokenizer(path, sample_texts=["façade naïve café résumé Ünïcödé"])
    assert tok.backend == "hf"
    assert "tiktoken ids differ from HF" in caplog.text
    assert tok.encode_batch(["café"]) == hf_ids(path, ["café"])


def test_threads_give_the_same_ids(gpt2_style: Path) -> None:
    one = load_tokenizer(gpt2_style)
    two = load_tokenizer(gpt2_style, threads=2)
    hf2 = load_tokenizer(gpt2_style, backend="hf", threads=2)
    texts = CHECK_TEXTS * 3
    assert one.encode_batch(texts) == two.encode_batch(texts) == hf2.encode_batch(texts)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fixture", ["gpt2_style", "qwen_style"])
def test_hf_backend_gives_the_ids_of_a_plain_encode(request: pytest.FixtureRequest, fixture: str, threads: int) -> None:
    # The backend encodes on a thread of its own, without offsets
    # (encode_batch_fast): the ids must be tokenizers' own encode() ids, per
    # document, for empty, special-token and very long documents.
    path = request.getfixturevalue(fixture)
    tok = load_tokenizer(path, backend="hf", threads=threads)
    long_doc = "\n".join(CHECK_TEXTS) * 60
    assert len(long_doc) > 200_000
    texts = ["", *CHECK_TEXTS, long_doc, "", "<|endoftext|>", "<|endoftext|><|im_end|>x"]
    assert tok.encode_batch(texts) == hf_ids(path, texts)
    assert [tok.encode_batch([t])[0] for t in texts[-4:]] == hf_ids(path, texts[-4:])


# --------------------------------------------------------------------------
# Arrays out, EOS after every document


def test_encode_to_arrays_appends_eos(gpt2_style: Path) -> None:
    for backend in ("hf", "tiktoken"):
        tok = load_tokenizer(gpt2_style, backend=backend)
        texts = ["hello world", "", "line\u2028break"]
        ids, lengths = tok.encode_to_arrays(texts)
        assert ids.dtype == np.int32 and lengths.dtype == np.int64
        assert lengths.sum() == len(ids) and lengths[1] == 1
        ends = np.cumsum(lengths) - 1
        assert (ids[ends] == tok.eos_id).all()
        per_doc = tok.encode_batch(texts)
        assert ids.tolist() == [i for doc in per_doc for i in [*doc, tok.eos_id]]
        assert ((ids >= 0) & (ids < tok.vocab_size)).all()
        empty_ids, empty_lengths = tok.encode_to_arrays([])
        assert len(empty_ids) == len(empty_lengths) == 0


def test_async_batches_give_the_ids_of_encode_to_arrays_in_order(gpt2_style: Path) -> None:
    # The build submits a shard's batches ahead of its counting, several
    # queued on the one encoding thread: each future must hold its own
    # batch's ids, as the synchronous call gives them.
    for backend in ("hf", "tiktoken"):
        tok = load_tokenizer(gpt2_style, backend=backend)
        batches = [CHECK_TEXTS[i:] + [str(i)] for i in range(len(CHECK_TEXTS))] + [[]]
        futures = [tok.encode_to_arrays_async(b) for b in batches]
        for b, f in zip(batches, futures):
            got = f.result()
            want_ids, want_lengths = tok.encode_to_arrays(b)
            assert np.array_equal(got.ids, want_ids) and np.array_equal(got.lengths, want_lengths)
            assert got.ids.dtype == np.int32 and got.lengths.dtype == np.int64 and got.seconds >= 0
            assert got.ids.tolist() == [i for doc in tok.encode_batch(b) for i in [*doc, tok.eos_id]]
    with pytest.raises(TokenizerError, match="add_special_tokens needs the hf backend"):
        load_tokenizer(gpt2_style, backend="tiktoken").encode_to_arrays_async(["x"], add_special_tokens=True)


# --------------------------------------------------------------------------
# Facts: vocab_size, eos, name, fingerprint


def test_facts_of_a_tokenizer_json(gpt2_style: Path) -> None:
    tok = load_tokenizer(gpt2_style)
    hf = HFTokenizer.from_file(str(gpt2_style))
    assert tok.vocab_size == hf.get_vocab_size(with_added_tokens=True)
    assert tok.eos_id == hf.token_to_id("<|endoftext|>")
    assert tok.name == "tokenizer.json"
    assert len(tok.fingerprint) == 64 and int(tok.fingerprint, 16) >= 0


def test_eos_choices(gpt2_style: Path, tmp_path: Path) -> None:
    hf = HFTokenizer.from_file(str(gpt2_style))
    im_end = hf.token_to_id("<|im_end|>")
    assert load_tokenizer(gpt2_style, eos="<|im_end|>").eos_id == im_end
    assert load_tokenizer(gpt2_style, eos=7).eos_id == 7
    with pytest.raises(TokenizerError, match="outside"):
        load_tokenizer(gpt2_style, eos=10**6)
    with pytest.raises(TokenizerError, match="'<nope>' is not in the vocabulary"):
        load_tokenizer(gpt2_style, eos="<nope>")

    # A folder with tokenizer_config.json: its eos_token wins.
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(gpt2_style.read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<|im_end|>"}}))
    tok = load_tokenizer(str(folder))
    assert (tok.name, tok.eos_id) == ("my-model", im_end)


def test_no_eos_is_a_clear_error(gpt2_style: Path, tmp_path: Path) -> None:
    cfg = json.loads(gpt2_style.read_text())
    for tok in cfg["added_tokens"]:
        tok["content"] = tok["content"].replace("|", "#")  # <#endoftext#>
    vocab = cfg["model"]["vocab"]  # the trainer puts special tokens there too
    cfg["model"]["vocab"] = {t.replace("|", "#") if t.startswith("<|") else t: i for t, i in vocab.items()}
    path = tmp_path / "noeos.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(TokenizerError, match="no end-of-document token found.*pass eos="):
        load_tokenizer(path)


def test_fingerprint_is_backend_independent_and_content_sensitive(gpt2_style: Path, tmp_path: Path) -> None:
    prints = {load_tokenizer(gpt2_style, backend=b).fingerprint for b in ("auto", "hf", "tiktoken")}
    assert len(prints) == 1
    (fp,) = prints

    cfg = json.loads(gpt2_style.read_text())
    # Same content, other layout (key order, indentation, "a b" merges): same.
    relaid = dict(reversed(list(cfg.items())))
    relaid["model"] = dict(cfg["model"], merges=[" ".join(m) for m in cfg["model"]["merges"]])
    (tmp_path / "relaid.json").write_text(json.dumps(relaid, indent=4))
    assert load_tokenizer(tmp_path / "relaid.json", backend="hf").fingerprint == fp

    # Decoder and post-processor do not change the ids of text: same.
    other = json.loads(json.dumps(cfg))
    other["decoder"] = None
    (tmp_path / "nodecoder.json").write_text(json.dumps(other))
    assert load_tokenizer(tmp_path / "nodecoder.json", backend="hf").fingerprint == fp

    # One vocabulary entry swapped: different.
    changed = json.loads(json.dumps(cfg))
    vocab = changed["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    assert load_tokenizer(tmp_path / "changed.json", backend="hf").fingerprint != fp

    # A different normalizer: different.
    normed = json.loads(json.dumps(cfg))
    normed["normalizer"] = {"type": "NFKC"}
    (tmp_path / "normed.json").write_text(json.dumps(normed))
    assert load_tokenizer(tmp_path / "normed.json").fingerprint != fp


# --------------------------------------------------------------------------
# tiktoken rank files


def write_rank_file(tokenizer_json: Path, path: Path) -> Path:
    from indexer.tiktoken_conversion import BYTE_OF_CHAR

    cfg = json.loads(tokenizer_json.read_text())
    specials = {t["content"] for t in cfg["added_tokens"]}
    lines = []
    for token, rank in sorted(cfg["model"]["vocab"].items(), key=lambda kv: kv[1]):
        if token in specials:
            continue  # special tokens are not ranks; they are passed separately
        raw = bytes(BYTE_OF_CHAR[c] for c in token)
        lines.append(f"{base64.b64encode(raw).decode()} {rank}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_tiktoken_rank_file(gpt2_style: Path, tmp_path: Path) -> None:
    ranks = write_rank_file(gpt2_style, tmp_path / "tiny.tiktoken")
    hf = HFTokenizer.from_file(str(gpt2_style))
    specials = {"<|endoftext|>": hf.token_to_id("<|endoftext|>"), "<|im_end|>": hf.token_to_id("<|im_end|>")}
    tok = load_tokenizer(ranks, pattern=GPT2_PATTERN, special_tokens=specials)
    assert (tok.backend, tok.name, tok.eos_id) == ("tiktoken", "tiny.tiktoken", specials["<|endoftext|>"])
    assert tok.vocab_size == hf.get_vocab_size(with_added_tokens=True)
    texts = [t for t in CHECK_TEXTS if unicodedata.is_normalized("NFC", t)]
    assert tok.encode_batch(texts) == hf_ids(gpt2_style, texts)
    # The fingerprint covers ranks, pattern and special tokens.
    same = load_tokenizer(ranks, pattern=GPT2_PATTERN, special_tokens=specials)
    assert same.fingerprint == tok.fingerprint
    assert load_tokenizer(ranks, pattern=r"\S+|\s+", special_tokens=specials).fingerprint != tok.fingerprint
    assert load_tokenizer(ranks, pattern=GPT2_PATTERN, special_tokens={"<|endoftext|>": 0}).fingerprint != tok.fingerprint
    with pytest.raises(TokenizerError, match="cannot use the 'hf' backend"):
        load_tokenizer(ranks, backend="hf", special_tokens=specials)


def test_rank_file_errors(gpt2_style: Path, tmp_path: Path) -> None:
    ranks = write_rank_file(gpt2_style, tmp_path / "tiny.tiktoken")
    with pytest.raises(TokenizerError, match="no end-of-document token"):
        load_tokenizer(ranks, pattern=GPT2_PATTERN, special_tokens={})
    assert load_tokenizer(ranks, pattern=GPT2_PATTERN, special_tokens={}, eos=5).eos_id == 5
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("IQ== 0\nnot-base64!! 1\n")
    with pytest.raises(TokenizerError, match=r"bad.tiktoken:2: not a tiktoken rank line"):
        load_tokenizer(bad)


# --------------------------------------------------------------------------
# Specs that do not load


def test_missing_local_paths_do_not_go_to_the_hub(tmp_path: Path) -> None:
    for spec in [str(tmp_path / "nope.json"), "./tokenizer.json", "a/b/c"]:
        with pytest.raises(TokenizerError, match="no such tokenizer file or folder"):
            load_tokenizer(spec)
    (tmp_path / "emptydir").mkdir()
    with pytest.raises(TokenizerError, match="folder holds no tokenizer.json"):
        load_tokenizer(tmp_path / "emptydir")


def test_hub_id_failure_names_the_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    # Offline mode makes the hub client fail at once instead of retrying.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import sys

    if "huggingface_hub.constants" in sys.modules:
        monkeypatch.setattr(sys.modules["huggingface_hub.constants"], "HF_HUB_OFFLINE", True)
    with pytest.raises(TokenizerError, match="cannot load tokenizer 'no-such-org/no-such-model'.*hub"):
        load_tokenizer("no-such-org/no-such-model")


def test_bad_arguments(gpt2_style: Path) -> None:
    with pytest.raises(ValueError, match="backend"):
        load_tokenizer(gpt2_style, backend="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threads"):
        load_tokenizer(gpt2_style, threads=0)


# --------------------------------------------------------------------------
# Worker processes


def _encode_in_worker(tok: Tokenizer, texts: list[str]) -> tuple[str, list[list[int]]]:
    return tok.backend, tok.encode_batch(texts)


def _encode_as_two_tasks(blob: bytes, texts: list[str]) -> tuple[list[list[int]], int]:
    """What a pool worker does for two shards: unpickles the tokenizer for
    each and encodes; the ids and how many tiktoken encodings it then holds."""
    import gc

    import tiktoken

    tokenizers = [pickle.loads(blob) for _ in range(2)]
    ids = [t.encode_batch(texts) for t in tokenizers]
    gc.collect()
    return ids[1], sum(isinstance(o, tiktoken.Encoding) for o in gc.get_objects())


def test_pickles_small_and_rebuilds_in_a_worker(gpt2_style: Path, tmp_path: Path) -> None:
    tok = load_tokenizer(gpt2_style)
    blob = pickle.dumps(tok)
    assert len(blob) < 5000  # the spec and facts, not the vocabulary
    texts = CHECK_TEXTS[:10]
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        backend, ids = pool.submit(_encode_in_worker, tok, texts).result()
        # Unpickled again in the same process (a task per shard): its backend is built once.
        twice, encodings = pool.submit(_encode_as_two_tasks, blob, texts).result()
    assert backend == "tiktoken" and ids == twice == tok.encode_batch(texts)
    assert encodings == 1

    # A tokenizer file replaced under a running build is caught by a process
    # that builds the backend afterwards.
    path = tmp_path / "tokenizer.json"
    path.write_bytes(gpt2_style.read_bytes())
    moved = load_tokenizer(path)
    path.write_text(path.read_text().replace('"<|im_end|>"', '"<|im_END|>"'))
    with (ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool,
          pytest.raises(TokenizerError, match="changed since it was loaded")):
        pool.submit(_encode_in_worker, moved, ["x"]).result()


# --------------------------------------------------------------------------
# The real Qwen3 vocabulary on the shared corpus

needs_qwen = pytest.mark.skipif(not QWEN.is_file(), reason="shared Qwen3 tokenizer not available")


@pytest.fixture(scope="module")
def qwen_pair() -> tuple[Tokenizer, Tokenizer]:
    return load_tokenizer(QWEN), load_tokenizer(QWEN, backend="hf")


def corpus_sample(chars_per_shard: int = 150_000) -> list[str]:
    texts: list[str] = []
    for shard in sorted((SHARED_DATA / "corpus").iterdir()):
        taken = 0
        for batch in ShardReader(shard, batch_chars=50_000):
            for t in batch:
                # Take the head of each shard, and every document with U+2028.
                if taken < chars_per_shard or "\u2028" in t:
                    texts.append(t)
                    taken += len(t)
    return texts


@needs_qwen
def test_qwen3_facts(qwen_pair: tuple[Tokenizer, Tokenizer]) -> None:
    fast, ref = qwen_pair
    assert fast.backend == "tiktoken" and ref.backend == "hf"
    assert fast.vocab_size == ref.vocab_size == 151_669
    assert fast.eos_id == ref.eos_id == 151_643
    assert fast.fingerprint == ref.fingerprint
    (ids,) = fast.encode_batch(["<|endoftext|><|im_start|>"])
    assert 151_643 not in ids and 151_644 not in ids


@needs_qwen
@pytest.mark.skipif(not (SHARED_DATA / "corpus").is_dir(), reason="shared corpus not available")
def test_qwen3_tiktoken_equals_hf_on_corpus(qwen_pair: tuple[Tokenizer, Tokenizer]) -> None:
    fast, ref = qwen_pair
    texts = corpus_sample()
    assert any("\u2028" in t for t in texts)
    fast_ids, fast_lengths = fast.encode_to_arrays(texts)
    ref_ids, ref_lengths = ref.encode_to_arrays(texts)
    assert np.array_equal(fast_lengths, ref_lengths)
    assert np.array_equal(fast_ids, ref_ids)
    assert (fast_ids[np.cumsum(fast_lengths) - 1] == 151_643).all()


@needs_qwen
@pytest.mark.skipif(not (SHARED_DATA / "corpus").is_dir(), reason="shared corpus not available")
def test_qwen3_hf_backend_equals_plain_encode_on_corpus(qwen_pair: tuple[Tokenizer, Tokenizer]) -> None:
    _, ref = qwen_pair
    texts = corpus_sample(chars_per_shard=60_000)
    plain = HFTokenizer.from_file(str(QWEN))
    plain.encode_special_tokens = True
    ids, lengths = ref.encode_to_arrays(texts)
    want = [i for t in texts for i in [*plain.encode(t, add_special_tokens=False).ids, 151_643]]
    assert ids.tolist() == want
    assert lengths.tolist() == [len(plain.encode(t, add_special_tokens=False).ids) + 1 for t in texts]
