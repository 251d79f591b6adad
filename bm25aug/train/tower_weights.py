"""bge-small-en-v1.5's torch weights read back from its fp32 ONNX export, and a query tower cut from them.

The pinned fp32 export (``bm25aug.dense.fetch.BGE_SMALL``) stores the embeddings, every bias and
every LayerNorm weight under its ``transformers.BertModel`` name, and each projection's matrix
under an ONNX-internal name (``onnx::MatMul_1525``), transposed (``[in, out]``, as ``MatMul``
takes it). A matrix is found by following the graph: each ``Add`` that adds a named bias
(``encoder.layer.0.attention.self.query.bias``) to a ``MatMul``'s output gives that ``MatMul``'s
weight initializer the bias's module (``...query.weight`` = its transpose). Node names are not
read. ``teacher_bert`` loads the result into a ``BertModel`` (no pooler: bge pools [CLS]) and
refuses, in one line, a graph whose weights do not fill one at bge-small's shape; ``cls_difference``
measures it against onnxruntime on the same texts.

A tower (``make_student``) keeps the teacher's embeddings and the layers ``keep`` names, in order.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch

from bm25aug.errors import UserError

# bge-small-en-v1.5's config.json (BAAI); the shapes are checked against the export's weights.
BGE_CONFIG = {"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 12,
              "intermediate_size": 1536, "max_position_embeddings": 512, "type_vocab_size": 2,
              "layer_norm_eps": 1e-12, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
              "attention_probs_dropout_prob": 0.1, "pad_token_id": 0}
MAX_TOKENS = 512


def bge_onnx_path() -> Path:
    """The pinned fp32 export's graph (fetched once: ``bm25aug.dense.fetch``)."""
    from bm25aug.dense.fetch import BGE_SMALL, ONNX_FILE, model_folder

    return model_folder(BGE_SMALL, quiet=True) / ONNX_FILE


def onnx_state(onnx_path: Path) -> dict[str, np.ndarray]:
    """The export's weights under ``BertModel``'s names (see the module's text)."""
    from bm25aug.train.teacher_weights import graph_weights

    graph, weights = graph_weights(onnx_path, "pass bge-small's fp32 export (bm25aug.dense.fetch.BGE_SMALL)")
    state = {name: value for name, value in weights.items() if not name.startswith("onnx::")}
    producer = {out: node for node in graph.node for out in node.output}
    for node in graph.node:
        if node.op_type != "Add":
            continue
        bias = next((i for i in node.input if i in weights and i.endswith(".bias")), None)
        other = next((producer.get(i) for i in node.input if i != bias), None)
        if bias is None or other is None or other.op_type != "MatMul":
            continue
        matrix = next((i for i in other.input if i in weights), None)
        if matrix is not None:
            state[bias.removesuffix("bias") + "weight"] = weights[matrix].T
    return state


def bert_config(layers: int = BGE_CONFIG["num_hidden_layers"]):
    from transformers import BertConfig

    return BertConfig(**{**BGE_CONFIG, "num_hidden_layers": layers})


def teacher_bert(onnx_path: Path | None = None):
    """bge-small as a ``BertModel`` (eval mode, no pooler), its weights read from ``onnx_path``
    (default: the pinned fp32 export)."""
    from transformers import BertModel

    onnx_path = onnx_path or bge_onnx_path()
    state = onnx_state(onnx_path)
    model = BertModel(bert_config(), add_pooling_layer=False)
    fix = "fix: pass bge-small-en-v1.5's fp32 ONNX export (bm25aug.dense.fetch.BGE_SMALL)"
    wanted = {k: v.shape for k, v in model.state_dict().items() if not k.endswith("position_ids")}
    missing = sorted(set(wanted) - set(state))
    if missing:
        raise UserError(f"{onnx_path} holds no {missing[0]} ({len(missing)} of bge-small's {len(wanted)} tensors "
                        f"missing); {fix}")
    if wrong := [k for k in wanted if tuple(state[k].shape) != tuple(wanted[k])]:
        raise UserError(f"{onnx_path}'s {wrong[0]} is {list(state[wrong[0]].shape)}, not bge-small's "
                        f"{list(wanted[wrong[0]])}; {fix}")
    model.load_state_dict({k: torch.from_numpy(np.array(state[k], np.float32)) for k in wanted}, strict=False)
    return model.eval()


def parse_keep(keep: str | list[int], layers: int = BGE_CONFIG["num_hidden_layers"]) -> list[int]:
    """``--keep``'s layer numbers: whole numbers from 0 to ``layers - 1``, ascending, no repeats."""
    fix = f"fix: pass the teacher's layers to keep, ascending and comma-separated, from 0 to {layers - 1}, e.g. 0,5,11"
    try:
        kept = [int(part) for part in keep.split(",")] if isinstance(keep, str) else [int(k) for k in keep]
    except ValueError:
        raise UserError(f"--keep {keep} is not a list of layer numbers; {fix}") from None
    shown = ",".join(map(str, kept))
    if not kept:
        raise UserError(f"--keep names no layer; {fix}")
    if bad := [k for k in kept if not 0 <= k < layers]:
        raise UserError(f"--keep {shown}: bge-small has no layer {bad[0]} (it has {layers}: 0 to {layers - 1}); {fix}")
    if len(set(kept)) != len(kept):
        raise UserError(f"--keep {shown} names a layer twice; {fix}")
    if kept != sorted(kept):
        raise UserError(f"--keep {shown} is not ascending (a tower keeps the teacher's order); {fix}")
    return kept


def make_student(teacher, keep: str | list[int], dropout: float | None = None):
    """A ``BertModel`` of ``len(keep)`` layers: the teacher's embeddings and its layers ``keep``
    (copies: training the student leaves the teacher as it is); ``dropout``, when given, its
    hidden and attention dropout (default: the teacher's)."""
    from transformers import BertModel

    kept = parse_keep(keep, teacher.config.num_hidden_layers)
    config = copy.deepcopy(teacher.config)
    config.num_hidden_layers = len(kept)
    if dropout is not None:
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = dropout
    student = BertModel(config, add_pooling_layer=False)
    student.embeddings.load_state_dict(teacher.embeddings.state_dict())
    for at, layer in enumerate(kept):
        student.encoder.layer[at].load_state_dict(teacher.encoder.layer[layer].state_dict())
    return student


def cls_vectors(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """bge's pooling: the [CLS] token's last hidden state, L2-normalized."""
    states = model(input_ids=input_ids, attention_mask=attention_mask,
                   token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
    return torch.nn.functional.normalize(states[:, 0], dim=-1)


def tokenizer(folder: Path | None = None):
    """bge's tokenizer (``tokenizer.json`` of ``folder``, default the pinned export's), cut at 512."""
    from tokenizers import Tokenizer

    from bm25aug.dense.fetch import TOKENIZER_FILE

    folder = folder or bge_onnx_path().parent
    tok = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    tok.enable_truncation(MAX_TOKENS)
    tok.no_padding()
    return tok


def padded(rows: list[np.ndarray] | list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id rows padded to the longest (id 0), and their attention mask."""
    width = max(len(r) for r in rows)
    ids, mask = torch.zeros((len(rows), width), dtype=torch.long), torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)], mask[i, :len(r)] = torch.as_tensor(np.asarray(r, np.int64)), 1
    return ids, mask


def cls_difference(model, texts: list[str], onnx_path: Path | None = None) -> float:
    """The largest absolute difference between ``model``'s [CLS] states and onnxruntime's (fp32
    export, one thread) on ``texts``, each alone and unnormalized."""
    import onnxruntime as ort

    onnx_path = onnx_path or bge_onnx_path()
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
    tok, worst = tokenizer(onnx_path.parent), 0.0
    for text in texts:
        ids, mask = padded([tok.encode(text).ids])
        feed = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": np.zeros_like(ids.numpy())}
        want = session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})[0][:, 0]
        with torch.no_grad():
            got = model(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).last_hidden_state[:, 0]
        worst = max(worst, float(np.abs(got.numpy() - want).max()))
    return worst
