"""The benchmarks' own arithmetic (their timings are never tested: they print ratios in one run)."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_extrapolation_fits_a_line_through_every_size_and_never_prints_a_negative():
    """The NQ line that scale.py prints and docs/speed.md's extrapolation block is generated from."""
    from bm25aug.reproduce.tables import extrapolate

    rows = [{"size": size, "build_s_flat": 1e-4 * size + 2, "p50_ms_augmented": p50}
            for size, p50 in ((10_000, 4.0), (100_000, 9.0), (1_000_000, 3.0))]
    line = extrapolate(rows)
    assert "flat build 0.6 h" in line  # 1e-4 s a passage: 2,104 s at 21M
    assert "augmented p50 not extrapolated" in line and not re.search(r"-\d", line)
    assert "no extrapolation" in extrapolate(rows[1:])  # two points are not a line to trust


def test_the_load_client_counts_every_non_200_and_every_request():
    """bench_serve's keep-alive client against a loopback server that answers 503 to every third
    request: QPS over all requests, each 503 an error, the bodies read whole (keep-alive holds)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen, lock = [], threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client expects

        def do_GET(self):
            with lock:  # the server's threads answer at once: count each request exactly once
                seen.append(self.path)
                n = len(seen)
            body = b'{"candidates": []}' * (1 + n % 5)
            self.send_response(503 if n % 3 == 0 else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        paths = [f"/q{i}" for i in range(30)]
        result = _load("bench_serve").client(f"http://127.0.0.1:{server.server_address[1]}", paths, 4)
    finally:
        server.shutdown()
    assert sorted(seen) == sorted(paths) and result["requests"] == 30 and result["errors"] == 10
    assert result["qps"] > 0 and 0 < result["p50_ms"] <= result["p99_ms"]


def test_two_core_split_counts_python_apart_and_the_table_says_what_both_goals_need(monkeypatch):
    """benchmarks/two_core.py: CPU spent in the calling thread is Python's (P), CPU in another
    thread (as Java's pool) is J, both per query; the generated table's bound is
    2 max(P, J) / (P + J) and its budget lines follow from the QPS."""
    import hashlib
    import threading
    import time

    from bm25aug.reproduce.tables import two_core_table

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    two_core = _load("two_core")
    data, worker_s = bytes(1 << 24), []

    def batch(items, threads):
        def work():  # hashing a large buffer releases the GIL, as Lucene's threads run without it
            start = time.thread_time()
            for _ in range(len(items)):
                hashlib.sha256(data).digest()
            worker_s.append(time.thread_time() - start)

        worker = threading.Thread(target=work)
        worker.start()
        end = time.thread_time() + 0.005 * len(items)
        while time.thread_time() < end:
            pass
        worker.join()

    two_core.cpu_split(batch, [0] * 4, rounds=1)  # untimed: what the imports left running in other threads settles
    worker_s.clear()
    python_ms, java_ms = two_core.cpu_split(batch, [0] * 4, rounds=3)
    assert 5.0 <= python_ms < 6.0
    assert abs(java_ms - sum(worker_s) * 1000 / 12) < 0.2 * java_ms

    paths = {"bm25-flat": {"python_ms": 0.05, "java_ms": 0.45, "qps_1t": 2000, "qps_2t": 4000},
             "augmented": {"python_ms": 2.0, "java_ms": 0.5, "qps_1t": 450, "qps_2t": 720},
             "augmented, pre-encoded": {"python_ms": 0.05, "java_ms": 0.4, "qps_1t": 2200, "qps_2t": 3600}}
    table = two_core_table({"paths": paths})
    augmented_row = next(line for line in table.splitlines() if line.startswith("| augmented |"))
    assert augmented_row.endswith("| 1.60x | 1.11 | 1.60x | 1.78x |")  # 720/450; 1000/450/2.0; 2*2.0/2.5; 2000/450/2.5
    assert "at most 2,000 / (P + J) = 800 QPS, 0.20x bm25-flat's 4,000 (measured: 720, 0.18x)" in table
    assert "encoded beforehand it answers 0.90x" in table
    assert "at most 1.000 ms" in table and "leaves the encoding 0.550 ms" in table  # 4000/4000; 1 - (0.05 + 0.4)
    assert "it takes 1.950 (3.5x)" in table  # 2.0 - 0.05
    assert "J <= 0.150 ms" in table and "P <= 0.088 ms" in table  # 1.000 * 0.15; 0.5 * 0.3/1.7
