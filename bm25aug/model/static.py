"""An inference-free query side: a learned weight and a learned expansion list per term, looked up.

As OpenSearch's inference-free sparse models and sentence-transformers' ``SparseStaticEmbedding``,
no encoder runs at query time. A query is its target's term occurrences (flat: the terms of
Lucene's English analysis, bm25-flat's own; wp: its WordPiece tokens), and the model is a table:

* ``w_t = max(relu(θ_t), weight_floor)`` for a term in the table, 1 (BM25's own weight) for any other;
* ``a(q)_u = relu(Σ_s A[s, u])`` over the query's distinct table terms s, each with a short list of
  candidate added terms u (``fit_table``: the terms a trained teacher adds for training queries that
  hold s, else the terms of their judged documents), zeroed at or below ``aug_threshold``.

Each term then gets what the contextual model's targets give it (``bm25aug.model.targets``):
``(Σ occurrence weights) · (1 + a_t)`` for a query term, ``a_u`` for an added one. With θ ≡ 1 and
A ≡ 0 it is plain BM25. Training scores the same boosts in torch (``column_boosts``), through torch
BM25 as the contextual model is trained; search computes them in numpy (``encode_batch``).

At query time a flat query costs a whitespace split and a dictionary lookup per word: each chunk's
analyzed terms come from a cache (``bm25aug.lucene.analysis.analyze_chunks``), so Java is called only
for a word not seen before. A folder holds ``bm25aug_config.json`` (``query_side: static``),
``static_table.json`` (the terms and expansion lists), ``model.safetensors`` (θ and A's values),
the tokenizer (wp queries are tokenized with it) and the card.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bm25aug.errors import UserError
from bm25aug.model.card import CARD_NAME, card_text
from bm25aug.model.config import CONFIG_NAME, AugmenterConfig, finite
from bm25aug.model.encoder import QueryEncoder

log = logging.getLogger(__name__)
TABLE_NAME = "static_table.json"
WEIGHTS_NAME = "model.safetensors"
START = 0.05  # every candidate expansion starts slightly on, so the ranking loss can price it


class StaticQueryModel(nn.Module, QueryEncoder):
    """The static query side: ``theta`` (one per table term) and ``values`` (one per expansion entry;
    entry e adds ``targets[e]`` for ``terms[owner[e]]``)."""

    light = True  # search reads two dicts (``_lookups``) under the GIL, each query as alone

    def __init__(self, config: AugmenterConfig, tokenizer, terms: list[str] | None = None,
                 expansions: dict[str, list[str]] | None = None):
        super().__init__()
        self.config, self.tokenizer = config, tokenizer
        self._set_table(terms or [], expansions or {})

    def _set_table(self, terms: list[str], expansions: dict[str, list[str]]) -> None:
        self.terms = list(terms)
        self.row = {t: i for i, t in enumerate(self.terms)}
        owner, targets = [], []
        for s in self.terms:
            for u in expansions.get(s, []):
                owner.append(self.row[s])
                targets.append(u)
        self.targets = targets
        self.owner = np.asarray(owner, np.int64)
        self.first = np.searchsorted(self.owner, np.arange(len(self.terms) + 1))  # entries of row r: first[r]:first[r+1]
        device = self.theta.device if hasattr(self, "theta") else torch.device("cpu")
        self.theta = nn.Parameter(torch.ones(len(self.terms), device=device))
        self.values = nn.Parameter(torch.full((len(targets),), START, device=device))
        self._columns: dict = {}  # per ColumnMap: entries' columns (_dest), columns in term order (_within_budget)

    @property
    def target(self):
        """The target whose term occurrences a query is read as (built once)."""
        from bm25aug.model.targets import make_target

        if getattr(self, "_target", None) is None:
            self._target = make_target(self.tokenizer, self.config)
        return self._target

    @classmethod
    def from_tokenizer(cls, encoder_name: str | None = None, **config) -> "StaticQueryModel":
        """A new static model with the WordPiece tokenizer of ``encoder_name`` (the packaged one by
        default; wp queries are read with it). Its table is empty until ``fit_table``."""
        from bm25aug.tokenization import load_tokenizer, portable_name, tokenizer_name, vocab_hash

        tok = load_tokenizer(encoder_name)
        return cls(AugmenterConfig(encoder=portable_name(tokenizer_name(tok)), vocab_hash=vocab_hash(tok),
                                   query_side="static", **config), tok)

    # ------------------------------------------------------------------------------ the table
    def fit_table(self, queries: list[list[str]], added: list[dict[str, float]], size: int) -> None:
        """The table from the training queries' term occurrences: every term they hold gets a
        weight, and the ``size`` candidates most often in ``added`` beside it (per query, the terms
        a teacher adds, or those of its judged documents, with a weight) an expansion entry."""
        terms = sorted({t for q in queries for t in q})
        scores: dict[str, Counter] = defaultdict(Counter)
        if size and self.config.use_augmentation:
            for occurrences, extra in zip(queries, added):
                own = set(occurrences)
                for u, weight in extra.items():
                    if u not in own:
                        for s in own:
                            scores[s][u] += weight
        expansions = {s: [u for u, _ in scores[s].most_common(size)] for s in terms if scores.get(s)}
        self._set_table(terms, expansions)
        log.info("static table: %d terms, %d expansion entries", len(terms), len(self.targets))

    # ------------------------------------------------------------------------------ training
    def column_boosts(self, terms: list[list[str]], cmap) -> tuple[torch.Tensor, torch.Tensor]:
        """Boosts over ``cmap``'s index columns (B x T) for queries given as term occurrences, and
        a(q) on those columns (for the L1 penalty), differentiable in ``theta`` and ``values``."""
        n, width, dev = len(terms), cmap.width, self.theta.device
        flat, rows = [], []
        exp_at, exp_entry = [], []
        dest = self._dest(cmap)
        for i, occurrences in enumerate(terms):
            for t in occurrences:
                col = cmap.columns.get(t, -1)
                if col >= 0:
                    flat.append(i * width + col)
                    rows.append(self.row.get(t, -1))
            for s in dict.fromkeys(occurrences):
                r = self.row.get(s)
                if r is not None:
                    entries = np.arange(self.first[r], self.first[r + 1])
                    entries = entries[dest[entries] >= 0]
                    exp_entry.extend(entries.tolist())
                    exp_at.extend((i * width + dest[entries]).tolist())
        rows_t = torch.tensor(rows, dtype=torch.long, device=dev)
        known = rows_t >= 0
        w = torch.ones(len(rows), device=dev)
        if self.config.use_weights and len(rows):
            learned = torch.relu(self.theta[rows_t.clamp(min=0)]).clamp(min=float(self.config.weight_floor))
            w = torch.where(known, learned, w)
        where = torch.tensor(flat, dtype=torch.long, device=dev)
        term_w = torch.zeros(n * width, device=dev).index_add(0, where, w).view(n, width)
        bow = torch.zeros(n * width, device=dev).index_add(0, where, torch.ones_like(w)).view(n, width)
        a = torch.zeros(n * width, device=dev)
        if self.config.use_augmentation and exp_entry:
            a = a.index_add(0, torch.tensor(exp_at, dtype=torch.long, device=dev),
                            self.values[torch.tensor(exp_entry, dtype=torch.long, device=dev)])
        a = torch.relu(a).view(n, width)
        if self.config.aug_threshold > 0:
            a = a * (a > self.config.aug_threshold)
        if self.config.added_budget:
            a = a * ((bow > 0) | self._within_budget(torch.where(bow > 0, torch.zeros_like(a), a), cmap))
        return torch.where(bow > 0, term_w * (1 + a), a), a

    def _within_budget(self, outside: torch.Tensor, cmap) -> torch.Tensor:
        """Per query (row), its ``added_budget`` heaviest positive entries of ``outside`` (added terms
        only), ties broken by term as search breaks them: a stable sort over the columns in term order."""
        key = ("order", id(cmap.columns))
        if key not in self._columns:
            by_term = sorted(cmap.columns.items())
            self._columns[key] = torch.tensor([c for _, c in by_term], dtype=torch.long)
        order = self._columns[key].to(outside.device)
        ranked = torch.sort(-outside[:, order], dim=1, stable=True).indices[:, :self.config.added_budget]
        keep = torch.zeros_like(outside, dtype=torch.bool)
        keep.scatter_(1, order[ranked], True)
        return keep & (outside > 0)

    def _dest(self, cmap) -> np.ndarray:
        """Per expansion entry, the column of its added term in ``cmap``'s index (-1: not there)."""
        key = id(cmap.columns)
        if key not in self._columns:
            self._columns[key] = np.asarray([cmap.columns.get(u, -1) for u in self.targets], np.int64)
        return self._columns[key]

    # ------------------------------------------------------------------------------ search
    def occurrences(self, text: str) -> list[str]:
        """A query's term occurrences as its target reads them (flat: cached chunk analysis)."""
        if self.config.target == "flat":
            from bm25aug.lucene.analysis import analyze_chunks

            return analyze_chunks(text)
        from bm25aug.tokenization import untruncated

        special = set(self.tokenizer.all_special_tokens)
        return [t for t in untruncated(self.tokenizer).encode(text, add_special_tokens=False).tokens if t not in special]

    @torch.no_grad()
    def encode_batch(self, texts: list[str], feedback: list[str] | None = None) -> list[dict[str, float]]:
        weights, expansions = self._lookups()
        return [self._term_list(self.occurrences(text), weights, expansions) for text in texts]

    def _lookups(self) -> tuple[dict[str, np.float32], dict[str, list[tuple[str, np.float32]]]]:
        """Per table term, its occurrence weight ``max(relu(θ), floor)`` and its expansion entries
        (float32, as torch computes them), made once per change of the parameters."""
        version = (self.theta._version, self.values._version, self.theta.data_ptr(), self.values.data_ptr())
        if getattr(self, "_lookup_version", None) != version:
            theta = self.theta.detach().float().cpu().numpy()
            values = self.values.detach().float().cpu().numpy()
            floor = np.float32(self.config.weight_floor)
            weights = {t: max(max(theta[r], np.float32(0)), floor) for r, t in enumerate(self.terms)} \
                if self.config.use_weights else {}
            expansions = {t: [(self.targets[e], values[e]) for e in range(self.first[r], self.first[r + 1])]
                          for r, t in enumerate(self.terms) if self.first[r + 1] > self.first[r]} \
                if self.config.use_augmentation else {}
            self._lookup, self._lookup_version = (weights, expansions), version
        return self._lookup

    def _term_list(self, occurrences: list[str], weights: dict, expansions: dict) -> dict[str, float]:
        """``{term: boost}`` of one query, in float32 as ``column_boosts`` computes it."""
        one, zero = np.float32(1), np.float32(0)
        terms: dict[str, np.float32] = {}
        for t in occurrences:
            terms[t] = terms.get(t, zero) + weights.get(t, one)
        added: dict[str, np.float32] = {}
        for s in terms:
            for u, v in expansions.get(s, ()):
                added[u] = added.get(u, zero) + v
        threshold = np.float32(self.config.aug_threshold)
        added = {u: v for u, v in added.items() if v > zero and v > threshold}
        if self.config.added_budget:  # the heaviest terms not in the query (ties: by term), as column_boosts keeps
            outside = sorted((u for u in added if u not in terms), key=lambda u: (-added[u], u))
            kept = set(outside[:self.config.added_budget])
            added = {u: v for u, v in added.items() if u in terms or u in kept}
        boosts = {t: tw * (one + added.get(t, zero)) for t, tw in terms.items()}
        boosts.update((u, v) for u, v in added.items() if u not in terms)
        ordered = sorted(boosts) if self.config.target == "flat" else sorted(boosts, key=self.target.order)
        return {t: float(boosts[t]) for t in ordered if boosts[t] > 0}

    # ------------------------------------------------------------------------------ persistence
    def save_pretrained(self, path: str | Path) -> None:
        from bm25aug.io import atomic_dir

        with atomic_dir(path, CONFIG_NAME, what="a bm25aug checkpoint",
                        fix="pass a new or empty directory, or one written by save_pretrained") as tmp:
            self.write_files(tmp)

    def write_files(self, folder: Path) -> None:
        from safetensors.torch import save

        self.tokenizer.save_pretrained(folder)
        (folder / CONFIG_NAME).write_text(json.dumps(asdict(self.config), indent=2))
        expansions = {s: self.targets[self.first[r]:self.first[r + 1]] for r, s in enumerate(self.terms)
                      if self.first[r + 1] > self.first[r]}
        (folder / TABLE_NAME).write_text(json.dumps({"terms": self.terms, "expansions": expansions}))
        (folder / CARD_NAME).write_text(card_text(self.config, 0))
        (folder / WEIGHTS_NAME).write_bytes(save({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}))

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "StaticQueryModel":
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        from transformers import AutoTokenizer

        path = Path(path)
        config = AugmenterConfig.load(path)
        try:
            table = json.loads((path / TABLE_NAME).read_text(encoding="utf-8"))
            model = cls(config, AutoTokenizer.from_pretrained(path, use_fast=True), table["terms"], table["expansions"])
            model.load_state_dict(finite(load_file(str(path / WEIGHTS_NAME)), path / WEIGHTS_NAME))
        except (SafetensorError, json.JSONDecodeError, KeyError, TypeError, RuntimeError, OSError, ValueError) as e:
            raise UserError(f"checkpoint {path} is corrupt or incomplete ({type(e).__name__}: {str(e)[:120]}); "
                            f"fix: restore the folder from where it came, or train a new model "
                            f"(`python train.py --dataset NAME --query-side static`)") from None
        model.path = path
        return model.eval()
