"""``OpenSearchIndex``: a flat index on an OpenSearch cluster, searched as ``LuceneIndex`` searches
one in our process, so that ``BM25Searcher`` and ``AugmentedSearcher`` take either.

* **Queries.** A query is analyzed here, by the same Java analyzer as in-process search, into its
  terms with their counts; a model's query is its term list. Either is sent as a ``bool`` of
  ``term`` clauses with float32 boosts: on each shard the same ``BoostQuery(TermQuery)`` structure
  Lucene runs in our process, nothing parsed.
* **Statistics.** ``dfs_query_then_fetch`` by default: each query first gathers every shard's term
  and field statistics, so a term's BM25 weight is the whole index's, as on one machine. The URL
  option ``?stats=local`` skips that round trip (each shard then scores with its own statistics:
  faster, and rankings shift a little; fine when shards are large and documents spread at random).
* **The index opened.** Answers are used only from the index that was opened (``identity.Watch``):
  one deleted, made again or re-filled since is ``identity.IndexChanged``, at most ``RECHECK_S``
  after its deletion, for every call from then on.
* **No partial results.** ``allow_partial_search_results=false``, and every answer's ``_shards``
  is checked: a shard that failed is an error naming it, never fewer hits without a word. A search
  the cluster fails while it loses a node is sent again (``bm25aug.opensearch.retry``, the one
  policy), on another node of the URL when its own is gone (the transport's failover).
* **Clients.** Every request goes through one opensearch-py client: built for the URL, or the
  user's own, as it is (``from_client``: SigV4, API keys, certificates, sniffing). What a search
  sends is ``search_request(pairs, k)`` (``benchmarks/bench_cluster.py`` times it).
* **Ranking.** Scores are divided by OpenSearch's (1 + k1) (``schema.score_scale``), then ranked
  as Anserini ranks (ties by external id, 4 decimals, ``anserini_scores``), with ``TIE_MARGIN``
  extra hits asked for and deeper searches when a tie crosses the k-th place, as in-process,
  within the index's result window (``window``: a k past it is refused, never cut).
* **Hits.** ``TopK.lucene_ids`` are numbers this object gives each external id it has seen
  (``docids[top.lucene_ids]`` is the ids, as for a Lucene index).
* **Clause limit.** A term list (or query) with more terms than the cluster's
  ``indices.query.bool.max_clause_count`` is refused before it is sent, with the limit and the fix.
* **Document frequencies** are cached per term, at most ``DF_ENTRIES`` terms (``bm25aug.cache.LRU``):
  a flood of new words costs one ``_msearch`` per call and never more memory.
* **Which index.** One ``bm25aug index --to`` made, or one of the user's own named with ``?field=NAME``,
  searched read-only once its analyzer is shown to give the flat index's terms (``layout``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from bm25aug.cache import DF_ENTRIES, LRU
from bm25aug.errors import UserError
from bm25aug.limits import check
from bm25aug.backend import ANALYZED, TERMS
from bm25aug.bm25_defaults import B, FIELD, K1
from bm25aug.ranking import EMPTY, TopK, anserini_scores
from bm25aug.opensearch.answers import checked, error_kind, responses, shaped
from bm25aug.opensearch.client import Client, ClusterError, ClusterURL
from bm25aug.opensearch.identity import RECHECK_S, IndexChanged, Watch, clause_limit, identify  # noqa: F401
from bm25aug.opensearch.layout import open_layout
from bm25aug.opensearch.retry import retrying
from bm25aug.opensearch.window import after_tie, complete, deeper, depth, tie_past_window

_STATS = {"exact": "dfs_query_then_fetch", "local": "query_then_fetch"}


@dataclass(frozen=True)
class SearchRequest:
    """What a search sends: ``Client.request(method, path, body, params=params)``."""

    method: str
    path: str
    params: dict
    body: dict


class OpenSearchIndex:
    """A complete bm25aug index on a cluster (``url``: ``http://HOST:PORT[,...]/INDEX[?stats=local]``),
    or with ``&field=NAME`` (``?field=NAME``) an index of the user's own, read-only, with BM25's ``k1``
    and ``b`` the index scores with. ``client``: an ``opensearchpy.OpenSearch`` the user built, used as
    it is; ``url`` is then the index's name and options (``INDEX[?stats=local][&field=NAME]``)."""

    def __init__(self, url: str, k1: float = K1, b: float = B, fields: dict[str, float] | None = None,
                 df_entries: int = DF_ENTRIES, client=None):
        self.client = Client(ClusterURL.parse(url)) if client is None else Client.given(client, url)
        self.url = self.client.url
        self.path = str(self.url)  # how messages name the index (never the text given: no credentials)
        options = dict(self.url.options)
        stats, field = options.pop("stats", "exact"), options.pop("field", None)
        if stats not in _STATS or options or field == "":
            raise UserError(f"{self.path}: a cluster URL takes only the options stats=exact (default) or stats=local, "
                            f"and field=NAME (an index of your own, searched read-only); fix: drop the others")
        if fields:
            raise UserError(f"field weights {fields!r} were given for {self.path}, a flat index with one field; fix: "
                            f"drop them")
        self.search_type, self.fields = _STATS[stats], None
        name = self.url.index
        mapping, uuid, self.record, self.window = identify(self.client, name, self.path)
        self.layout = open_layout(self.client, name, self.url, mapping, self.record, field)
        self.check_bm25(k1, b)
        self.num_docs = shaped(self.path, f"GET /{name}/_count",
                               lambda: int(self.client.request("GET", f"/{name}/_count")["count"]))
        self.scale = shaped(self.path, f"a search of /{name}", lambda: self.layout.scale(self.client, name))
        self.meta = self.layout.meta(name, self.num_docs)
        self.clause_limit = shaped(self.path, "GET /_nodes/settings", lambda: clause_limit(self.client))
        self.watch = Watch(self.client, name, self.path, uuid, self.record)
        self.watch.check()  # what was read above was all of the index identified first
        self._ids: dict[str, int] = {}
        self._table = np.empty(1024, object)  # external id of each number given out, grown by doubling
        self._lock = threading.Lock()
        self._df = LRU(df_entries)  # document frequency of each term asked lately
        self._pools: dict[int, ThreadPoolExecutor] = {}

    @classmethod
    def from_client(cls, client, index: str, k1: float = K1, b: float = B,
                    df_entries: int = DF_ENTRIES) -> "OpenSearchIndex":
        """The index ``index`` (``NAME[?stats=local]``) through ``client``, an ``opensearchpy.OpenSearch``
        the user built and configured: its settings are never changed, and ``close`` leaves it open."""
        return cls(index, k1, b, df_entries=df_entries, client=client)

    def check_bm25(self, k1: float, b: float) -> None:
        """That ``k1`` and ``b`` are the ones the index scores with (on a cluster they are its own)."""
        self.layout.check_bm25(k1, b)

    def __str__(self) -> str:
        return self.path

    # ------------------------------------------------------------------------------- documents
    @property
    def docids(self) -> np.ndarray:
        """External id of each number a ``TopK`` of this index holds (a view; numbers only grow)."""
        with self._lock:
            return self._table[:len(self._ids)]

    def _numbers(self, ids: list[str]) -> np.ndarray:
        with self._lock:
            for docid in ids:
                if docid not in self._ids:
                    if len(self._ids) == len(self._table):
                        self._table = np.concatenate([self._table, np.empty(len(self._table), object)])
                    self._table[len(self._ids)] = docid
                    self._ids[docid] = len(self._ids)
            return np.fromiter((self._ids[d] for d in ids), np.int32, len(ids))

    def doc_freq(self, term: str, field: str = FIELD) -> int:
        return self.doc_freqs([term], field)[term]

    def doc_freqs(self, terms, field: str = FIELD) -> dict[str, int]:
        """Documents that hold each term (not analyzed). Those not among the ``df_entries`` terms
        asked lately (the cache) are asked in one ``_msearch`` (256 terms a request)."""
        found: dict[str, int] = {}
        for term in terms:
            if (df := self._df.get(term)) is not None:
                found[term] = df
        missing, field = sorted({t for t in terms if t not in found}), self.layout.field if field == FIELD else field
        header = {"index": self.url.index, "search_type": "query_then_fetch", "allow_partial_search_results": False}
        for at in range(0, len(missing), 256):  # one term query a search, counted, no hits fetched
            part = missing[at:at + 256]
            lines = [line for t in part for line in (header, {"size": 0, "track_total_hits": True,
                                                               "query": {"term": {field: t}}})]
            answer = retrying(lambda: self._ask("POST", "/_msearch", lines, ndjson=True))
            for term, response in zip(part, responses(answer, len(part), self.path)):
                if "error" in response:
                    raise UserError(f"{self.path}: counting the documents of {term!r} failed "
                                    f"({error_kind(response)}); fix: check the cluster's health")
                found[term] = df = shaped(self.path, "_msearch", lambda: int(
                    checked(response, self.path)["hits"]["total"]["value"]))
                self._df.put(term, df)
        return {t: found[t] for t in terms}

    def verify(self, dataset) -> None:
        """That this index holds ``dataset``'s very corpus, as ``bm25aug.lucene.index.verify_index``
        checks an index folder (``Layout.verify``)."""
        self.layout.verify(dataset, self)

    def _mget(self, ids: list[str]) -> list[str | None]:
        """Each document's stored contents (None: no such document)."""
        answer = self._ask("POST", f"/{self.url.index}/_mget", {"ids": list(ids)},
                           params={"_source": ",".join(self.layout.source)})
        return [self.layout.contents(d) for d in answer.get("docs", [])]

    def doc_numbers(self, ids: list[str]) -> np.ndarray:
        """This object's number of each external id the index holds (-1: none)."""
        ids = [i if isinstance(i, str) else "" for i in ids]
        found = self._mget(ids) if ids else []
        numbers = self._numbers([i for i, c in zip(ids, found) if c is not None])
        out, at = np.full(len(ids), -1, np.int64), iter(numbers.tolist())
        for n, contents in enumerate(found):
            if contents is not None:
                out[n] = next(at)
        return out

    def stored(self, numbers: list[int]) -> list[str | None]:
        """The documents of ``numbers`` as a flat index stores them raw: ``{"id", "contents"}`` JSON."""
        ids = self.docids[np.asarray(numbers, np.int64)].tolist()
        return [None if c is None else json.dumps({"id": i, "contents": c}, ensure_ascii=False)
                for i, c in zip(ids, self._mget(ids))]

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    # --------------------------------------------------------------------------------- queries
    def terms_element(self, terms: dict[str, float], fields: dict[str, float] | None = None) -> list | None:
        """A checked term list as ``(term, float32 boost)`` pairs, the zeros dropped; None: nothing
        to search. Past the cluster's clause limit: an error with the limit and the fix."""
        if fields:
            raise UserError(f"{self.path} is a flat index with one field; fix: drop the field weights")
        return self._pairs(terms, "the term list", f"send at most its {self.clause_limit} heaviest terms")

    def _pairs(self, terms: dict[str, float], what: str, fix: str) -> list | None:
        pairs = [(t, float(np.float32(w))) for t, w in terms.items() if w > 0]
        if len(pairs) > self.clause_limit:
            raise UserError(f"{what} has {len(pairs)} terms and the cluster {self.url.nodes} takes at most "
                            f"{self.clause_limit} (indices.query.bool.max_clause_count); fix: {fix}, or raise that "
                            f"setting in every node's opensearch.yml")
        return pairs or None

    def weighted_query(self, terms: dict[str, float], fields: dict[str, float] | None = None) -> list | None:
        return self.terms_element(terms, fields)

    def terms_kind(self, fields: dict[str, float] | None = None) -> str:
        return TERMS

    def analyzed_query(self, text: str) -> list | None:
        """Pyserini's default query: the English analyzer's terms (analyzed here, as in-process),
        boosted by count."""
        self.layout.check_texts([text])
        return self._analyzed(text)

    def _analyzed(self, text: str) -> list | None:
        from bm25aug.lucene.analysis import analyze

        return self._pairs({t: float(c) for t, c in Counter(analyze(text)).items()}, "the query",
                           f"use a shorter query, of at most {self.clause_limit} distinct words (stopwords aside)")

    def query(self, kind: str, item) -> list | None:
        return self.analyzed_query(item) if kind == ANALYZED else item

    # ---------------------------------------------------------------------------------- search
    def search_request(self, pairs: list, k: int) -> SearchRequest:
        """What a search of ``pairs`` (``terms_element``'s or ``analyzed_query``'s) for the top ``k``
        sends first: a ``bool`` of boosted ``term`` clauses, ``depth(k)`` hits, exact statistics
        (unless ``?stats=local``), no partial results, only what is read of the answer."""
        return self._request(self._body(pairs, self.depth(k)))

    def _request(self, body: dict) -> SearchRequest:
        params = {"search_type": self.search_type, "allow_partial_search_results": "false",
                  "filter_path": self.layout.keep}
        return SearchRequest("POST", f"/{self.url.index}/_search", params, body)

    def _body(self, pairs: list, n: int) -> dict:
        clauses = [{"term": {self.layout.field: {"value": t, "boost": w}}} for t, w in pairs]
        return {"size": n, **self.layout.fetch, "track_total_hits": False, "query": {"bool": {"should": clauses}}}

    def _search_once(self, body: dict) -> dict:
        request = self._request(body)
        return checked(retrying(lambda: self._ask(request.method, request.path, request.body, search=True,
                                                  params=request.params)), self.path)

    def _ask(self, method: str, path: str, body=None, search: bool = False, **options) -> dict:
        """A request about the index, its answer used only while the index is the one opened
        (``Watch``: ``IndexChanged`` otherwise, and once the cluster says it is gone; checked at
        once when a ``search`` found no hits: an index made again is empty until its ingest ends)."""
        self.watch.still()
        try:
            answer = self.client.request(method, path, body, **options)
        except ClusterError as e:
            # a 404 on a request about the index: it, or its shards, are gone (index_not_found_exception,
            # or a search_phase_execution_exception for a shard deleted between a search's two phases)
            if e.status == 404:
                self.watch.gone()
            raise
        each = answer.get("responses", [answer])
        if any(isinstance(r, dict) and (r.get("status") == 404 or error_kind(r) == "index_not_found_exception")
               for r in each):
            self.watch.gone()
        empty = search and any(not r.get("hits", {}).get("hits") for r in each if isinstance(r, dict))
        self.watch.after(time.monotonic(), empty)
        return answer

    def _hits(self, answer: dict) -> tuple[list[str], np.ndarray, list[float]]:
        """The hits' ids, their scores as Lucene's (float32) and as the cluster's (for ``search_after``)."""
        hits = answer.get("hits", {}).get("hits", [])  # filter_path leaves no "hits" when there are none
        raw = [h["_score"] for h in hits]
        return [self.layout.hit_id(h) for h in hits], np.asarray(raw, np.float32) / self.scale, raw

    def depth(self, k: int) -> int:
        """Hits to ask for (``window.depth``: a k past the result window is refused, never cut)."""
        return depth(k, self.num_docs, self.window, self.path, self.url.index)

    def _top(self, pairs: list, answer: dict, n: int, k: int) -> TopK:
        ids, scores, raw = self._hits(answer)
        while not complete(scores, n, k, self.num_docs, self.window):  # a tie crosses the k-th place
            n = deeper(n, self.num_docs, self.window)
            ids, scores, raw = self._hits(self._search_once(self._body(pairs, n)))
        if tie_past_window(scores, n, k, self.num_docs, self.window):
            body, above = after_tie(self._body(pairs, n), scores, raw, k)
            body["sort"] = [{"_score": "desc"}, {self.layout.sort_id: "asc"}]  # (ID_FIELD, or the user's _id)
            tied_ids, tied, _ = self._hits(self._search_once(body))
            ids, scores = [i for i, a in zip(ids, above) if a] + tied_ids, np.concatenate([scores[above], tied])
        order = np.lexsort((np.asarray(ids, dtype=object).astype(str), -scores))[:k] if ids else np.zeros(0, np.int64)
        return TopK(self._numbers([ids[i] for i in order]), anserini_scores(scores[order]))

    def search(self, query: list | None, k: int) -> TopK:
        """Top k of ``query``, a term list's pairs (``terms_element``, ``analyzed_query``), as
        ``LuceneIndex.search`` ranks them."""
        if query is None or not self.num_docs:
            check("k", k)
            return EMPTY
        n = self.depth(k)
        return self._top(query, self._search_once(self._body(query, n)), n, k)

    def search_many(self, items: list, k: int) -> list[TopK]:
        """Several queries' top k in one ``_msearch`` request."""
        n = self.depth(k)
        lines = []
        header = {"index": self.url.index, "search_type": self.search_type, "allow_partial_search_results": False}
        for pairs in items:
            lines += [header, self._body(pairs, n)]
        keep = {"filter_path": ",".join(f"responses.{part}" for part in self.layout.keep.split(","))}
        answer = retrying(lambda: self._ask("POST", "/_msearch", lines, search=True, ndjson=True, params=keep))
        answers = responses(answer, len(items), self.path)
        for i, response in enumerate(answers):
            if "error" in response:  # one query's failure: that query again alone, for its own error
                answers[i] = self._search_once(lines[2 * i + 1])
        return [self._top(pairs, checked(r, self.path), n, k) for pairs, r in zip(items, answers)]

    def submit(self, kind: str, texts: list, k: int, threads: int):
        """Start searching ``texts`` (query texts or term lists' pairs, none empty) in one ``_msearch``
        on a worker thread (``threads`` at once); ``result()`` waits for each one's ``TopK``."""
        check("k", k)
        check("threads", threads)
        with self._lock:
            if threads not in self._pools:
                self._pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix=f"opensearch-{threads}")
            pool = self._pools[threads]
        if kind == ANALYZED:  # the user's own index: every text's analysis checked, in batches
            self.layout.check_texts(texts)
        items = [self._analyzed(t) if kind == ANALYZED else t for t in texts]
        return _Pending(pool.submit(self._search_items, items, k))

    def _search_items(self, items: list, k: int) -> list[TopK]:
        tops = [EMPTY] * len(items)
        at = [i for i, item in enumerate(items) if item is not None]
        for i, top in zip(at, self.search_many([items[i] for i in at], k) if at else []):
            tops[i] = top
        return tops


def open_cluster(url, k1: float, b: float, tokenizer=None, flavor: str | None = None,
                 fields: dict[str, float] | None = None) -> OpenSearchIndex:
    """The cluster's index for ``BM25Searcher`` (``url``: its URL, or an ``OpenSearchIndex`` opened
    already, e.g. by ``from_client``): a flat one, so a WordPiece index or tokenizer is refused."""
    if tokenizer is not None or flavor not in (None, "flat"):
        where = url if isinstance(url, OpenSearchIndex) else ClusterURL.parse(url)
        raise UserError(f"{where} is a flat index on a cluster (bm25aug indexes only flat ones there), not "
                        f"{flavor or 'a WordPiece one'}; fix: use a flat-target model or plain BM25, or a wp index "
                        f"folder")
    if isinstance(url, OpenSearchIndex):
        if fields:
            raise UserError(f"field weights {fields!r} were given for {url}, a flat index with one field; fix: drop "
                            f"them")
        url.check_bm25(k1, b)
        return url
    return OpenSearchIndex(url, k1, b, fields)


class _Pending:
    def __init__(self, future):
        self.future = future

    def result(self) -> list[TopK]:
        return self.future.result()

    def cancel(self) -> None:
        self.future.cancel()
