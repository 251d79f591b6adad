"""What an ``OpenSearchIndex`` needs to know about the index it searches: the ``Layout`` protocol,
and ``open_layout``, which picks the one the URL names.

* ``OwnLayout``: an index ``bm25aug index --to`` made (``bm25aug.opensearch.schema``): its record
  (``_meta.bm25aug``) says the corpus, BM25's k1 and b and that its ingest finished; terms go to
  ``contents``, hits' ids come from the ``ID_FIELD`` doc values.
* ``bm25aug.opensearch.user_index.UserLayout``: an index of the user's own, named with the URL
  option ``?field=NAME`` and searched read-only, once the cluster's ``_analyze`` showed that the
  field's analyzer gives the flat index's terms.

An index with no record and no ``field`` option is refused with both ways out: search it read-only
with ``?field=NAME``, or index the corpus into a new index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from bm25aug.errors import UserError
from bm25aug.index_meta import IndexRecord
from bm25aug.bm25_defaults import FIELD
from bm25aug.opensearch.schema import COMPLETE, ID_FIELD

if TYPE_CHECKING:
    from bm25aug.opensearch.client import Client


class Layout(Protocol):
    """``field``: the text field term clauses go to; ``fetch``: what a search body asks for to read
    its hits' ids (``hit_id``); ``keep``: the ``filter_path`` of a search's answer; ``sort_id``: the
    field a search sorts ties by; ``source``: the ``_source`` an ``_mget`` asks for (``contents``
    reads a document's text from its entry); ``record``: the bm25aug record (empty for the user's
    own index), which ``identity.Watch`` checks stays the same."""

    field: str
    fetch: dict
    keep: str
    sort_id: str
    source: object
    record: dict

    def hit_id(self, hit: dict) -> str: ...

    def contents(self, doc: dict) -> str | None: ...

    def check_bm25(self, k1: float, b: float) -> None: ...

    def scale(self, client: Client, name: str) -> np.float32: ...

    def meta(self, name: str, num_docs: int) -> IndexRecord: ...

    def check_texts(self, texts: list[str]) -> None: ...

    def verify(self, dataset, index) -> None: ...


class OwnLayout:
    """An index ``bm25aug index --to`` made: complete, with ``ID_FIELD``, searched with its k1 and b."""

    field, sort_id, source = FIELD, ID_FIELD, [FIELD]
    fetch = {"stored_fields": "_none_", "docvalue_fields": [ID_FIELD]}
    # What an answer is read for (filter_path): the rest (each hit's index name and _id, totals) is
    # not sent, so a k=1000 answer is shorter to write, send and decode.
    keep = "took,timed_out,_shards,error,status,hits.hits._score,hits.hits.fields"

    def __init__(self, record: dict, mapping: dict, url):
        self.record, self.url, self.where = record, url, str(url)
        command_url = self.where.split("?", 1)[0]  # (what `bm25aug index --to` takes: no search options)
        properties = mapping.get("properties") if isinstance(mapping, dict) else None
        if not isinstance(properties, dict) or ID_FIELD not in properties:
            raise UserError(f"{self.where} was made by an older bm25aug (no {ID_FIELD!r} field to read hits' ids "
                            f"from); fix: index it again with `bm25aug index --dataset NAME --to {command_url} --force`")
        if record["state"] != COMPLETE:
            dataset = record.get("dataset", "NAME")
            raise UserError(f"{self.where} cannot be searched: its ingest has not finished (at document "
                            f"{record.get('next', 0):,} of {dataset}'s corpus); fix: run the command that started "
                            f"it again (`bm25aug index --dataset {dataset} --to {command_url}`, same options) to "
                            f"resume it")

    def hit_id(self, hit: dict) -> str:
        return hit["fields"][ID_FIELD][0]

    def contents(self, doc: dict) -> str | None:
        return doc.get("_source", {}).get(FIELD) if doc.get("found") else None

    def check_bm25(self, k1: float, b: float) -> None:
        """That ``k1`` and ``b`` are the ones the index was made with (on a cluster they are its own)."""
        made = (float(self.record["k1"]), float(self.record["b"]))
        if (np.float32(k1), np.float32(b)) != tuple(map(np.float32, made)):
            raise UserError(f"{self.where} was made with BM25 k1={made[0]} b={made[1]}, and on a cluster they are "
                            f"the index's own; fix: pass --k1 {made[0]} --b {made[1]}, or index again with --k1 {k1} "
                            f"--b {b} --force")

    def scale(self, client: Client, name: str) -> np.float32:
        from bm25aug.opensearch.identity import engine_scale

        return engine_scale(client, name, float(self.record["k1"]))

    def meta(self, name: str, num_docs: int) -> IndexRecord:
        return IndexRecord("flat", self.record.get("dataset", name), num_docs,
                           corpus_fingerprint=self.record.get("fingerprint", ""),
                           anserini=f"OpenSearch index {name}, {self.record.get('shards')} shards")

    def check_texts(self, texts: list[str]) -> None:
        """Nothing to check: the index's analyzer is bm25aug's own (``schema.ANALYSIS``)."""

    def verify(self, dataset, index) -> None:
        """That the index holds ``dataset``'s very corpus (its record's fingerprint), as
        ``bm25aug.lucene.index.verify_index`` checks an index folder."""
        from bm25aug.data.registry import corpus_fingerprint

        if self.record.get("fingerprint") != corpus_fingerprint(dataset):
            raise UserError(f"{self.where} holds {self.record.get('dataset')}'s corpus, not {dataset.name}'s as it is "
                            f"now; fix: `bm25aug index --dataset {dataset.name} --to URL` into another index, or "
                            f"search the right one")


def open_layout(client: Client, name: str, url, mapping: dict, record: dict, field: str | None) -> Layout:
    """The layout of the index ``name`` (``url``: a ``ClusterURL``; ``mapping`` and ``record`` as
    ``identity.identify`` read them): the user's own with ``field``, else bm25aug's."""
    from bm25aug.opensearch.user_index import UserLayout, listed

    if field is not None:
        if record:  # one of bm25aug's: searched through its field only once its ingest is complete
            OwnLayout(record, mapping, url)
        return UserLayout(client, name, str(url), mapping, field)
    if not record:
        fields = listed(mapping)
        raise UserError(f"{url} was not made by bm25aug (its mapping has no _meta.bm25aug record); fix: search it as "
                        f"it is, read-only, naming its text field: {url.scheme}://{url.nodes}/{name}?field=NAME (its "
                        f"text fields: {fields}), or index the corpus into another index name, `bm25aug index "
                        f"--dataset NAME --to {url.scheme}://{url.nodes}/NEWNAME`")
    return OwnLayout(record, mapping, url)

