"""OpenSearch's built-in ``english`` analyzer against the flat index's (Anserini's English
analyzer, in this process), on every document and every distinct query of each dataset.

    python benchmarks/english_analyzer.py [--dataset scifact nfcorpus medquad squad]
                                          [--opensearch VERSION | --url URL] [--analyzer english]
                                          [--json-out F] [--record]

It starts its own one-node local cluster (``bm25aug.opensearch.local``, OpenSearch ``--opensearch``,
default the local default; deleted at the end) or takes yours (``--url``), creates an empty index
``--index`` whose ``text`` field has ``"analyzer": "english"`` (``--analyzer``: another built-in
one, such as ``standard``, the control that shows the check can fail; opensearch-py; removed at the end,
and an index of that name already there is refused, never touched) and checks, through the
product's own ``FieldAnalysis`` (what opening ``?field=`` checks: the cluster's ``_analyze`` on
the index and field, batched, its tokens compared with ``bm25aug.lucene.analysis.analyze``):

* the product's fixed probe text (``field_analysis.PROBE``);
* every document's contents, title and text joined as the flat index joins them
  (``Document.contents``), each document counted, repeats too;
* every distinct query text of every split.

The index allows ``MAX_TOKEN_COUNT`` tokens an ``_analyze`` (``index.analyze.max_token_count``), so
every document of these sets is compared whole, not in pieces. A batch that differs is checked
again text by text: the counts are of texts whose tokens differ, with the first ``SHOWN``
differences as the product words them.

``--record`` puts the run into ``docs/data/english_analyzer.json``, one entry per engine and
analyzer: a dataset measured again replaces that entry's row for it, the others stay. ``docs/scale-out.md``'s table
is generated from it (``bm25aug.reproduce.cluster_tables.analyzer_table``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.opensearch.client import Client, ClusterError, ClusterURL
from bm25aug.opensearch.field_analysis import PROBE, FieldAnalysis

RECORD = Path("docs/data/english_analyzer.json")
DATASETS = ["scifact", "nfcorpus", "medquad", "squad"]
INDEX = "bm25aug-english-analyzer"
FIELD = "text"
MAX_TOKEN_COUNT = 100_000  # tokens (and so characters) an _analyze may take: the longest document whole
CHUNK = 256  # texts checked by one FieldAnalysis.check; a chunk that differs is checked text by text
SHOWN = 5  # differences kept a dataset, of documents and of queries
READ_TIMEOUT_S = 120.0  # a 512 MB node on a loaded machine


def created(client: Client, name: str, where: str, analyzer: str) -> None:
    """An empty index ``name`` with one text field analyzed by ``analyzer``; refused if ``name`` exists."""
    if client.call(f"HEAD /{name}", lambda: client.opensearch.indices.exists(index=name)):
        raise UserError(f"{where} already has an index {name!r}, which this benchmark would not touch; fix: pass "
                        f"--index with a name the cluster does not use")
    body = {"settings": {"index": {"number_of_shards": 1, "number_of_replicas": 0,
                                   "analyze": {"max_token_count": MAX_TOKEN_COUNT}}},
            "mappings": {"properties": {FIELD: {"type": "text", "analyzer": analyzer}}}}
    client.call(f"PUT /{name}", lambda: client.opensearch.indices.create(index=name, body=body))


def compared(analysis: FieldAnalysis, texts: list[tuple[str, str]]) -> tuple[int, list[str]]:
    """How many of ``texts`` (label, text) the field analyzes otherwise than the flat index, and
    the first ``SHOWN`` differences (the product's one-line messages)."""
    differ, shown = 0, []
    for at in range(0, len(texts), CHUNK):
        chunk = texts[at:at + CHUNK]
        if difference(analysis, chunk) is None:
            continue
        for label, text in chunk:
            if (message := difference(analysis, [(label, text)])) is not None:
                differ += 1
                if len(shown) < SHOWN:
                    shown.append(message)
    return differ, shown


def difference(analysis: FieldAnalysis, texts: list[tuple[str, str]]) -> str | None:
    """The product's message for the first of ``texts`` whose tokens differ; None when none does.
    Any other failure (the cluster's, a malformed answer) ends the run."""
    try:
        analysis.check([text for _, text in texts], [label for label, _ in texts])
    except ClusterError:
        raise
    except UserError as e:
        if not str(e).startswith(f"{analysis.where}: field {analysis.field!r} does not analyze text"):
            raise
        return str(e)
    return None


def queries(dataset) -> dict[str, str]:
    """Every distinct query text of the dataset's splits, labelled by its first split and id."""
    found: dict[str, str] = {}
    for split in dataset.splits():
        for qid, text in dataset.split(split).queries.items():
            found.setdefault(text, f"query {qid!r} ({split})")
    return found


def measure(analysis: FieldAnalysis, name: str) -> dict:
    """One dataset's documents and distinct queries compared."""
    start = time.perf_counter()
    dataset = load_dataset(name)
    docs = [(f"document {docid!r}", doc.contents) for docid, doc in dataset.corpus.items()]
    docs_differ, doc_diffs = compared(analysis, docs)
    texts = [(label, text) for text, label in queries(dataset).items()]
    queries_differ, query_diffs = compared(analysis, texts)
    row = {"dataset": name, "documents": len(docs), "documents_differ": docs_differ, "queries": len(texts),
           "queries_differ": queries_differ, "document_differences": doc_diffs, "query_differences": query_diffs,
           "seconds": round(time.perf_counter() - start, 1), "command": command()}
    print(f"{name}: {row['documents']:,} documents ({docs_differ} differ), {row['queries']:,} distinct queries "
          f"({queries_differ} differ), {row['seconds']:.0f} s", flush=True)
    for message in doc_diffs + query_diffs:
        print(f"  {message}", flush=True)
    return row


def run(base: str, index: str, names: list[str], analyzer: str, credentials: bool) -> dict:
    """Every dataset checked on the cluster at ``base`` (through an index ``index`` made and removed
    here, its field analyzed by ``analyzer``)."""
    client = Client(ClusterURL.parse(f"{base}/{index}"), timeout=READ_TIMEOUT_S, credentials=credentials)
    about = client.request("GET", "/")["version"]
    engine = f"{about.get('distribution', 'opensearch')} {about['number']}"
    print(f"{engine} at {base}", flush=True)
    created(client, index, base, analyzer)
    try:
        analysis = FieldAnalysis(client, index, FIELD, f"{base}/{index}", MAX_TOKEN_COUNT)
        probe = difference(analysis, [("the probe text", PROBE)])
        print(f"probe text: {'differs: ' + probe if probe else 'the same tokens'}", flush=True)
        rows = [measure(analysis, name) for name in names]
    finally:
        client.call(f"DELETE /{index}", lambda: client.opensearch.indices.delete(index=index))
    return {"engine": engine, "version": about["number"], "analyzer": analyzer, "max_token_count": MAX_TOKEN_COUNT,
            "probe_differs": probe is not None, "probe_difference": probe, "datasets": rows, "command": command()}


def command() -> str:
    return "python " + " ".join(sys.argv)


def recorded(result: dict, path: Path = RECORD) -> list[dict]:
    """The record with ``result`` in: its engine and analyzer's entry replaced, that entry's rows of
    datasets not measured now kept (ahead of the new ones); ``english`` first, then newest engine first."""
    runs = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    same = lambda r: (r["engine"], r["analyzer"]) == (result["engine"], result["analyzer"])  # noqa: E731
    old = next((r for r in runs if same(r)), None)
    if old is not None:
        now = {row["dataset"] for row in result["datasets"]}
        result = {**result, "datasets": [r for r in old["datasets"] if r["dataset"] not in now] + result["datasets"]}
    runs = [r for r in runs if not same(r)] + [result]
    return sorted(runs, key=lambda r: (r["analyzer"] == "english", [int(p) for p in r["version"].split(".")
                                                                    if p.isdigit()]), reverse=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", nargs="+", default=DATASETS, help=f"datasets to check (default: {' '.join(DATASETS)})")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--opensearch", help="the version a local cluster runs (default: bm25aug cluster's default)")
    where.add_argument("--url", help="a cluster of yours (http://HOST:PORT[,...]) instead of a local one started here")
    p.add_argument("--analyzer", default="english", help="the field's built-in analyzer (default: english; "
                   "standard: a control that differs)")
    p.add_argument("--index", default=INDEX, help=f"the name of the empty index made and removed (default: {INDEX})")
    p.add_argument("--json-out")
    p.add_argument("--record", action="store_true", help=f"put the run into {RECORD}")
    args = p.parse_args()
    try:
        result = checked(args)
    except UserError as e:
        sys.exit(f"error: {e}")
    from bm25aug.reproduce.cluster_tables import analyzer_table

    print(analyzer_table([result]))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.record:
        RECORD.write_text(json.dumps(recorded(result), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def checked(args) -> dict:
    """The run on ``--url``, or on a one-node local cluster started and deleted here."""
    from bm25aug.opensearch import local

    for name in args.dataset:
        load_dataset(name)  # a missing dataset is named before any cluster starts
    if args.url:
        return run(args.url.rstrip("/"), args.index, args.dataset, args.analyzer, credentials=True)
    parent = Path(tempfile.mkdtemp(prefix="bm25aug-english-analyzer-"))
    try:
        state = local.start(1, parent / "cluster", heap="512m", opensearch=args.opensearch)
        try:
            return run(state["url"], args.index, args.dataset, args.analyzer, credentials=False)
        finally:
            local.delete(parent / "cluster")
    finally:
        shutil.rmtree(parent, ignore_errors=True)


if __name__ == "__main__":
    main()
