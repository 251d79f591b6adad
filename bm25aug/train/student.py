"""A student query model: the teacher's settings on a smaller encoder, before distillation.

The teacher (``general``: all-MiniLM-L6-v2's six 384-wide layers) spends most of a query's time in
its graph, and the graph's cost grows with layers x width² (and its a(q) head with the width). A
student keeps the vocabulary, the tokenizer and every setting of the teacher's model (target,
window, weight floor, augmentation gate, pooling), so that it serves, exports and packages exactly
as the teacher does, on an encoder of ``layers`` layers ``hidden`` wide:

* ``hidden`` equal to the base encoder's width: the base's embeddings and its first ``layers``
  layers, as ``train.py --encoder-layers`` keeps them;
* narrower: a new BERT encoder (``hidden / 64`` heads, a feed-forward 4x as wide) whose word,
  position and type embeddings are the base's projected on their ``hidden`` principal directions
  (of the word embeddings), so that the tied a(q) head starts from words' neighbourhoods as the
  teacher's did; its layers start at BERT's random init.

or, with ``start`` (``distill --start teacher``), at the teacher's width from the teacher's own
weights (``bm25aug.train.teacher_weights``): its embeddings, its w head and the layers ``keep``
names, in their order (Wang & Lyu, 2023: a student's start decides most of what it keeps).

``bm25aug.train.distill`` then fits it to the teacher's outputs.
"""

from __future__ import annotations

from dataclasses import asdict

import torch

from bm25aug.errors import UserError
from bm25aug.model.augmenter import QueryAugmenter, resolve_encoder
from bm25aug.model.config import AugmenterConfig

HEAD_WIDTH = 64  # channels per attention head, as BERT's and MiniLM's


def student_shape(layers: int, hidden: int) -> None:
    """A shape a student can have: at least one layer, a width a whole number of heads wide."""
    if layers < 1 or hidden < HEAD_WIDTH or hidden % HEAD_WIDTH:
        raise UserError(f"a student of {layers} layers {hidden} wide; fix: pass --layers 1 or more and a --hidden "
                        f"that is a multiple of {HEAD_WIDTH}")


def make_student(teacher: AugmenterConfig, layers: int, hidden: int, base: str | None = None,
                 augmentation: bool = True, start: dict[str, torch.Tensor] | None = None,
                 keep: list[int] | None = None) -> QueryAugmenter:
    """A new student with ``teacher``'s settings on an encoder of ``layers`` x ``hidden`` (see
    the module's text). ``base``: the encoder whose embeddings it starts from (default: the
    packaged all-MiniLM-L6-v2, the teacher's own). ``augmentation=False``: a w-only student
    (``use_augmentation`` off: a ≡ 0, and its served graph has no a(q) head). ``start``: the
    teacher's own weights (``bm25aug.train.teacher_weights``), whose embeddings, w head and
    layers ``keep`` (default: the first ``layers``) the student starts from, at the teacher's width."""
    student_shape(layers, hidden)
    if start is not None:
        return _from_teacher(teacher, layers, hidden, base, augmentation, start, keep)
    name, encoder, tokenizer = resolve_encoder(base)
    if len(tokenizer) != teacher.vocab_size:
        raise UserError(f"{name} has {len(tokenizer)} vocabulary entries and the teacher {teacher.vocab_size}; fix: "
                        f"pass a --base encoder with the teacher's vocabulary (bert-base-uncased)")
    width = encoder.config.hidden_size
    if hidden == width:
        if layers > len(encoder.encoder.layer):
            raise UserError(f"--layers {layers}, but {name} has {len(encoder.encoder.layer)} layers; fix: pass at most "
                            f"{len(encoder.encoder.layer)}, or a narrower --hidden (new layers)")
        encoder.encoder.layer = encoder.encoder.layer[:layers]
        encoder.config.num_hidden_layers = layers
    elif hidden < width:
        encoder = _narrow(encoder, layers, hidden)
    else:
        raise UserError(f"--hidden {hidden} is wider than {name} ({width}); fix: pass at most {width}")
    if not -1 <= teacher.aug_layer <= layers:
        raise UserError(f"the teacher pools a(q) from layer {teacher.aug_layer}, and a student of {layers} layers has "
                        f"none; fix: pass --layers {teacher.aug_layer} or more")
    config = AugmenterConfig(**{**asdict(teacher), "encoder": teacher.encoder,
                                "use_augmentation": teacher.use_augmentation and augmentation})
    return QueryAugmenter(config, encoder, tokenizer)


def check_start(start: dict[str, torch.Tensor], layers: int, hidden: int, keep: list[int] | None
                ) -> tuple[list[int], int]:
    """The teacher's layers a student of ``layers`` x ``hidden`` keeps (``keep``, default the first
    ``layers``) and the teacher's depth, once the shape fits the teacher's weights ``start``."""
    width = start["encoder.embeddings.word_embeddings.weight"].shape[1]
    depth = len({k.split(".")[3] for k in start if k.startswith("encoder.encoder.layer.")})
    keep = list(range(layers)) if keep is None else keep
    if hidden != width:
        raise UserError(f"a student started from its teacher is the teacher's width, {width}, not --hidden {hidden}; "
                        f"fix: pass --hidden {width}, or --start base")
    if len(keep) != layers or sorted(set(keep)) != keep or not all(0 <= i < depth for i in keep):
        raise UserError(f"--keep {','.join(map(str, keep))} is not {layers} of the teacher's layers 0-{depth - 1} in "
                        f"order; fix: pass {layers} increasing layer numbers, e.g. {','.join(map(str, range(layers)))}")
    return keep, depth


def _from_teacher(teacher: AugmenterConfig, layers: int, hidden: int, base: str | None, augmentation: bool,
                  start: dict[str, torch.Tensor], keep: list[int] | None) -> QueryAugmenter:
    """A student at the teacher's width: the teacher's embeddings, its layers ``keep`` in their
    order, and its w head (the a(q) head, when the student has one, starts as a new model's)."""
    keep, depth = check_start(start, layers, hidden, keep)
    name, encoder, tokenizer = resolve_encoder(base)
    encoder.encoder.layer = encoder.encoder.layer[:depth]
    config = AugmenterConfig(**{**asdict(teacher), "use_augmentation": teacher.use_augmentation and augmentation})
    model = QueryAugmenter(config, encoder, tokenizer)
    missing, unexpected = model.load_state_dict(start, strict=False)
    if unexpected or [k for k in missing if not k.startswith(("aug_head.", "encoder.pooler."))]:
        raise UserError(f"the teacher's weights do not fit {name}'s encoder ({len(unexpected)} unexpected, "
                        f"{len(missing)} missing); fix: pass the teacher's own --base encoder")
    encoder.encoder.layer = torch.nn.ModuleList([encoder.encoder.layer[i] for i in keep])
    encoder.config.num_hidden_layers = layers
    return model


def _narrow(base, layers: int, hidden: int):
    """A new BERT encoder ``hidden`` wide, its embeddings the base's on their principal directions."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=base.config.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=hidden // HEAD_WIDTH, intermediate_size=4 * hidden,
                        max_position_embeddings=base.config.max_position_embeddings,
                        type_vocab_size=base.config.type_vocab_size, pad_token_id=base.config.pad_token_id)
    student = BertModel(config)  # its pooler unused, as the base's: AutoModel.from_config makes one on load
    words = base.embeddings.word_embeddings.weight.detach()
    mean = words.mean(dim=0)
    # The principal directions of the word embeddings (a fixed order: the SVD is deterministic).
    _, _, vt = torch.linalg.svd(words - mean, full_matrices=False)
    basis = vt[:hidden].T  # width x hidden
    with torch.no_grad():
        for part in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
            source = getattr(base.embeddings, part).weight.detach()
            centre = mean if part == "word_embeddings" else 0
            getattr(student.embeddings, part).weight.copy_((source - centre) @ basis)
    return student
