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
* **No partial results.** ``allow_partial_search_results=false``, and every answer's ``_shards``
  is checked: a shard that failed is an error naming it, never fewer hits without a word. A search
  the cluster fails while it loses a node is sent again (``RETRIES``), on another node of the URL
  when its own is gone.
* **Ranking.** Scores are divided by OpenSearch's (1 + k1) (``schema.score_scale``), then ranked
  as Anserini ranks (ties by external id, 4 decimals, ``anserini_scores``), with ``TIE_MARGIN``
  extra hits asked for and deeper searches when a tie crosses the k-th place, as in-process.
* **Hits.** ``TopK.lucene_ids`` are numbers this object gives each external id it has seen
  (``docids[top.lucene_ids]`` is the ids, as for a Lucene index).
* **Clause limit.** A term list longer than the cluster's ``indices.query.bool.max_clause_count``
  is refused before it is sent, with the limit and the fix.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections import Counter

import numpy as np

from bm25aug.errors import UserError
from bm25aug.limits import check
from bm25aug.lucene.index import IndexMeta
from bm25aug.lucene.ranking import EMPTY, TopK, anserini_scores
from bm25aug.lucene.reader import ANALYZED, B, FIELD, K1, TERMS, TIE_MARGIN
from bm25aug.opensearch.client import Client, ClusterError, ClusterURL
from bm25aug.opensearch.schema import COMPLETE, DEFAULT_CLAUSE_LIMIT, ID_FIELD, record_of, score_scale

MAX_WINDOW = 10_000  # OpenSearch's default index.max_result_window, when the index does not say
RETRIES = 3  # a search that failed while the cluster lost a node, sent again after RETRY_S
RETRY_S = 1.0
log = logging.getLogger(__name__)
# What an answer is read for (filter_path): the rest (each hit's index name and _id, totals) is not
# sent, so a k=1000 answer is shorter to write, send and decode.
_KEEP = "took,timed_out,_shards,error,status,hits.hits._score,hits.hits.fields"
_STATS = {"exact": "dfs_query_then_fetch", "local": "query_then_fetch"}


class OpenSearchIndex:
    """A complete bm25aug index on a cluster (``url``: ``http://HOST:PORT[,...]/INDEX[?stats=local]``),
    with BM25's ``k1`` and ``b`` the index was made with."""

    def __init__(self, url: str, k1: float = K1, b: float = B, fields: dict[str, float] | None = None):
        self.url = ClusterURL.parse(url)
        self.path = str(self.url)  # how messages name the index
        options = dict(self.url.options)
        stats = options.pop("stats", "exact")
        if stats not in _STATS or options:
            raise UserError(f"{url!r}: the only option a cluster URL takes is stats=exact (default) or stats=local; "
                            f"fix: drop the others")
        if fields:
            raise UserError(f"field weights {fields!r} were given for {url}, a flat index with one field; fix: drop them")
        self.search_type, self.fields = _STATS[stats], None
        self.client = Client(self.url)
        name = self.url.index
        mapping = self.client.request("GET", f"/{name}/_mapping")
        self.record = record_of(mapping, name)
        if self.record and ID_FIELD not in mapping[name]["mappings"].get("properties", {}):
            raise UserError(f"{url} was made by an older bm25aug (no {ID_FIELD!r} field to read hits' ids from); "
                            f"fix: index it again with `bm25aug index --dataset NAME --to {url} --force`")
        if self.record.get("state") != COMPLETE:
            why = "its ingest has not finished" if self.record else "bm25aug did not make it"
            raise UserError(f"{url} cannot be searched: {why}; fix: `bm25aug index --dataset NAME --to {url}` "
                            f"(it resumes an unfinished ingest)")
        made = (float(self.record["k1"]), float(self.record["b"]))
        if (np.float32(k1), np.float32(b)) != tuple(map(np.float32, made)):
            raise UserError(f"{url} was made with BM25 k1={made[0]} b={made[1]}, and on a cluster they are the index's "
                            f"own; fix: pass --k1 {made[0]} --b {made[1]}, or index again with --k1 {k1} --b {b} --force")
        self.num_docs = int(self.client.request("GET", f"/{name}/_count")["count"])
        self.scale = self._score_scale(made[0])
        self.meta = IndexMeta("flat", self.record.get("dataset", name), self.num_docs,
                              corpus_fingerprint=self.record.get("fingerprint", ""),
                              anserini=f"OpenSearch index {name}, {self.record.get('shards')} shards")
        self.clause_limit = self._clause_limit()
        self.window = int(self.client.request("GET", f"/{name}/_settings", params={
            "include_defaults": "true", "flat_settings": "true"}).get(name, {}).get("settings", {}).get(
            "index.max_result_window", MAX_WINDOW))
        self._ids: dict[str, int] = {}
        self._table = np.empty(1024, object)  # external id of each number given out, grown by doubling
        self._lock = threading.Lock()
        self._df: dict[str, int] = {}
        self._pools: dict[int, ThreadPoolExecutor] = {}

    def _score_scale(self, k1: float) -> np.float32:
        """What the engine's BM25 multiplies Lucene's by, read off its explanation of one term's
        score (the boost it scores with, for a boost of 1): OpenSearch 2.x's LegacyBM25Similarity
        gives (1 + k1), a plain BM25Similarity 1. ``schema.score_scale`` when nothing is indexed."""
        hit = self.client.request("POST", f"/{self.url.index}/_search", {"size": 1, "_source": [FIELD]})["hits"]["hits"]
        if not hit:
            return score_scale(k1)
        from bm25aug.lucene.analysis import analyze

        terms = analyze(hit[0]["_source"].get(FIELD, ""))
        if not terms:
            return score_scale(k1)
        body = {"size": 1, "explain": True, "query": {"term": {FIELD: terms[0]}}}
        explained = self.client.request("POST", f"/{self.url.index}/_search", body)["hits"]["hits"]
        boost = _boost(explained[0]["_explanation"]) if explained else None
        return np.float32(boost) if boost else score_scale(k1)

    def _clause_limit(self) -> int:
        """The smallest ``indices.query.bool.max_clause_count`` among the cluster's nodes."""
        key = "indices.query.bool.max_clause_count"
        nodes = self.client.request("GET", "/_nodes/settings", params={"flat_settings": "true"}).get("nodes", {})
        limits = [int(n.get("settings", {}).get(key, DEFAULT_CLAUSE_LIMIT)) for n in nodes.values()]
        cluster = self.client.request("GET", "/_cluster/settings", params={"flat_settings": "true"})
        limits += [int(cluster[scope][key]) for scope in ("persistent", "transient") if key in cluster.get(scope, {})]
        return min(limits or [DEFAULT_CLAUSE_LIMIT])

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
        """Documents that hold each term (not analyzed), those not seen before asked in one request."""
        missing = sorted({t for t in terms if t not in self._df})
        header = {"index": self.url.index, "search_type": "query_then_fetch", "allow_partial_search_results": False}
        for at in range(0, len(missing), 256):  # one term query a search, counted, no hits fetched
            part = missing[at:at + 256]
            lines = [line for t in part for line in (header, {"size": 0, "track_total_hits": True,
                                                               "query": {"term": {field: t}}})]
            answer = self._retrying(lambda: self.client.request("POST", "/_msearch", lines, ndjson=True))
            for term, response in zip(part, answer.get("responses", [])):
                if "error" in response:
                    raise UserError(f"{self.path}: counting the documents of {term!r} failed "
                                    f"({response['error'].get('type')}); fix: check the cluster's health")
                self._df[term] = int(_checked(response, self.path)["hits"]["total"]["value"])
        return {t: self._df[t] for t in terms}

    def verify(self, dataset) -> None:
        """That this index holds ``dataset``'s very corpus (its record's fingerprint), as
        ``bm25aug.lucene.index.verify_index`` checks an index folder."""
        from bm25aug.lucene.index import corpus_fingerprint

        if self.record.get("fingerprint") != corpus_fingerprint(dataset):
            raise UserError(f"{self.path} holds {self.record.get('dataset')}'s corpus, not {dataset.name}'s as it is "
                            f"now; fix: `bm25aug index --dataset {dataset.name} --to URL` into another index, or "
                            f"search the right one")

    def _mget(self, ids: list[str]) -> list[str | None]:
        """Each document's stored contents (None: no such document)."""
        found = self.client.request("POST", f"/{self.url.index}/_mget", {"ids": list(ids)}).get("docs", [])
        return [d.get("_source", {}).get(FIELD) if d.get("found") else None for d in found]

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
        pairs = [(t, float(np.float32(w))) for t, w in terms.items() if w > 0]
        if len(pairs) > self.clause_limit:
            raise UserError(f"the term list has {len(pairs)} terms and the cluster {self.url.nodes} takes at most "
                            f"{self.clause_limit} (indices.query.bool.max_clause_count); fix: keep fewer terms "
                            f"(--top-k), or raise that setting in every node's opensearch.yml")
        return pairs or None

    def weighted_query(self, terms: dict[str, float], fields: dict[str, float] | None = None) -> list | None:
        return self.terms_element(terms, fields)

    def terms_kind(self, fields: dict[str, float] | None = None) -> str:
        return TERMS

    def analyzed_query(self, text: str) -> list | None:
        """Pyserini's default query: the English analyzer's terms (analyzed here, as in-process),
        boosted by count."""
        from bm25aug.lucene.analysis import analyze

        return self.terms_element({t: float(c) for t, c in Counter(analyze(text)).items()})

    def query(self, kind: str, item) -> list | None:
        return self.analyzed_query(item) if kind == ANALYZED else item

    # ---------------------------------------------------------------------------------- search
    def _body(self, pairs: list, n: int) -> dict:
        clauses = [{"term": {FIELD: {"value": t, "boost": w}}} for t, w in pairs]
        return {"size": n, "stored_fields": "_none_", "docvalue_fields": [ID_FIELD], "track_total_hits": False,
                "query": {"bool": {"should": clauses}}}

    def _params(self) -> dict:
        return {"search_type": self.search_type, "allow_partial_search_results": "false", "filter_path": _KEEP}

    def _search_once(self, body: dict) -> dict:
        return _checked(self._retrying(lambda: self.client.request("POST", f"/{self.url.index}/_search", body,
                                                                   params=self._params())), self.path)

    def _retrying(self, call):
        """``call()``, again after ``RETRY_S`` when the cluster failed it (5xx: e.g. a shard whose
        node died between two phases), up to ``RETRIES`` times; then its error."""
        for attempt in range(RETRIES + 1):
            try:
                return call()
            except ClusterError as e:
                if (e.status < 500 and e.status != 429) or attempt == RETRIES:  # 429: the search queue is full
                    raise
                time.sleep(RETRY_S)

    def _hits(self, answer: dict) -> tuple[list[str], np.ndarray]:
        hits = answer.get("hits", {}).get("hits", [])  # filter_path leaves no "hits" when there are none
        scores = np.fromiter((h["_score"] for h in hits), np.float32, len(hits)) / self.scale
        return [h["fields"][ID_FIELD][0] for h in hits], scores

    def depth(self, k: int) -> int:
        """Hits to ask for: k and ``TIE_MARGIN`` more, within the index's size and result window;
        a k past the window is refused (OpenSearch would refuse the search)."""
        if check("k", k) > self.window and k < self.num_docs:
            raise UserError(f"k={k} is past {self.path}'s result window ({self.window:,} hits, "
                            f"index.max_result_window); fix: ask for at most {self.window:,} hits, or raise that "
                            f"index setting")
        return int(min(k + TIE_MARGIN, self.num_docs, self.window))

    def _complete(self, scores: np.ndarray, n: int, k: int) -> bool:
        return len(scores) < n or len(scores) <= k or scores[k - 1] > scores[-1] or n >= min(self.num_docs, self.window)

    def _top(self, pairs: list, answer: dict, n: int, k: int) -> TopK:
        ids, scores = self._hits(answer)
        while not self._complete(scores, n, k):  # a tie crosses the k-th place: see it whole
            n = min(n * 4, self.num_docs, self.window)
            ids, scores = self._hits(self._search_once(self._body(pairs, n)))
        if len(scores) > k and n >= self.window and scores[k - 1] == scores[-1]:
            log.warning("%s: a tie at the %d-th place runs past the result window (%d hits); its order there is "
                        "the cluster's, not by external id", self.path, k, self.window)
        order = np.lexsort((np.asarray(ids, dtype=object).astype(str), -scores))[:k] if ids else np.zeros(0, np.int64)
        return TopK(self._numbers([ids[i] for i in order]), anserini_scores(scores[order]))

    def search(self, pairs: list | None, k: int) -> TopK:
        """Top k of a term list's pairs, as ``LuceneIndex.search`` ranks them."""
        if pairs is None or not self.num_docs:
            check("k", k)
            return EMPTY
        n = self.depth(k)
        return self._top(pairs, self._search_once(self._body(pairs, n)), n, k)

    def search_many(self, items: list, k: int) -> list[TopK]:
        """Several queries' top k in one ``_msearch`` request."""
        n = self.depth(k)
        lines = []
        header = {"index": self.url.index, "search_type": self.search_type, "allow_partial_search_results": False}
        for pairs in items:
            lines += [header, self._body(pairs, n)]
        answer = self._retrying(lambda: self.client.request(
            "POST", "/_msearch", lines, ndjson=True, params={"filter_path": ",".join(f"responses.{k}" for k in _KEEP.split(","))}))
        responses = answer.get("responses", [])
        for i, response in enumerate(responses):
            if "error" in response:  # one query's failure: that query again alone, for its own error
                responses[i] = self._search_once(lines[2 * i + 1])
        return [self._top(pairs, _checked(r, self.path), n, k) for pairs, r in zip(items, responses)]

    def submit(self, kind: str, texts: list, k: int, threads: int):
        """Start searching ``texts`` (query texts or term lists' pairs, none empty) in one ``_msearch``
        on a worker thread (``threads`` at once); ``result()`` waits for each one's ``TopK``."""
        check("k", k)
        check("threads", threads)
        with self._lock:
            if threads not in self._pools:
                self._pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix=f"opensearch-{threads}")
            pool = self._pools[threads]
        items = [self.query(kind, t) for t in texts]
        return _Pending(pool.submit(self._search_items, items, k))

    def _search_items(self, items: list, k: int) -> list[TopK]:
        tops = [EMPTY] * len(items)
        at = [i for i, item in enumerate(items) if item is not None]
        for i, top in zip(at, self.search_many([items[i] for i in at], k) if at else []):
            tops[i] = top
        return tops


def _boost(explanation: dict) -> float | None:
    """The ``boost`` factor of a BM25 explanation tree (depth first)."""
    if explanation.get("description") == "boost":
        return float(explanation["value"])
    for detail in explanation.get("details", []):
        if (found := _boost(detail)) is not None:
            return found
    return None


def open_cluster(url: str, k1: float, b: float, tokenizer=None, flavor: str | None = None,
                 fields: dict[str, float] | None = None) -> OpenSearchIndex:
    """The cluster's index for ``BM25Searcher``: a flat one, so a WordPiece index or tokenizer is refused."""
    if tokenizer is not None or flavor not in (None, "flat"):
        raise UserError(f"{url} is a flat index on a cluster (bm25aug indexes only flat ones there), not "
                        f"{flavor or 'a WordPiece one'}; fix: use a flat-target model or plain BM25, or a wp index "
                        f"folder")
    return OpenSearchIndex(url, k1, b, fields)


class _Pending:
    def __init__(self, future):
        self.future = future

    def result(self) -> list[TopK]:
        return self.future.result()

    def cancel(self) -> None:
        self.future.cancel()


def _checked(answer: dict, where: str) -> dict:
    """``answer`` when every shard answered in time; else an error naming what failed."""
    shards = answer.get("_shards", {})
    if shards.get("failed") or shards.get("successful", 0) + shards.get("skipped", 0) < shards.get("total", 0):
        failure = (shards.get("failures") or [{}])[0]
        node, reason = failure.get("node", "?"), (failure.get("reason") or {}).get("reason", "unknown")
        raise UserError(f"{where}: {shards.get('failed', 0)} of {shards.get('total')} shards failed (shard "
                        f"{failure.get('shard')} on node {node}: {reason}), so the hits would be partial; fix: check "
                        f"the cluster's health (`bm25aug cluster status`) and search again")
    if answer.get("timed_out"):
        raise UserError(f"{where}: the search timed out on some shard, so its hits would be partial; fix: search again")
    return answer
