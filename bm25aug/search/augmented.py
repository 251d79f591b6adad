"""BM25 with each query rewritten by a trained query encoder: the product's searcher.

Documents are never re-encoded: a query becomes boosted term queries on the stock index of the
encoder's target flavor (``TARGET_FLAVORS``: a flat-target model also searches a multifield index,
whose two fields are analyzed as a flat index's one: each term is then a clause on ``contents``
and one on ``title``, each field's clauses boosted by its weight). Encoding belongs to the encoder (``bm25aug.model.encoder``); this module
only checks that the two fit and hands the term list to Lucene.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bm25aug.errors import UserError
from bm25aug.limits import check, check_query
from bm25aug.ranking import TopK
from bm25aug.bm25_defaults import B, FIELD, K1, TITLE_FIELD
from bm25aug.model.encoder import QueryEncoder, cut_anywhere, encode_queries, prune
from bm25aug.search.batch import CHUNK, PIECE, search_chunks
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.hits import Hit, Searches
from bm25aug.search.feedback import reading_feedback

# The index flavors a model of each target searches: a flat model's terms are the English
# analyzer's, which a multifield index also holds, in both of its fields.
TARGET_FLAVORS = {"flat": ("flat", "multifield"), "wp": ("wp",)}
# A term list's field weights on a multifield index, chosen on dev data (docs/results.md#multifield-indexes):
# titles weigh a quarter of the text. Plain BM25 keeps Pyserini's 1 and 1 (MULTIFIELD_WEIGHTS).
AUGMENTED_FIELD_WEIGHTS = {FIELD: 1.0, TITLE_FIELD: 0.25}


@dataclass
class AugmentedQuery:
    """A query's learned term list next to its plain WordPiece terms, to show what changed."""

    query: str
    terms: dict[str, float]
    original: dict[str, float]
    unindexed: frozenset[str] = frozenset()  # query terms no document of the index has (never searched)

    @property
    def added(self) -> dict[str, float]:
        """Terms the model added (not in the query), heaviest first."""
        return dict(sorted(((t, w) for t, w in self.terms.items() if t not in self.original), key=lambda tw: -tw[1]))

    @property
    def reweighted(self) -> dict[str, tuple[float, float]]:
        """Query terms as ``token: (BM25 boost, learned boost)``; a learned 0 means dropped, by the
        model or, for a term in ``unindexed``, because no document has it."""
        return {t: (c, self.terms.get(t, 0.0)) for t, c in self.original.items()}

    def explain(self, top: int = 15) -> str:
        lines = [f"query: {self.query}", "reweighted (bm25 -> learned):"]
        lines += [f"  {t:<20} {c:5.2f} -> " + ("(in no document of the index)" if t in self.unindexed else f"{w:6.3f}")
                  for t, (c, w) in self.reweighted.items()]
        added = list(self.added.items())
        lines.append(f"added ({len(added)} terms, top {min(top, len(added))}):")
        lines += [f"  {t:<20} {w:6.3f}" for t, w in added[:top]]
        return "\n".join(lines)


class AugmentedSearcher(Searches):
    """BM25 with queries rewritten by a ``QueryEncoder`` (a trained model), over the index of its
    target: ``wp``, or ``flat`` (Lucene's English analyzer, as Pyserini's prebuilt indexes; a
    multifield one too: each term on both fields, weighted by ``fields``, default
    ``AUGMENTED_FIELD_WEIGHTS``; ``searcher`` itself keeps its own, Pyserini's, for plain BM25).
    ``top_k``/``threshold`` prune each term list as ``bm25aug export`` does. ``encode_batch_size``:
    queries a forward pass in batch search (``encode_queries``; default: batches only where they
    give each query its own terms, so the int8 encoder encodes one by one)."""

    def __init__(self, encoder: QueryEncoder, searcher: BM25Searcher, top_k: int | None = None,
                 threshold: float = 0.0, encode_batch_size: int | None = None,
                 fields: dict[str, float] | None = None):
        target = encoder.config.target
        if searcher.meta.flavor not in TARGET_FLAVORS.get(target, ()):
            raise UserError(f"{searcher.index_dir} is a {searcher.meta.flavor} index but the model was trained for "
                            f"{target} indexes; fix: use the dataset's {' or '.join(TARGET_FLAVORS.get(target, [target]))} "
                            f"index")
        if target == "wp" and encoder.config.vocab_hash and encoder.config.vocab_hash != searcher.meta.vocab_hash:
            raise UserError(f"the checkpoint was trained against vocabulary {encoder.config.vocab_hash} but "
                            f"{searcher.index_dir} has {searcher.meta.vocab_hash}; fix: use a wp index built "
                            f"with the checkpoint's tokenizer")
        self.encoder, self.bm25 = reading_feedback(encoder, searcher), searcher  # learned feedback: RM3 terms first
        self.top_k, self.threshold = check("top_k", top_k), check("threshold", threshold)
        self.encode_batch_size = check("encode_batch_size", encode_batch_size)
        multifield = searcher.meta.flavor == "multifield"
        self.fields = searcher.field_weights(AUGMENTED_FIELD_WEIGHTS if multifield and fields is None else fields)

    @classmethod
    def from_pretrained(cls, checkpoint: str | Path, index: str | Path, k1: float = K1, b: float = B,
                        top_k: int | None = None, threshold: float = 0.0,
                        runtime: str = "onnx-int8", aug_gate: int | None = None,
                        encode_batch_size: int | None = None, fields: dict[str, float] | None = None
                        ) -> "AugmentedSearcher":
        """``runtime`` of the query encoder: ``onnx-int8`` (default, and what ``bm25aug export`` uses), ``torch-int8``
        or ``torch-fp32`` (the reference); see ``bm25aug.model.onnx_encoder``. ``aug_gate`` overrides the
        checkpoint's augmentation gate (0: off; see ``bm25aug.model.targets``). A flat-target model
        searches a flat or a multifield index (what the index's fields say), with ``fields``'
        weights on a multifield one (default ``AUGMENTED_FIELD_WEIGHTS``)."""
        from bm25aug.model.loading import load_encoder

        encoder = load_encoder(checkpoint, runtime)
        if aug_gate is not None:
            if encoder.config.query_side != "contextual":
                raise UserError(f"{checkpoint} is a {encoder.config.query_side} model, which has no augmentation gate; "
                                f"fix: drop --aug-gate")
            encoder.config.aug_gate = check("aug_gate", aug_gate)
        flat = encoder.config.target == "flat"  # flat or multifield, as the index's fields say
        return cls(encoder, BM25Searcher(index, k1, b, tokenizer=None if flat else encoder.tokenizer,
                                         flavor=None if flat else encoder.config.target),
                   top_k, threshold, encode_batch_size, fields)

    def term_list(self, query: str) -> dict[str, float]:
        """The query's term list as Lucene scores it: the encoder's (pruned, as ``bm25aug export``
        writes it) less the terms this index lacks. Those match nothing, so the ranking is the
        same, and ``AugmentedQuery.added`` shows only terms that can score."""
        if not check_query(query).strip():
            return {}
        return self.bm25.indexed(prune(self.encoder.encode(query), self.top_k, self.threshold))

    def augment(self, query: str) -> AugmentedQuery:
        original = self.bm25.query_terms(query)
        return AugmentedQuery(query, self.term_list(query), original,
                              frozenset(original.keys() - self.bm25.indexed(original).keys()))

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        return self.bm25.search_terms_arrays(self.term_list(query), k, self.fields)

    @property
    def docids(self) -> np.ndarray:
        """External ids by Lucene doc number: ``docids[top.lucene_ids]``."""
        return self.bm25.docids

    def hits(self, top: TopK) -> list[Hit]:
        return self.bm25.hits(top)

    def verify(self, dataset) -> None:
        """That the index holds ``dataset``'s very corpus (``Index.verify``)."""
        self.bm25.verify(dataset)

    def term_lists(self, queries: list[str], threads: int = 1) -> list[dict[str, float]]:
        """``term_list`` for many queries (``encode_queries``, ``encode_batch_size`` a pass, on
        ``threads`` threads): the same lists ``bm25aug export`` writes for this list of queries."""
        blank = [not check_query(q).strip() for q in queries]
        # Blank queries are encoded too (and then dropped), so that every query has the
        # neighbours it has in an export of the same list.
        encoded = encode_queries(self.encoder, list(queries), self.top_k, self.threshold, progress=False,
                                 batch_size=self.encode_batch_size, threads=threads)
        return [{} if empty else self.bm25.indexed(terms) for empty, terms in zip(blank, encoded)]

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]:
        """The fast path for many queries: a chunk is encoded on ``threads`` Python threads while
        the one before searches on ``threads`` Java threads (``bm25aug.search.batch``); any
        ``threads`` gives the same result, and with the default ``encode_batch_size`` the same as
        ``search_arrays`` one by one."""
        return search_chunks(self.bm25.index, self.bm25.index.terms_kind(self.fields),
                             lambda chunk: [self.bm25.terms_element(t, self.fields) for t in self.term_lists(chunk, threads)],
                             list(queries), k, threads, desc, PIECE if cut_anywhere(self.encoder) else CHUNK)

    def batch_search_terms_arrays(self, term_lists: list[dict[str, float]], k: int = 1000, threads: int = 1,
                                  desc: str | None = None) -> list[TopK]:
        """Term lists this searcher made (``term_lists``) searched as it searches them (its ``fields``)."""
        return self.bm25.batch_search_terms_arrays(term_lists, k, threads, desc, self.fields)
