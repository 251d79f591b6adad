"""How a packaged model (``bm25aug.model.packaged``) is made: ``python -m bm25aug.model.packaged NAME``
trains its recipe (skipped when the run's best/ exists), exports best/ to int8 ONNX, and writes
``bm25aug/models/NAME`` with ``package.json`` (the size and digest of every file the runtime
reads) and its card. The runtime never imports this module."""

from __future__ import annotations

import json
from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.model.packaged import BUILDS, ONNX_FILE, PACKAGE_FILE, PACKAGED_ROOT, SHIPPABLE, file_record

# What is copied from best/ beside the ONNX file: the model's settings and the tokenizer's files.
TOKENIZER_PREFIXES = ("tokenizer", "special_tokens", "vocab")
# What a student's build names of its distillation (bm25aug.train.distill's flags).
STUDENT_SETTINGS = ("layers", "hidden", "start", "keep", "epochs", "pseudo_queries", "batch_size", "lr", "margin",
                    "aug_weight", "seed", "threads")
RUN_SETTINGS = "distill.json"  # a distillation run's settings (bm25aug.train.distill)


def build(name: str) -> Path:
    """Make the packaged model ``name``: train its recipe (skipped when the run's best/ exists),
    export best/ to int8 ONNX, and write ``bm25aug/models/NAME`` (one rename; the old one stays
    until the new one is whole)."""
    import subprocess
    import sys

    from bm25aug import recipes
    from bm25aug.data.registry import REGISTRY
    from bm25aug.model.config import CONFIG_NAME

    spec = BUILDS.get(name)
    if spec is None:
        raise UserError(f"no packaged model is called {name!r}; fix: use one of {', '.join(BUILDS)}")
    if "cut_from" in spec:
        return cut(name, spec)
    datasets = recipes.datasets(spec["recipe"])
    licenses = {d: REGISTRY[d].license for d in datasets}
    if bad := [f"{d} ({lic or 'unknown'})" for d, lic in licenses.items() if lic not in SHIPPABLE]:
        raise UserError(f"recipe {spec['recipe']} trains on {', '.join(bad)}, whose license does not let its model "
                        f"ship in this package; fix: train on sets under {', '.join(SHIPPABLE)}")
    root = Path(__file__).resolve().parents[2]
    run = root / spec["run"]
    if "teacher" in spec:
        check_student_run(name, spec, run)
    if not (run / "best" / CONFIG_NAME).exists():
        subprocess.run(training_command(spec, run, sys.executable, root), check=True, cwd=root)
    return _write(name, spec, licenses, run)


def check_student_run(name: str, spec: dict, run: Path) -> None:
    """A student's run folder, when it holds a model, is the run its build names: its
    ``distill.json`` holds the build's teacher and recipe and every distillation setting the build
    names (all of distill's, ``--threads`` aside), and no other. Else no package is cut from it:
    one line, naming what differs."""
    from bm25aug.model.config import CONFIG_NAME

    saved, fix = run / RUN_SETTINGS, f"fix: move {run} aside and rerun python -m bm25aug.model.packaged {name}"
    if not saved.exists():
        if (run / "best" / CONFIG_NAME).exists():
            raise UserError(f"{run} holds a model but no {RUN_SETTINGS}: it is not a distillation of {name}'s "
                            f"build; {fix}")
        return
    try:
        before = json.loads(saved.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{saved} is unreadable ({type(e).__name__}); {fix} (it trains the run again)") from None
    named = {"teacher": spec["teacher"], "recipe": spec["recipe"], **{k: spec[k] for k in STUDENT_SETTINGS}}
    keys = sorted((set(named) | set(before)) - {"threads"}) if isinstance(before, dict) else ["all"]
    if differs := [k for k in keys if not isinstance(before, dict) or named.get(k) != before.get(k, "(none)")]:
        raise UserError(f"{run} holds a distillation with other settings than {name}'s build "
                        f"({', '.join(differs)}); {fix}")


def training_command(spec: dict, run: Path, python: str = "python", root: Path = Path(".")) -> list[str]:
    """What makes a packaged model's run: its recipe trained by ``train.py``, or, for a student
    (``teacher`` in its build), the recipe's queries distilled from the teacher
    (``bm25aug.train.distill``) into a student of the build's shape."""
    if "teacher" not in spec:
        return [python, str(root / "train.py"), "--recipe", spec["recipe"], "--output-dir", str(run), "--resume"]
    shape = [arg for key in STUDENT_SETTINGS for arg in (f"--{key.replace('_', '-')}", str(spec[key]))]
    return [python, "-m", "bm25aug.train.distill", "--teacher", spec["teacher"], "--recipe", spec["recipe"], *shape,
            "--output-dir", str(run), "--resume"]


def _write(name: str, spec: dict, licenses: dict, run: Path) -> Path:
    """``bm25aug/models/NAME`` from the run's best/ (left as it is when cut from this very model)."""
    from bm25aug.io import atomic_dir, write_json
    from bm25aug.model.config import CONFIG_NAME
    from bm25aug.model.loading import load_model
    from bm25aug.model.onnx_encoder import export_source, onnx_path

    best = run / "best"
    source, made = export_source(best), PACKAGED_ROOT / name / PACKAGE_FILE
    if made.is_file() and json.loads(made.read_text()).get("source") == source:
        return PACKAGED_ROOT / name  # cut from this very model already: the binary in the history stays as it is
    onnx = onnx_path(best, load_model(best), source)
    with atomic_dir(PACKAGED_ROOT / name, PACKAGE_FILE, what="a packaged bm25aug model") as tmp:
        for file in best.iterdir():
            if file.is_file() and (file.name == CONFIG_NAME or file.name.startswith(TOKENIZER_PREFIXES)):
                (tmp / file.name).write_bytes(file.read_bytes())
        (tmp / ONNX_FILE).write_bytes(onnx.read_bytes())
        files = {f.name: file_record(f) for f in sorted(tmp.iterdir())}  # what the runtime reads, checked at load
        record = {"name": name, "recipe": spec["recipe"], "training_sets": licenses, "run": spec["run"],
                  "dev": _dev_record(run), "source": source, "onnx_digest": files[ONNX_FILE]["blake2b"],
                  "files": files, "bytes": sum(f["bytes"] for f in files.values()),
                  "command": f"python -m bm25aug.model.packaged {name}", **_student_record(spec)}
        write_json(tmp / PACKAGE_FILE, record)
        (tmp / "README.md").write_text(_card(record), encoding="utf-8")
    return PACKAGED_ROOT / name


def cut(name: str, spec: dict) -> Path:
    """``bm25aug/models/NAME`` as the packaged model ``spec["cut_from"]`` with its graph cut to
    ``spec["outputs"]`` (``onnx.utils.Extractor``: the nodes those outputs need, bit for bit the
    same values) and ``use_augmentation`` off: the same encoder and w head, no a(q) head. Left as it
    is when cut from this very file already."""
    import onnx
    from onnx.utils import Extractor

    from bm25aug.io import atomic_dir, write_json
    from bm25aug.model.config import CONFIG_NAME
    from bm25aug.model.packaged import check_files

    source = PACKAGED_ROOT / spec["cut_from"]
    parent, made = check_files(source), PACKAGED_ROOT / name / PACKAGE_FILE
    origin = {"name": spec["cut_from"], "onnx_digest": parent["onnx_digest"], "outputs": spec["outputs"]}
    if made.is_file() and json.loads(made.read_text()).get("cut_from") == origin:
        return PACKAGED_ROOT / name
    graph = onnx.load(str(source / ONNX_FILE))
    inputs = [i.name for i in graph.graph.input]
    with atomic_dir(PACKAGED_ROOT / name, PACKAGE_FILE, what="a packaged bm25aug model") as tmp:
        onnx.save(Extractor(graph).extract_model(inputs, spec["outputs"]), str(tmp / ONNX_FILE))
        config = json.loads((source / CONFIG_NAME).read_text(encoding="utf-8"))
        write_json(tmp / CONFIG_NAME, {**config, "use_augmentation": False})
        for file in parent["files"]:
            if file.startswith(TOKENIZER_PREFIXES):
                (tmp / file).write_bytes((source / file).read_bytes())
        files = {f.name: file_record(f) for f in sorted(tmp.iterdir())}
        record = {**{k: parent[k] for k in ("recipe", "training_sets", "run", "dev", "source")}, "name": name,
                  "cut_from": origin, "onnx_digest": files[ONNX_FILE]["blake2b"], "files": files,
                  "bytes": sum(f["bytes"] for f in files.values()),
                  "command": f"python -m bm25aug.model.packaged {name}"}
        write_json(tmp / PACKAGE_FILE, record)
        (tmp / "README.md").write_text(_card(record), encoding="utf-8")
    return PACKAGED_ROOT / name


def _student_record(spec: dict) -> dict:
    """A student's teacher and shape, for its record and card (nothing for a recipe's own model)."""
    if "teacher" not in spec:
        return {}
    return {"teacher": spec["teacher"], "student": {k: spec[k] for k in STUDENT_SETTINGS}}


def _dev_record(run: Path) -> dict:
    """The run's model selection: the best epoch's dev metric (``log.jsonl``)."""
    rows = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]
    scored = [r for r in rows if "dev_metric" in r]
    best = max(scored, key=lambda r: r["dev_metric"]) if scored else {}
    return {k: best[k] for k in ("epoch", "dev_metric", "dev_metric_name") if k in best}


def _left_out() -> str:
    from bm25aug.data.registry import REGISTRY

    return ", ".join(f"{d} ({spec.license})" for d, spec in REGISTRY.items() if spec.license and
                     spec.license not in SHIPPABLE)


def _card(record: dict) -> str:
    made_by = (f"cuts `{record['cut_from']['name']}`'s graph; no training" if "cut_from" in record else
               f"distills `{record['teacher']}` into `{record['run']}` unless its best/ exists, then exports it"
               if "teacher" in record else
               f"trains the recipe into `{record['run']}` unless its best/ exists, then exports it")
    sets = "\n".join(f"| {d} | {lic} |" for d, lic in record["training_sets"].items())
    if "teacher" in record:
        shape = record["student"]
        kept = shape.get("keep") or ",".join(map(str, range(shape["layers"])))
        start = (f", started from `{record['teacher']}`'s own embeddings, w head and "
                 f"layer{'s' if ',' in kept else ''} {kept} (read back from its int8 export)"
                 if shape.get("start") == "teacher" else "")
        what = (f"A student of the packaged model `{record['teacher']}`: {shape['layers']} encoder layer{'s' if shape['layers'] != 1 else ''} "
                f"{shape['hidden']} wide{start}, fitted to `{record['teacher']}`'s outputs "
                f"({'w and a(q)' if shape['aug_weight'] else 'w alone: no a(q) head'}) on the training "
                f"queries of its `{record['recipe']}` recipe (`bm25aug.train.distill`, seed {shape['seed']}, "
                f"{shape['epochs']} epochs; no labels, no documents), as its")
    elif "cut_from" in record:
        what = (f"The packaged model `{record['cut_from']['name']}` (the contextual query model of the "
                f"`{record['recipe']}` recipe) served without its a(q) head: the same encoder and per-token "
                f"weights w(q), its graph cut to {', '.join(record['cut_from']['outputs'])} "
                f"(`onnx.utils.Extractor`), so it reweights a query's own terms and adds none. On corpora "
                f"left out of its training, a(q) added nothing to the gain. It ships as its")
    else:
        what = (f"The contextual query model of the `{record['recipe']}` recipe "
                f"(`bm25aug/recipes/{record['recipe']}.yaml`), as its")
    return f"""# bm25aug packaged model: `{record['name']}`

{what}
int8 ONNX query encoder ({record['bytes'] / 1e6:.1f} MB with its tokenizer). It rewrites a query into weighted
terms for a flat index (Lucene's English analyzer, as Pyserini's stock BEIR and MS MARCO indexes):

```python
from bm25aug import AugmentedSearcher
searcher = AugmentedSearcher.from_pretrained("{record['name']}", "path/to/any.flat.index")
```

## Training data

| training set | license |
|---|---|
{sets}

Only sets under {', '.join(SHIPPABLE)} (`bm25aug.model.packaged.SHIPPABLE`) are trained on, so that
the model may ship inside this Apache-2.0 package; of the shared sets, {_left_out()} are left out.
Attribution: SQuADShifts (Miller et al., ICML 2020) and MedQuAD (Ben Abacha and Demner-Fushman, BMC
Bioinformatics 2019).

## Made by

`{record['command']}` ({made_by}). Model selection on the run's dev queries: {json.dumps(record['dev'])}. What it scores
on corpora left out of its training is in docs/results.md (the packaged model).
"""


def main() -> None:
    """``python -m bm25aug.model.packaged NAME``."""
    import argparse
    import subprocess
    import sys

    parser = argparse.ArgumentParser(prog="python -m bm25aug.model.packaged", description=build.__doc__)
    parser.add_argument("name", choices=sorted(BUILDS))
    try:
        print(f"wrote {build(parser.parse_args().name)}")
    except subprocess.CalledProcessError as e:
        print(f"error: training the recipe failed (exit {e.returncode}, its error above); fix: resolve it, then "
              f"rerun (training resumes)", file=sys.stderr)
        sys.exit(2)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
