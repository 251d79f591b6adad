"""The server under load against the same searches in process, in one run.

    python benchmarks/bench_serve.py --dataset scifact --checkpoint checkpoints/scifact
        [--requests 10000] [--concurrency 1 8 32] [--hits 10] [--threads 2] [--json-out F] [--record F]

* In process first: p50 of one ``search`` at a time (model included for augmented) and QPS of one
  ``batch_search_arrays`` over the queries, for bm25 (flat) and augmented, as ``bench_search.py``.
* Then ``bm25aug serve`` as a real process on a loopback port, driven by a separate client process
  (this script with ``--client``: asyncio keep-alive connections, one request in flight each, so
  that the client costs little CPU). For each method and concurrency: QPS, p50 and p99, and
  every non-200 answer counted as an error. Requests cycle over the split's queries; every
  response carries its hits' stored documents, as Anserini's API does.
* Printed: server QPS at the highest concurrency over in-process batch QPS, and server p50 at
  concurrency 1 minus in-process p50. Both sides share this machine's cores with each other and
  with the client, so compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import numpy as np


# ------------------------------------------------------------------------------------- client
async def _one_connection(host: str, port: int, paths: list[str], start: int, step: int, latencies: list[float],
                          statuses: list[int]) -> None:
    """Send ``paths[start::step]`` one after another on one keep-alive connection."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for path in paths[start::step]:
            began = time.perf_counter()
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            status_line = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - began)
            statuses.append(int(status_line.split()[1]) if status_line else 0)
    finally:
        writer.close()


def client(url: str, paths: list[str], concurrency: int) -> dict:
    """Run every request at ``concurrency`` and return QPS, p50, p99 (ms) and the error count."""
    host, port = url.removeprefix("http://").split(":")
    latencies: list[float] = []
    statuses: list[int] = []

    async def run() -> None:
        await asyncio.gather(*(_one_connection(host, int(port), paths, i, concurrency, latencies, statuses)
                               for i in range(concurrency)))

    began = time.perf_counter()
    asyncio.run(run())
    elapsed = time.perf_counter() - began
    ms = np.asarray(latencies) * 1000
    return {"requests": len(paths), "concurrency": concurrency, "qps": len(latencies) / elapsed,
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "errors": sum(s != 200 for s in statuses) + len(paths) - len(statuses)}


def drive(url: str, paths: list[str], concurrency: int) -> dict:
    """``client`` in a separate process, so that its CPU is not the server's or this process's."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(paths, f)
        f.flush()
        out = subprocess.run([sys.executable, __file__, "--client", url, "--paths", f.name, "--concurrency",
                              str(concurrency)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


# ------------------------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(index: Path, checkpoint: Path, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "bm25aug.cli", "serve", "--index", f"bench={index}", "--model",
                               f"bench={checkpoint}", "--port", str(port), "--threads", str(threads)],
                              stdout=open(log, "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"error: the server exited; its log: {log}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return server, url
        except OSError:
            time.sleep(0.5)
    server.terminate()
    raise SystemExit(f"error: the server did not start in 600 s; its log: {log}")


# --------------------------------------------------------------------------------- in process
def in_process(index: Path, checkpoint: Path, queries: list[str], hits: int, threads: int) -> dict[str, dict]:
    """p50 of one search at a time and QPS of one batch, per method, in this process."""
    from bm25aug.search.augmented import AugmentedSearcher

    augmented = AugmentedSearcher.from_pretrained(checkpoint, index)
    results = {}
    for method, searcher in (("bm25", augmented.bm25), ("augmented", augmented)):
        searcher.batch_search_arrays(queries[:50], hits, threads)  # warm-up
        began = time.perf_counter()
        searcher.batch_search_arrays(queries, hits, threads)
        batch_qps = len(queries) / (time.perf_counter() - began)
        latencies = []
        for query in queries[:200]:
            began = time.perf_counter()
            searcher.search_arrays(query, hits)
            latencies.append(time.perf_counter() - began)
        results[method] = {"batch_qps": batch_qps, "p50_ms": float(np.percentile(latencies, 50) * 1000)}
    return results


def run(dataset_name: str, checkpoint_arg: str, split: str | None, hits: int, threads: int, requests: int,
        levels: list[int]) -> dict:
    from bm25aug.data.registry import load_dataset
    from bm25aug.eval.evaluate import resolve_checkpoint
    from bm25aug.lucene.index import ensure_index

    dataset = load_dataset(dataset_name)
    checkpoint = resolve_checkpoint(checkpoint_arg, dataset_name, False)
    index = ensure_index(dataset, "flat")
    queries = [q for q in dataset.split(split or dataset.spec.eval_split).queries.values() if q.strip()]
    local = in_process(index, checkpoint, queries, hits, threads)
    log = Path(tempfile.gettempdir()) / "bench_serve_server.log"
    server, url = start_server(index, checkpoint, threads, log)
    rows = []
    try:
        for method in ("bm25", "augmented"):
            for c in levels:
                n = requests if c == max(levels) else min(requests, 100 * c + 500)
                paths = [f"/v1/bench/search?{urlencode({'query': queries[i % len(queries)], 'hits': hits, 'method': method})}"
                         for i in range(n)]
                drive(url, paths[:min(n, 4 * c + 50)], c)  # warm-up at this concurrency
                row = {"method": method, **drive(url, paths, c)}
                rows.append(row)
                print(f"{method:9} c={c:<3} {row['qps']:8.1f} QPS  p50 {row['p50_ms']:7.2f} ms  p99 "
                      f"{row['p99_ms']:7.2f} ms  errors {row['errors']}", flush=True)
    finally:
        server.terminate()
        server.wait(60)
    top = max(levels)
    summary = {}
    for method in ("bm25", "augmented"):
        at = {r["concurrency"]: r for r in rows if r["method"] == method}
        summary[method] = {"server_over_batch_qps": at[top]["qps"] / local[method]["batch_qps"],
                           "p50_c1_minus_in_process_ms": at[min(levels)]["p50_ms"] - local[method]["p50_ms"]}
        print(f"{method}: in process batch {local[method]['batch_qps']:.1f} QPS, p50 {local[method]['p50_ms']:.2f} ms; "
              f"server at c={top} / batch = {summary[method]['server_over_batch_qps']:.2f}x; server p50 at "
              f"c={min(levels)} - in process = {summary[method]['p50_c1_minus_in_process_ms']:+.2f} ms")
    return {"dataset": dataset_name, "num_docs": len(dataset.corpus), "hits": hits, "threads": threads,
            "cpus": os.cpu_count(), "in_process": local, "server": rows, "summary": summary}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--checkpoint", default="checkpoints/scifact", help="a train.py output dir or a model dir")
    p.add_argument("--split")
    p.add_argument("--hits", type=int, default=10)
    p.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1), help="Java search threads")
    p.add_argument("--requests", type=int, default=10_000, help="requests at the highest concurrency")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--json-out", help="the run as one JSON object")
    p.add_argument("--record", help="write the run where docs/usage-serve.md's table is generated from "
                                    "(docs/data/serve.json), with this command")
    p.add_argument("--client", help=argparse.SUPPRESS)  # internal: the load-generating child process
    p.add_argument("--paths", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.client:
        print(json.dumps(client(args.client, json.loads(Path(args.paths).read_text()), args.concurrency[0])))
        return
    from bm25aug.errors import UserError
    from bm25aug.io import write_json

    if min(args.concurrency) < 1 or args.requests < max(args.concurrency) or args.hits < 1:
        raise SystemExit("error: --concurrency, --hits and --requests must be positive, with --requests at least "
                         "the highest concurrency")
    try:
        result = run(args.dataset, args.checkpoint, args.split, args.hits, args.threads, args.requests,
                     sorted(set(args.concurrency)))
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    if args.json_out:
        write_json(args.json_out, result)
    if args.record:
        write_json(args.record, {"command": "python " + " ".join(sys.argv), "runs": [result]})


if __name__ == "__main__":
    main()
