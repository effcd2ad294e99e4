from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetInfoRequest(_message.Message):
    __slots__ = ("index",)
    INDEX_FIELD_NUMBER: _ClassVar[int]
    index: str
    def __init__(self, index: _Optional[str] = ...) -> None: ...

class GetInfoResponse(_message.Message):
    __slots__ = ("index", "order", "vocab_size", "eos_id", "ngram_counts", "meta_json", "total_tokens", "file_bytes", "mapped", "path", "loaded_unix_seconds", "indexes", "ram_bytes")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    EOS_ID_FIELD_NUMBER: _ClassVar[int]
    NGRAM_COUNTS_FIELD_NUMBER: _ClassVar[int]
    META_JSON_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAPPED_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    LOADED_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    INDEXES_FIELD_NUMBER: _ClassVar[int]
    RAM_BYTES_FIELD_NUMBER: _ClassVar[int]
    index: str
    order: int
    vocab_size: int
    eos_id: int
    ngram_counts: _containers.RepeatedScalarFieldContainer[int]
    meta_json: str
    total_tokens: int
    file_bytes: int
    mapped: bool
    path: str
    loaded_unix_seconds: float
    indexes: _containers.RepeatedScalarFieldContainer[str]
    ram_bytes: int
    def __init__(self, index: _Optional[str] = ..., order: _Optional[int] = ..., vocab_size: _Optional[int] = ..., eos_id: _Optional[int] = ..., ngram_counts: _Optional[_Iterable[int]] = ..., meta_json: _Optional[str] = ..., total_tokens: _Optional[int] = ..., file_bytes: _Optional[int] = ..., mapped: _Optional[bool] = ..., path: _Optional[str] = ..., loaded_unix_seconds: _Optional[float] = ..., indexes: _Optional[_Iterable[str]] = ..., ram_bytes: _Optional[int] = ...) -> None: ...

class ConditionalProbsRequest(_message.Message):
    __slots__ = ("index", "tokenizer_fingerprint", "context_len", "num_candidates", "contexts", "candidates")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LEN_FIELD_NUMBER: _ClassVar[int]
    NUM_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    index: str
    tokenizer_fingerprint: str
    context_len: int
    num_candidates: int
    contexts: _containers.RepeatedScalarFieldContainer[int]
    candidates: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, index: _Optional[str] = ..., tokenizer_fingerprint: _Optional[str] = ..., context_len: _Optional[int] = ..., num_candidates: _Optional[int] = ..., contexts: _Optional[_Iterable[int]] = ..., candidates: _Optional[_Iterable[int]] = ...) -> None: ...

class ConditionalProbsResponse(_message.Message):
    __slots__ = ("batch", "num_candidates", "probs", "matched")
    BATCH_FIELD_NUMBER: _ClassVar[int]
    NUM_CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    PROBS_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    batch: int
    num_candidates: int
    probs: _containers.RepeatedScalarFieldContainer[float]
    matched: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, batch: _Optional[int] = ..., num_candidates: _Optional[int] = ..., probs: _Optional[_Iterable[float]] = ..., matched: _Optional[_Iterable[int]] = ...) -> None: ...

class TopKRequest(_message.Message):
    __slots__ = ("index", "tokenizer_fingerprint", "context", "k")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    index: str
    tokenizer_fingerprint: str
    context: _containers.RepeatedScalarFieldContainer[int]
    k: int
    def __init__(self, index: _Optional[str] = ..., tokenizer_fingerprint: _Optional[str] = ..., context: _Optional[_Iterable[int]] = ..., k: _Optional[int] = ...) -> None: ...

class TopKResponse(_message.Message):
    __slots__ = ("tokens", "probs", "counts", "matched")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROBS_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    probs: _containers.RepeatedScalarFieldContainer[float]
    counts: _containers.RepeatedScalarFieldContainer[int]
    matched: int
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., probs: _Optional[_Iterable[float]] = ..., counts: _Optional[_Iterable[int]] = ..., matched: _Optional[int] = ...) -> None: ...

class PruneParams(_message.Message):
    __slots__ = ("beam_width", "max_nodes", "ngram_weight", "level_weights", "logit_weights", "eos_token_id", "ngram_on_first_level")
    BEAM_WIDTH_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    NGRAM_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    LEVEL_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    LOGIT_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    NGRAM_ON_FIRST_LEVEL_FIELD_NUMBER: _ClassVar[int]
    beam_width: int
    max_nodes: int
    ngram_weight: float
    level_weights: _containers.RepeatedScalarFieldContainer[float]
    logit_weights: _containers.RepeatedScalarFieldContainer[float]
    eos_token_id: int
    ngram_on_first_level: bool
    def __init__(self, beam_width: _Optional[int] = ..., max_nodes: _Optional[int] = ..., ngram_weight: _Optional[float] = ..., level_weights: _Optional[_Iterable[float]] = ..., logit_weights: _Optional[_Iterable[float]] = ..., eos_token_id: _Optional[int] = ..., ngram_on_first_level: _Optional[bool] = ...) -> None: ...

class PruneInput(_message.Message):
    __slots__ = ("prefix", "level_sizes", "tokens", "probs")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LEVEL_SIZES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROBS_FIELD_NUMBER: _ClassVar[int]
    prefix: _containers.RepeatedScalarFieldContainer[int]
    level_sizes: _containers.RepeatedScalarFieldContainer[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    probs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, prefix: _Optional[_Iterable[int]] = ..., level_sizes: _Optional[_Iterable[int]] = ..., tokens: _Optional[_Iterable[int]] = ..., probs: _Optional[_Iterable[float]] = ...) -> None: ...

class PruneTreeRequest(_message.Message):
    __slots__ = ("index", "tokenizer_fingerprint", "params", "inputs", "with_scores")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    WITH_SCORES_FIELD_NUMBER: _ClassVar[int]
    index: str
    tokenizer_fingerprint: str
    params: PruneParams
    inputs: _containers.RepeatedCompositeFieldContainer[PruneInput]
    with_scores: bool
    def __init__(self, index: _Optional[str] = ..., tokenizer_fingerprint: _Optional[str] = ..., params: _Optional[_Union[PruneParams, _Mapping]] = ..., inputs: _Optional[_Iterable[_Union[PruneInput, _Mapping]]] = ..., with_scores: _Optional[bool] = ...) -> None: ...

class PrunedTreeNodes(_message.Message):
    __slots__ = ("tokens", "parents", "scores")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    parents: _containers.RepeatedScalarFieldContainer[int]
    scores: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., parents: _Optional[_Iterable[int]] = ..., scores: _Optional[_Iterable[float]] = ...) -> None: ...

class PruneTreeResponse(_message.Message):
    __slots__ = ("trees",)
    TREES_FIELD_NUMBER: _ClassVar[int]
    trees: _containers.RepeatedCompositeFieldContainer[PrunedTreeNodes]
    def __init__(self, trees: _Optional[_Iterable[_Union[PrunedTreeNodes, _Mapping]]] = ...) -> None: ...

class ProposeParams(_message.Message):
    __slots__ = ("max_nodes", "max_depth", "max_branch", "min_prob", "backoff", "corpus", "lookup", "lookup_weight", "lookup_min_match", "discount", "lookup_decay", "lookup_prior", "order_weight", "root_branch")
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_BRANCH_FIELD_NUMBER: _ClassVar[int]
    MIN_PROB_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    CORPUS_FIELD_NUMBER: _ClassVar[int]
    LOOKUP_FIELD_NUMBER: _ClassVar[int]
    LOOKUP_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    LOOKUP_MIN_MATCH_FIELD_NUMBER: _ClassVar[int]
    DISCOUNT_FIELD_NUMBER: _ClassVar[int]
    LOOKUP_DECAY_FIELD_NUMBER: _ClassVar[int]
    LOOKUP_PRIOR_FIELD_NUMBER: _ClassVar[int]
    ORDER_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    ROOT_BRANCH_FIELD_NUMBER: _ClassVar[int]
    max_nodes: int
    max_depth: int
    max_branch: int
    min_prob: float
    backoff: float
    corpus: bool
    lookup: bool
    lookup_weight: float
    lookup_min_match: int
    discount: float
    lookup_decay: float
    lookup_prior: float
    order_weight: float
    root_branch: int
    def __init__(self, max_nodes: _Optional[int] = ..., max_depth: _Optional[int] = ..., max_branch: _Optional[int] = ..., min_prob: _Optional[float] = ..., backoff: _Optional[float] = ..., corpus: _Optional[bool] = ..., lookup: _Optional[bool] = ..., lookup_weight: _Optional[float] = ..., lookup_min_match: _Optional[int] = ..., discount: _Optional[float] = ..., lookup_decay: _Optional[float] = ..., lookup_prior: _Optional[float] = ..., order_weight: _Optional[float] = ..., root_branch: _Optional[int] = ...) -> None: ...

class ProposeInput(_message.Message):
    __slots__ = ("context",)
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    context: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, context: _Optional[_Iterable[int]] = ...) -> None: ...

class ProposeTreeRequest(_message.Message):
    __slots__ = ("index", "tokenizer_fingerprint", "params", "contexts")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    index: str
    tokenizer_fingerprint: str
    params: ProposeParams
    contexts: _containers.RepeatedCompositeFieldContainer[ProposeInput]
    def __init__(self, index: _Optional[str] = ..., tokenizer_fingerprint: _Optional[str] = ..., params: _Optional[_Union[ProposeParams, _Mapping]] = ..., contexts: _Optional[_Iterable[_Union[ProposeInput, _Mapping]]] = ...) -> None: ...

class ProposeTreeResponse(_message.Message):
    __slots__ = ("trees",)
    TREES_FIELD_NUMBER: _ClassVar[int]
    trees: _containers.RepeatedCompositeFieldContainer[PrunedTreeNodes]
    def __init__(self, trees: _Optional[_Iterable[_Union[PrunedTreeNodes, _Mapping]]] = ...) -> None: ...

class ReloadRequest(_message.Message):
    __slots__ = ("index", "path")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    index: str
    path: str
    def __init__(self, index: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ("index", "path", "file_bytes", "loaded_unix_seconds")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    FILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOADED_UNIX_SECONDS_FIELD_NUMBER: _ClassVar[int]
    index: str
    path: str
    file_bytes: int
    loaded_unix_seconds: float
    def __init__(self, index: _Optional[str] = ..., path: _Optional[str] = ..., file_bytes: _Optional[int] = ..., loaded_unix_seconds: _Optional[float] = ...) -> None: ...
