"""Anserini's REST contract (issue 45): schemathesis, with the ``rest/openapi.yaml`` that the
Anserini jar Pyserini ships holds (read from the jar now, so a Pyserini upgrade that changes it
is tested here), finds no failure against ``bm25aug serve``; where Anserini's own server and its
spec part, bm25aug does what the server does, as docs/usage-serve.md says.

Every check runs (the config file enables them all: a check named on the command line would
override the per-operation settings), and the run is told, each for a reason the docs give:
* ``index`` is the served name ``scifact`` (the spec's is any index path or prebuilt name);
* POST is not probed for a 405 on ``/{index}/search``, nor a 405's ``Allow: GET, POST`` held
  to the spec's GET: bm25aug answers POST there (the weighted query); other methods get their 405;
* a schema-valid search may be a 400, as the spec lists: a blank query (Anserini's server
  answers "Parameter 'query' is required"), hits past Java's int (its "must be an integer"), a
  query over ``--max-query-chars``. Hits above 1000 are no longer among them (checked below)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest
import yaml

CONFIG = """\
[checks]
enabled = true

[parameters]
"path.index" = "scifact"

[[operations]]
include-path = "/{index}/search"
phases.coverage.unexpected-methods = ["get", "put", "delete", "options", "patch", "trace", "query"]
checks.allow_header_conformance.enabled = false
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "404"]
"""


@pytest.fixture(scope="module")
def anserini_spec() -> str:
    from bm25aug.lucene.jvm import anserini_jar

    with zipfile.ZipFile(anserini_jar()) as jar:
        return jar.read("rest/openapi.yaml").decode("utf-8")


@pytest.fixture(scope="module")
def server(scifact_flat, tmp_path_factory):
    """``bm25aug serve`` on SciFact without a model, with its defaults (``max_hits`` included)."""
    log = tmp_path_factory.mktemp("contract") / "server.log"
    process = subprocess.Popen([sys.executable, "-m", "bm25aug.cli", "serve", "--index", f"scifact={scifact_flat}",
                                "--port", "0", "--threads", "1"], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while "REST API on http://" not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    yield "http://127.0.0.1:" + log.read_text().split("REST API on http://127.0.0.1:")[1].split()[0]
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0
    assert "Traceback" not in log.read_text()


def test_the_spec_still_says_what_the_choices_rest_on(anserini_spec):
    """A newer spec that changes these needs the choices (and docs/usage-serve.md) looked at again."""
    spec = yaml.safe_load(anserini_spec)
    assert set(spec["paths"]) == {"/{index}/search", "/{index}/doc/{docid}"}
    assert all(set(path) == {"get"} for path in spec["paths"].values())  # GET only
    search = spec["paths"]["/{index}/search"]["get"]
    params = {p["name"]: p for p in search["parameters"]}
    assert params["query"]["schema"] == {"type": "string"} and params["query"]["required"]  # "" is schema-valid
    assert params["hits"]["schema"] == {"type": "integer", "minimum": 1, "default": 10}  # no maximum
    assert "400" in search["responses"] and "503" not in search["responses"]


def test_schemathesis_with_anserinis_own_spec_finds_no_failure(server, anserini_spec, tmp_path):
    (tmp_path / "openapi.yaml").write_text(anserini_spec, encoding="utf-8")
    (tmp_path / "schemathesis.toml").write_text(CONFIG, encoding="utf-8")
    run = subprocess.run([str(Path(sys.executable).parent / "schemathesis"), "--config-file", "schemathesis.toml",
                          "run", "openapi.yaml", "--url", f"{server}/v1", "--max-examples", "150",
                          "--seed", "7", "--generation-database", "none", "--request-timeout", "60",
                          "--continue-on-failure"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0 and " passed" in run.stdout and "failed" not in run.stdout, run.stdout[-4000:]


def test_hits_above_1000_are_answered_as_anserini_does(server):
    """Anserini takes any positive int and Lucene answers at most the index's size: so does bm25aug,
    up to its --max-hits (10,000 by default; SciFact has 5,183 documents)."""
    for hits in (1001, 5000, 10**9):
        response = httpx.get(f"{server}/v1/scifact/search", params={"query": "cell", "hits": hits}, timeout=120)
        assert response.status_code == 200, response.text
        assert 1000 < len(response.json()["candidates"]) <= 5183
    too_big = httpx.get(f"{server}/v1/scifact/search", params={"query": "cell", "hits": 2**31}, timeout=60)
    assert too_big.status_code == 400  # as Anserini's "Parameter 'hits' must be an integer"


def test_a_blank_query_is_a_400_as_anserini_answers_it(server):
    for query in ("", "  "):
        response = httpx.get(f"{server}/v1/scifact/search", params={"query": query}, timeout=60)
        assert response.status_code == 400 and "empty" in response.json()["error"]
