"""What kind of index a folder holds, told by its own files, fields and terms, so that nothing is
searched as what it is not.

bm25aug searches three flavors (``bm25aug.lucene.index.FLAVORS``): ``flat`` (one English-analyzed
``contents`` field), ``multifield`` (Pyserini's BEIR layout: ``contents`` and ``title``, both
English-analyzed) and ``wp`` (WordPiece tokens in ``contents``). It recognises the stock kinds it
does not search, to refuse them by name: Anserini's impact indexes (SPLADE, uniCOIL: learned
weights stored as term frequencies, every document of length 1), dense ones (a Lucene vector
field, or Pyserini's Faiss folders) and inverted indexes with other fields than these.
"""

from __future__ import annotations

import logging
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.lucene.jvm import JNI_LOCK, jclass
from bm25aug.bm25_defaults import FIELD, TITLE_FIELD
from bm25aug.lucene.docids import ID_FIELD
from bm25aug.lucene.opening import open_reader
from bm25aug.tokenization import lowercases

log = logging.getLogger(__name__)
_NORMS_SAMPLED = 64  # documents whose length norm is read to tell an impact index
_WARNED_UNKNOWN: set[str] = set()
_FIX = "fix: pass a Lucene inverted index: Pyserini's flat or multifield ones, or `bm25aug index --dataset NAME`"


def not_lucene(index_dir: str | Path) -> UserError | None:
    """The error for a folder that is no Lucene index (a Faiss one named as such), else None."""
    path = Path(index_dir)
    if path.is_dir() and any(path.glob("segments_*")):
        return None
    if (path / "index").is_file() and (path / "docid").is_file():
        return UserError(f"{index_dir} is a Faiss dense index (Pyserini's `index` and `docid` files), not a Lucene "
                         f"inverted index; fix: search it with Pyserini's FaissSearcher, or pass a flat or "
                         f"multifield index (`--method dense` encodes the corpus of a flat index itself)")
    return UserError(f"{index_dir} is not a Lucene index (no segments_* file); "
                     f"fix: build it with `bm25aug index --dataset NAME --flavor flat|wp|multifield`")


def probe_index(index_dir: Path) -> dict[str, bool]:
    """What an index's own fields and terms say: whether it is multifield (a ``title`` field with
    terms), WordPiece continuation pieces (``##``), stopwords (the English analyzer drops them),
    upper-case terms (a lowercasing analyzer has none). A dense, impact or otherwise unknown index
    is refused here, by name."""
    if (error := not_lucene(index_dir)) is not None:
        raise error
    reader = open_reader(index_dir)  # first: it starts the JVM, which importing jnius would not do right
    from jnius import cast

    try:
        with JNI_LOCK:
            ireader = cast("org.apache.lucene.index.IndexReader", reader)
            infos = jclass("org.apache.lucene.index.FieldInfos").getMergedFieldInfos(ireader)
            dense, indexed = [], []
            it = infos.iterator()
            while it.hasNext():
                info = it.next()
                if info.getVectorDimension() > 0:
                    dense.append(f"'{info.name}', {info.getVectorDimension()} dimensions")
                elif info.getIndexOptions().toString() != "NONE" and info.name != ID_FIELD:
                    indexed.append(str(info.name))
            if dense:
                raise UserError(f"{index_dir} is a dense vector index ({'; '.join(dense)}), not an inverted one; fix: "
                                f"search it with Pyserini's dense searchers, or pass a flat or multifield index")
            multi_terms = jclass("org.apache.lucene.index.MultiTerms")
            terms = multi_terms.getTerms(ireader, FIELD)
            if terms is None:
                raise UserError(f"{index_dir} has no '{FIELD}' field to search; {_FIX}")
            if unknown := sorted(set(indexed) - {FIELD, TITLE_FIELD}):
                raise UserError(f"{index_dir} indexes fields bm25aug does not search ({', '.join(unknown)}), beside "
                                f"'{FIELD}'; searching '{FIELD}' alone would leave them out; fix: search it with "
                                f"Pyserini (LuceneSearcher.search(..., fields=...)), or pass a flat or multifield index")
            _refuse_impact(index_dir, ireader, terms)
            title = multi_terms.getTerms(ireader, TITLE_FIELD)
            BytesRef, Term = jclass("org.apache.lucene.util.BytesRef"), jclass("org.apache.lucene.index.Term")

            def first_from(prefix: str) -> str:
                it = terms.iterator()
                return "" if it.seekCeil(BytesRef(prefix.encode())).toString() == "END" else str(it.term().utf8ToString())

            return {"multifield": title is not None and title.size() != 0,
                    "pieces": first_from("##").startswith("##"),
                    # In most documents, not in a few: a flat index stems "OFS" to "of" in two SciFact documents.
                    "stopwords": max(reader.docFreq(Term(FIELD, w)) for w in ("the", "and", "of"))
                                 > 0.05 * reader.maxDoc(),
                    "upper": "A" <= first_from("A")[:1] <= "Z"}
    finally:
        with JNI_LOCK:
            reader.close()


def _refuse_impact(index_dir: Path, ireader, terms) -> None:
    """Anserini's impact indexes (``-impact``) store a learned weight as each term's frequency and
    give every document length 1; BM25 would read those weights as counts. (Call under the lock.)"""
    norms = jclass("org.apache.lucene.index.MultiDocValues").getNormValues(ireader, FIELD)
    lengths = []
    while norms is not None and len(lengths) < _NORMS_SAMPLED and norms.nextDoc() != 2147483647:  # NO_MORE_DOCS
        lengths.append(int(norms.longValue()))
    occurrences = int(terms.getSumTotalTermFreq())
    mean = occurrences / max(int(terms.getDocCount()), 1)
    per_posting = occurrences / max(int(terms.getSumDocFreq()), 1)  # natural text: 1 to 1.6 (a weight: tens)
    if per_posting >= 2 and (norms is None or all(n == 1 for n in lengths)):
        raise UserError(f"{index_dir} is an impact index (its documents all have length 1 while holding {mean:.0f} "
                        f"term occurrences on average: learned weights stored as frequencies, as Anserini's -impact "
                        f"writes for SPLADE or uniCOIL), which BM25 would score as counts; fix: search it with "
                        f"Pyserini's LuceneImpactSearcher, or pass a flat, multifield or wp index")


def check_flavor(index_dir: Path, flavor: str | None, tokenizer, stock: bool) -> str:
    """The flavor to search ``index_dir`` as: ``flavor`` (None, for a stock index: what its fields
    say, else ``wp`` with a tokenizer, else ``flat``), checked against the index's own fields and
    terms. A multifield index is never searched as one field, nor a one-field index as multifield.
    ``##`` pieces are proof of a wp index; no stopwords and no pieces only suggest a flat one (a
    tiny wp corpus may have neither), so for an index with bm25aug's meta.json that is a warning."""
    probe = probe_index(index_dir)
    if flavor is None:
        flavor = "multifield" if probe["multifield"] else "wp" if tokenizer is not None else "flat"
    if probe["multifield"] and flavor != "multifield":
        raise UserError(f"{index_dir} is a multifield index (a '{TITLE_FIELD}' field beside '{FIELD}'); searching it "
                        f"as {flavor} would leave out its titles; fix: search it as multifield (--method "
                        f"bm25-multifield, a flat-target model, or BM25Searcher without flavor), or pass a {flavor} index")
    if flavor == "multifield" and not probe["multifield"]:
        raise UserError(f"{index_dir} has no '{TITLE_FIELD}' field with terms, so it is not a multifield index; fix: "
                        f"search it as flat (--method bm25-flat), or build one (`bm25aug index --flavor multifield`)")
    if flavor in ("flat", "multifield") and probe["pieces"]:
        raise UserError(f"{index_dir} holds WordPiece pieces (## terms), so it is a wp index, not {flavor}; fix: pass "
                        f"--tokenizer NAME (the tokenizer that built it), or use a flat model or index")
    if flavor == "wp" and not probe["pieces"] and not probe["stopwords"]:
        message = (f"{index_dir} has no WordPiece pieces and no stopwords, as Lucene's English analyzer (flat) "
                   f"writes")
        if stock:
            raise UserError(f"{message}; fix: search it as flat (drop --tokenizer), or use a flat-target model")
        log.warning("%s; its meta.json says wp", message)
    if tokenizer is not None and flavor == "wp" and probe["pieces"] and probe["upper"] == lowercases(tokenizer):
        case = "lowercases" if lowercases(tokenizer) else "keeps case"
        raise UserError(f"{index_dir} has {'upper-case' if probe['upper'] else 'no upper-case'} terms but the "
                        f"tokenizer {case}; fix: pass the tokenizer the index was built with")
    if stock and flavor != "wp" and probe["stopwords"] and str(index_dir) not in _WARNED_UNKNOWN:
        _WARNED_UNKNOWN.add(str(index_dir))
        log.warning("%s has stopwords, which Lucene's English analyzer drops; bm25aug cannot tell how it "
                    "was analyzed and searches it as %s", index_dir, flavor)
    return flavor
