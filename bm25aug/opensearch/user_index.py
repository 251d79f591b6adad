"""An index of the user's own, searched as it is and never written to: ``UserLayout``.

Named by the URL option ``field``: ``http://HOST:9200/theirs?field=body`` (``OpenSearchIndex`` and
everything that takes a cluster URL; ``OpenSearchIndex.from_client(client, "theirs?field=body")``
on the user's own client). Opening it reads, and only reads:

* **the field's mapping**: a ``text`` field (a multi-field such as ``body.english`` too), indexed
  with its frequencies and norms, as BM25 over the flat index needs, whose text ``_source`` keeps;
  inside plain objects (``doc.body``) but not a ``nested`` one, whose objects are hidden documents
  of their own: bm25aug's BM25 scores a document's own fields (as the flat index does), not a nested
  object's text, even where ``include_in_root`` or ``include_in_parent`` copies it into the document;
* **its similarity**: the field's, else the index's ``default``, else OpenSearch's BM25 (k1 1.2,
  b 0.75). It must be BM25; its k1 and b are the index's own, and a searcher given others is
  refused with the ones to pass (as for an index bm25aug made). Scores are divided by what the
  engine multiplies Lucene's BM25 by, read off its own explanation (``identity.term_scale``);
* **its analyzer, through the cluster's ``_analyze``** (``field_analysis``): on ``PROBE`` and on
  ``SAMPLE_DOCS`` stored documents (a fixed pseudo-random sample: ``random_score`` with a fixed seed
  over ``_seq_no``), then on every query text at search time, batched and remembered. Any text
  whose tokens differ from the flat index's is refused in one line naming the difference.

Hits' ids are ``_id``; a document's contents (``stored``) its field's ``_source``. Nothing is ever
written: no record, no settings, no refresh, and nothing anywhere else on the cluster.
"""

from __future__ import annotations

import logging

import numpy as np

from bm25aug.errors import UserError
from bm25aug.index_meta import IndexRecord
from bm25aug.opensearch.answers import shaped
from bm25aug.opensearch.field_analysis import MAX_TOKEN_COUNT, PROBE, FieldAnalysis
from bm25aug.opensearch.schema import is_blank

log = logging.getLogger(__name__)
SAMPLE_DOCS = 32  # stored documents whose analysis is compared at opening
SAMPLE_SEED = 20240611
VERIFY_IDS = 1000  # corpus ids looked up when eval checks that the index holds its dataset
DEFAULT_K1, DEFAULT_B = 1.2, 0.75  # OpenSearch's BM25 when the index does not say
_SETTINGS_KEEP = ("*.settings.index.similarity,*.defaults.index.similarity,*.settings.index.analyze,"
                  "*.defaults.index.analyze")


class UserLayout:
    """``field`` of the index ``name``, checked as the module's docstring says (``where``: the URL)."""

    sort_id = "_id"
    fetch = {"_source": False}
    keep = "took,timed_out,_shards,error,status,hits.hits._score,hits.hits._id"
    record: dict = {}

    def __init__(self, client, name: str, where: str, mapping: dict, field: str):
        self.client, self.name, self.where, self.field = client, name, where, field
        spec, self.path = field_spec(mapping, field, where)
        self.source = [".".join(self.path)]
        if isinstance(mapping.get("_source"), dict) and mapping["_source"].get("enabled") is False:
            self._no_source()
        settings = client.request("GET", f"/{name}/_settings", params={
            "include_defaults": "true", "local": "true", "filter_path": _SETTINGS_KEEP}).get(name, {})
        self.k1, self.b, self.similarity = shaped(where, f"GET /{name}/_settings", lambda: similarity(
            settings, spec.get("similarity"), field, where))
        limit = shaped(where, f"GET /{name}/_settings", lambda: int(_setting(settings, ("analyze", "max_token_count"))
                                                                    or MAX_TOKEN_COUNT))
        self._warn_deleted()
        self.analysis = FieldAnalysis(client, name, field, where, limit)
        self.analysis.check([PROBE], ["the probe text"])
        self._sample = self._check_sample()

    def _check_sample(self) -> list[str]:
        """The analysis of ``SAMPLE_DOCS`` stored documents checked; their texts."""
        body = {"size": SAMPLE_DOCS, "_source": self.source, "query": {"function_score": {
            "query": {"exists": {"field": self.field}}, "random_score": {"seed": SAMPLE_SEED, "field": "_seq_no"}}}}
        hits = self.client.request("POST", f"/{self.name}/_search", body).get("hits", {}).get("hits", [])
        texts, labels = [], []
        for hit in hits:
            for value in shaped(self.where, f"POST /{self.name}/_search", lambda: values(hit.get("_source"),
                                                                                          self.path)):
                texts.append(value)
                labels.append(f"stored document {hit['_id']!r}")
        if hits and not texts:
            self._no_source()
        self.analysis.check(texts, labels)
        return texts

    def _warn_deleted(self) -> None:
        """Deleted (or updated) documents still count in a term's document frequency and the average
        length until Lucene merges them away: the scores are then not the flat index's."""
        from bm25aug.opensearch.identity import deleted_documents

        if deleted := deleted_documents(self.client, self.name, "primaries"):
            log.warning("%s holds %s deleted or updated documents not merged away yet: Lucene still counts them in "
                        "BM25's statistics, so scores differ from an index of the live documents alone (a force "
                        "merge, `POST /%s/_forcemerge?only_expunge_deletes=true`, is yours to run)",
                        self.where, deleted, self.name)

    def _no_source(self):
        raise UserError(f"{self.where}: the _source of its documents holds no text at {self.source[0]!r} (the source "
                        f"of field {self.field!r}: disabled, excluded from _source, or a copy_to target), so how they "
                        f"were analyzed cannot be checked; fix: name a field whose text _source keeps")

    def hit_id(self, hit: dict) -> str:
        return hit["_id"]

    def contents(self, doc: dict) -> str | None:
        return " ".join(values(doc.get("_source"), self.path)) if doc.get("found") else None

    def check_bm25(self, k1: float, b: float) -> None:
        """That ``k1`` and ``b`` are the field's own (its similarity's)."""
        if (np.float32(k1), np.float32(b)) != (np.float32(self.k1), np.float32(self.b)):
            raise UserError(f"{self.where} scores field {self.field!r} with BM25 k1={self.k1:g} b={self.b:g} "
                            f"({self.similarity}), and an index of your own is searched as it is; fix: pass --k1 "
                            f"{self.k1:g} --b {self.b:g} (k1={self.k1:g}, b={self.b:g} in Python)")

    def scale(self, client, name: str) -> np.float32:
        from bm25aug.lucene.analysis import analyze
        from bm25aug.opensearch.identity import term_scale, version_scale

        term = next((terms[0] for text in self._sample if (terms := analyze(text))), None)
        return version_scale(client, self.k1) if term is None else term_scale(client, name, self.field, term, self.k1)

    def meta(self, name: str, num_docs: int) -> IndexRecord:
        return IndexRecord("flat", name, num_docs, stock=True,
                           anserini=f"OpenSearch index {name}, field {self.field} (your own, searched read-only)")

    def check_texts(self, texts: list[str]) -> None:
        labels = ["the query"] if len(texts) == 1 else [f"query {i + 1} of {len(texts)}" for i in range(len(texts))]
        self.analysis.check(texts, labels)

    def verify(self, dataset, index) -> None:
        """That the index holds ``dataset``'s corpus, as far as can be read without a fingerprint:
        ``VERIFY_IDS`` of its ids, spread over it, all there; a count that differs is a warning."""
        ids = [docid for docid, doc in dataset.corpus.items() if not is_blank(doc.contents)]
        step = max(len(ids) // VERIFY_IDS, 1)
        sample = ids[::step][:VERIFY_IDS]
        missing = [i for i, n in zip(sample, index.doc_numbers(sample)) if n < 0]
        if missing:
            raise UserError(f"{self.where} lacks {len(missing)} of {len(sample)} documents looked up from "
                            f"{dataset.name}'s corpus (e.g. {missing[0]!r}), so it does not hold that corpus; fix: "
                            f"search the index that holds it, or pass the dataset it holds")
        if index.num_docs != len(ids):
            log.warning("%s holds %d documents, %s's corpus %d (blank ones aside): the %d looked up are there, but "
                        "the counts differ", self.where, index.num_docs, dataset.name, len(ids), len(sample))
        log.info("%s is an index of your own (no bm25aug record), so its corpus fingerprint cannot be checked; %d "
                 "ids of %s's corpus looked up are all there", self.where, len(sample), dataset.name)


def field_spec(mapping: dict, field: str, where: str) -> tuple[dict, tuple[str, ...]]:
    """The mapping of ``field`` (a dotted path through objects and multi-fields), checked to be a
    ``text`` field BM25 can score as the flat index does, and the path of its ``_source``."""
    spec, node, source, nested = None, mapping if isinstance(mapping, dict) else {}, [], None
    for part in field.split("."):
        if nested is None and spec is not None and spec.get("type") == "nested":
            nested = ".".join(source)  # (a nested field's own name is a path of objects' names)
        holders = [(node.get("properties") or {}, True), (node.get("fields") or {}, False)]
        found = next(((h[part], own) for h, own in holders if isinstance(h, dict) and isinstance(h.get(part), dict)),
                     None)
        if found is None:
            spec = None
            break
        spec, node = found[0], found[0]
        source += [part] if found[1] else []
    texts = listed(mapping)
    if spec is None or spec.get("type", "object") != "text":
        kind = "not in its mapping" if spec is None else f"of type {spec.get('type', 'object')}"
        raise UserError(f"{where}: field {field!r} is {kind}, and bm25aug searches a text field; fix: name one of "
                        f"the index's text fields in ?field= ({texts})")
    if nested is not None:
        other = f"name a text field outside nested objects ({texts}), or " if texts != "none" else ""
        raise UserError(f"{where}: field {field!r} is in a nested object ({nested!r} is of type nested: each of its "
                        f"objects is indexed as a hidden document of its own), whose text bm25aug's BM25 does not "
                        f"score as the document's own field; fix: {other}index the corpus with `bm25aug index "
                        f"--dataset NAME --to URL`")
    wrong = ("it is not indexed (index: false)" if spec.get("index") is False else
             "it keeps no norms (norms: false), so BM25 cannot weigh document length" if spec.get("norms") is False
             else "it keeps no term frequencies (index_options: docs)" if spec.get("index_options") == "docs" else None)
    if wrong:
        raise UserError(f"{where}: field {field!r} cannot be scored as the flat index scores: {wrong}; fix: name "
                        f"another text field ({texts}), or index the corpus with `bm25aug index --dataset NAME --to "
                        f"URL`")
    return spec, tuple(source)


def listed(mapping: dict, most: int = 8) -> str:
    """The index's text fields for a message: the first ``most``, and how many more."""
    fields = text_fields(mapping)
    more = f" and {len(fields) - most} more" if len(fields) > most else ""
    return (", ".join(fields[:most]) or "none") + more


def text_fields(mapping: dict, prefix: str = "") -> list[str]:
    """The paths of the ``text`` fields of a mapping, multi-fields included (``body.english``), those
    in ``nested`` objects left out (bm25aug scores a document's own fields, not a nested object's text)."""
    found = []
    for name, spec in (mapping.get("properties") or {}).items() if isinstance(mapping, dict) else ():
        if not isinstance(spec, dict):
            continue
        if spec.get("type", "object") == "text":
            found.append(prefix + name)
        found += text_fields({"properties": spec.get("fields") or {}}, f"{prefix}{name}.")
        found += text_fields(spec, f"{prefix}{name}.") if "properties" in spec and spec.get("type") != "nested" else []
    return found


def similarity(settings: dict, name: str | None, field: str, where: str) -> tuple[float, float, str]:
    """BM25's k1 and b of the field (its ``similarity``, else the index's ``default``), and where
    they come from; any similarity other than BM25 is refused."""
    named = name or "default"
    custom = _setting(settings, ("similarity", named))
    if not isinstance(custom, dict) and named in ("BM25", "default"):
        return DEFAULT_K1, DEFAULT_B, "OpenSearch's default similarity"
    kind = custom.get("type") if isinstance(custom, dict) else named  # a built-in one: boolean
    if kind != "BM25" or str(custom.get("discount_overlaps", "true")).lower() != "true":
        what = f"type {kind}" if kind != "BM25" else "discount_overlaps false"
        raise UserError(f"{where}: field {field!r} scores with similarity {named!r} ({what}), not BM25 as the flat "
                        f"index does; fix: name a field scored with BM25, or index the corpus with `bm25aug index "
                        f"--dataset NAME --to URL`")
    return (float(custom.get("k1", DEFAULT_K1)), float(custom.get("b", DEFAULT_B)),
            f"the index's similarity {named!r}")


def _setting(settings: dict, path: tuple[str, ...]):
    """An index setting under ``index.`` as set, else its default (None when neither is there)."""
    for scope in ("settings", "defaults"):
        node = settings.get(scope, {}).get("index", {})
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            return node
    return None


def values(source, path: tuple[str, ...]) -> list[str]:
    """The strings at ``path`` in a document's ``_source`` (objects and lists walked through)."""
    nodes = [source]
    for part in path:
        nodes = [n.get(part) for n in _flat(nodes) if isinstance(n, dict)]
    return [v for v in _flat(nodes) if isinstance(v, str)]


def _flat(nodes: list) -> list:
    out = []
    for node in nodes:
        out += _flat(node) if isinstance(node, list) else [node]
    return out
