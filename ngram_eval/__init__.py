"""ngram-eval: which trie makes DART accept the most tokens, measured offline from draft lattices.

``replay`` prunes lattices with a trie (the engine's own search) and measures
the accepted length; ``synthetic`` makes lattices from held-out text;
``report`` gathers the statistics; ``plot`` draws them; ``cli`` is the command.
"""
from ngram_eval.replay import (PruneSetting, ReplayResult, accepted_length, accepted_lengths, hit_rates,
                               prune_lattices, replay)

__all__ = ["PruneSetting", "ReplayResult", "accepted_length", "accepted_lengths", "hit_rates", "prune_lattices",
           "replay"]
