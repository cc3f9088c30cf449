"""Metrics and per-call timings of a stdio server (issue 14).

(a) a real `python -m cpersona` stdio process with CPERSONA_METRICS_PORT=0 serves the scrape on
loopback, counting the calls the official client made, and with CPERSONA_LOG_LEVEL=debug logs
one stage-timing line per tool call on stderr; (b) in memory: the timings and the metrics never
change an answer, and the stages are attributed to the call that ran them.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from child_env import inherited
from cpersona.server.app import build_server
from cpersona.server.metrics import Metrics
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from prometheus_client.parser import text_string_to_metric_families

WAIT = 30.0  # seconds any single wait may take before the test fails (never a timing claim)
_METRICS_URL = re.compile(r"metrics: (http://127\.0\.0\.1:\d+/metrics)")
_TIMING_LINE = re.compile(r"\[cpersona\.timings\] DEBUG: tool (\S+) [\d.]+ms (\S+)(.*)$")


def counts(text: str, name: str, label: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[sample.labels[label]] = sample.value
    return out


def wait_for(pattern: re.Pattern[str], path: Path) -> re.Match[str]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = pattern.search(path.read_text(encoding="utf-8", errors="replace"))
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{pattern.pattern!r} never appeared:\n{path.read_text()}")


@pytest.mark.anyio
async def test_stdio_metrics_port_and_debug_timing_lines(tmp_path: Path):
    db = tmp_path / "mem.db"
    env = {
        **inherited(),
        "CPERSONA_DB_PATH": str(db),
        "CPERSONA_EMBEDDING_MODE": "hashing",
        "CPERSONA_METRICS_PORT": "0",
        "CPERSONA_LOG_LEVEL": "debug",
    }
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "cpersona"], env=env, cwd=str(tmp_path)
    )
    errlog = tmp_path / "stderr.txt"
    with open(errlog, "w", encoding="utf-8") as err:
        async with Client(stdio_client(params, errlog=err)) as client:
            for i, text in enumerate(("tea with lemon", "green tea", "a city map")):
                message = {"id": f"m{i}", "content": text}
                await client.call_tool("store", {"agent_id": "a", "message": message})
            recalled = await client.call_tool("recall", {"agent_id": "a", "query": "tea"})
            assert json.loads(recalled.content[0].text)["messages"]
            await client.call_tool("list_memories", {"agent_id": "a"})
            url = wait_for(_METRICS_URL, errlog).group(1)
            scrape = httpx2.get(url, timeout=WAIT)
    assert scrape.status_code == 200
    calls = counts(scrape.text, "cpersona_tool_calls_total", "tool")
    assert calls["store"] == 3
    assert calls["recall"] == 1
    assert calls["list_memories"] == 1
    assert calls["update_memory"] == 0
    stages = counts(scrape.text, "cpersona_recall_stage_duration_seconds_count", "stage")
    assert stages["vector_scan"] == 1
    assert stages["gate"] == 1

    lines = [
        found.groups()
        for line in errlog.read_text(encoding="utf-8").splitlines()
        if (found := _TIMING_LINE.search(line))
    ]
    assert [tool for tool, _, _ in lines] == ["store"] * 3 + ["recall", "list_memories"]
    assert all(outcome == "ok" for _, outcome, _ in lines)
    recall_stages = dict(part.split("=") for part in lines[3][2].split())
    assert set(recall_stages) >= {"query_embedding", "vector_scan", "keyword", "fusion", "gate"}
    assert all(value.endswith("ms") for value in recall_stages.values())


@pytest.mark.anyio
async def test_metrics_and_timings_leave_answers_unchanged(make_engine, caplog):
    engine = make_engine()
    reads = [
        ("recall", {"agent_id": "a", "query": "tea"}),
        ("recall", {"agent_id": "a", "query": ""}),
        ("list_memories", {"agent_id": "a"}),
        ("store", {"agent_id": "a"}),  # refused by the schema
        ("nope", {}),
    ]
    plain = build_server(engine)
    metrics = Metrics(engine, ["store", "recall", "list_memories"])
    instrumented = build_server(engine, metrics=metrics)
    caplog.set_level(logging.DEBUG, logger="cpersona.timings")
    async with Client(plain) as a, Client(instrumented) as b:
        for i, text in enumerate(("tea with lemon", "green tea in Kyoto")):
            await a.call_tool(
                "store", {"agent_id": "a", "message": {"id": str(i), "content": text}}
            )
        for name, args in reads:
            first = await a.call_tool(name, args)
            second = await b.call_tool(name, args)
            assert second.content[0].text == first.content[0].text, name
            assert second.is_error == first.is_error
    text = metrics.render()[0].decode()
    calls = counts(text, "cpersona_tool_calls_total", "tool")
    assert calls == {"store": 1, "recall": 2, "list_memories": 1, "unknown": 1}
    errors = counts(text, "cpersona_tool_errors_total", "kind")
    assert errors == {"invalid_arguments": 1, "unknown_tool": 1}
    stages = counts(text, "cpersona_recall_stage_duration_seconds_count", "stage")
    assert stages["vector_scan"] == 1  # the blank query runs no vector arm
    assert stages["keyword"] == 2
    # The log does not depend on metrics: both servers log one line per call.
    logged = [r.getMessage() for r in caplog.records if r.name == "cpersona.timings"]
    assert len(logged) == 2 + 2 * len(reads)
    assert sum("vector_scan=" in line for line in logged) == 2


def test_serving_modules_do_not_import_prometheus_client():
    # Its import costs about 90 ms; a server without metrics must not pay it at start.
    code = (
        "import sys, cpersona.cli, cpersona.server.app, cpersona.server.http, "
        "cpersona.server.stdio, cpersona.retrieval.pipeline; "
        "print('prometheus_client' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT, check=True
    )
    assert done.stdout.strip() == "False"


@pytest.mark.anyio
async def test_broken_metrics_never_cost_a_call_its_answer(make_engine, monkeypatch, caplog):
    import cpersona.server.metrics as metrics_module

    def refuse(*args: object) -> None:
        raise ImportError("prometheus_client is not installed")

    monkeypatch.setattr(metrics_module, "_Collectors", refuse)
    engine = make_engine()
    metrics = Metrics(engine, ["store"])
    async with Client(build_server(engine, metrics=metrics)) as client:
        message = {"id": "1", "content": "tea"}
        stored = await client.call_tool("store", {"agent_id": "a", "message": message})
        again = await client.call_tool("list_memories", {"agent_id": "a"})
    assert json.loads(stored.content[0].text)["result"] == "stored"
    assert json.loads(again.content[0].text)["count"] == 1
    assert sum("metrics are off" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(RuntimeError, match="metrics are off"):
        metrics.render()
