"""The numpy twin of rust/py/tokenizer.rs: the e5 model's SentencePiece unigram tokenizer."""

from __future__ import annotations

import array
import itertools
import math

import numpy as np

from cpersona._fallback.args import shaped, typed

_META = "\u2581"
_UNK_PENALTY = 10.0


def _f32(value: float) -> float:
    """`value` rounded to float32, as the Rust tokenizer keeps its path scores."""
    return array.array("f", (value,))[0]


class Unigram:
    """The twin of rust/unigram.rs: SentencePiece unigram over a model's own tables.

    Same normalisation, same Viterbi, same tie rule (the first path found wins; sums rounded
    to float32). Building it takes seconds for a 250,000-piece vocabulary, so `e5_engine`
    needs the Rust one; this one is the reference the tests hold it to.
    """

    def __init__(
        self,
        blob: bytes,
        offsets: np.ndarray,
        scores: np.ndarray,
        unk_id: int,
        norm_cp: np.ndarray,
        norm_off: np.ndarray,
        norm_out: np.ndarray,
    ) -> None:
        offsets = shaped(typed(offsets, np.dtype(np.uint32), "offsets"), "offsets", 1)
        scores = shaped(typed(scores, np.dtype(np.float32), "scores"), "scores", 1)
        norm_cp = shaped(typed(norm_cp, np.dtype(np.uint32), "norm_cp"), "norm_cp", 1)
        norm_off = shaped(typed(norm_off, np.dtype(np.uint32), "norm_off"), "norm_off", 1)
        norm_out = shaped(typed(norm_out, np.dtype(np.uint32), "norm_out"), "norm_out", 1)
        if len(offsets) != len(scores) + 1:
            raise ValueError("offsets must hold one more entry than scores")
        if not 0 <= unk_id < len(scores):
            raise ValueError("unk_id is not a piece id")
        self._pieces: dict[bytes, tuple[int, float]] = {}
        self._max_piece_bytes = 1
        for piece_id, (start, end) in enumerate(itertools.pairwise(offsets.tolist())):
            if start > end or end > len(blob):
                raise ValueError("piece offsets must rise within the blob")
            if start == end:
                continue
            self._max_piece_bytes = max(self._max_piece_bytes, end - start)
            self._pieces.setdefault(bytes(blob[start:end]), (piece_id, float(scores[piece_id])))
        self._unk_id = unk_id
        self._unk_score = _f32(float(scores.min()) - _UNK_PENALTY)
        if len(norm_off) != len(norm_cp) + 1:
            raise ValueError("norm_off must hold one more entry than norm_cp")
        self._norm: dict[int, str] = {}
        bounds = itertools.pairwise(norm_off.tolist())
        for cp, (start, end) in zip(norm_cp.tolist(), bounds, strict=True):
            if start > end or end > len(norm_out):
                raise ValueError("norm offsets must rise within norm_out")
            try:
                self._norm[cp] = "".join(map(chr, norm_out[start:end].tolist()))
                (chr(cp) + self._norm[cp]).encode("utf-8")
            except (ValueError, UnicodeEncodeError) as exc:
                raise ValueError("bad code point") from exc

    def normalize(self, text: str) -> str:
        chars: list[str] = []
        for c in text.translate(self._norm):
            for o in c:
                if not (o == " " and chars and chars[-1] == " "):
                    chars.append(o)
        joined = "".join(chars)
        prefix = "" if joined.startswith(" ") else _META
        return prefix + joined.replace(" ", _META)

    def encode(self, text: str) -> list[int]:
        chars = self.normalize(text)
        ends = [0]
        for c in chars:
            ends.append(ends[-1] + len(c.encode("utf-8")))
        raw = chars.encode("utf-8")
        n = len(chars)
        best = [-math.inf] * (n + 1)
        piece = [self._unk_id] * (n + 1)
        source = [0] * (n + 1)
        best[0] = 0.0
        for i in range(n):
            here = best[i]
            for e in range(i + 1, n + 1):
                span = raw[ends[i] : ends[e]]
                if len(span) > self._max_piece_bytes:
                    break
                hit = self._pieces.get(span)
                if hit is not None:
                    total = _f32(here + hit[1])
                    if hit[0] != self._unk_id and total > best[e]:
                        best[e], piece[e], source[e] = total, hit[0], i
            total = _f32(here + self._unk_score)
            if total > best[i + 1]:
                best[i + 1], piece[i + 1], source[i + 1] = total, self._unk_id, i
        ids: list[int] = []
        at = n
        while at > 0:
            ids.append(piece[at])
            at = source[at]
        return ids[::-1]
