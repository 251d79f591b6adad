"""What a query becomes on an index: the model's outputs (w per token, a over the WordPiece
vocabulary) as boosted terms of a ``wp`` or a ``flat`` index.

Both targets see a query as term occurrences, each taking the weight w of the WordPiece tokens
it came from:

* ``wp`` (the paper's): an occurrence is one WordPiece token; its weight is that token's w.
* ``flat``: an occurrence is one term of Lucene's English analysis of the query, exactly the terms
  Pyserini's bm25-flat counts; its weight is the **mean w of the WordPiece tokens whose characters
  overlap the analyzed word** ("breast-cancer" gives "breast" and "cancer", each from its own
  tokens; "running" → "run" takes the mean over "running"'s pieces).

The search side reads a(q) only on the target's **live** entries, those that can reach a term of
its index (wp: every entry but the special tokens; flat: the whole-word entries of the flat map),
so the ONNX graph computes only those rows of the head (``bm25aug.model.onnx_encoder``). a(q) is dropped
for a query where it has more than ``aug_gate`` non-zero live entries, a count set after training
from the training queries (``bm25aug.train.callbacks.calibrate_gate``).

An occurrence outside the encoder's window (``max_query_length`` tokens) keeps its BM25 weight,
1, so a long query never loses a term; inside, its weight is at least ``weight_floor`` (default
1, which keeps the original query's BM25 weight as a floor; the paper's 0 lets the model drop it). A query term t gets ``(sum of its occurrence weights) ·
(1 + a_t)``, any other term ``a_t``, where ``a_t`` is a of the vocabulary entry (wp) or the sum of
a over the whole-word entries that analyze to t (flat, ``bm25aug.lucene.analysis.flat_map``). With
w ≡ 1 and a ≡ 0 either target is plain BM25 on its index: each query term boosted by its count.

``term_lists`` does this in numpy for search; ``boosts`` does it in torch, over an index's term
columns, for training.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from bm25aug.errors import UserError
from bm25aug.model.config import TARGETS



@dataclass
class QueryBatch:
    """Queries as the encoder reads them (ids and mask, B x L) and as term occurrences."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    terms: list[list[str]]  # each query's occurrences, in order
    spans: list[list[list[int]]]  # per occurrence, the window positions whose w it averages ([]: weight 1)
    has_tokens: np.ndarray  # a(q) is used only for queries with a known WordPiece token in the window


class Target:
    """Shared by both targets; subclasses say what an occurrence is and where a(q) goes."""

    def __init__(self, tokenizer, config):
        """``config``: the model's ``AugmenterConfig`` (window, weight floor, augmentation gate)."""
        from bm25aug.tokenization import window_tokenizer

        self.tokenizer, self.config, self.max_length = tokenizer, config, config.max_query_length
        self.window = window_tokenizer(tokenizer, self.max_length)  # what the encoder reads of a query
        self.floor = np.float32(config.weight_floor)
        self.special = np.zeros(len(tokenizer), dtype=bool)
        self.special[tokenizer.all_special_ids] = True
        self.live = np.flatnonzero(~self.special)  # subclasses narrow it to what reaches their index

    def encode_window(self, queries: list[str]) -> tuple[np.ndarray, np.ndarray, list]:
        """What the encoder reads of each query: ids and mask (B x L, padded to the longest), and
        the Rust encodings (their ``offsets``)."""
        encodings = self.window.encode_batch(queries)
        return (np.array([e.ids for e in encodings], np.int64),
                np.array([e.attention_mask for e in encodings], np.int64), encodings)

    @cached_property
    def feedback_window(self):
        """What a learned-feedback model reads of its feedback: ``max_query_length`` tokens."""
        from bm25aug.tokenization import window_tokenizer

        return window_tokenizer(self.tokenizer, self.max_length, pad=False)

    def read(self, ids: np.ndarray, mask: np.ndarray, feedback: list[str] | None) -> tuple[np.ndarray, np.ndarray]:
        """The encoder's input: the query window, followed by its ``feedback`` for a model that
        reads feedback (``with_feedback``; it cannot do without), the window alone for any other
        (any feedback given is ignored)."""
        if not self.config.reads_feedback:
            return ids, mask
        if feedback is None:
            raise UserError(f"this model reads BM25 feedback with each query (feedback_terms "
                            f"{self.config.feedback_terms}), which needs the index; fix: search through "
                            f"AugmentedSearcher (or bm25aug search/eval/export, which do), or encode through "
                            f"bm25aug.search.feedback.reading_feedback(model, BM25Searcher(index))")
        return self.with_feedback(ids, mask, feedback)

    def with_feedback(self, ids: np.ndarray, mask: np.ndarray, feedback: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``[CLS] query [SEP] feedback [SEP]`` per row (a row with no feedback stays the query
        alone), padded to the longest. The query keeps its positions, so its occurrences' spans
        hold; the feedback gets ``max_query_length`` tokens. The model takes everything after the
        first [SEP] for feedback, so a "[SEP]" typed inside a query is read as [UNK] (both special:
        no weight, no term)."""
        if len(feedback) != len(ids):
            raise UserError(f"{len(feedback)} feedback texts for {len(ids)} queries; fix: pass one per query")
        sep, unk = self.tokenizer.sep_token_id, self.tokenizer.unk_token_id
        rows = []
        for i, extra in enumerate(self.feedback_window.encode_batch(list(feedback), add_special_tokens=False)):
            query = ids[i, :int(mask[i].sum())].tolist()
            query = [unk if t == sep else t for t in query[:-1]] + query[-1:]  # it ends in its own [SEP]
            rows.append(query + extra.ids + [sep] if extra.ids else query)
        width = max(map(len, rows))
        out = np.full((len(rows), width), self.tokenizer.pad_token_id, np.int64)
        out_mask = np.zeros((len(rows), width), np.int64)
        for i, row in enumerate(rows):
            out[i, :len(row)], out_mask[i, :len(row)] = row, 1
        return out, out_mask

    def batch(self, queries: list[str], feedback: list[str] | None = None) -> QueryBatch:
        """``feedback``: per query, the text a learned-feedback model reads after it (``read``)."""
        ids, mask, encodings = self.encode_window(queries)
        real = (mask > 0) & ~self.special[ids]
        terms, spans = [], []
        for i, query in enumerate(queries):
            t, s = self.occurrences(query, np.array(encodings[i].offsets, np.int64), real[i])
            terms.append(t)
            spans.append(s)
        ids, mask = self.read(ids, mask, feedback)
        return QueryBatch(ids, mask, terms, spans, real.any(axis=1))

    def occurrences(self, query: str, offsets: np.ndarray, real: np.ndarray) -> tuple[list[str], list[list[int]]]:
        raise NotImplementedError

    def live_part(self, a):
        """a(q) over the vocabulary (... x V, numpy or torch) on the live entries only (... x len(live))."""
        if isinstance(a, torch.Tensor):
            return a[..., torch.from_numpy(self.live).to(a.device)]
        return a[..., self.live]

    def added(self, a: np.ndarray) -> dict[str, np.float32]:
        """One query's a(q) (live entries) as ``{term: weight}`` in this target's terms, zeros dropped."""
        raise NotImplementedError

    def order(self, term: str):
        """Sort key of a term in a term list (wp: vocabulary id, as the index's term order)."""
        return term

    def use_augmentation(self, batch: QueryBatch, a: np.ndarray) -> np.ndarray:
        """Per query, whether a(q) (B x live entries) is used: the query has a known token, and
        a(q) has at most ``aug_gate`` non-zero entries (0: no gate). A query for which the model proposes far
        more terms than for any training query is one it does not know; it keeps its
        reweighting and gets no added terms. A model without a(q) (``use_augmentation`` off, a ≡ 0)
        uses it for none, with no pass over its zeros."""
        if not self.config.use_augmentation:
            return np.zeros(len(batch.terms), bool)
        keep = batch.has_tokens.copy()
        if self.config.aug_gate:
            keep &= self.gate_counts(a) <= self.config.aug_gate
        return keep

    def gated(self, batch: QueryBatch, a: torch.Tensor) -> torch.Tensor:
        """a(q) over the vocabulary (B x V, torch, as training scores it) zeroed for the queries
        ``use_augmentation`` drops, so that torch scores what search sends."""
        use_a = self.use_augmentation(batch, self.live_part(a.detach()).cpu().numpy())
        return a * torch.as_tensor(use_a, device=a.device).unsqueeze(1)

    def gate_counts(self, a: np.ndarray) -> np.ndarray:
        """What the gate counts per query (and ``calibrate_gate`` takes a quantile of): the
        non-zero entries of a(q) on the live entries (B x len(live))."""
        return np.count_nonzero(a > 0, axis=1)

    # ------------------------------------------------------------------------------ search side
    def term_lists(self, batch: QueryBatch, w: np.ndarray, a: np.ndarray | None) -> list[dict[str, float]]:
        """``{term: boost}`` per query, boosts > 0 only, in float32 as the torch path computes them.
        ``a``: a(q) on the live entries (``live_part``), as the ONNX graph outputs it; None for a
        model without a(q), whose term lists are its reweighted query terms alone."""
        one = np.float32(1)
        use_a = self.use_augmentation(batch, a)
        result = []
        for i in range(len(batch.terms)):
            weights: dict[str, np.float32] = {}
            row = w[i]
            for term, span in zip(batch.terms[i], batch.spans[i]):
                occ = max(span_mean(row, span), self.floor) if span else one
                weights[term] = weights.get(term, np.float32(0)) + occ
            boosts = weights
            if use_a[i]:
                added = self.added(a[i])
                boosts = {t: tw * (one + added.get(t, np.float32(0))) for t, tw in weights.items()}
                boosts.update((t, v) for t, v in added.items() if t not in weights)
            result.append({t: float(boosts[t]) for t in sorted(boosts, key=self.order) if boosts[t] > 0})
        return result

    # ---------------------------------------------------------------------------- training side
    def columns(self, bm25) -> "ColumnMap":
        """How a(q) reaches the columns of a ``TorchBM25`` over this target's index."""
        raise NotImplementedError

    def boosts(self, batch: QueryBatch, w: torch.Tensor, a: torch.Tensor, cmap: "ColumnMap") -> torch.Tensor:
        """``w ⊙ (bow + a)`` over ``cmap``'s index columns (B x T), differentiable in w and a."""
        n, width = len(batch.terms), cmap.width
        flat_index, occ_of, pos, coef, outside = [], [], [], [], []
        for i, (terms, spans) in enumerate(zip(batch.terms, batch.spans)):
            for term, span in zip(terms, spans):
                col = cmap.columns.get(term, -1)
                if col < 0:
                    continue  # a term the index lacks matches nothing
                o = len(flat_index)
                flat_index.append(i * width + col)
                outside.append(not span)
                for p in span:
                    occ_of.append(o)
                    pos.append(i * w.shape[1] + p)
                    coef.append(1.0 / len(span))
        dev, dtype = w.device, w.dtype
        occ = torch.zeros(len(outside), dtype=dtype, device=dev).index_add(
            0, torch.tensor(occ_of, dtype=torch.long, device=dev),
            w.reshape(-1)[torch.tensor(pos, dtype=torch.long, device=dev)] * torch.tensor(coef, dtype=dtype, device=dev))
        occ = torch.where(torch.tensor(outside, device=dev), torch.ones_like(occ), occ.clamp(min=float(self.floor)))
        where = torch.tensor(flat_index, dtype=torch.long, device=dev)
        term_w = torch.zeros(n * width, dtype=dtype, device=dev).index_add(0, where, occ).view(n, width)
        bow = torch.zeros(n * width, dtype=dtype, device=dev).index_add(0, where, torch.ones_like(occ)).view(n, width)
        a_cols = cmap.project(self.gated(batch, a))
        return torch.where(bow > 0, term_w * (1 + a_cols), a_cols)


def span_mean(row: np.ndarray, span: list[int]) -> np.float32:
    """``row[span].mean(dtype=float32)``, bit for bit, without numpy's per-call overhead for the
    short spans of a query's words (numpy sums fewer than 8 values one after the other, in
    float32, then divides by the count: the same steps)."""
    if len(span) >= 8:
        return row[span].mean(dtype=np.float32)
    total = row[span[0]]
    for p in span[1:]:
        total = total + row[p]
    return total / np.float32(len(span))


@dataclass
class ColumnMap:
    """An index's term columns (term → column) and the vocabulary → column map of a(q)."""

    columns: dict[str, int]
    width: int
    matrix: torch.Tensor | None  # sparse, columns x vocabulary; None: a is already in columns (wp)

    def project(self, a: torch.Tensor) -> torch.Tensor:
        """Vocabulary → columns (B x V → B x T): each term gets the sum of its entries."""
        return a if self.matrix is None else torch.sparse.mm(self.matrix.to(a.device), a.t()).t()

    def pull(self, x: torch.Tensor) -> torch.Tensor:
        """Columns → vocabulary (B x T → B x V): each entry gets the value of the term it reaches (0: none)."""
        return x if self.matrix is None else torch.sparse.mm(self.matrix.t().to(x.device), x.t()).t()

    def vocab_df(self, df: torch.Tensor) -> torch.Tensor:
        """Document frequency seen by each vocabulary entry through the map (0: it reaches no term)."""
        return self.pull(df.unsqueeze(0)).squeeze(0)


class WordPieceTarget(Target):
    def __init__(self, tokenizer, config):
        super().__init__(tokenizer, config)
        self.vocab = tokenizer.get_vocab()
        self.live_tokens = tokenizer.convert_ids_to_tokens(self.live.tolist())

    def occurrences(self, query, offsets, real):
        from bm25aug.tokenization import note_unknown, untruncated

        tokens = untruncated(self.tokenizer).encode(query, add_special_tokens=False).tokens
        note_unknown(self.tokenizer, tokens, query)
        # The window holds the first tokens of the query: [CLS] t0 t1 ... [SEP] (offsets (0, 0) on
        # [CLS], [SEP] and padding only).
        window = int(np.count_nonzero(offsets[:, 1] > offsets[:, 0]))
        terms, spans = [], []
        for j, token in enumerate(tokens):
            if self.special[self.vocab[token]]:
                continue
            terms.append(token)
            spans.append([j + 1] if j < window else [])
        return terms, spans

    def added(self, a):
        ids = np.flatnonzero(a > 0)
        return dict(zip((self.live_tokens[i] for i in ids.tolist()), a[ids]))

    def order(self, term):
        return self.vocab[term]

    def columns(self, bm25) -> ColumnMap:
        if bm25.columns != self.vocab:
            raise UserError("a wp target trains on a TorchBM25 over the vocabulary; fix: build it with the tokenizer's vocab")
        return ColumnMap(bm25.columns, len(self.vocab), None)


class FlatTarget(Target):
    def __init__(self, tokenizer, config):
        from bm25aug.lucene.analysis import flat_map

        super().__init__(tokenizer, config)
        self.map = flat_map(tokenizer)
        self.term_of = np.full(self.map.vocab_size, -1, np.int64)  # vocabulary id -> flat term id (-1: none)
        self.term_of[self.map.vocab_ids] = self.map.term_ids
        self.live = np.flatnonzero(self.term_of >= 0)  # ## pieces, stopwords and specials reach nothing
        self.live_terms = self.term_of[self.live]

    def occurrences(self, query, offsets, real):
        from bm25aug.lucene.analysis import cached_offsets

        positions = np.flatnonzero(real)
        tokens = list(zip(positions.tolist(), offsets[positions, 0].tolist(), offsets[positions, 1].tolist()))
        terms, spans = [], []
        for term, start, end in cached_offsets(query):
            terms.append(term)
            spans.append([p for p, s, e in tokens if s < end and e > start])  # the tokens overlapping the word
        return terms, spans

    def added(self, a):
        # Only a(q)'s few non-zero entries are read: each sums into its flat term in vocabulary
        # order, in float32, the sum the map's 0/1 matrix would give (a test checks).
        ids = np.flatnonzero(a > 0)
        if not ids.size:
            return {}
        terms, slot = np.unique(self.live_terms[ids], return_inverse=True)
        sums = np.zeros(len(terms), np.float32)
        np.add.at(sums, slot, a[ids].astype(np.float32))
        return dict(zip((self.map.terms[i] for i in terms.tolist()), sums))

    def columns(self, bm25) -> ColumnMap:
        m = self.map.matrix(bm25.columns).T.tocoo()
        idx = torch.from_numpy(np.vstack([m.row, m.col]).astype(np.int64))
        matrix = torch.sparse_coo_tensor(idx, torch.from_numpy(m.data), m.shape, check_invariants=False).coalesce()
        return ColumnMap(bm25.columns, len(bm25.columns), matrix)


def make_target(tokenizer, config) -> Target:
    """The target named by ``config.target`` (an ``AugmenterConfig``)."""
    if config.target not in TARGETS:
        raise UserError(f"unknown target {config.target!r}; fix: use one of {', '.join(TARGETS)}")
    return (WordPieceTarget if config.target == "wp" else FlatTarget)(tokenizer, config)
