"""A flood of never-seen query words against a running server: its memory must level off.

    python benchmarks/df_flood.py --index indexes/scifact.flat --model general [--rounds 5]
        [--requests 1500] [--words 200] [--record docs/data/df_flood.json]

Starts ``bm25aug serve`` on a free port, then each round sends ``--requests`` augmented searches of
``--words`` random 8-letter words (8 client threads), and reads the server's resident memory after
it; a last round sends the same words again (the control). Every word's document frequency is
cached (``bm25aug.cache.DF_ENTRIES`` entries at most, an LRU), so past the first rounds the memory
stays flat instead of growing with every distinct word (probe round five, S2: 994 MB to 1,405 MB
over 1.5 M words, no plateau).
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import string
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def flood(port: int, requests: int, words: int, rng: random.Random | None) -> int:
    """``requests`` searches of random words (``rng``) or of one fixed text (None); the errors."""
    fixed = " ".join(["wordless"] * words)
    lock, left, errors = threading.Lock(), [requests], [0]

    def worker():
        while True:
            with lock:
                if not left[0]:
                    return
                left[0] -= 1
                text = fixed if rng is None else " ".join(
                    "".join(rng.choice(string.ascii_lowercase) for _ in range(8)) for _ in range(words))
            query = urllib.parse.urlencode({"query": text, "hits": 1, "method": "augmented"})
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/x/search?{query}", timeout=120).read()
            except OSError:
                errors[0] += 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", required=True)
    parser.add_argument("--model", default="general")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--words", type=int, default=200)
    parser.add_argument("--record", help="write the rows to this JSON file")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "bm25aug.cli", "serve", "--index", f"x={args.index}", "--model",
                               f"x={args.model}", "--port", str(port)], stderr=subprocess.PIPE, text=True)
    try:
        for line in server.stderr:
            if "REST API on" in line or line.startswith("error"):
                break
        rows, rng = [{"round": 0, "distinct_words": 0, "rss_mb": rss_mb(server.pid)}], random.Random(7)
        for n in range(1, args.rounds + 2):
            control = n > args.rounds
            start = time.perf_counter()
            errors = flood(port, args.requests, args.words, None if control else rng)
            seconds, sent = round(time.perf_counter() - start, 1), 0 if control else args.requests * args.words
            rows.append({"round": n, "control": control, "errors": errors, "seconds": seconds,
                         "distinct_words": rows[-1]["distinct_words"] + sent, "rss_mb": rss_mb(server.pid)})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        server.terminate()
        server.wait(60)
    if args.record:
        Path(args.record).write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
