"""A model's settings (``bm25aug_config.json``): what it serves and how its heads behave.

Kept apart from the torch model so that the command line and the training arguments can read
its defaults without importing torch. A setting a saved config predates reads as the first
release's value (``bm25aug.recipes.LEGACY``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

from bm25aug import recipes
from bm25aug.errors import UserError
from bm25aug.limits import check_all, check_choice
from bm25aug.tokenization import portable_name

PAPER_ENCODER = "distilbert-base-uncased"
CONFIG_NAME = "bm25aug_config.json"
POOLINGS = ("cls", "mean", "max")
TARGETS = ("wp", "flat")  # bm25aug.model.targets
# contextual: the encoder reads each query (bm25aug.model.augmenter); static: a learned weight and
# expansion list per term, looked up, no encoder at query time (bm25aug.model.static). Both are
# trained by train.py. reweighter: static word vectors and a tiny head fitted to a contextual
# model's weights (bm25aug.model.reweighter, fitted by bm25aug.train.reweighter).
TRAINED_SIDES = ("contextual", "static")
# What a setting newer than every recipe reads as in a config saved before it existed (the first
# release's recipe holds only settings every model has; this one is a static table's own).
SAVED_BEFORE = {"added_budget": 0}  # a static model trained before the budget kept every added term
QUERY_SIDES = (*TRAINED_SIDES, "reweighter")



def finite(state: dict, path) -> dict:
    """A model's saved tensors, if every value is a finite number: a NaN or an infinity (a damaged
    or hand-edited file) would drop or break terms at search time without a word. A ``ValueError``
    otherwise, which the loaders report as a corrupt checkpoint."""
    for name, tensor in state.items():
        if tensor.is_floating_point() and not bool(tensor.isfinite().all()):
            raise ValueError(f"NaN or infinite values in {name} of {path}")
    return state

@dataclass
class AugmenterConfig:
    encoder: str = PAPER_ENCODER
    vocab_size: int = 30522
    vocab_hash: str = ""  # the index vocabulary the model was trained against
    use_weights: bool = True  # ablation "w/o weight": w ≡ 1 per query token
    use_augmentation: bool = True  # ablation "no augmentation": a ≡ 0
    max_query_length: int = 64
    # a(q) from one query vector, "cls" (paper) or "mean" (sentence-transformers encoders), or
    # "max": SPLADE-style, the max over query tokens of ReLU(W h_i + b), so each added term is tied to a token.
    pooling: str = "cls"
    # "embeddings": W starts as the word-embedding matrix; "centered": the same, with each entry's
    # bias lowered by its logit at the training queries' mean state (``center_aug_head``); "random": N(0, 0.02)
    aug_init: str = "embeddings"
    aug_init_bias: float = -1.0  # with tied init, only tokens close to the query start above zero
    # The index the boosts are for: "flat" (Lucene's English analyzer, Pyserini's stock indexes) or
    # "wp" (the paper's WordPiece index); see bm25aug.model.targets.
    target: str = "flat"
    weight_floor: float = 1.0  # a query term's w is at least this (1: its BM25 weight is a floor; the paper: 0)
    # Entries of a(q) at or below this are zeroed, in training as in search, so the model learns to
    # commit to a term or leave it out, and what is served is what was trained (0: plain ReLU).
    aug_threshold: float = 0.0
    # a(q) is used only when it has at most this many non-zero entries (0: always). Set after
    # training to a high quantile of the training queries' counts, so that a query far from
    # anything trained on keeps its reweighting and gets no guessed terms.
    aug_gate: int = 0
    # The encoder layer whose states a(q) is pooled from, indexed as Hugging Face's hidden_states
    # (0: the embeddings, each token's word and position vectors; -1: the last layer, as the paper).
    # w always reads the last layer.
    aug_layer: int = -1
    # Learned feedback: the encoder reads, after the query and a [SEP], the surface words of the top
    # this-many terms of BM25's RM3 relevance model, less the query's own terms (0: the query alone).
    # Such a model searches the index once before it encodes (``bm25aug.search.feedback.FeedbackEncoder``).
    feedback_terms: int = 0
    query_side: str = QUERY_SIDES[0]
    # The static query side adds at most this many terms a query, its heaviest (ties: by term), in
    # training as in search (0: every one). Chosen from quality against QPS on SciFact
    # (benchmarks/bench_budget.py, docs/speed.md#added-term-budget); a model saved before it had none.
    added_budget: int = 6

    def __post_init__(self) -> None:
        """A hand-edited config (a negative gate silently switched a(q) off) is refused on load."""
        check_all(self)
        check_choice("pooling", self.pooling, POOLINGS)
        check_choice("target", self.target, TARGETS)
        check_choice("query side", self.query_side, QUERY_SIDES)
        for f in fields(self):  # a JSON "no" for a flag was read as True
            value = getattr(self, f.name)
            if isinstance(f.default, (bool, str)) and type(value) is not type(f.default):
                kind = "true or false" if isinstance(f.default, bool) else "a quoted string"
                raise UserError(f"{f.name} must be {kind}, not {value!r}; fix: write it as {kind}")

    @property
    def reads_feedback(self) -> bool:
        """Whether the model reads BM25 feedback: ``feedback_terms`` set, unless the model is
        plain BM25 (w ≡ 1, a ≡ 0, as the significance check leaves one that did not beat BM25),
        which reads nothing and so searches nothing first."""
        return bool(self.feedback_terms) and (self.use_weights or self.use_augmentation)

    @classmethod
    def load(cls, path: str | Path) -> "AugmenterConfig":
        """A model folder's config, checked: an unreadable or hand-broken one is one error line."""
        file = Path(path) / CONFIG_NAME
        try:
            saved = json.loads(file.read_text(encoding="utf-8"))
            if isinstance(saved, dict):  # a setting it predates had the first release's value
                legacy = recipes.settings(recipes.LEGACY)
                saved = {**{f.name: legacy[f.name] for f in fields(cls) if legacy.get(f.name) is not None},
                         **SAVED_BEFORE, **saved}
            config = cls(**saved)
            config.encoder = portable_name(config.encoder)  # a folder saved by an earlier release named a path
            return config
        except UserError as e:
            raise UserError(f"{file}: {e}") from None
        except (json.JSONDecodeError, TypeError, UnicodeDecodeError, OSError) as e:
            raise UserError(f"{file} is not a bm25aug model config ({type(e).__name__}: {str(e)[:120]}); "
                            f"fix: restore it from the run's other checkpoint (best/ or last/), or retrain") from None
