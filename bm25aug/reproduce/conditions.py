"""Re-run the recorded results (``reproductions.yaml``) and mark each as reproduced or not.

    python -m bm25aug.reproduce [--only PATTERN] [--fast] [--out runs/reproduce]
    python -m bm25aug.reproduce --write-readme      # regenerate the tables of README.md and docs/
    python -m bm25aug.reproduce --record [--only PATTERN]  # after a change meant to move results

Each condition's command runs as it is written (``python eval.py ...`` with ``--json-out``
added), in the repository root, so that what is checked is what a user types: a ``python eval.py``
command by running the script itself in this process (``runpy``), so that every condition shares
one interpreter and one JVM; any other command (a training) as a subprocess. Exits 1 when any
metric misses its tolerance. The table is also written as Markdown and JSON under ``--out``.
``--record`` writes the run's values into ``reproductions.yaml`` instead of failing on them
(then ``--write-readme``), except where an exact baseline moved: that is a bug, never a new result.
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import json
import logging
import os
import re
import runpy
import shlex
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import yaml

from bm25aug.errors import UserError
from bm25aug.io import atomic_write_text, write_json
from bm25aug.outputs import check_output_path, check_outputs
from bm25aug.reproduce.tables import write_docs

CONDITIONS_FILE = Path(__file__).with_name("reproductions.yaml")
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Condition:
    name: str
    tables: list[str]  # the README blocks the condition's row appears in
    row: str
    command: str
    expected: dict[str, float]
    tolerance: dict[str, float]
    fast: bool = False
    train: str | None = None
    seeds: dict | None = None
    method: str | None = None  # read this method's metrics from the command's run (a companion); None: its own
    reported: dict[str, float] | None = None  # shown in the README, not checked (e.g. p50 latency)


def load_conditions(path: Path = CONDITIONS_FILE) -> list[Condition]:
    data = yaml.safe_load(path.read_text())
    conditions = []
    for raw in data["conditions"]:
        tol = raw.get("tolerance", 0.0)
        tolerance = tol if isinstance(tol, dict) else {m: float(tol) for m in raw["expected"]}
        tables = raw["table"] if isinstance(raw["table"], list) else [raw["table"]]
        conditions.append(Condition(raw["name"], tables, raw["row"], raw["command"],
                                    {k: float(v) for k, v in raw["expected"].items()}, tolerance,
                                    bool(raw.get("fast")), raw.get("train"), raw.get("seeds"), raw.get("method"),
                                    raw.get("reported")))
    return conditions


def _run(command: str, extra: list[str]) -> None:
    args = shlex.split(command)
    if args[:2] == ["python", "eval.py"]:
        return _run_eval(command, [*args[2:], *extra])
    if args[0] == "python":
        args[0] = sys.executable
    proc = subprocess.run([*args, *extra], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"`{command}` failed ({tail}); fix: run it by hand to see why")


def _run_eval(command: str, argv: list[str]) -> None:
    """``python eval.py ARGV``: the script itself (``runpy``, as ``python`` runs it), in this process
    and in the repository root; its printed table is kept out of this run's output."""
    out, err, cwd, saved = io.StringIO(), io.StringIO(), os.getcwd(), sys.argv
    root = logging.getLogger()
    handlers, level, tail = root.handlers[:], root.level, None
    try:
        os.chdir(ROOT)
        sys.argv = ["eval.py", *argv]
        with redirect_stdout(out), redirect_stderr(err):
            runpy.run_path(str(ROOT / "eval.py"), run_name="__main__")
        code = 0
    except SystemExit as e:  # eval.py ends with sys.exit(main(...))
        code = e.code if isinstance(e.code, int) else 1
    except Exception as e:  # whatever escaped eval.py: this condition failed, the others still run
        code, tail = 1, f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    finally:
        os.chdir(cwd)
        sys.argv = saved
        root.handlers[:], root.level = handlers, level  # a handler eval.py set on the captured stderr goes
    if code == 130:  # interrupted (Ctrl-C): the whole run stops, as it would in a subprocess's parent
        raise KeyboardInterrupt
    if code != 0:
        tail = tail or (err.getvalue().strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"`{command}` failed ({tail}); fix: run it by hand to see why")


def run_condition(condition: Condition, done: dict[str, dict] | None = None) -> dict[str, float]:
    """Train when needed, evaluate, and return the metrics of the condition's method. Conditions
    that share a command (a model and the baselines of its run) share one run through ``done``."""
    done = {} if done is None else done
    if condition.command not in done:
        if condition.train:
            _run(condition.train, [])
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "metrics.json"
            _run(condition.command, ["--json-out", str(out)])
            done[condition.command] = json.loads(out.read_text())
    got = done[condition.command]
    return got["methods"][condition.method] if condition.method else got


def compare(condition: Condition, got: dict) -> list[dict]:
    rows = []
    for metric, expected in condition.expected.items():
        value = got.get(metric)
        tol = condition.tolerance.get(metric, 0.0)
        ok = value is not None and abs(value - expected) <= tol + 1e-12
        rows.append({"condition": condition.name, "metric": metric, "expected": expected, "got": value,
                     "delta": None if value is None else value - expected, "tolerance": tol, "ok": ok})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| condition | metric | expected | got | delta | tolerance | |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        got = "–" if r["got"] is None else f"{r['got']:.4f}"
        delta = "–" if r["delta"] is None else f"{r['delta']:+.4f}"
        lines.append(f"| {r['condition']} | {r['metric']} | {r['expected']:.4f} | {got} | {delta} | "
                     f"±{r['tolerance']:g} | {'✔' if r['ok'] else '✘'} |")
    return "\n".join(lines)


def is_exact(condition: Condition) -> bool:
    """A BM25 baseline, checked to Pyserini's 4th decimal (the YAML's ``*exact``)."""
    return all(t <= 5e-5 for t in condition.tolerance.values())


def record(path: Path, conditions: list[Condition], got: dict[str, dict]) -> list[str]:
    """Write ``got[name]`` (this run's metrics) into the ``expected`` and ``reported`` lines of each
    condition in ``path``, line by line, so that comments and layout stay; the names rewritten.
    Refuses, writing nothing, when an exact baseline missed."""
    moved = [c.name for c in conditions if c.name in got and is_exact(c)
             and not all(r["ok"] for r in compare(c, got[c.name]))]
    if moved:
        raise UserError(f"exact baselines moved ({', '.join(moved)}): a bug, not a result to record; "
                        f"fix: find what changed their BM25 scores")
    new: dict[str, dict[str, str]] = {}
    for c in conditions:
        if c.name in got:
            values = got[c.name]
            missing = [m for m in [*c.expected, *(c.reported or {})] if values.get(m) is None]
            if missing:
                raise UserError(f"{c.name}: this run has no {', '.join(missing)}; fix: check its command's --json-out")
            new[c.name] = {"expected": json.dumps({m: round(values[m], 4) for m in c.expected}),
                           **({"reported": json.dumps({m: round(values[m], 1) for m in c.reported})} if c.reported else {})}
    lines, name = path.read_text().splitlines(keepends=True), None
    for i, line in enumerate(lines):
        if m := re.match(r"  - name: (\S+)\s*$", line):
            name = m.group(1)
        elif name in new and (m := re.match(r"    (expected|reported): \{.*\}\s*$", line)):
            lines[i] = f"    {m.group(1)}: {new[name][m.group(1)]}\n"
    atomic_write_text(path, "".join(lines))
    return list(new)


# --------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bm25aug.reproduce", description=__doc__.splitlines()[0])
    p.add_argument("--only", help="glob over condition names, e.g. 'scifact/*' or 'scifact'")
    p.add_argument("--fast", action="store_true", help="only the exact BM25 baselines (what CI runs)")
    p.add_argument("--out", default="runs/reproduce", help="where the Markdown and JSON tables go")
    p.add_argument("--write-readme", action="store_true", help="regenerate the tables of README.md and docs/ and stop")
    p.add_argument("--record", action="store_true", help="write this run's values into reproductions.yaml "
                                                         "(exact baselines must still match)")
    args = p.parse_args(argv)
    try:
        conditions = load_conditions()
        if args.write_readme:
            for path in write_docs(conditions):
                print(f"rewrote the generated blocks of {path}")
            return 0
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {out} is a file, and --out is the folder the tables are written into; fix: pass a "
                            f"folder (new or existing), e.g. --out runs/reproduce")
        check_outputs({"--out": out}, {"the conditions file": CONDITIONS_FILE}, folders=("--out",))
        check_output_path(out / "reproduce.md", "--out")
        pattern = args.only if not args.only or any(ch in args.only for ch in "*?[") else f"{args.only}*"
        chosen = [c for c in conditions if (not pattern or fnmatch.fnmatch(c.name, pattern)) and (c.fast or not args.fast)]
        if not chosen:
            raise UserError(f"no condition matches --only {args.only!r}; fix: use one of "
                            f"{', '.join(c.name for c in conditions)}")
        rows, start, done, got = [], time.perf_counter(), {}, {}
        for condition in chosen:
            print(f"running {condition.name} ...", flush=True)
            got[condition.name] = run_condition(condition, done)
            rows += compare(condition, got[condition.name])
        table = markdown(rows)
        print(table)
        print(f"{sum(r['ok'] for r in rows)}/{len(rows)} reproduced in {time.perf_counter() - start:.0f} s")
        atomic_write_text(out / "reproduce.md", table + "\n")
        write_json(out / "reproduce.json", rows)
        if args.record:
            names = record(CONDITIONS_FILE, conditions, got)
            print(f"recorded {len(names)} conditions in {CONDITIONS_FILE}; "
                  f"now run `python -m bm25aug.reproduce --write-readme`")
            return 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0 if all(r["ok"] for r in rows) else 1

