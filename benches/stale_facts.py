"""Stale facts (issue 32): many facts, each updated several times with declared supersession,
asked in natural words; and what the supersession step costs a recall at 100,000 memories.

``PYTHONPATH=. nice -n 5 python -m benches.stale_facts [--facts 200] [--versions 4]
[--cost-rows 100000] [--rounds 60] [--json]``

Quality. Two fresh stores get the same rows: each fact stored `--versions` times, its newer
wordings written later ("moved to", "now", "correction:"), with the hashing embedder the test
suite uses. In the first store each newer version is declared to supersede (or, for a
correction, correct) the one before (`declare_associations`); the second store declares
nothing. Each fact is then asked once as a question (`recall`, limit 5) and the answer's best
message (the last) is classified: the current version (success), a superseded version of the
same fact (stale, returned as current), or anything else (a miss). Also counted: answers that
hold a superseded version anywhere.

Cost. A private copy of the 100,000-memory corpus of `benches/million_corpus.py` (built and
cached on first use) is opened by an Engine as the stdio server opens it; the recall handler is
called for `--rounds` corpus queries in three conditions, interleaved round by round so that
load on the shared machine falls on all three alike: the agent declares nothing (the step is
its cached probe), the agent declares 1,000 `supersedes` relations among its rows, and the
same with `include_superseded`. The step itself (`Supersession` as the pipeline's list step and
`Supersession.marks` on the answer) and the whole recall are timed; p50, p95 and the
interquartile range are printed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cpersona.config import Settings
from cpersona.engine import Engine
from cpersona.retrieval.supersession import Supersession
from cpersona.server.registry import coerce
from cpersona.server.tools import by_name
from cpersona.storage import associations as decl

from benches import million as mb
from benches import million_corpus as mc

AGENT = "stale"
PEOPLE = [
    "Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan", "Jun",
    "Kofi", "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara",
    "Uma", "Viktor", "Wren", "Xiu", "Yara", "Zane", "Amir", "Beatriz", "Cyrus", "Dmitri",
]  # fmt: skip
MEETINGS = ["standup", "retro", "planning meeting"]
FLOORS = ["floor 2", "floor 3", "floor 4", "floor 5", "floor 6", "floor 7", "floor 8"]
WINDOWS = ["Monday mornings", "Tuesday evenings", "Wednesday nights", "Thursday noons",
           "Friday mornings", "Sunday nights"]  # fmt: skip
CITIES = [
    "Paris", "Berlin", "Lisbon", "Osaka", "Lagos", "Austin", "Quito", "Hanoi", "Oslo", "Perth",
    "Cairo", "Seoul", "Lima", "Riga", "Turin", "Dakar",
]  # fmt: skip
TEAMS = ["platform", "billing", "search", "mobile", "payments", "growth", "infra", "data"]
SERVICES = ["gateway", "ledger", "indexer", "scheduler", "mailer", "auth service"]
HOSTS = ["atlas", "zeus", "hermes", "apollo", "orion", "vega", "lyra", "draco"]
TIMES = ["08:30", "09:00", "09:30", "10:00", "10:30", "11:00", "13:30", "15:00"]
DAYS = ["Mondays", "Tuesdays", "Wednesdays", "Thursdays", "Fridays"]

#: (first wording, newer wording, question, values) per kind of fact; the slots a question
#: names make one fact (so at most 30 + 24 + 48 + 30 + 30 + 48 = 210 distinct facts).
KINDS: list[tuple[str, str, str, list[str]]] = [
    ("{who} lives in {v}", "{who} moved to {v}", "Where does {who} live now?", CITIES),
    (
        "The {team} team {meet} is at {v}",
        "The {team} team {meet} moved to {v}",
        "When is the {team} team {meet}?",
        TIMES,
    ),
    (
        "The {svc} of the {team} team runs on host {v}",
        "The {svc} of the {team} team now runs on host {v}",
        "Which host runs the {team} team's {svc}?",
        HOSTS,
    ),
    (
        "{who}'s weekly one-on-one is on {v}",
        "Correction: {who}'s weekly one-on-one is on {v}",
        "What day is {who}'s weekly one-on-one?",
        DAYS,
    ),
    (
        "{who}'s desk is on {v}",
        "{who}'s desk moved to {v}",
        "Which floor is {who}'s desk on?",
        FLOORS,
    ),
    (
        "The {team} team deploys the {svc} on {v}",
        "Correction: the {team} team deploys the {svc} on {v}",
        "When does the {team} team deploy the {svc}?",
        WINDOWS,
    ),
]
SLOTS = ("who", "team", "svc", "meet")


def facts(count: int, versions: int, seed: int = 5) -> list[dict[str, Any]]:
    """`count` distinct facts, each with `versions` wordings (oldest first) and a question."""
    rng = random.Random(seed)
    keys = sorted(
        {
            (kind, *(f"{slot}={value}" for slot, value in combo))
            for kind, (_, _, question, _) in enumerate(KINDS)
            for combo in _combos(question)
        }
    )
    if count > len(keys):
        raise SystemExit(f"--facts {count}: at most {len(keys)} distinct facts")
    out = []
    for key in rng.sample(keys, count):
        first, newer, question, values = KINDS[key[0]]
        slots = dict(part.split("=", 1) for part in key[1:])
        picked = rng.sample(values, versions)
        texts = [
            (first if k == 0 else newer).format(v=value, **slots) for k, value in enumerate(picked)
        ]
        role = "corrects" if newer.startswith("Correction") else "supersedes"
        out.append({"texts": texts, "question": question.format(**slots), "role": role})
    return out


def _combos(question: str) -> list[tuple[tuple[str, str], ...]]:
    """Every filling of the slots `question` names."""
    pools = {"who": PEOPLE, "team": TEAMS, "svc": SERVICES, "meet": MEETINGS}
    combos: list[tuple[tuple[str, str], ...]] = [()]
    for slot in SLOTS:
        if "{" + slot + "}" in question:
            combos = [(*c, (slot, v)) for c in combos for v in pools[slot]]
    return combos


def _caller(engine: Engine) -> Callable[[str, dict[str, Any]], dict[str, Any]]:
    tools = by_name()

    def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        spec = tools[name]
        out = spec.handler(engine, coerce(spec, args))
        engine.db.release_reader()  # as the server does at the end of each call
        return out

    return call


def quality(count: int, versions: int, work: Path) -> dict[str, Any]:
    corpus = facts(count, versions)
    result: dict[str, Any] = {"facts": count, "versions": versions}
    for label, declared in (("declared", True), ("undeclared", False)):
        engine = Engine(
            Settings(
                db_path=str(work / f"{label}.db"),
                embedding_mode="hashing",
                calibrate_on_model_change=False,
            )
        )
        call = _caller(engine)
        ids: list[list[int]] = []
        try:
            for k in range(versions):  # round by round: every fact's version k, then k + 1
                for n, fact in enumerate(corpus):
                    stamp = f"2026-0{1 + k}-{1 + n % 28:02d}T09:00:00Z"
                    out = call(
                        "store",
                        {
                            "agent_id": AGENT,
                            "message": {"content": fact["texts"][k], "timestamp": stamp},
                        },
                    )
                    assert out["result"] == "stored", out
                    if k == 0:
                        ids.append([])
                    ids[n].append(int(out["id"]))
            if declared:
                for n, fact in enumerate(corpus):
                    rel = [
                        {
                            "subject": f"mem:{ids[n][k + 1]}",
                            "predicate": fact["role"],
                            "object": f"mem:{ids[n][k]}",
                        }
                        for k in range(versions - 1)
                    ]
                    call(
                        "declare_associations",
                        {"agent_id": AGENT, "associations": {"relations": rel}},
                    )
            current = stale = missed = holds_stale = 0
            for n, fact in enumerate(corpus):
                answer = call("recall", {"agent_id": AGENT, "query": fact["question"], "limit": 5})
                got = [m.get("ref") for m in answer["messages"]]
                old = {f"mem:{i}" for i in ids[n][:-1]}
                best = got[-1] if got else None
                if best == f"mem:{ids[n][-1]}":
                    current += 1
                elif best in old:
                    stale += 1
                else:
                    missed += 1
                holds_stale += any(r in old for r in got)
        finally:
            engine.close()
        result[label] = {
            "current_first": round(current / count, 4),
            "stale_first": round(stale / count, 4),
            "other_first": round(missed / count, 4),
            "answers_holding_a_superseded_version": round(holds_stale / count, 4),
        }
    return result


def cost(rows: int, rounds: int, work: Path) -> dict[str, Any]:
    db = mb._copy(mc.corpus(rows), work / "cost")
    engine = Engine(
        Settings(db_path=str(db), embedding_mode="hashing", calibrate_on_model_change=False)
    )
    call = _caller(engine)
    step: dict[str, list[float]] = {"none": [], "declared": [], "declared_include": []}
    total: dict[str, list[float]] = {k: [] for k in step}
    originals = {name: getattr(Supersession, name) for name in ("__call__", "marks")}
    spent = [0.0]  # this call's time in the step: the replacement and the answer's marks

    def timing(name: str) -> Callable[..., Any]:
        def timed(self: Supersession, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return originals[name](self, *args, **kwargs)
            finally:
                spent[0] += (time.perf_counter() - t0) * 1e3

        return timed

    try:
        queries = mc.queries(rounds + 5, seed=13)
        for q in queries[:5]:  # warm: the full-text core and the vector file are loaded
            call("recall", {"agent_id": mc.AGENT, "query": q, "limit": 10})
        rng = random.Random(3)
        ids = [
            r[0] for r in engine.db.query("SELECT id FROM memories WHERE agent_id = ?", (mc.AGENT,))
        ]
        declared = min(1000, len(ids) // 4)  # 1,000 at the real size; fewer in a toy run
        chain_rows = rng.sample(ids, 2 * declared)
        other = mc.AGENT + "-declared"
        # The declaring agent: the same rows, under another name, 1,000 supersedes among them.
        with engine.db.atomic() as conn:
            conn.execute(
                "INSERT INTO memories (agent_id, project_id, msg_id, content, source, timestamp, "
                "metadata, embedding, channel, created_at) SELECT ?, project_id, msg_id, content, "
                "source, timestamp, metadata, embedding, channel, created_at FROM memories "
                "WHERE agent_id = ? ORDER BY id",
                (other, mc.AGENT),
            )
        engine.after_write()
        # Copied in id order, so the n-th row of each agent is the same text.
        copies = [
            r[0]
            for r in engine.db.query(
                "SELECT id FROM memories WHERE agent_id = ? ORDER BY id", (other,)
            )
        ]
        mapped = dict(zip(sorted(ids), copies, strict=True))
        pairs = [
            (mapped[chain_rows[2 * k]], mapped[chain_rows[2 * k + 1]]) for k in range(declared)
        ]
        for start in range(0, len(pairs), 64):
            rel = [
                {"subject": f"mem:{a}", "predicate": "supersedes", "object": f"mem:{b}"}
                for a, b in pairs[start : start + 64]
            ]
            decl.declare(engine.db, decl.DeclScope(other), {"relations": rel})
        engine.recaller.supersession.invalidate()
        for name in originals:
            setattr(Supersession, name, timing(name))
        for q in queries[5:]:
            for label, agent, include in (
                ("none", mc.AGENT, False),
                ("declared", other, False),
                ("declared_include", other, True),
            ):
                spent[0] = 0.0
                t0 = time.perf_counter()
                call(
                    "recall",
                    {"agent_id": agent, "query": q, "limit": 10, "include_superseded": include},
                )
                total[label].append((time.perf_counter() - t0) * 1e3)
                step[label].append(spent[0])
    finally:
        for name, method in originals.items():
            setattr(Supersession, name, method)
        engine.close()
    return {
        "rows_per_agent": rows,
        "declared_relations": declared,
        "step_ms": {k: _summary(v) for k, v in step.items()},
        "recall_ms": {k: _summary(v) for k, v in total.items()},
    }


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 3),
        "p95": round(mb._pct(values, 0.95), 3),
        "iqr": round(mb._pct(values, 0.75) - mb._pct(values, 0.25), 3),
        "n": len(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=200)
    parser.add_argument("--versions", type=int, default=4)
    parser.add_argument("--cost-rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="stale-facts-") as tmp:
        work = Path(tmp)
        out: dict[str, Any] = {"quality": quality(a.facts, a.versions, work)}
        if not a.skip_cost:
            out["cost"] = cost(a.cost_rows, a.rounds, work)
    print(json.dumps(out, indent=None if a.json else 2))


if __name__ == "__main__":
    main()
