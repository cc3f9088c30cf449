"""One frozen `Settings`, parsed once from the environment and passed down.

Every variable of spec surface.md §13 and retrieval.md §17 is declared once, as a field of
`Settings`: its name, kind (the field's type), default and accepted values. Unlike CPersona
2.5.x, which logs a warning and falls back to the default, an unusable value stops start-up
with one line naming the variable and what it accepts (`ConfigError`): a silently ignored
setting is a setting the operator thinks is in force and is not (see docs/compatibility.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from cpersona.credentials import MODES
from cpersona.errors import ConfigError

#: Embedding modes. `local` is the embedded default model; the others name a provider.
EMBEDDING_MODES = ("local", "local-e5", "local-minilm", "http", "api", "none", "hashing")
#: What a check of written input does when it fails (the timestamp skew, an external context,
#: an HTTP body over the limit): say so in the answer, refuse the write, or not check.
ENFORCEMENT = ("warn", "reject", "off")
PRECISION_BETAS = {"strict": 2.0, "balanced": 1.0, "lenient": 0.5}


T = TypeVar("T")

#: A field's kind by its annotation (`from __future__` keeps annotations as text); a field
#: given `choices` is a `choice`.
_KINDS = {
    "bool": "bool",
    "int": "int",
    "int | None": "optint",
    "float": "float",
    "float | None": "optfloat",
    "str": "str",
    "str | None": "optstr",
}


@dataclass(frozen=True, slots=True)
class _Var:
    """How one environment variable is read."""

    field: str
    names: tuple[str, ...]  # first non-empty wins: the CPERSONA_ form, then its generic alias
    kind: str  # bool | int | optint | float | optfloat | choice | str | optstr
    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()


def _env(
    default: T,
    *aliases: str,
    low: float | None = None,
    high: float | None = None,
    choices: tuple[str, ...] = (),
) -> T:
    """A `Settings` field whose variable has generic `aliases` (read after the CPERSONA_
    form), bounds or a set of accepted values; a field without these is declared plainly."""
    meta = {"aliases": aliases, "low": low, "high": high, "choices": choices}
    return field(default=default, metadata=meta)


def _var(f: Field[Any]) -> _Var:
    choices: tuple[str, ...] = f.metadata.get("choices", ())
    return _Var(
        f.name,
        ("CPERSONA_" + f.name.upper(), *f.metadata.get("aliases", ())),
        "choice" if choices else _KINDS[str(f.type)],
        f.default,
        f.metadata.get("low"),
        f.metadata.get("high"),
        choices,
    )


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of the server. Build with `Settings.from_env()`; replace() for tests."""

    # Storage, limits and surface (surface.md §13.2)
    db_path: str = "data/cpersona.db"
    # PostgreSQL + pgvector as the shared store (issue 12, docs/scale-out.md); unset = SQLite.
    database_url: str | None = None
    pg_pool_size: int = _env(8, low=1, high=1000)
    # Bounds a connection attempt and a wait for a pooled connection (issue 21): while the
    # server is unreachable a call is refused at once or after at most this.
    pg_connect_timeout_seconds: float = _env(5.0, low=0.1, high=600.0)
    # The vector arm on PostgreSQL from this host's index file (issue 19); false = pgvector.
    pg_vector_index: bool = True
    # Where a PostgreSQL deployment keeps this host's derived files (the full-text index).
    cache_dir: str | None = None
    fts_enabled: bool = True
    # The FTS arms from the Rust core's full-text index (docs/fts-index.md); false = FTS5 SQL.
    fts_index: bool = True
    # The kernel backend of the searchers (cpersona._backend): auto = Rust when built.
    kernel: str = _env("auto", choices=("auto", "rust", "numpy"))
    max_content_length: int = _env(16000, low=1)
    max_profile_length: int = _env(2000, low=1)
    max_metadata_length: int = _env(8000, low=1)
    future_timestamp_skew_seconds: int = _env(300, low=0)
    future_timestamp_mode: str = _env("warn", choices=ENFORCEMENT)
    # Credentials in written text (issue 22, docs/compatibility.md): allow = 2.5.x's verbatim.
    secrets: str = _env("redact", choices=MODES)
    recall_preview_chars: int = 500
    external_context_mode: str = _env("warn", choices=ENFORCEMENT)
    export_dir: str | None = None
    max_import_bytes: int = _env(104857600, low=1)
    task_queue_enabled: bool = True
    task_max_retries: int = _env(3, low=0)
    task_retry_delay: int = _env(30, low=0)
    degraded_advisory: bool = True
    operating_context: str | None = None
    operating_context_path: str = "~/.cpersona/operating-context.toml"
    # cpersona looks nothing up unless the operator asks (issue 5): default off.
    update_check: bool = False
    update_check_interval_seconds: int = _env(86400, low=0)
    reembed_row_cap: int = _env(5000, low=1)
    near_duplicate_row_cap: int = _env(5000, low=2)
    invalid_source_classify_cap: int = _env(10000, low=1)
    normalization_scan_cap: int = _env(10000, low=1)
    # Embedding and vector storage
    embedding_mode: str = _env("local", "EMBEDDING_MODE", choices=EMBEDDING_MODES)
    embedding_url: str = _env("", "EMBEDDING_HTTP_URL")
    embedding_api_key: str = _env("", "EMBEDDING_API_KEY")
    embedding_api_url: str = _env("https://api.openai.com/v1/embeddings", "EMBEDDING_API_URL")
    embedding_model: str = _env("text-embedding-3-small", "EMBEDDING_MODEL")
    embedding_timeout_secs: int = _env(30, low=1)
    embedding_cache_size: int = _env(256, low=0)
    embedding_cache_ttl: int = _env(300, low=0)
    embedding_threads: int = _env(1, low=1, high=256)
    vector_search_mode: str = _env("local", choices=("local", "remote"))
    store_blob: bool = True
    remote_search_timeout_secs: float = _env(5.0, low=0.0)
    remote_index_timeout_secs: float = _env(10.0, low=0.0)
    # Transport and security
    transport: str = _env("stdio", choices=("stdio", "streamable-http"))
    http_host: str = "127.0.0.1"
    http_port: int = _env(8402, low=0, high=65535)
    auth_token: str | None = None
    allow_unauthenticated_http: bool = False
    acl_file: str | None = None
    alias_ledger_file: str | None = None
    http_max_body_bytes: int = _env(4194304, low=1)
    http_body_limit_mode: str = _env("warn", choices=ENFORCEMENT)
    # Slow and idle HTTP connections, and how many may be open (issue 11.4, docs/reliability.md)
    http_header_timeout_seconds: float = _env(10.0, low=0.01)
    http_body_timeout_seconds: float = _env(60.0, low=0.01)
    http_keepalive_timeout_seconds: float = _env(5.0, low=0.01)
    http_max_connections: int = _env(512, low=1)
    oauth_resource: str | None = None
    oauth_authorization_servers: str | None = None
    oauth_scopes: str | None = None
    oauth_jwks_uri: str | None = None
    remote_url: str = "http://localhost:8402/mcp"
    # cpersona's own: where `cpersona web` (the read-only view) listens.
    web_host: str = "127.0.0.1"
    web_port: int = _env(8403, low=0, high=65535)
    proxy_max_inflight: int = _env(8, low=1)
    # cpersona's own: how long the bridge waits for one answer before failing it with -32000.
    proxy_timeout_seconds: float = _env(300.0, low=0.1)
    # Retrieval (retrieval.md §17)
    # rrf, as retrieval.md §17 and the contract's default configuration say; with the default
    # embedder (e5) it has the best mean nDCG@10 of docs/quality.md before calibration.
    recall_mode: str = _env("rrf", choices=("rrf", "rsf", "cascade"))
    max_memories: int = _env(10000, low=0)
    vector_reach: int = _env(0, low=0)
    vector_far_limit: int = _env(0, low=0)
    recall_library_max_limit: int = _env(10000, low=1)
    vector_scan_chunk_rows: int = _env(512, low=1)
    vector_index_max_excluded_ids: int = _env(10000, low=0)
    vector_min_similarity: float = 0.3
    rrf_k: int = _env(60, low=1)
    rrf_threshold_factor: float = 0.5
    confidence_enabled: bool = False
    cosine_floor: float = 0.20
    cosine_ceil: float = 0.75
    decay_rate: float = 0.005
    decay_floor: float = 0.3
    decay_ceil: float = 0.5
    recall_boost: float = 0.02
    boost_decay_rate: float = 0.002
    min_time_range_hours: float = 24.0
    reference_hours: float = 168.0
    resolved_decay_factor: float = 0.3
    recent_recall_penalty: float = 0.7
    recent_recall_window_min: float = 5.0
    episode_penalty_enabled: bool = True
    episode_decay_rate: float = 0.01
    episode_decay_floor: float = 0.5
    # Episode rows a fused recall answer may hold, placed after its memories (issue 30,
    # docs/compatibility.md "Episodes in recall"); -1 = one per ten rows asked, 0 = none.
    recall_episode_rows: int = _env(-1, low=-1)
    autocut_enabled: bool = True
    autocut_min_gap_ratio: float = 0.15
    autocut_min_results: int = _env(3, low=2)
    fused_gate_enabled: bool = True
    fused_gate_sample_queries: int = _env(40, low=1)
    fused_gate_calibration_draws: int = _env(5, low=1)
    recall_precision: str = _env("balanced", choices=tuple(PRECISION_BETAS))
    fused_gate_beta: float | None = None
    auto_calibrate: bool = False
    calibrate_on_model_change: bool = True
    calibrate_sample_size: int = _env(200, low=1)
    calibrate_max_sample: int = _env(5000, low=1)
    calibrate_z_factor: float = 1.0
    calibrate_floor: float = 0.05
    calibrate_method: str = _env("separation", choices=("separation", "percentile", "zscore"))
    calibrate_percentile: float = 0.95
    calibrate_temporal_window_min: float = 30.0
    scope_stats_cache: bool = True
    scope_stats_ttl_seconds: float = _env(60.0, low=0.0)
    # cpersona's own
    log_level: str = _env("info", choices=("debug", "info", "warning", "error"))
    sql_trace: bool = False
    # Metrics (issue 14): /metrics on HTTP, authenticated unless public; a stdio server serves
    # them only when given a loopback port (0: any free port, shown on stderr).
    metrics_public: bool = False
    metrics_port: int | None = _env(None, low=0, high=65535)
    #: Variables that were set in the environment (for the start-up banner).
    explicit: frozenset[str] = field(default=frozenset(), compare=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Parse every declared variable from `env` (default: `os.environ`).

        Raises:
            ConfigError: one line naming the variable and the values it accepts.
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        explicit: set[str] = set()
        for var in _VARS:
            name, raw = _lookup(env, var.names)
            if raw is None:
                continue
            values[var.field] = _parse(var, name, raw)
            explicit.add(name)
        settings = cls(**values, explicit=frozenset(explicit))
        problem = settings.full_text_problem()
        if problem:
            raise ConfigError(problem)
        return settings

    def full_text_problem(self, kernel: str = "") -> str:
        """Why these settings cannot serve the full-text arms ("" = they can): on PostgreSQL
        there is no FTS5, so the arms need the Rust core's full-text index (docs/fts-index.md).
        `kernel`: the loaded kernel when it is not the one asked for ("numpy" when the Rust
        core is not there), else `self.kernel`."""
        if not self.database_url or not self.fts_enabled:
            return ""
        if not self.fts_index:
            why = "CPERSONA_FTS_INDEX=false"
        elif (kernel or self.kernel) == "numpy":
            why = "the numpy kernel (CPERSONA_KERNEL=numpy)"
        else:
            return ""
        return (
            f"{why} cannot serve full-text search on PostgreSQL (CPERSONA_DATABASE_URL): it has "
            "no FTS5, the Rust core's full-text index answers there; use the Rust kernel with "
            "CPERSONA_FTS_INDEX=true, or CPERSONA_FTS_ENABLED=false for keyword search only"
        )

    @property
    def fused_beta(self) -> float:
        """The global beta: CPERSONA_FUSED_GATE_BETA, else that of CPERSONA_RECALL_PRECISION."""
        if self.fused_gate_beta is not None:
            return self.fused_gate_beta
        return PRECISION_BETAS[self.recall_precision]

    @property
    def embedding_provider(self) -> str:
        """The concrete provider name (`local` resolves to the default local model).

        e5, not MiniLM: the only embedded model that reads Japanese, and the best mean nDCG@10
        of docs/quality.md (0.694 with rrf). Where its package has no wheel, the factory falls
        back to MiniLM and says so at start (embedding.factory.local_fallback).
        """
        return "local-e5" if self.embedding_mode == "local" else self.embedding_mode


#: Every variable, one per field of `Settings` in its order.
_VARS: tuple[_Var, ...] = tuple(_var(f) for f in fields(Settings) if f.name != "explicit")

#: The names the embedded models record their vectors under (embedding/e5.py and minilm.py
#: take theirs from here): start-up compares them with the stored record without importing a
#: model (docs/performance.md, "Start-up").
LOCAL_MODEL_NAMES = {
    "local-e5": "local-e5:multilingual-e5-small-q4",
    "local-minilm": "local-minilm:all-MiniLM-L6-v2-int8",
}


def cache_root(cache_dir: str | None) -> Path:
    """This host's directory for derived files: CPERSONA_CACHE_DIR, else
    $XDG_CACHE_HOME/cpersona, else ~/.cache/cpersona."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "cpersona"


def variables() -> list[tuple[str, str, str]]:
    """(name, kind, default) of every variable, for the README table and `--help`."""
    return [(v.names[0], v.kind, _show_default(v)) for v in _VARS]


def _show_default(var: _Var) -> str:
    if var.default is None:
        return "unset"
    if isinstance(var.default, bool):
        return "true" if var.default else "false"
    return str(var.default)


def _lookup(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str | None]:
    # The CPERSONA_ form wins when non-empty; an empty one falls through to the alias.
    for name in names:
        raw = env.get(name)
        if raw is not None and raw.strip() != "":
            return name, raw
    return names[0], None


def _parse(var: _Var, name: str, raw: str) -> Any:
    text = raw.strip()
    if var.kind in ("str", "optstr"):
        return raw
    if var.kind == "bool":
        low = text.lower()
        if low in ("true", "false"):
            return low == "true"
        raise ConfigError(f"{name}={raw!r} is not valid: expected true or false")
    if var.kind == "choice":
        low = text.lower()
        if low in var.choices:
            return low
        raise ConfigError(f"{name}={raw!r} is not valid: expected one of {', '.join(var.choices)}")
    if var.kind in ("int", "optint"):
        try:
            value: float = int(text)
        except ValueError:
            raise ConfigError(
                f"{name}={raw!r} is not valid: expected {_range(var, 'an integer')}"
            ) from None
        return _bounded(var, name, raw, value)
    # float / optfloat
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ConfigError(f"{name}={raw!r} is not valid: expected {_range(var, 'a finite number')}")
    return _bounded(var, name, raw, value)


def _bounded(var: _Var, name: str, raw: str, value: float) -> float:
    if (var.low is not None and value < var.low) or (var.high is not None and value > var.high):
        what = "an integer" if var.kind in ("int", "optint") else "a number"
        raise ConfigError(f"{name}={raw!r} is out of range: expected {_range(var, what)}")
    return value


def _range(var: _Var, what: str) -> str:
    def num(x: float) -> str:
        return str(int(x)) if var.kind in ("int", "optint") else str(x)

    if var.low is not None and var.high is not None:
        return f"{what} from {num(var.low)} to {num(var.high)}"
    if var.low is not None:
        return f"{what} >= {num(var.low)}"
    if var.high is not None:
        return f"{what} <= {num(var.high)}"
    return what


def field_names() -> frozenset[str]:
    """Names of the Settings fields (used by tests to prove every variable is declared)."""
    return frozenset(f.name for f in fields(Settings)) - {"explicit"}


if __name__ == "__main__":  # python -m cpersona.config: the table of docs/settings.md
    for _name, _kind, _default in variables():
        print(f"| `{_name}` | {_kind} | `{_default}` |")
