"""``bm25aug index --dataset NAME --to URL``: a dataset's corpus into an OpenSearch index laid out
as ``bm25aug.opensearch.schema`` says, streamed in bulk, resumable.

* A new index gets ``--shards`` shards (2) with ``--replicas`` copies each (1), refreshes off.
* Documents go in ``BULK_DOCS`` at a time as ``create`` operations, by id, through opensearch-py's
  ``helpers.streaming_bulk`` (``Client.bulk``, every item read; what the cluster pushes back is sent
  again by ``bm25aug.opensearch.retry``, the policy searches use too): a document the index
  holds already is refused (409, ``version_conflict_engine_exception``) and counted as written, so
  no document is ever written twice. After each acknowledged batch the record says how far the
  ingest got (``_meta.bm25aug.next``). Killed at any point (before a batch, mid-bulk, between a
  batch's acknowledgement and its record, in the final steps), the same command resumes from the
  record: the batch it sends again writes only what is missing. Nothing is lost, nothing counts
  twice, and the index's statistics are a clean ingest's.
* At the end the index is merged to one segment per shard, refreshed, and its deleted documents
  counted: any (an index a former bm25aug filled with ``index`` operations, whose resent documents
  left deleted copies that Lucene counts in a term's document frequency) are merged away
  (``_expunge``). Then counted, and marked complete.
* An index that exists is refused unless it is this corpus's unfinished ingest (resumed) or
  ``--force`` (a warning says what it held; deleted and made again; also the fix for a damaged
  record). An index without bm25aug's record is never deleted, ``--force`` or not (the fix names
  ``?field=``, which searches it read-only), and a URL with ``?field=`` is never written to. The index is missing only when OpenSearch says so (a 404 of type
  ``index_not_found_exception``): any other answer (a proxy's empty 404) is an error and nothing is
  deleted. An alias is refused, with or without ``--force``.
"""

from __future__ import annotations

import json
import logging
import time

from bm25aug.data.registry import Dataset
from bm25aug.errors import UserError
from bm25aug.bm25_defaults import B, FIELD, K1
from bm25aug.data.registry import corpus_fingerprint
from bm25aug.opensearch.client import Client, ClusterError, ClusterURL
from bm25aug.opensearch.identity import deleted_documents, not_an_index
from bm25aug.opensearch.retry import RETRIES, attempts, retryable
from bm25aug.opensearch.schema import (COMPLETE, ID_FIELD, INGESTING, REPLICAS, SHARDS, index_body, is_blank,
                                      raise_damaged, record_of)
from bm25aug.progress import progress

log = logging.getLogger(__name__)
BULK_DOCS = 1000  # documents a bulk request (a few MB of JSON for BEIR's passages)
MERGE_TIMEOUT_S = 3600.0
# Deleted documents are merged away once the shards' retention leases (renewed about every 30 s)
# no longer keep them: tried every EXPUNGE_STEP_S seconds for up to EXPUNGE_WAIT_S.
EXPUNGE_WAIT_S, EXPUNGE_STEP_S = 120.0, 5.0
MISSING = "index_not_found_exception"  # OpenSearch's 404 for an index that does not exist
EXISTS = "resource_already_exists_exception"  # its 400 for creating one that does
WRITTEN = "version_conflict_engine_exception"  # a create's 409: the document is there already
SAME = ("fingerprint", "k1", "b", "shards", "replicas")  # what a resumed ingest must share with the record


def ingest(dataset: Dataset, url: str, shards: int = SHARDS, replicas: int = REPLICAS, k1: float = K1, b: float = B,
           force: bool = False, bulk_docs: int = BULK_DOCS, client=None) -> dict:
    """Fill the index ``url`` names with ``dataset``'s corpus; its record when complete. ``client``:
    an ``opensearchpy.OpenSearch`` the user built, used as it is; ``url`` is then the index's name."""
    target = ClusterURL.parse(url) if client is None else None
    if "field=" in str(url).partition("?")[2]:
        raise UserError(f"--to {str(url).split('?', 1)[0]}?field=...: ?field= names an index of your own, which "
                        f"bm25aug searches read-only and never writes; fix: drop ?field= and name a new index to "
                        f"index into")
    if shards < 1 or replicas < 0 or bulk_docs < 1:
        raise UserError(f"--shards {shards} --replicas {replicas}: at least 1 shard and 0 replicas; fix: pass e.g. "
                        f"--shards 2 --replicas 1")
    client = Client(target) if client is None else Client.given(client, url)
    target = client.url
    record = {"dataset": dataset.name, "fingerprint": corpus_fingerprint(dataset), "k1": k1, "b": b,
              "shards": shards, "replicas": replicas, "state": INGESTING, "next": 0, "docs": 0}
    record = _open(client, target.index, record, force, len(dataset.corpus))
    _wait_active(client, target.index, replicas)
    _fill(client, target.index, dataset, record, bulk_docs)
    return _finish(client, target.index, record)


def _fill(client: Client, index: str, dataset: Dataset, record: dict, bulk_docs: int) -> None:
    """Send the corpus from the record's ``next`` on, saving the record after each batch."""
    corpus, start = dataset.corpus, record["next"]
    if start:
        log.info("resuming the ingest of %s into %s at document %d of %d", dataset.name, index, start, len(corpus))
    there = 0
    with progress(total=len(corpus), initial=start, desc=f"ingest {dataset.name}", unit="doc") as bar:
        at = 0
        for batch in corpus.batches(bulk_docs):
            if at + len(batch) > start:  # (a batch of another size than the killed run's may straddle next)
                part = batch[max(0, start - at):]
                docs = [(docid, contents) for docid, doc in part if not is_blank(contents := doc.contents)]
                there += _bulk(client, index, docs)
                record.update(next=at + len(batch), docs=record["docs"] + len(docs))
                _save(client, index, record)
                bar.update(len(part))
            at += len(batch)
    if there:
        log.info("%s: %d documents sent again after an interruption were there already; kept, not written twice",
                 index, there)


def _open(client: Client, index: str, record: dict, force: bool, size: int) -> dict:
    """The record to ingest under: a new index's, or the unfinished one's to resume."""
    found = _mapping(client, index)
    if found is not None:
        where = f"index {index} on the cluster"
        try:
            old = record_of(found, index, where)
        except UserError:
            if not force:
                raise
            old = None  # damaged: replaced, as its error's fix says
        if old == {}:  # someone else's index: never deleted, --force or not
            raise UserError(f"index {index} exists on the cluster and is not one bm25aug made; fix: search it as it "
                            f"is, read-only (`--index URL?field=NAME`, NAME its text field), or name another index "
                            f"in the URL (bm25aug never deletes an index it did not make)")
        if not force:
            if old.get("state") == INGESTING and {k: old.get(k) for k in SAME} == {k: record[k] for k in SAME}:
                return _resumed(old, record, where, size)
            raise UserError(f"index {index} exists on the cluster and holds {old.get('dataset')}'s corpus "
                            f"({old.get('state')}); fix: pass --force to replace it, or name another index in the URL")
        log.warning("--force: deleting index %s (%s) to make it again", index, _held(client, index, old))
        client.request("DELETE", f"/{index}", ok=(404,))  # (404: a try the client sent again had deleted it)
    _create(client, index, record)
    return record


def _create(client: Client, index: str, record: dict) -> None:
    """A new index with ``record``. Already there with that very record: an earlier try of this
    request made it (a node that took it and did not answer, and the client asked another)."""
    try:
        client.request("PUT", f"/{index}", index_body(record["shards"], record["replicas"], record["k1"],
                                                      record["b"], record))
    except ClusterError as e:
        if e.kind != EXISTS:
            raise
        found = _mapping(client, index)
        if found is None or record_of(found, index, f"index {index} on the cluster") != record:
            raise UserError(f"index {index} was made on the cluster by someone else while this ingest made it; fix: "
                            f"run the same command again (it refuses or resumes what is there)") from None


def _resumed(old: dict, record: dict, where: str, size: int) -> dict:
    """``record`` from where the unfinished ingest ``old`` got (its counts checked against the corpus)."""
    start, docs = old.get("next", 0), old.get("docs", 0)
    if not 0 <= docs <= start <= size:
        raise_damaged(where, f"'next' {start} and 'docs' {docs} do not fit a corpus of {size} documents")
    return {**record, "next": start, "docs": docs}


def _mapping(client: Client, index: str) -> dict | None:
    """``GET /index/_mapping``'s answer where the index exists, None where OpenSearch says it does
    not. Any other answer (a proxy's 404, another server) is an error, so that nothing is created or
    deleted on its word; so is an alias (its answer names its indexes instead)."""
    path = f"/{index}/_mapping"
    try:
        found = client.request("GET", path)
    except ClusterError as e:
        if e.status != 404:
            raise
        if e.kind == MISSING:
            return None
        raise _not_opensearch(client, path, 404, client.request("GET", path, ok=(404,))) from None
    entry = found.get(index) if isinstance(found, dict) else None
    if isinstance(entry, dict) and isinstance(entry.get("mappings"), dict):
        return found
    if isinstance(found, dict) and found and all(isinstance(v, dict) and "mappings" in v for v in found.values()):
        raise not_an_index(index, list(found), "bm25aug neither fills nor replaces an alias")
    raise _not_opensearch(client, path, 200, found)


def _not_opensearch(client: Client, path: str, status: int, answer) -> UserError:
    body = json.dumps(answer, ensure_ascii=False)
    body = body if len(body) <= 80 else body[:77] + "..."
    return UserError(f"the server at {client.url.nodes} does not answer as OpenSearch does (GET {path}: {status} "
                     f"{body}); fix: point the URL at an OpenSearch node")


def _held(client: Client, index: str, old: dict | None) -> str:
    """What an index ``--force`` replaces (one of bm25aug's, or a damaged record) holds, in words."""
    try:
        count = f"{client.request('GET', f'/{index}/_count').get('count')} documents"
    except ClusterError:
        count = "its documents not counted"
    if old is None:
        return f"a damaged bm25aug record, {count}"
    return f"bm25aug's ingest of {old.get('dataset')}, {old.get('state')}, {count}"


def _wait_active(client: Client, index: str, replicas: int) -> None:
    """Wait until every copy of every shard is active (green); with fewer nodes than copies, a
    warning and on with the primaries (yellow)."""
    health = client.request("GET", f"/_cluster/health/{index}", params={"wait_for_status": "green", "timeout": "60s"},
                            ok=(408,))
    if health.get("status") != "green":
        nodes = health.get("number_of_data_nodes", 0)
        if health.get("status") == "yellow":
            log.warning("%s: not every shard copy is placed (%d data nodes for %d copies of each shard); the index "
                        "has no copy to fail over to", index, nodes, replicas + 1)
        else:
            raise UserError(f"the shards of {index} did not start (health {health.get('status')}); fix: see the "
                            f"cluster's health, `GET _cluster/allocation/explain`")


def _bulk(client: Client, index: str, docs: list[tuple[str, str]]) -> int:
    """Create ``docs`` (id, contents) with one bulk request; how many were there already. Operations
    the cluster pushes back on (or the whole request, when it loses a node) are sent again
    (``retry``); a document already created (by an earlier try, or a run killed before its record)
    is a 409 that counts as written. A document the cluster refuses otherwise is an error naming it."""
    pending, there = docs, 0
    for attempt in attempts():
        actions = [{"_op_type": "create", "_id": docid, "_source": {FIELD: contents, ID_FIELD: docid}}
                   for docid, contents in pending]
        try:
            results = client.bulk(index, actions)
        except ClusterError as e:
            if retryable(e.status) and attempt < RETRIES:
                continue
            raise
        pending, found = _unwritten(results, pending)
        there += found
        if not pending:
            return there
    raise UserError(f"the cluster kept refusing bulk requests to {index}; fix: check its health, then run the same "
                    f"command again to resume")


def _unwritten(results: list, sent: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], int]:
    """Of a bulk's results (``Client.bulk``'s): the documents to send again (pushed back) and how
    many were there already; any other refusal is an error."""
    items = [(item.get("create") if isinstance(item, dict) else None) or {} for _, item in results]
    if len(items) != len(sent):
        raise UserError(f"the cluster answered a bulk request of {len(sent)} documents with {len(items)} results; "
                        f"fix: check that the URL names an OpenSearch node, then run the same command again")
    again, there = [], 0
    for doc, item in zip(sent, items):
        error = item.get("error")
        if not error:
            continue
        kind = error.get("type") if isinstance(error, dict) else str(error)
        if item.get("status") == 409 and kind == WRITTEN:
            there += 1
        elif isinstance(item.get("status"), int) and retryable(item["status"]):
            again.append(doc)
        else:
            reason = error.get("reason") if isinstance(error, dict) else ""
            raise UserError(f"the cluster refused document {doc[0]!r} ({kind}: {reason}); fix: see the message, then "
                            f"run the same command again to resume")
    return again, there


def _save(client: Client, index: str, record: dict) -> None:
    client.request("PUT", f"/{index}/_mapping", {"_meta": {"bm25aug": record}})


def _finish(client: Client, index: str, record: dict) -> dict:
    """Merge, refresh, merge away any deleted documents, count, and mark the index complete (each
    step safe to run again: a resume after a kill here runs them all)."""
    client.request("POST", f"/{index}/_forcemerge", params={"max_num_segments": 1}, timeout=MERGE_TIMEOUT_S)
    client.request("PUT", f"/{index}/_settings", {"index": {"refresh_interval": None}})
    client.request("POST", f"/{index}/_refresh")
    deleted = deleted_documents(client, index)
    if deleted:
        deleted = _expunge(client, index, deleted)
    count = client.request("GET", f"/{index}/_count").get("count", -1)
    if count != record["docs"] or deleted:
        raise UserError(f"{index} holds {count} documents ({deleted} deleted copies) after its ingest, not "
                        f"{record['docs']}; fix: run the same command again to retry the end, or with --force to "
                        f"make it again")
    record.update(state=COMPLETE)
    _save(client, index, record)
    return record


def _expunge(client: Client, index: str, deleted: int) -> int:
    """Merge away deleted documents; how many are left. ``only_expunge_deletes`` rewrites only
    segments whose deleted share is over ``expunge_deletes_allowed`` (set to 0 here), and only drops
    what the shards' retention leases no longer keep (they follow the writes within about 30 s):
    tried again until none are left or ``EXPUNGE_WAIT_S`` has passed."""
    log.info("%s holds %d deleted documents; merging them away", index, deleted)
    client.request("PUT", f"/{index}/_settings", {"index": {"merge.policy.expunge_deletes_allowed": 0}})
    deadline = time.monotonic() + EXPUNGE_WAIT_S
    while True:
        client.request("POST", f"/{index}/_flush")
        client.request("POST", f"/{index}/_forcemerge", params={"only_expunge_deletes": "true"},
                       timeout=MERGE_TIMEOUT_S)
        client.request("POST", f"/{index}/_refresh")
        deleted = deleted_documents(client, index)
        if not deleted or time.monotonic() > deadline:
            return deleted
        time.sleep(EXPUNGE_STEP_S)


def run(args) -> None:
    """``bm25aug index --dataset NAME --to URL``."""
    from bm25aug.data.registry import load_dataset

    if args.flavor not in (["flat", "wp"], ["flat"]):  # the default, or flat said out loud
        raise UserError(f"--to builds a flat index on the cluster, not {' '.join(args.flavor)}; fix: drop --flavor")
    dataset = load_dataset(args.dataset, args.data_dir)
    record = ingest(dataset, args.to, SHARDS if args.shards is None else args.shards,
                    REPLICAS if args.replicas is None else args.replicas, args.k1, args.b, args.force)
    print(f"{args.to}: {record['docs']} documents of {dataset.name} in {record['shards']} shards with "
          f"{record['replicas']} replica(s) each (BM25 k1={record['k1']}, b={record['b']})")
