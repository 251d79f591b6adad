"""``bm25aug index --dataset NAME --to URL``: a dataset's corpus into an OpenSearch index laid out
as ``bm25aug.opensearch.schema`` says, streamed in bulk, resumable.

* A new index gets ``--shards`` shards (2) with ``--replicas`` copies each (1), refreshes off.
* Documents go in ``BULK_DOCS`` at a time, by id, so that sending one twice replaces it: after an
  interruption (a Ctrl-C, a crash, a node gone), running the same command again resumes from the
  last batch the record says was acknowledged (``_meta.bm25aug.next``, saved after each batch).
  Nothing is lost, and nothing counts twice.
* At the end the index is merged to one segment per shard, which also drops the deleted copies
  of documents sent twice (Lucene would otherwise count them in a term's document frequency and
  change scores), refreshed, counted, and marked complete.
* An index that exists is refused unless it is this corpus's unfinished ingest (resumed) or
  ``--force`` (deleted and made again).
"""

from __future__ import annotations

import logging
import time

from bm25aug.data.registry import Dataset
from bm25aug.errors import UserError
from bm25aug.lucene.index import corpus_fingerprint
from bm25aug.lucene.reader import B, FIELD, K1
from bm25aug.opensearch.client import Client, ClusterError, ClusterURL
from bm25aug.opensearch.schema import (COMPLETE, ID_FIELD, INGESTING, REPLICAS, SHARDS, index_body, is_blank,
                                      record_of)
from bm25aug.progress import progress

log = logging.getLogger(__name__)
BULK_DOCS = 1000  # documents a bulk request (a few MB of JSON for BEIR's passages)
RETRIES = 5  # a bulk the cluster pushes back on (429) or loses a node during, sent again
MERGE_TIMEOUT_S = 3600.0


def ingest(dataset: Dataset, url: str, shards: int = SHARDS, replicas: int = REPLICAS, k1: float = K1, b: float = B,
           force: bool = False, bulk_docs: int = BULK_DOCS) -> dict:
    """Fill the index ``url`` names with ``dataset``'s corpus; its record when complete."""
    target = ClusterURL.parse(url)
    if shards < 1 or replicas < 0 or bulk_docs < 1:
        raise UserError(f"--shards {shards} --replicas {replicas}: at least 1 shard and 0 replicas; fix: pass e.g. "
                        f"--shards 2 --replicas 1")
    client = Client(target)
    record = {"dataset": dataset.name, "fingerprint": corpus_fingerprint(dataset), "k1": k1, "b": b,
              "shards": shards, "replicas": replicas, "state": INGESTING, "next": 0, "docs": 0}
    record = _open(client, target.index, record, force)
    _wait_active(client, target.index, replicas)
    corpus = dataset.corpus
    start = record["next"]
    if start:
        log.info("resuming the ingest of %s into %s at document %d of %d", dataset.name, target.index, start, len(corpus))
    sent = record["docs"]
    with progress(total=len(corpus), initial=start, desc=f"ingest {dataset.name}", unit="doc") as bar:
        at = 0
        for batch in corpus.batches(bulk_docs):
            if at >= start:
                lines = []
                for docid, doc in batch:
                    if not is_blank(contents := doc.contents):
                        lines += [{"index": {"_id": docid}}, {FIELD: contents, ID_FIELD: docid}]
                _bulk(client, target.index, lines)
                sent += len(lines) // 2
                record.update(next=at + len(batch), docs=sent)
                _save(client, target.index, record)
                bar.update(len(batch))
            at += len(batch)
    return _finish(client, target.index, record)


def _open(client: Client, index: str, record: dict, force: bool) -> dict:
    """The record to ingest under: a new index's, or the unfinished one's to resume."""
    found = client.request("GET", f"/{index}/_mapping", ok=(404,))
    if "error" not in found:
        old = record_of(found, index)
        same = {k: old.get(k) for k in ("fingerprint", "k1", "b", "shards", "replicas")} == \
               {k: record[k] for k in ("fingerprint", "k1", "b", "shards", "replicas")}
        if not force:
            if old.get("state") == INGESTING and same:
                return {**record, "next": int(old.get("next", 0)), "docs": int(old.get("docs", 0))}
            what = (f"holds {old.get('dataset')}'s corpus ({old.get('state')})" if old else "is not one bm25aug made")
            raise UserError(f"index {index} exists on the cluster and {what}; fix: pass --force to replace it, or "
                            f"name another index in the URL")
        client.request("DELETE", f"/{index}")
    client.request("PUT", f"/{index}", index_body(record["shards"], record["replicas"], record["k1"], record["b"],
                                                  record))
    return record


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


def _bulk(client: Client, index: str, lines: list[dict]) -> None:
    """One bulk request, sent again (same ids: replaced, never doubled) when the cluster pushes
    back or loses a node; a document the cluster refuses is an error naming it."""
    if not lines:
        return
    for attempt in range(RETRIES + 1):
        try:
            answer = client.request("POST", f"/{index}/_bulk", lines, ndjson=True)
        except ClusterError as e:
            if e.status in (429, 503) and attempt < RETRIES:
                time.sleep(2 ** attempt)
                continue
            raise
        if not answer.get("errors"):
            return
        failed = [item.get("index", {}) for item in answer.get("items", []) if item.get("index", {}).get("error")]
        if all(f.get("status") in (429, 503) for f in failed) and attempt < RETRIES:
            time.sleep(2 ** attempt)
            continue
        first = failed[0]
        error = first.get("error") or {}
        raise UserError(f"the cluster refused document {first.get('_id')!r} ({error.get('type')}: "
                        f"{error.get('reason')}); fix: see the message, then run the same command again to resume")
    raise UserError(f"the cluster kept refusing bulk requests to {index}; fix: check its health, then run the same "
                    f"command again to resume")


def _save(client: Client, index: str, record: dict) -> None:
    client.request("PUT", f"/{index}/_mapping", {"_meta": {"bm25aug": record}})


def _finish(client: Client, index: str, record: dict) -> dict:
    """Merge (dropping documents sent twice), refresh, count, and mark the index complete."""
    client.request("POST", f"/{index}/_forcemerge", params={"max_num_segments": 1}, timeout=MERGE_TIMEOUT_S)
    client.request("PUT", f"/{index}/_settings", {"index": {"refresh_interval": None}})
    client.request("POST", f"/{index}/_refresh")
    count = client.request("GET", f"/{index}/_count").get("count", -1)
    stats = client.request("GET", f"/{index}/_stats/docs").get("_all", {}).get("total", {}).get("docs", {})
    if count != record["docs"] or stats.get("deleted", 0):
        raise UserError(f"{index} holds {count} documents ({stats.get('deleted', 0)} deleted copies) after its "
                        f"ingest, not {record['docs']}; fix: run the command again with --force")
    record.update(state=COMPLETE)
    _save(client, index, record)
    return record


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
