"""The two benchmark corpora as plain data: memories to store, episodes, and judged queries.

The data is read from `../shared/bench-data/` (or `CPERSONA_BENCH_DATA`) and never copied into
the repository: LoCoMo is CC BY-NC 4.0 and JSQuAD CC BY-SA 4.0 (their README and licences sit
beside the files).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

#: LoCoMo question categories (README of the data).
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "inference", 4: "single-hop", 5: "adversarial"}
#: Query groups whose answer is not in the agent's memory: LoCoMo's adversarial questions
#: (category 5), and another conversation's answerable questions asked of this agent
#: ("foreign": about people and events it never heard of).
PROBES = ("adversarial", "foreign")
#: Foreign questions asked of each agent (its next conversation's first ones).
FOREIGN_PER_AGENT = 40
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_SESSION = re.compile(r"session_(\d+)")


def data_dir() -> Path:
    """Where the licensed data lives: $CPERSONA_BENCH_DATA, else ../shared/bench-data."""
    env = os.environ.get("CPERSONA_BENCH_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "bench-data"


@dataclass(frozen=True, slots=True)
class Doc:
    """One memory: stored with `store` under `agent`, judged by `key` (its msg_id)."""

    key: str
    agent: str
    content: str
    timestamp: str | None = None
    #: The session (LoCoMo) or article (JSQuAD) the memory belongs to: the lived replay
    #: stores a session's memories, then archives it as an episode.
    session: str = ""


@dataclass(frozen=True, slots=True)
class Episode:
    """One session summary, stored with `archive_episode`; never a relevant answer."""

    agent: str
    summary: str
    start: str
    end: str
    session: str = ""


@dataclass(frozen=True, slots=True)
class Query:
    agent: str
    text: str
    group: str  # "jsquad", or the LoCoMo category name
    relevant: frozenset[str] = frozenset()  # Doc keys; empty for adversarial probes

    @property
    def probe(self) -> bool:
        """An adversarial question: the corpus holds no answer, the best reply is little."""
        return not self.relevant


@dataclass
class Corpus:
    name: str
    docs: list[Doc] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)


def _session_time(text: str) -> datetime:
    # "1:56 pm on 8 May, 2023"
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def locomo(path: Path | None = None, *, conversations: int | None = None) -> Corpus:
    """LoCoMo: one memory per turn ("Speaker: text"), one agent per conversation.

    A turn's timestamp is its session's date plus 30 s per turn (turns keep their order).
    Queries are the questions of categories 1-4 whose evidence names stored turns (relevant =
    those turns), plus every category-5 question as a probe.
    """
    samples = json.loads((path or data_dir() / "locomo-dev6.json").read_text("utf-8"))
    corpus = Corpus("locomo")
    answerable: dict[str, list[str]] = {}
    for sample in samples[:conversations]:
        agent = f"locomo-{sample['sample_id']}"
        conv = sample["conversation"]
        summaries = sample.get("session_summary", {})
        keys: set[str] = set()
        sessions = sorted((int(m.group(1)) for k in conv if (m := _SESSION.fullmatch(k))), key=int)
        for n in sessions:
            turns = conv.get(f"session_{n}") or []
            start = _session_time(conv[f"session_{n}_date_time"])
            for i, turn in enumerate(turns):
                ts = _iso(start + timedelta(seconds=30 * i))
                text = f"{turn['speaker']}: {turn['text']}"
                # dia_ids repeat across conversations: the key carries the agent.
                key = f"{agent}/{turn['dia_id']}"
                corpus.docs.append(Doc(key, agent, text, ts, f"s{n}"))
                keys.add(key)
            summary = summaries.get(f"session_{n}_summary")
            if summary and turns:
                end = _iso(start + timedelta(seconds=30 * (len(turns) - 1)))
                corpus.episodes.append(Episode(agent, summary, _iso(start), end, f"s{n}"))
        for qa in sample["qa"]:
            category = int(qa["category"])
            evidence = " ".join(qa.get("evidence") or [])
            ids = {f"{agent}/D{a}:{b}" for a, b in _EVIDENCE.findall(evidence)} & keys
            if category == 5:
                corpus.queries.append(Query(agent, qa["question"], CATEGORIES[5]))
            elif ids:
                corpus.queries.append(
                    Query(agent, qa["question"], CATEGORIES[category], frozenset(ids))
                )
                answerable.setdefault(agent, []).append(qa["question"])
    agents = list(answerable)
    for i, agent in enumerate(agents if len(agents) > 1 else []):
        other = agents[(i + 1) % len(agents)]
        for text in answerable[other][:FOREIGN_PER_AGENT]:
            corpus.queries.append(Query(agent, text, "foreign"))
    return corpus


#: JSQuAD has no sessions: the lived replay reads one article a day from this date.
_JSQUAD_EPOCH = datetime(2024, 1, 1, 9, 0, 0)


def _article_episode(agent: str, a: int, article: dict[str, object]) -> Episode:
    """An article as a session an agent would archive: its title and the first sentence of
    each paragraph (an extractive summary, as JSQuAD carries none), on day `a`."""
    paragraphs = article["paragraphs"]
    assert isinstance(paragraphs, list)
    # A context reads "title [SEP] text".
    texts = [str(p["context"]).split("[SEP]", 1)[-1].strip() for p in paragraphs]
    firsts = [t.split("。")[0] + "。" for t in texts]
    title = str(article.get("title", ""))
    summary = (f"{title}: " + "".join(firsts))[:600]
    start = _JSQUAD_EPOCH + timedelta(days=a)
    end = start + timedelta(seconds=30 * max(0, len(paragraphs) - 1))
    return Episode(agent, summary, _iso(start), _iso(end), f"a{a}")


def jsquad(
    path: Path | None = None, *, questions: int | None = None, article_step: int = 1
) -> Corpus:
    """JSQuAD: every paragraph is a memory of one agent; a question's own paragraph is relevant.

    With `article_step` n, only every n-th article is read (the quick run's smaller corpus).
    With `questions`, that many questions are taken evenly across the whole set (articles come
    in blocks, so the first N would test only a few of them).
    """
    data = json.loads((path or data_dir() / "jsquad-valid-v1.3.json").read_text("utf-8"))
    corpus = Corpus("jsquad")
    agent = "jsquad"
    everything: list[Query] = []
    for a, article in enumerate(data["data"]):
        if a % article_step:
            continue
        for p, para in enumerate(article["paragraphs"]):
            key = f"p{a}.{p}"
            corpus.docs.append(Doc(key, agent, para["context"], session=f"a{a}"))
            for qa in para["qas"]:
                everything.append(Query(agent, qa["question"], "jsquad", frozenset({key})))
        corpus.episodes.append(_article_episode(agent, a, article))
    if questions is not None and questions < len(everything):
        step = len(everything) / questions
        everything = [everything[int(i * step)] for i in range(questions)]
    corpus.queries = everything
    return corpus
