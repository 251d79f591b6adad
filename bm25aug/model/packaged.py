"""Models shipped inside the package, by name: ``AugmentedSearcher.from_pretrained("general", index)``.

A packaged model is a runtime-only folder under ``bm25aug/models/NAME/``: what search reads and
nothing else, so that it is small enough for the repository and the wheel. Its int8 ONNX query
encoder (``model.int8.onnx``), the model's settings (``bm25aug_config.json``), the tokenizer's
files, its card (``README.md``: what it was trained on, each set's license, what it scored) and
``package.json`` (the run it was cut from, the recorded command that rebuilds it, and the ONNX
file's digest, checked when it loads). It has no torch weights, so it serves (``onnx-int8``) but
cannot be trained from; its run folder, made by that command, can.

A name is looked up only where no folder of that name exists, as Pyserini looks up a prebuilt
index by name: ``checkpoints/general`` or ``./general`` on disk wins over the packaged model.
"""

from __future__ import annotations

import json
from pathlib import Path

from bm25aug.errors import UserError

PACKAGED_ROOT = Path(__file__).resolve().parents[1] / "models"
ONNX_FILE = "model.int8.onnx"  # the int8 query encoder, packaged or exported (bm25aug.model.onnx_encoder)
PACKAGE_FILE = "package.json"
RUNTIME = "onnx-int8"  # the only runtime a packaged model ships


def names() -> list[str]:
    """The models this package ships."""
    return sorted(p.name for p in PACKAGED_ROOT.glob("*") if (p / PACKAGE_FILE).is_file())


def resolve(name_or_path: str | Path) -> Path:
    """A model folder given as a path, or as the name of a packaged model (where no such path exists)."""
    path = Path(name_or_path)
    if path.exists() or str(name_or_path) not in names():
        return path
    return PACKAGED_ROOT / str(name_or_path)


def is_packaged(folder: Path) -> bool:
    """Whether ``folder`` is a runtime-only packaged model (an ONNX encoder and no torch weights)."""
    return (folder / PACKAGE_FILE).is_file()


def check_packaged(folder: Path, runtime: str) -> Path:
    """The ONNX file of a packaged model, once its checksum matches ``package.json`` and the
    runtime asked for is the one it ships."""
    from bm25aug.io import digest

    if runtime != RUNTIME:
        raise UserError(f"{folder.name} is a packaged model that ships only its {RUNTIME} query encoder, not "
                        f"{runtime}; fix: drop --runtime (or pass {RUNTIME}), or use its full model, {full_model(folder)}")
    try:
        record = json.loads((folder / PACKAGE_FILE).read_text(encoding="utf-8"))
        expected = record["onnx_digest"]
        actual = digest(folder / ONNX_FILE)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"the packaged model {folder} is incomplete ({type(e).__name__}: {str(e)[:120]}); "
                        f"{_restore(folder)}") from None
    if actual != expected:
        raise UserError(f"the packaged model's {ONNX_FILE} in {folder} is not the file it shipped (checksum "
                        f"differs); {_restore(folder)}")
    return folder / ONNX_FILE


def _restore(folder: Path) -> str:
    """The fix for a damaged packaged model."""
    return (f"fix: restore the folder from the release or checkout it came with (git checkout -- {folder}), or "
            f"rebuild it: python -m bm25aug.model.packaged {folder.name}")


def full_model(folder: Path) -> str:
    """Where the full (torch) model a packaged one was cut from is, and the command that makes it."""
    run = BUILDS.get(folder.name, {}).get("run", "its run folder")
    return f"{run}/best (made by `python -m bm25aug.model.packaged {folder.name}`)"


# How each packaged model is made: the recipe trained (its datasets are the training data, every
# one under a license in SHIPPABLE) and the run folder it is cut from.
BUILDS = {"general": {"recipe": "general-open", "run": "runs/general-open"}}
# Licenses under which a model trained on the data may ship inside an Apache-2.0 package. CC BY
# asks for attribution, which the card gives; non-commercial, academic-only and share-alike terms
# are left out (share-alike on a model's weights is in doubt).
SHIPPABLE = ("CC BY 4.0",)


def build(name: str) -> Path:
    """Make the packaged model ``name``: train its recipe (skipped when the run's best/ exists),
    export best/ to int8 ONNX, and write ``bm25aug/models/NAME`` (one rename; the old one stays
    until the new one is whole)."""
    import subprocess
    import sys

    from bm25aug import recipes
    from bm25aug.data.registry import REGISTRY
    from bm25aug.io import atomic_dir, digest, write_json
    from bm25aug.model.config import CONFIG_NAME

    spec = BUILDS.get(name)
    if spec is None:
        raise UserError(f"no packaged model is called {name!r}; fix: use one of {', '.join(BUILDS)}")
    datasets = recipes.datasets(spec["recipe"])
    licenses = {d: REGISTRY[d].license for d in datasets}
    if bad := [f"{d} ({lic or 'unknown'})" for d, lic in licenses.items() if lic not in SHIPPABLE]:
        raise UserError(f"recipe {spec['recipe']} trains on {', '.join(bad)}, whose license does not let its model "
                        f"ship in this package; fix: train on sets under {', '.join(SHIPPABLE)}")
    root = Path(__file__).resolve().parents[2]
    run = root / spec["run"]
    if not (run / "best" / CONFIG_NAME).exists():
        subprocess.run([sys.executable, str(root / "train.py"), "--recipe", spec["recipe"], "--output-dir", str(run),
                        "--resume"], check=True, cwd=root)
    from bm25aug.model.loading import load_model
    from bm25aug.model.onnx_encoder import export_source, onnx_path

    best = run / "best"
    source, made = export_source(best), PACKAGED_ROOT / name / PACKAGE_FILE
    if made.is_file() and json.loads(made.read_text()).get("source") == source:
        return PACKAGED_ROOT / name  # cut from this very model already: the binary in the history stays as it is
    onnx = onnx_path(best, load_model(best), source)
    with atomic_dir(PACKAGED_ROOT / name, PACKAGE_FILE, what="a packaged bm25aug model") as tmp:
        for file in best.iterdir():
            if file.is_file() and (file.name == CONFIG_NAME or file.name.startswith(("tokenizer", "special_tokens",
                                                                                      "vocab"))):
                (tmp / file.name).write_bytes(file.read_bytes())
        (tmp / ONNX_FILE).write_bytes(onnx.read_bytes())
        record = {"name": name, "recipe": spec["recipe"], "training_sets": licenses, "run": spec["run"],
                  "dev": _dev_record(run), "source": source, "onnx_digest": digest(tmp / ONNX_FILE),
                  "bytes": sum(f.stat().st_size for f in tmp.iterdir()),
                  "command": f"python -m bm25aug.model.packaged {name}"}
        write_json(tmp / PACKAGE_FILE, record)
        (tmp / "README.md").write_text(_card(record), encoding="utf-8")
    return PACKAGED_ROOT / name


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
    sets = "\n".join(f"| {d} | {lic} |" for d, lic in record["training_sets"].items())
    return f"""# bm25aug packaged model: `{record['name']}`

The contextual query model of the `{record['recipe']}` recipe (`bm25aug/recipes/{record['recipe']}.yaml`), as its
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

`{record['command']}` (trains the recipe into `{record['run']}` unless its best/ exists, then
exports it). Model selection on the run's dev queries: {json.dumps(record['dev'])}. What it scores
on corpora left out of its training is in docs/results.md (the packaged model).
"""


if __name__ == "__main__":
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
