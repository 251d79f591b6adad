"""Lucene's English analyzer (Pyserini's "flat") from Python, and the WordPiece → flat term map.

The flat target needs two things from the analyzer that a flat index was built with:

* a query's terms with their character offsets, so that each flat term can take the weight w of
  the WordPiece tokens of the word(s) it came from (``analyze_with_offsets``, one JVM call chain
  per text, the same token stream Pyserini's ``BagOfWordsQueryGenerator`` counts; search reads it
  through ``cached_offsets``, which calls Java once for the whitespace-separated chunks not seen before);
* a fixed sparse map from the 30,522-entry WordPiece vocabulary to flat terms, through which a(q)
  reaches the flat index (``flat_map``). Each whole-word entry is analyzed alone; stopwords,
  ``##`` pieces, ``[unused]``/special entries and entries that analyze to more than one term map
  to nothing; entries that stem to the same term add up. It is built once per (vocabulary,
  analyzer) and cached, so a query never calls Java for it.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from bm25aug.io import CACHE_ROOT, atomic_write_text, derived_ok, record_derived, source_key
from bm25aug.lucene.jvm import JNI_LOCK, anserini_jar, jclass
from bm25aug.bm25_defaults import FIELD
from bm25aug.lucene.opening import java
from bm25aug.tokenization import vocab_hash

ANALYZER = "anserini-default-english"  # IndexCollection.DEFAULT_ANALYZER: Porter stemmer, Lucene's stopwords
CACHE_DIR = CACHE_ROOT / "flat_map"
_ATTRIBUTES = "org.apache.lucene.analysis.tokenattributes"
_BRACKETED = re.compile(r"^\[.*\]$")


def analyze_with_offsets(text: str) -> list[tuple[str, int, int]]:
    """``(term, start, end)`` of every token the English analyzer emits for ``text``, in order."""
    j = java()  # starts the JVM with Anserini's classpath, which importing jnius first would not
    from jnius import cast

    with JNI_LOCK:
        stream = j.english.tokenStream(FIELD, text)
        term = cast(f"{_ATTRIBUTES}.CharTermAttribute", stream.addAttribute(_attribute("CharTermAttribute")))
        offset = cast(f"{_ATTRIBUTES}.OffsetAttribute", stream.addAttribute(_attribute("OffsetAttribute")))
        out = []
        try:
            stream.reset()
            while stream.incrementToken():
                out.append((term.toString(), offset.startOffset(), offset.endOffset()))
            stream.end()
        finally:
            stream.close()
    return _code_point_offsets(text, out)


def _code_point_offsets(text: str, tokens: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Java counts offsets in UTF-16 units, Python (and the WordPiece tokenizer) in code points;
    they differ after any character outside the Basic Multilingual Plane (emoji, for one)."""
    if text.isascii() or max(text) < "\U00010000":
        return tokens
    to_python = np.cumsum([0] + [2 if ord(c) >= 0x10000 else 1 for c in text])
    index = {int(u): i for i, u in enumerate(to_python)}
    return [(t, index.get(s, s), index.get(e, e)) for t, s, e in tokens]


@lru_cache(maxsize=None)
def _attribute(name: str):
    return jclass("java.lang.Class").forName(f"{_ATTRIBUTES}.{name}")


def analyze(text: str) -> list[str]:
    """The English analyzer's terms of ``text`` (repeats kept), as a flat index stores them."""
    with JNI_LOCK:
        terms = jclass("io.anserini.analysis.AnalyzerUtils").analyze(java().english, text)
        return [terms.get(i) for i in range(terms.size())]


# Whitespace-separated chunks whose analysis is kept, and the longest kept: words repeat, and a
# server's clients cannot fill the cache with long junk (a longer chunk is analyzed each time).
CHUNK_CACHE, CHUNK_CHARS = 1 << 18, 64
_chunks: dict[str, tuple[str, ...]] = {}


def analyze_chunks(text: str) -> list[str]:
    """``analyze(text)``, one whitespace-separated chunk at a time, each chunk's terms kept in a
    cache: Java is called only for a chunk not seen before. The terms are the same: the English
    analyzer's tokenizer (UAX#29 word breaks) never joins across whitespace and every filter after
    it reads one token at a time (``tests/test_static.py`` checks it on real queries)."""
    out: list[str] = []
    for chunk in text.split():
        out.extend(chunk_terms(chunk))
    return out


def chunk_terms(chunk: str) -> tuple[str, ...]:
    """The analyzer's terms of one whitespace-free chunk, from the cache when it holds them."""
    return _cached(_chunks, chunk, analyze)


def _cached(cache: dict, chunk: str, make) -> tuple:
    """``make(chunk)`` as a tuple, from ``cache`` when it holds it; kept there when the chunk has at
    most ``CHUNK_CHARS`` characters (a full cache, ``CHUNK_CACHE`` chunks, is emptied first)."""
    value = cache.get(chunk)
    if value is None:
        value = tuple(make(chunk))
        if len(chunk) <= CHUNK_CHARS:
            if len(cache) >= CHUNK_CACHE:
                cache.clear()
            cache[chunk] = value
    return value


_offset_chunks: dict[str, tuple[tuple[str, int, int], ...]] = {}
_CHUNK = re.compile(r"\S+")


def cached_offsets(text: str) -> list[tuple[str, int, int]]:
    """``analyze_with_offsets(text)``, one whitespace-separated chunk at a time, each chunk's
    terms and offsets (within the chunk) kept in a cache of ``CHUNK_CACHE`` chunks. The chunks not
    seen before are analyzed together, in one Java call (``_analyze_chunks``), so a new query costs
    one call, not one a word. As for ``analyze_chunks``, the analyzer never joins across
    whitespace; a text with any character outside ASCII is analyzed whole, so that no Unicode
    word-break rule can tell the two apart (``tests/test_student.py`` checks both, on real queries
    and on odd ones)."""
    if not text.isascii():
        return analyze_with_offsets(text)
    found = [(match.start(), match.group()) for match in _CHUNK.finditer(text)]
    known = {chunk: _offset_chunks.get(chunk) for _, chunk in found}  # one look each: another thread may clear it
    known.update(_analyze_chunks([chunk for chunk, terms in known.items() if terms is None]))
    out: list[tuple[str, int, int]] = []
    for at, chunk in found:
        out.extend((term, start + at, end + at) for term, start, end in known[chunk])
    return out


def _analyze_chunks(chunks: list[str]) -> dict[str, tuple[tuple[str, int, int], ...]]:
    """Each ASCII whitespace-free chunk's terms and offsets (within it), from one analysis of the
    chunks joined by spaces; the chunks of at most ``CHUNK_CHARS`` characters are kept in the cache."""
    unique = list(dict.fromkeys(chunks))
    if not unique:
        return {}
    starts, at = [], 0
    for chunk in unique:
        starts.append(at)
        at += len(chunk) + 1
    found: dict[str, list[tuple[str, int, int]]] = {chunk: [] for chunk in unique}
    for term, start, end in analyze_with_offsets(" ".join(unique)):
        i = bisect_right(starts, start) - 1  # the chunk the token starts in; it ends there too
        found[unique[i]].append((term, start - starts[i], end - starts[i]))
    out = {chunk: tuple(terms) for chunk, terms in found.items()}
    kept = {chunk: terms for chunk, terms in out.items() if len(chunk) <= CHUNK_CHARS}
    if len(_offset_chunks) + len(kept) > CHUNK_CACHE:
        _offset_chunks.clear()
    if len(kept) <= CHUNK_CACHE:  # a query cannot hold more (its length is bounded), but the cache never grows past it
        _offset_chunks.update(kept)
    return out


@dataclass(frozen=True)
class FlatMap:
    """WordPiece id → flat term: ``vocab_ids[i]`` maps to ``terms[term_ids[i]]``."""

    vocab_ids: np.ndarray
    term_ids: np.ndarray
    terms: list[str]
    vocab_size: int

    def matrix(self, columns: dict[str, int] | None = None) -> sp.csr_matrix:
        """The map as a sparse 0/1 matrix, vocabulary x terms. With ``columns`` (term → column, an
        index's own term list), terms the index lacks are dropped: they cannot match anything."""
        if columns is None:
            return sp.csr_matrix((np.ones(len(self.vocab_ids), np.float32), (self.vocab_ids, self.term_ids)),
                                 shape=(self.vocab_size, len(self.terms)))
        cols = np.asarray([columns.get(self.terms[t], -1) for t in self.term_ids], np.int64)
        keep = cols >= 0
        return sp.csr_matrix((np.ones(int(keep.sum()), np.float32), (self.vocab_ids[keep], cols[keep])),
                             shape=(self.vocab_size, len(columns)))


def flat_map(tokenizer) -> FlatMap:
    """The WordPiece → flat term map of ``tokenizer``'s vocabulary, from the cache or built (a few
    seconds of Lucene analysis)."""
    key = vocab_hash(tokenizer)
    cached = _loaded.get(key)
    if cached is not None:
        return cached
    path = CACHE_DIR / f"{key}.{ANALYZER}.json"
    source = source_key("flat_map", key, ANALYZER, Path(anserini_jar()).name)
    if derived_ok(path, source):
        saved = json.loads(path.read_text())
        result = FlatMap(np.asarray(saved["vocab_ids"], np.int64), np.asarray(saved["term_ids"], np.int64),
                         saved["terms"], saved["vocab_size"])
    else:
        result = _build(tokenizer)
        atomic_write_text(path, json.dumps({"analyzer": ANALYZER, "vocab_size": result.vocab_size,
                                            "vocab_ids": result.vocab_ids.tolist(),
                                            "term_ids": result.term_ids.tolist(), "terms": result.terms}))
        record_derived(path, source)
    _loaded[key] = result
    return result


_loaded: dict[str, FlatMap] = {}


def _build(tokenizer) -> FlatMap:
    specials = set(tokenizer.all_special_tokens)
    vocab = tokenizer.get_vocab()
    entries = sorted((i, t) for t, i in vocab.items()
                     if not t.startswith("##") and t not in specials and not _BRACKETED.match(t))
    term_index: dict[str, int] = {}
    vocab_ids, term_ids = [], []
    with JNI_LOCK:  # re-entrant: taken once for the whole vocabulary, not per entry
        for i, entry in entries:
            terms = analyze(entry)
            if len(terms) == 1:
                vocab_ids.append(i)
                term_ids.append(term_index.setdefault(terms[0], len(term_index)))
    return FlatMap(np.asarray(vocab_ids, np.int64), np.asarray(term_ids, np.int64), list(term_index),
                   max(vocab.values()) + 1)
