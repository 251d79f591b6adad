"""The evaluation methods: each an entry of ``METHODS``, with the index flavor it searches, how its
searcher is made from an index, an ``EvalConfig`` and a checkpoint, and the methods run beside it
(``augmented`` brings both BM25 baselines, so that its latency and quality ratios compare like with
like, in one process). Adding a method is adding an entry. ``bm25-multifield`` is Pyserini's (title
and text as two fields, ``contents^1 title^1``); ``augmented-multifield`` is a flat-target model's
term list over that index; ``hybrid`` and ``augmented-hybrid`` fuse bm25-flat or a model with the
dense peer (``bm25aug.search.hybrid``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from bm25aug.errors import UserError

if TYPE_CHECKING:
    from bm25aug.eval.evaluate import EvalConfig


@dataclass(frozen=True)
class Method:
    """A registry entry: ``searcher(index, config, checkpoint)`` returns an object with
    ``search_arrays``, ``batch_search_arrays`` and ``hits`` (``BM25Searcher``, ``AugmentedSearcher``)."""

    name: str
    flavor: str  # the index it searches; "target": the checkpoint's (wp or flat)
    searcher: Callable
    needs_checkpoint: bool = False
    companions: tuple[str, ...] = ()
    target: str | None = None  # the checkpoint target a fixed-flavor model method needs (augmented-multifield: flat)
    # searches any Index (bm25aug.backend), a cluster's too; the others read what only an index folder holds
    any_index: bool = False


def _bm25(flavor: str):
    def make(index: Path, config: EvalConfig, checkpoint: Path | None):
        from bm25aug.search.bm25 import BM25Searcher

        return BM25Searcher(index, config.k1, config.b, tokenizer=config.tokenizer if config.index else None,
                            flavor=flavor, fields=config.fields if flavor == "multifield" else None)

    return make


def _expansion(name: str):
    def make(index: Path, config: EvalConfig, checkpoint: Path | None):
        from bm25aug.search.peers import ExpansionSearcher

        return ExpansionSearcher(index, name, config.k1, config.b)

    return make


def _augmented(index: Path, config: EvalConfig, checkpoint: Path | None):
    from bm25aug.search.augmented import AugmentedSearcher

    return AugmentedSearcher.from_pretrained(checkpoint, index, config.k1, config.b, runtime=config.runtime,
                                             encode_batch_size=config.encode_batch_size,
                                             aug_gate=config.aug_gate, fields=config.fields)


def _augmented_rm3(index: Path, config: EvalConfig, checkpoint: Path | None):
    from bm25aug.search.feedback import RM3Searcher

    first = _augmented(index, config, checkpoint)
    _flat_only(first.bm25.meta, index, "augmented-rm3 reads its feedback from one field's document vectors")
    return RM3Searcher(first)


def _flat_only(meta, index: Path, why: str) -> None:
    if meta.flavor != "flat":
        raise UserError(f"{index} is a {meta.flavor} index and {why}, a flat index's; fix: pass the dataset's flat "
                        f"index (`bm25aug index --dataset NAME --flavor flat`)")


def _dense(index: Path, config: EvalConfig, checkpoint: Path | None):
    from bm25aug.lucene.index import IndexMeta
    from bm25aug.search.dense import DenseSearcher

    _flat_only(IndexMeta.load(index, flavor="flat"), index, "the dense peer encodes the stored contents")
    return DenseSearcher(index, model=config.dense_model)


def _splade(index: Path, config: EvalConfig, checkpoint: Path | None):
    from bm25aug.lucene.index import IndexMeta
    from bm25aug.search.splade import SpladeSearcher

    _flat_only(IndexMeta.load(index, flavor="flat"), index, "the SPLADE peer encodes the stored contents")
    return SpladeSearcher(index)


def fusion_of(config: EvalConfig):
    """The config's ``Fusion``: its own settings over the defaults."""
    from bm25aug.search.hybrid import Fusion

    return Fusion.given(config.fusion, config.fusion_weight, config.fusion_depth)


def _hybrid(with_model: bool):
    """bm25-flat (``with_model``: the checkpoint's model) fused with the dense peer."""
    def make(index: Path, config: EvalConfig, checkpoint: Path | None):
        from bm25aug.search.hybrid import HybridSearcher

        options = {"runtime": config.runtime, "encode_batch_size": config.encode_batch_size,
                   "aug_gate": config.aug_gate} if with_model else {}
        return HybridSearcher.from_pretrained(checkpoint if with_model else None, index, config.dense_model,
                                              fusion_of(config), config.k1, config.b, **options)

    return make


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("bm25-flat", "flat", _bm25("flat"), any_index=True),
    Method("bm25-wp", "wp", _bm25("wp")),
    # Pyserini's bm25-multifield: title and text indexed apart, searched as contents^1 title^1
    Method("bm25-multifield", "multifield", _bm25("multifield")),
    Method("bm25-rm3", "flat", _expansion("rm3")),  # Pyserini's RM3, default parameters
    Method("bm25-rocchio", "flat", _expansion("rocchio")),  # Pyserini's Rocchio, default parameters
    # DEFAULT_DENSE_MODEL (bge-small-en-v1.5 split by precision) by default: exact inner product, or the corpus's HNSW index when one exists (bm25aug.dense.hnsw)
    Method("dense", "flat", _dense),
    Method("splade", "flat", _splade),  # SPLADE-tiny, exact sparse dot product: what re-indexing buys (search.splade)
    Method("hybrid", "flat", _hybrid(False), companions=("bm25-flat", "dense")),  # bm25-flat fused with dense
    # a flat-target model's term lists fused with dense: against the bm25-flat hybrid and dense alone
    Method("augmented-hybrid", "flat", _hybrid(True), needs_checkpoint=True, target="flat",
           companions=("hybrid", "dense", "augmented", "bm25-flat")),
    Method("augmented", "target", _augmented, needs_checkpoint=True, any_index=True,
           companions=("bm25-flat", "bm25-wp", "bm25-rm3", "bm25-rocchio")),
    # RM3 (Pyserini's defaults) on the augmented query: the feedback baseline (bm25aug.search.feedback)
    Method("augmented-rm3", "target", _augmented_rm3, needs_checkpoint=True,
           companions=("bm25-flat", "bm25-rm3", "augmented")),
    # A flat-target model's term list over the multifield index (each term on contents and title)
    Method("augmented-multifield", "multifield", _augmented, needs_checkpoint=True, target="flat",
           companions=("bm25-multifield", "bm25-flat", "augmented")),
)}


def index_flavor(method: Method, checkpoint: Path | None) -> str:
    """The index flavor ``method`` searches (for augmented: the one its checkpoint was trained for)."""
    from bm25aug.model.config import AugmenterConfig

    if method.flavor != "target":
        if method.target and (target := AugmenterConfig.load(checkpoint).target) != method.target:
            raise UserError(f"{method.name} searches a {method.flavor} index with a {method.target}-target model, and "
                            f"{checkpoint} was trained for {target} indexes; fix: pass a {method.target}-target "
                            f"checkpoint, or use --method augmented")
        return method.flavor
    return AugmenterConfig.load(checkpoint).target
