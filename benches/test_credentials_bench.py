"""What the credential detector costs a write (issue 22).

- detect: `redact` over 1,000 typical memories (LoCoMo turns, read from ../shared/bench-data;
  generated conversational sentences when the data is absent), and over texts that hold
  credentials (a config snippet, a pasted private key).
- store: `Writer.store` end to end (hashing embedder, a file database) under
  CPERSONA_SECRETS=redact against allow, on the same turns: the detector's share of a store.

Run: ``python -m pytest benches/test_credentials_bench.py --benchmark-enable
--benchmark-columns=min,median,mean,rounds``.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cpersona.config import Settings
from cpersona.credentials.detect import redact
from cpersona.embedding.hashing import HashingProvider
from cpersona.engine import Engine

from benches.quality import datasets

N_TEXTS = 1000


def typical_texts() -> tuple[str, list[str]]:
    try:
        docs = datasets.locomo().docs
        return "locomo", [d.content for d in docs[:N_TEXTS]]
    except FileNotFoundError:
        rng = random.Random(22)
        words = ["we", "met", "at", "the", "cafe", "and", "talked", "about", "the", "trip"]
        return "generated", [
            " ".join(rng.choices(words, k=rng.randint(8, 40))) for _ in range(N_TEXTS)
        ]


CONFIG = (
    "deploy: export GITHUB_TOKEN=ghp_" + "a1B2c3" * 6 + "\nDATABASE_URL=postgres://app:s3cr3t"
    "@db.internal:5432/app\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n"
    "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\npassword: hunter22"
)
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    + "\n".join(["b3BlbnNzaC1rZXktdjE" * 3] * 25)
    + ("\n-----END OPENSSH PRIVATE KEY-----")
)


@pytest.mark.parametrize("workload", ["typical", "with credentials"])
def test_detect_cost_per_text(benchmark: Any, workload: str) -> None:
    source, texts = typical_texts()
    if workload == "with credentials":
        texts = [CONFIG, PEM] * 50
    found = sum(bool(redact(t)[1]) for t in texts)
    assert found == (0 if workload == "typical" else len(texts))  # checked before timing

    def run() -> None:
        for text in texts:
            redact(text)

    benchmark.group = f"detect {workload}"
    benchmark.extra_info.update(
        texts=len(texts),
        source=source if workload == "typical" else "config + private key",
        mean_chars=round(sum(map(len, texts)) / len(texts), 1),
    )
    benchmark(run)
    if benchmark.stats is not None:  # None under --benchmark-disable
        mean = benchmark.stats.stats.mean
        benchmark.extra_info["us_per_text"] = round(mean / len(texts) * 1e6, 2)


@pytest.fixture
def writer_engine(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Engine]:
    settings = Settings(
        db_path=str(tmp_path / "bench.db"),
        embedding_mode="hashing",
        operating_context_path=str(tmp_path / "no-oc.toml"),
    )
    engine = Engine(
        dataclasses.replace(settings, secrets=request.param), embedder=HashingProvider()
    )
    yield engine
    engine.close()


@pytest.mark.parametrize("writer_engine", ["redact", "allow"], indirect=True)
def test_store_cost_with_and_without_the_detector(benchmark: Any, writer_engine: Engine) -> None:
    source, texts = typical_texts()
    serial = itertools.count()

    def store() -> None:
        n = next(serial)
        message = {"content": f"{texts[n % len(texts)]} #{n}"}
        assert writer_engine.writer.store("bench", message, "", "")["result"] == "stored"

    benchmark.group = "store one memory"
    benchmark.extra_info.update(secrets=writer_engine.settings.secrets, source=source)
    benchmark.pedantic(store, rounds=300, warmup_rounds=20)
