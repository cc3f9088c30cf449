"""The unigram tokenizer (rust/unigram.rs) against its Python twin, and both against examples."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from cpersona import _fallback
from hypothesis import given
from hypothesis import strategies as st

# A toy vocabulary with overlapping pieces, so the best split is not the greedy one.
PIECES = [
    "<s>",
    "<pad>",
    "</s>",
    "<unk>",
    "\u2581",
    "a",
    "b",
    "ab",
    "\u2581a",
    "\u2581ab",
    "ba",
    "bab",
    "c",
    "\u2581c",
    "ca",
    "e",
    "\u3042",
    "\u2581\u3042\u3044",
    "\u3044",
]
SCORES = [
    0.0,
    0.0,
    0.0,
    0.0,
    -4.0,
    -3.0,
    -2.5,
    -2.0,
    -2.0,
    -1.5,
    -3.5,
    -4.0,
    -3.0,
    -2.0,
    -3.5,
    -1.0,
    -2.0,
    -2.5,
    -2.0,
]
# U+00E9 normalises to "e", U+3000 to a space, U+0001 disappears.
NORM = {0xE9: [ord("e")], 0x3000: [0x20], 0x1: []}


def build(module: ModuleType, pieces: list[str] = PIECES, scores: list[float] = SCORES) -> object:
    blob = b"".join(p.encode() for p in pieces)
    offsets = np.cumsum([0] + [len(p.encode()) for p in pieces]).astype(np.uint32)
    cps = np.array(sorted(NORM), np.uint32)
    off = np.cumsum([0] + [len(NORM[c]) for c in sorted(NORM)]).astype(np.uint32)
    out = np.array([o for c in sorted(NORM) for o in NORM[c]], np.uint32)
    return module.Unigram(blob, offsets, np.array(scores, np.float32), 3, cps, off, out)


@pytest.fixture(scope="module")
def tok(kernels: ModuleType) -> object:
    return build(kernels)


def test_best_split_beats_greedy(tok: object) -> None:
    # "▁ab" + "ab" (-3.5) beats "▁a" + "bab" (-6.0) and "▁ab" + "a" + "b" (-7.0).
    assert tok.encode("abab") == [9, 7]  # type: ignore[attr-defined]


def test_normalisation_spaces_and_unknowns(tok: object) -> None:
    assert tok.normalize("a  \u3000b") == "\u2581a\u2581b"  # type: ignore[attr-defined]
    assert tok.normalize(" a") == "\u2581a"  # type: ignore[attr-defined]
    assert tok.normalize("\u00e9\u0001") == "\u2581e"  # type: ignore[attr-defined]
    assert tok.encode("az") == [8, 3]  # type: ignore[attr-defined]
    assert tok.encode("\u3042\u3044") == [17]  # type: ignore[attr-defined]
    assert tok.encode("") == [4]  # type: ignore[attr-defined]


_U32 = np.uint32
#: Tables the constructor must refuse, each with the word its error names: offsets past the
#: end of the pieces, an unknown-piece id past the table, a surrogate among the code points.
INCONSISTENT = {
    "offsets": (np.array([0, 3], _U32), 0, np.zeros(0, _U32), np.zeros(1, _U32)),
    "unk_id": (np.array([0, 2], _U32), 1, np.zeros(0, _U32), np.zeros(1, _U32)),
    "code point": (np.array([0, 2], _U32), 0, np.array([0xD800], _U32), np.zeros(2, _U32)),
}


@pytest.mark.parametrize("words", INCONSISTENT)
def test_inconsistent_tables_are_refused(kernels: ModuleType, words: str) -> None:
    offsets, unk_id, norm_cp, norm_off = INCONSISTENT[words]
    with pytest.raises(ValueError, match=words):
        kernels.Unigram(
            b"ab", offsets, np.zeros(1, np.float32), unk_id, norm_cp, norm_off, np.zeros(0, _U32)
        )


TEXT = st.text(alphabet="ab ce\u00e9\u3000\u3042\u3044z\u0001", max_size=40)


@given(text=TEXT)
def test_rust_matches_the_twin(rust_kernels: ModuleType, text: str) -> None:
    native, twin = build(rust_kernels), build(_fallback)
    assert native.normalize(text) == twin.normalize(text)  # type: ignore[attr-defined]
    assert native.encode(text) == twin.encode(text)  # type: ignore[attr-defined]


@given(
    scores=st.lists(
        st.floats(-20, 0, width=32, allow_nan=False), min_size=len(PIECES), max_size=len(PIECES)
    ),
    text=TEXT,
)
def test_rust_matches_the_twin_on_any_scores(
    rust_kernels: ModuleType, scores: list[float], text: str
) -> None:
    # Random scores make near-ties: both must break them the same way.
    native, twin = build(rust_kernels, scores=scores), build(_fallback, scores=scores)
    assert native.encode(text) == twin.encode(text)  # type: ignore[attr-defined]
