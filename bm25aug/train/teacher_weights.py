"""A packaged model's torch weights, read back from its int8 ONNX export: where a student starts.

A packaged model ships no torch weights (``bm25aug.model.packaged``), only the graph that
``bm25aug.model.onnx_encoder.export_onnx`` wrote: onnxruntime's BERT fusions, then dynamic int8
quantization. Its weights are all in that graph, each stored as search uses it:

* the embeddings and their LayerNorm in ``QEmbedLayerNormalization``, uint8 with one scale a tensor;
* each layer's query, key and value projections in ``QAttention``, one int8 ``[hidden, 3 hidden]``
  matrix with a scale per output channel (columns: the query's, the key's, then the value's);
* every other projection (the attention's output, the feed-forward's two, the w head) in a
  ``MatMulInteger``, int8 ``[in, out]`` with a scale per output channel, named by its module;
* biases and LayerNorm weights in fp32, under their torch names.

``teacher_state`` dequantizes them (``(q - zero point) x scale``) into a state dict with
``QueryAugmenter``'s own names (``encoder.``, ``weight_head.``): the served teacher's weights, as
close to its fp32 training weights as int8 keeps them. The a(q) head is not read: a w-only
student has none. A graph that is not such an export is refused in one line.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from bm25aug.errors import UserError

_MODULE = re.compile(r"^/model/((?:encoder/encoder/layer\.\d+/(?:attention/output|intermediate|output)/dense)|weight_head)"
                     r"/MatMul_output_0_output_quantized$")
_EMBEDDINGS = ("word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight",
               "LayerNorm.weight", "LayerNorm.bias")


def graph_weights(onnx_path: Path, fix: str) -> tuple:
    """The ONNX graph at ``onnx_path`` and its initializers as arrays, by name; a file that is no
    graph is one line ending in ``fix``."""
    import onnx
    from onnx import numpy_helper

    try:
        graph = onnx.load(str(onnx_path)).graph
    except Exception as e:  # onnx's protobuf errors: a file that is no graph
        raise UserError(f"{onnx_path} cannot be read as an ONNX graph ({type(e).__name__}); fix: {fix}") from None
    return graph, {i.name: numpy_helper.to_array(i) for i in graph.initializer}


def teacher_state(onnx_path: Path) -> dict[str, torch.Tensor]:
    """The encoder's and the w head's weights of the export at ``onnx_path`` (see the module's text)."""
    graph, weights = graph_weights(onnx_path, "start the student from a packaged model or a checkpoint's export")
    state: dict[str, np.ndarray] = {}
    try:
        for node in graph.node:
            if node.op_type == "QEmbedLayerNormalization":
                for part, q, scale, zero in zip(_EMBEDDINGS, node.input[2:7], node.input[8:13], node.input[13:18]):
                    state[f"encoder.embeddings.{part}"] = _dequantized(weights, q, scale, zero)
            elif node.op_type == "QAttention":
                _attention(state, weights, node)
            elif node.op_type == "MatMulInteger" and (m := _MODULE.match(node.output[0])):
                module = m.group(1).replace("/", ".")
                state[f"{module}.weight"] = _dequantized(weights, node.input[1], _scale_of(weights, node), node.input[3]).T
        for name, value in weights.items():  # fp32 biases and LayerNorm weights, under their torch names
            if name.startswith("model.") and value.dtype == np.float32 and not name.endswith("_scale"):
                state.setdefault(name[len("model."):], value)
    except KeyError as e:
        raise UserError(f"{onnx_path} is not an export of bm25aug's (no {e.args[0]}); fix: start the student from a "
                        f"packaged model or a checkpoint's export") from None
    if "weight_head.weight" not in state or "encoder.embeddings.word_embeddings.weight" not in state:
        raise UserError(f"{onnx_path} holds no w head or no embeddings of bm25aug's export; fix: start the student "
                        f"from a packaged model or a checkpoint's export")
    return {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items() if not k.startswith("aug_head.")}


def _dequantized(weights: dict, quantized: str, scale: str, zero: str) -> np.ndarray:
    q = weights[quantized].astype(np.float32)
    return (q - weights[zero].astype(np.float32)) * weights[scale].astype(np.float32)


def _scale_of(weights: dict, node) -> str:
    """The weight's scale of a ``MatMulInteger``: the initializer its output's rescaling multiplies
    by (``Mul(input scale, weight scale)``, named after the weight)."""
    name = node.input[1].removesuffix("_quantized") + "_scale"
    if name not in weights:
        raise KeyError(name)
    return name


def _attention(state: dict, weights: dict, node) -> None:
    """A layer's query, key and value weights and biases from its ``QAttention``'s packed matrix."""
    layer = int(re.search(r"layer\.(\d+)", _layer_of(node)).group(1))
    qkv = _dequantized(weights, node.input[1], node.input[4], node.input[7])
    bias = weights[node.input[2]]
    width = qkv.shape[0]
    prefix = f"encoder.encoder.layer.{layer}.attention.self"
    for i, part in enumerate(("query", "key", "value")):
        state[f"{prefix}.{part}.weight"] = qkv[:, i * width:(i + 1) * width].T
        state[f"{prefix}.{part}.bias"] = bias[i * width:(i + 1) * width]


def _layer_of(node) -> str:
    """The name that says which layer an attention belongs to: its output's."""
    if "layer." in node.output[0]:
        return node.output[0]
    raise KeyError(f"the layer of {node.name or node.output[0]}")
