"""Fit the inference-free reweighter (``bm25aug.model.reweighter``) to a contextual model's weights.

    python -m bm25aug.train.reweighter --teacher general --dataset squadshifts-wiki squadshifts-reddit \
        squadshifts-amazon medquad --output-dir runs/general-static/s13

1. **Texts.** Each training set's train-split queries, and as many word windows (3-14 words) cut
   from its documents (``windows_per_doc`` a document, at most ``max_windows`` a set): a teacher
   labels any text, and queries alone are one style of text (SQuADShifts and MedQuAD questions),
   which the fit then overlearns. No relevance judgement is read.
2. **Labels.** The teacher's term list for every text (``encode_queries``), cached beside the
   output folder (``NAME.work/labels.json``) under the digests of the teacher's weights and the texts.
3. **Fit.** Every chunk that holds an analyzer term is one example; its target is the log of its
   terms' mean teacher weight per occurrence (at least 1: the teacher's floor), its prediction the
   runtime's ``y``, computed in torch from the teacher's word embeddings through a learned
   projection to ``dim``. Mean squared error, Adam, seeded.
4. **Export.** The projected vectors (vocabulary x dim) and the head, in the runtime's layout.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bm25aug.errors import UserError
from bm25aug.io import digest, source_key, write_json
from bm25aug.lucene.analysis import CHUNK_CACHE
from bm25aug.model.reweighter import HEAD, Reweighter, chunk_positions

log = logging.getLogger(__name__)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass
class FitSettings:
    dim: int = 64  # the static vectors' width
    hidden: int = 128  # the head's
    epochs: int = 15
    lr: float = 1e-3
    batch: int = 1024
    windows_per_doc: int = 6
    max_windows: int = 12000
    seed: int = 13


def training_texts(datasets: list[str], settings: FitSettings) -> list[str]:
    """Each set's train queries, then word windows from its documents (seeded)."""
    from bm25aug.data.registry import load_dataset

    rng, texts = random.Random(settings.seed), []
    for name in datasets:
        dataset = load_dataset(name)
        texts.extend(dataset.split("train").queries.values())
        corpus = dataset.corpus
        ids = sorted(corpus)
        draws = [d for d in ids for _ in range(settings.windows_per_doc)]
        for doc in (rng.sample(draws, settings.max_windows) if len(draws) > settings.max_windows else draws):
            sentences = [s for s in SENTENCE_END.split(corpus[doc].text) if 4 <= len(s.split()) <= 25]
            if sentences:
                words = rng.choice(sentences).split()
                n = rng.randint(3, min(14, len(words)))
                start = rng.randint(0, len(words) - n)
                texts.append(" ".join(words[start:start + n]))
    return texts


def teacher_labels(teacher, texts: list[str], cache: Path) -> list[dict[str, float]]:
    """The teacher's term list per text, from ``cache`` when it was made for this teacher and these texts."""
    from bm25aug.model.encoder import encode_queries

    key = source_key(teacher_digest(teacher), digest(json.dumps(texts).encode()))
    try:
        saved = json.loads(cache.read_text(encoding="utf-8")) if cache.is_file() else {}
    except (OSError, ValueError):
        saved = {}  # a damaged cache is made again
    if isinstance(saved, dict) and saved.get("key") == key:
        return saved["labels"]
    labels = encode_queries(teacher, texts)
    write_json(cache, {"key": key, "labels": labels})
    return labels


def teacher_digest(teacher) -> str:
    """The digest of the teacher's weights (a packaged model's ONNX file, else its torch weights)."""
    from bm25aug.model.packaged import ONNX_FILE

    folder = Path(teacher.path)
    weights = next((folder / f for f in (ONNX_FILE, "model.safetensors") if (folder / f).is_file()), None)
    if weights is None:
        raise UserError(f"the teacher {folder} has neither {ONNX_FILE} nor model.safetensors; fix: pass a packaged "
                        f"model's name or a trained model folder (its best/)")
    return digest(weights)


def embeddings(teacher) -> np.ndarray:
    """The teacher's word-embedding matrix (vocabulary x width): a packaged model's, from its int8
    ONNX file; a trained folder's, from its torch model."""
    from bm25aug.model.packaged import ONNX_FILE, is_packaged

    if not is_packaged(Path(teacher.path)):
        from bm25aug.model.loading import load_model

        return load_model(teacher.path).encoder.get_input_embeddings().weight.detach().float().numpy()
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(Path(teacher.path) / ONNX_FILE)).graph
    init = {i.name: numpy_helper.to_array(i) for i in graph.initializer if "word_embeddings" in i.name}
    name = next((n for n in init if n.endswith("weight_quantized")), None)
    if name is None:
        raise UserError(f"{Path(teacher.path) / ONNX_FILE} holds no quantized word embeddings; fix: rebuild the packaged "
                        f"model (python -m bm25aug.model.packaged {Path(teacher.path).name})")
    stem = name[:-len("quantized")]
    return ((init[name].astype(np.float32) - init[stem + "zero_point"].astype(np.float32))
            * init[stem + "scale"].astype(np.float32))


class Examples:
    """Chunk-level examples: for each, its own, left and right chunk rows in ``table`` (row 0 is
    the zero vector), its position features, its query's context row in ``contexts``, and its target."""

    def __init__(self, featurizer: Reweighter, texts: list[str], labels: list[dict[str, float]]):
        rows: dict[str, int] = {}
        features: dict[str, tuple] = {}  # each word's features, computed once (bounded as the runtime's cache)

        def remember(word: str) -> tuple:
            if len(features) >= CHUNK_CACHE:
                features.clear()
            found = features[word] = featurizer.chunk(word)
            return found

        table, contexts = [np.zeros(featurizer.vectors.shape[1], np.float32)], []
        own, left, right, positions, query, target = [], [], [], [], [], []
        for text, label in zip(texts, labels):
            words = text.split()
            chunks = [features.get(w) or remember(w) for w in words]
            ids = []
            for word, chunk in zip(words, chunks):
                if word not in rows:
                    rows[word] = len(table)
                    table.append(chunk[1])
                ids.append(rows[word])
            counts: dict[str, int] = {}
            for terms, *_ in chunks:
                for t in terms:
                    counts[t] = counts.get(t, 0) + 1
            pos = chunk_positions(len(chunks))
            for j, (terms, *_) in enumerate(chunks):
                if not terms:
                    continue
                weight = sum(label.get(t, 1.0) / counts[t] for t in terms) / len(terms)
                own.append(ids[j])
                left.append(ids[j - 1] if j else 0)
                right.append(ids[j + 1] if j + 1 < len(ids) else 0)
                positions.append(pos[j])
                query.append(len(contexts))
                target.append(math.log(max(weight, 1.0)))
            total = sum(c[3] for c in chunks)
            contexts.append(sum((c[2] for c in chunks), np.zeros_like(table[0])) / max(total, 1))
        self.table, self.contexts = np.stack(table), np.stack(contexts) if contexts else np.zeros((0, 1), np.float32)
        self.index = np.array([own, left, right, query], np.int64).T.reshape(-1, 4)
        self.positions = np.array(positions, np.float32).reshape(-1, 2)
        self.target = np.array(target, np.float32)


def fit(examples: Examples, width: int, settings: FitSettings, progress: bool = True) -> dict[str, np.ndarray]:
    """The projection (``project``: width x dim) and the head, fitted by mean squared error, with
    ``predicted``: each example's ``y`` as torch computes it (what the runtime must reproduce)."""
    import torch
    from torch import nn

    from bm25aug.progress import progress as progress_bar

    torch.manual_seed(settings.seed)
    project = nn.Linear(width, settings.dim, bias=False)
    parts = nn.ModuleDict({"w_self": nn.Linear(settings.dim, settings.hidden),
                           "w_left": nn.Linear(settings.dim, settings.hidden, bias=False),
                           "w_right": nn.Linear(settings.dim, settings.hidden, bias=False),
                           "w_position": nn.Linear(2, settings.hidden, bias=False),
                           "w_context": nn.Linear(settings.dim, settings.hidden, bias=False),
                           "v": nn.Linear(settings.hidden, 1)})
    table, contexts = torch.from_numpy(examples.table), torch.from_numpy(examples.contexts)
    index, positions = torch.from_numpy(examples.index), torch.from_numpy(examples.positions)
    target = torch.from_numpy(examples.target)

    def predict(rows: torch.Tensor) -> torch.Tensor:
        i = index[rows]
        pre = (parts["w_self"](project(table[i[:, 0]])) + parts["w_left"](project(table[i[:, 1]]))
               + parts["w_right"](project(table[i[:, 2]])) + parts["w_position"](positions[rows])
               + parts["w_context"](project(contexts[i[:, 3]])))
        return parts["v"](torch.relu(pre)).squeeze(-1)

    optimizer = torch.optim.Adam([*project.parameters(), *parts.parameters()], lr=settings.lr)
    generator = torch.Generator().manual_seed(settings.seed)
    n = len(target)
    for epoch in progress_bar(range(settings.epochs), desc="fitting the reweighter", disable=not progress):
        order, total = torch.randperm(n, generator=generator), 0.0
        for start in range(0, n, settings.batch):
            rows = order[start:start + settings.batch]
            loss = ((predict(rows) - target[rows]) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(rows)
        log.info("epoch %d: mean squared error %.4f (the targets' variance %.4f)", epoch + 1, total / n,
                 float(target.var()))
    with torch.no_grad():
        out = {"project": project.weight.T.numpy().copy()}
        for name in ("w_self", "w_left", "w_right", "w_position", "w_context"):
            out[name] = parts[name].weight.T.numpy().copy()
        out["bias"] = parts["w_self"].bias.numpy().copy()
        out["v"] = parts["v"].weight[0].numpy().copy()
        out["v_bias"] = parts["v"].bias.numpy().copy()
        out["predicted"] = torch.cat([predict(torch.arange(start, min(start + settings.batch, n)))
                                      for start in range(0, n, settings.batch)]).numpy() if n else np.zeros(0, np.float32)
    return out


def tables(fitted: dict[str, np.ndarray], vocabulary: np.ndarray) -> dict[str, np.ndarray]:
    """What the runtime reads: the projected vectors (vocabulary x dim) and the head."""
    return {"vectors": vocabulary @ fitted["project"], **{name: fitted[name] for name in HEAD}}


def featurizer(teacher) -> tuple[Reweighter, np.ndarray]:
    """A reweighter that reads the teacher's word embeddings (scaled to unit spread) as its vectors,
    for building examples, and that matrix."""
    from tokenizers import Tokenizer

    vocabulary = embeddings(teacher)
    vocabulary = vocabulary / vocabulary.std()
    tokenizer = Tokenizer.from_file(str(Path(teacher.path) / "tokenizer.json"))
    head = {name: np.zeros(1, np.float32) for name in HEAD}
    return Reweighter(teacher.config, tokenizer, {"vectors": vocabulary, **head}), vocabulary


def build(teacher_name: str, datasets: list[str], output: Path, settings: FitSettings) -> Path:
    """Fit a reweighter to ``teacher_name`` on ``datasets`` and write it to ``output`` (one rename),
    with ``fit.json`` (the teacher, the sets, the counts of texts and examples, the settings)."""
    from copy import deepcopy

    from bm25aug.io import atomic_dir
    from bm25aug.model.loading import load_encoder
    from bm25aug.model.reweighter import WEIGHTS_FILE, write_folder

    teacher = load_encoder(teacher_name)
    if teacher.config.target != "flat" or teacher.config.reads_feedback:
        raise UserError(f"the teacher {teacher_name} must be a flat-target model that reads only the query; fix: "
                        f"use a general model such as general")
    work = output.parent / f"{output.name}.work"
    work.mkdir(parents=True, exist_ok=True)
    texts = training_texts(datasets, settings)
    labels = teacher_labels(teacher, texts, work / "labels.json")
    reader, vocabulary = featurizer(teacher)
    examples = Examples(reader, texts, labels)
    fitted = fit(examples, vocabulary.shape[1], settings)
    with atomic_dir(output, WEIGHTS_FILE, what="a bm25aug reweighter") as tmp:
        write_folder(tmp, tables(fitted, vocabulary), Path(teacher.path), deepcopy(teacher.config))
        write_json(tmp / "fit.json", {"teacher": teacher_name, "datasets": datasets, "texts": len(texts),
                                      "examples": len(examples.target), "settings": settings.__dict__})
    return output


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bm25aug.train.reweighter", description=__doc__.split("\n")[0])
    parser.add_argument("--teacher", default="general", help="the contextual model whose weights are fitted")
    parser.add_argument("--dataset", nargs="+", required=True, help="the sets whose texts are labelled")
    parser.add_argument("--output-dir", type=Path, required=True)
    for name, default in FitSettings().__dict__.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args(argv)
    settings = FitSettings(**{name: getattr(args, name) for name in FitSettings().__dict__})
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(build(args.teacher, args.dataset, args.output_dir, settings))
    except UserError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
