"""The server under load against the same searches in process, in one run.

    python benchmarks/bench_serve.py --dataset scifact --checkpoint checkpoints/scifact
        [--requests 10000] [--concurrency 1 8 32] [--hits 10] [--threads 2] [--json-out F] [--record F]
        [--untrained-model] [--idle 1000] [--stop-requests 300] [--stop-shutdown-s 3] [--no-hardening]

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
* Then hostile clients (``hardening``): ``--requests`` augmented searches at the highest
  concurrency while another process holds ``--idle`` connections open, each with half a request
  head, reopened as soon as the server closes it; then a fresh server sent SIGTERM with
  ``--stop-requests`` searches of 1,000 hits in flight: its exit time against
  ``--stop-shutdown-s`` + 2 s, and what each client got.
* ``--untrained-model`` serves an untrained flat model (the encoder's cost, not its quality, as
  the tests do) instead of ``--checkpoint``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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


# --------------------------------------------------------------------------- hostile clients
async def _hold_idle(host: str, port: int, count: int) -> dict:
    """Hold ``count`` connections open, each with half a request head, until stdin closes; one the
    server closes is opened again at once. The first ones open over 5 s, so that the server's
    request timeout does not close them all at once. Prints ``ready`` once all are open."""
    stop = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    state = {"open": 0, "opened": 0}

    async def one(i: int) -> None:
        await asyncio.sleep(5 * i / count)
        while not stop.done():
            try:
                reader, writer = await asyncio.open_connection(host, port)
            except OSError:
                await asyncio.sleep(0.1)
                continue
            writer.write(f"GET /health HTTP/1.1\r\nHost: {host}\r\n".encode())
            state["open"], state["opened"] = state["open"] + 1, state["opened"] + 1
            closed = asyncio.ensure_future(reader.read(1))  # the server's 408, or its close
            await asyncio.wait({closed, stop}, return_when=asyncio.FIRST_COMPLETED)
            closed.cancel()
            state["open"] -= 1
            writer.close()

    tasks = [asyncio.ensure_future(one(i)) for i in range(count)]
    while state["open"] < count:
        await asyncio.sleep(0.1)
    print("ready", flush=True)
    await asyncio.gather(*tasks, return_exceptions=True)
    return {"idle": count, "reopened": state["opened"] - count}


async def _stop_clients(host: str, port: int, paths: list[str], timeout: float) -> list[str]:
    """Each path on a connection of its own; prints ``sent`` once all are sent; each one's outcome:
    its status, ``closed`` (closed without an answer), ``refused`` or ``no answer`` by ``timeout``."""
    sent = asyncio.Semaphore(0)

    async def one(path: str) -> str:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            sent.release()
            return "refused"
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            await writer.drain()
            sent.release()
            line = await asyncio.wait_for(reader.readline(), timeout)
            return line.split()[1].decode() if line else "closed"
        except asyncio.TimeoutError:
            return "no answer"
        except (ConnectionError, IndexError):
            return "closed"
        finally:
            writer.close()

    tasks = [asyncio.ensure_future(one(p)) for p in paths]
    for _ in paths:
        await asyncio.wait_for(sent.acquire(), timeout)
    print("sent", flush=True)
    return list(await asyncio.gather(*tasks))


def _sockets(pid: int) -> int:
    """Sockets process ``pid`` holds open (Linux: its /proc fd table)."""
    def link(path: str) -> str:
        with contextlib.suppress(OSError):
            return os.readlink(path)
        return ""
    return sum(link(entry.path).startswith("socket:") for entry in os.scandir(f"/proc/{pid}/fd"))


def idle_load(server: subprocess.Popen, url: str, paths: list[str], concurrency: int, idle: int) -> dict:
    """``paths`` at ``concurrency`` while another process holds ``idle`` connections open."""
    holder = subprocess.Popen([sys.executable, __file__, "--idle-holder", url, "--idle", str(idle)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if holder.stdout.readline().strip() != "ready":
            raise SystemExit("error: the idle-connection holder did not get its connections open")
        baseline, counts, done = _sockets(server.pid) - idle, [], threading.Event()

        def sample() -> None:
            while not done.wait(0.25):
                counts.append(_sockets(server.pid) - baseline)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        load = drive(url, paths, concurrency)
        done.set()
        sampler.join()
        holder.stdin.close()
        return {**load, "method": "augmented", **json.loads(holder.stdout.read()), "server_min_open": min(counts),
                "server_mean_open": float(np.mean(counts))}
    finally:
        if holder.poll() is None:
            holder.kill()


def stop_under_load(server: subprocess.Popen, url: str, paths: list[str], shutdown_s: int, log: Path) -> dict:
    """SIGTERM once every one of ``paths`` is sent on a connection of its own: the seconds to exit,
    and what each client got."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(paths, f)
        f.flush()
        clients = subprocess.Popen([sys.executable, __file__, "--stop-client", url, "--paths", f.name,
                                    "--stop-shutdown-s", str(shutdown_s)], stdout=subprocess.PIPE, text=True)
        if clients.stdout.readline().strip() != "sent":
            raise SystemExit("error: the stop client could not send its requests")
        time.sleep(0.5)  # received by the server
        server.send_signal(signal.SIGTERM)
        began = time.perf_counter()
        try:
            code = server.wait(shutdown_s + 60)
        except subprocess.TimeoutExpired:
            server.kill()
            code = "killed after shutdown_s + 60 s"
        exit_s = time.perf_counter() - began
        outcomes = json.loads(clients.communicate(timeout=shutdown_s + 120)[0])
    text = log.read_text()
    return {"requests": len(paths), "shutdown_s": shutdown_s, "exit_code": code, "exit_s": exit_s,
            "stopped_printed": text.strip().splitlines()[-1:] == ["stopped"], "tracebacks": text.count("Traceback"),
            "outcomes": {k: outcomes.count(k) for k in sorted(set(outcomes))}}


def hardening(index: Path, checkpoint: Path, threads: int, queries: list[str], requests: int, concurrency: int,
              hits: int, idle: int, stop_requests: int, shutdown_s: int) -> dict:
    """The load with ``idle`` connections held open, then the stop with ``stop_requests`` in flight."""
    log = Path(tempfile.gettempdir()) / "bench_serve_hardening.log"
    server, url = start_server(index, checkpoint, threads, log)
    try:
        load = idle_load(server, url, search_paths(queries, requests, hits=hits), concurrency, idle)
    finally:
        server.terminate()
        server.wait(60)
    print(f"{load['requests']:,} requests at c={concurrency} with {idle:,} idle connections held (the server's "
          f"open connections, theirs and the load's: min {load['server_min_open']:,}, mean "
          f"{load['server_mean_open']:,.0f}; reopened {load['reopened']:,} times): {load['qps']:.1f} QPS, p50 "
          f"{load['p50_ms']:.2f} ms, p99 {load['p99_ms']:.2f} ms, errors {load['errors']}", flush=True)
    server, url = start_server(index, checkpoint, threads, log, ["--shutdown-s", str(shutdown_s)])
    stop = stop_under_load(server, url, search_paths(queries, stop_requests, hits=1000), shutdown_s, log)
    print(f"SIGTERM with {stop_requests} searches of 1,000 hits in flight, --shutdown-s {shutdown_s}: exit "
          f"{stop['exit_code']} after {stop['exit_s']:.2f} s (limit {shutdown_s + 2}), stopped printed "
          f"{stop['stopped_printed']}, tracebacks {stop['tracebacks']}, clients {stop['outcomes']}", flush=True)
    return {"idle_load": load, "stop": stop}


# ------------------------------------------------------------------------------------- server
def search_paths(queries: list[str], n: int, **params) -> list[str]:
    """``n`` search URLs, cycling over ``queries``."""
    return [f"/v1/bench/search?{urlencode({'query': queries[i % len(queries)], **params})}" for i in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(index: Path, checkpoint: Path, threads: int, log: Path,
                 extra: list[str] = ()) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "bm25aug.cli", "serve", "--index", f"bench={index}", "--model",
                               f"bench={checkpoint}", "--port", str(port), "--threads", str(threads), *extra],
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


def untrained_model(folder: Path) -> Path:
    """An untrained flat model, as the tests serve: the encoder's cost per query, not its quality."""
    from bm25aug.model.augmenter import QueryAugmenter

    QueryAugmenter.from_encoder(target="flat").eval().save_pretrained(folder)
    return folder


def run(dataset_name: str, checkpoint_arg: str | None, split: str | None, hits: int, threads: int, requests: int,
        levels: list[int], hardened: dict | None) -> dict:
    from bm25aug.data.registry import load_dataset
    from bm25aug.eval.checkpoints import resolve_checkpoint
    from bm25aug.lucene.index import ensure_index

    dataset = load_dataset(dataset_name)
    checkpoint = (untrained_model(Path(tempfile.mkdtemp()) / "untrained") if checkpoint_arg is None
                  else resolve_checkpoint(checkpoint_arg, dataset_name, False))
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
                paths = search_paths(queries, n, hits=hits, method=method)
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
    result = {"dataset": dataset_name, "num_docs": len(dataset.corpus), "hits": hits, "threads": threads,
              "cpus": os.cpu_count(), "model": "untrained" if checkpoint_arg is None else str(checkpoint),
              "in_process": local, "server": rows, "summary": summary}
    if hardened is not None:
        result["hardening"] = hardening(index, checkpoint, threads, queries, requests, top, hits, **hardened)
    return result


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
    p.add_argument("--untrained-model", action="store_true", help="serve an untrained flat model, not --checkpoint")
    p.add_argument("--idle", type=int, default=1000, help="idle connections held open during the hardening load")
    p.add_argument("--stop-requests", type=int, default=300, help="searches in flight at the SIGTERM")
    p.add_argument("--stop-shutdown-s", type=int, default=3, help="the stopped server's --shutdown-s")
    p.add_argument("--no-hardening", action="store_true", help="skip the hostile-client part")
    p.add_argument("--client", help=argparse.SUPPRESS)  # internal: the load-generating child process
    p.add_argument("--idle-holder", help=argparse.SUPPRESS)  # internal: the idle-connection holder
    p.add_argument("--stop-client", help=argparse.SUPPRESS)  # internal: the clients at the SIGTERM
    p.add_argument("--paths", help=argparse.SUPPRESS)
    args = p.parse_args()
    if url := args.client or args.idle_holder or args.stop_client:  # a child process of this benchmark
        host, port = url.removeprefix("http://").split(":")
        paths = json.loads(Path(args.paths).read_text()) if args.paths else []
        print(json.dumps(client(url, paths, args.concurrency[0]) if args.client else
                         asyncio.run(_hold_idle(host, int(port), args.idle)) if args.idle_holder else
                         asyncio.run(_stop_clients(host, int(port), paths, args.stop_shutdown_s + 30))))
        return
    from bm25aug.errors import UserError
    from bm25aug.io import write_json

    if min(args.concurrency) < 1 or args.requests < max(args.concurrency) or args.hits < 1:
        raise SystemExit("error: --concurrency, --hits and --requests must be positive, with --requests at least "
                         "the highest concurrency")
    try:
        hardened = None if args.no_hardening else {"idle": args.idle, "stop_requests": args.stop_requests,
                                                   "shutdown_s": args.stop_shutdown_s}
        result = run(args.dataset, None if args.untrained_model else args.checkpoint, args.split, args.hits,
                     args.threads, args.requests, sorted(set(args.concurrency)), hardened)
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    if args.json_out:
        write_json(args.json_out, result)
    if args.record:
        write_json(args.record, {"command": "python " + " ".join(sys.argv), "runs": [result]})


if __name__ == "__main__":
    main()
