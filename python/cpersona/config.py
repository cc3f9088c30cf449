"""One frozen `Settings`, parsed once from the environment and passed down.

Every variable of spec surface.md §13 and retrieval.md §17 is declared in `_VARS` below, with
its kind, default and accepted values. Unlike CPersona 2.5.x, which logs a warning and falls
back to the default, an unusable value stops start-up with one line naming the variable and
what it accepts (`ConfigError`): a silently ignored setting is a setting the operator thinks is
in force and is not (see docs/compatibility.md).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cpersona.credentials import MODES
from cpersona.errors import ConfigError

#: Embedding modes. `local` is the embedded default model; the others name a provider.
EMBEDDING_MODES = ("local", "local-e5", "local-minilm", "http", "api", "none", "hashing")
PRECISION_BETAS = {"strict": 2.0, "balanced": 1.0, "lenient": 0.5}


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


def _v(field_: str, kind: str, default: Any, *aliases: str, **kw: Any) -> _Var:
    name = "CPERSONA_" + field_.upper()
    return _Var(field_, (name, *aliases), kind, default, **kw)


_VARS: tuple[_Var, ...] = (
    # Storage, limits and surface (surface.md §13.2)
    _v("db_path", "str", "data/cpersona.db"),
    # PostgreSQL + pgvector as the shared store (issue 12, docs/scale-out.md); unset = SQLite.
    _v("database_url", "optstr", None),
    _v("pg_pool_size", "int", 8, low=1, high=1000),
    # Bounds a connection attempt and a wait for a pooled connection (issue 21): while the
    # server is unreachable a call is refused at once or after at most this.
    _v("pg_connect_timeout_seconds", "float", 5.0, low=0.1, high=600.0),
    # The vector arm on PostgreSQL from this host's index file (issue 19); false = pgvector.
    _v("pg_vector_index", "bool", True),
    # Where a PostgreSQL deployment keeps this host's derived files (the full-text index).
    _v("cache_dir", "optstr", None),
    _v("fts_enabled", "bool", True),
    # The FTS arms from the Rust core's full-text index (docs/fts-index.md); false = FTS5 SQL.
    _v("fts_index", "bool", True),
    # The kernel backend of the searchers (cpersona._backend): auto = Rust when built.
    _v("kernel", "choice", "auto", choices=("auto", "rust", "numpy")),
    _v("max_content_length", "int", 16000, low=1),
    _v("max_profile_length", "int", 2000, low=1),
    _v("max_metadata_length", "int", 8000, low=1),
    _v("future_timestamp_skew_seconds", "int", 300, low=0),
    _v("future_timestamp_mode", "choice", "warn", choices=("warn", "reject", "off")),
    # Credentials in written text (issue 22, docs/compatibility.md): allow = 2.5.x's verbatim.
    _v("secrets", "choice", "redact", choices=MODES),
    _v("recall_preview_chars", "int", 500),
    _v("external_context_mode", "choice", "warn", choices=("warn", "reject", "off")),
    _v("export_dir", "optstr", None),
    _v("max_import_bytes", "int", 104857600, low=1),
    _v("task_queue_enabled", "bool", True),
    _v("task_max_retries", "int", 3, low=0),
    _v("task_retry_delay", "int", 30, low=0),
    _v("degraded_advisory", "bool", True),
    _v("operating_context", "optstr", None),
    _v("operating_context_path", "str", "~/.cpersona/operating-context.toml"),
    # cpersona looks nothing up unless the operator asks (issue 5): default off.
    _v("update_check", "bool", False),
    _v("update_check_interval_seconds", "int", 86400, low=0),
    _v("reembed_row_cap", "int", 5000, low=1),
    _v("near_duplicate_row_cap", "int", 5000, low=2),
    _v("invalid_source_classify_cap", "int", 10000, low=1),
    _v("normalization_scan_cap", "int", 10000, low=1),
    # Embedding and vector storage
    _v("embedding_mode", "choice", "local", "EMBEDDING_MODE", choices=EMBEDDING_MODES),
    _v("embedding_url", "str", "", "EMBEDDING_HTTP_URL"),
    _v("embedding_api_key", "str", "", "EMBEDDING_API_KEY"),
    _v("embedding_api_url", "str", "https://api.openai.com/v1/embeddings", "EMBEDDING_API_URL"),
    _v("embedding_model", "str", "text-embedding-3-small", "EMBEDDING_MODEL"),
    _v("embedding_timeout_secs", "int", 30, low=1),
    _v("embedding_cache_size", "int", 256, low=0),
    _v("embedding_cache_ttl", "int", 300, low=0),
    _v("embedding_threads", "int", 1, low=1, high=256),
    _v("vector_search_mode", "choice", "local", choices=("local", "remote")),
    _v("store_blob", "bool", True),
    _v("remote_search_timeout_secs", "float", 5.0, low=0.0),
    _v("remote_index_timeout_secs", "float", 10.0, low=0.0),
    # Transport and security
    _v("transport", "choice", "stdio", choices=("stdio", "streamable-http")),
    _v("http_host", "str", "127.0.0.1"),
    _v("http_port", "int", 8402, low=0, high=65535),
    _v("auth_token", "optstr", None),
    _v("allow_unauthenticated_http", "bool", False),
    _v("acl_file", "optstr", None),
    _v("alias_ledger_file", "optstr", None),
    _v("http_max_body_bytes", "int", 4194304, low=1),
    _v("http_body_limit_mode", "choice", "warn", choices=("warn", "reject", "off")),
    # Slow and idle HTTP connections, and how many may be open (issue 11.4, docs/reliability.md)
    _v("http_header_timeout_seconds", "float", 10.0, low=0.01),
    _v("http_body_timeout_seconds", "float", 60.0, low=0.01),
    _v("http_keepalive_timeout_seconds", "float", 5.0, low=0.01),
    _v("http_max_connections", "int", 512, low=1),
    _v("oauth_resource", "optstr", None),
    _v("oauth_authorization_servers", "optstr", None),
    _v("oauth_scopes", "optstr", None),
    _v("oauth_jwks_uri", "optstr", None),
    _v("remote_url", "str", "http://localhost:8402/mcp"),
    # cpersona's own: where `cpersona web` (the read-only view) listens.
    _v("web_host", "str", "127.0.0.1"),
    _v("web_port", "int", 8403, low=0, high=65535),
    _v("proxy_max_inflight", "int", 8, low=1),
    # cpersona's own: how long the bridge waits for one answer before failing it with -32000.
    _v("proxy_timeout_seconds", "float", 300.0, low=0.1),
    # Retrieval (retrieval.md §17)
    # rrf, as retrieval.md §17 and the contract's default configuration say; with the default
    # embedder (e5) it has the best mean nDCG@10 of docs/quality.md before calibration.
    _v("recall_mode", "choice", "rrf", choices=("rrf", "rsf", "cascade")),
    _v("max_memories", "int", 10000, low=0),
    _v("vector_reach", "int", 0, low=0),
    _v("vector_far_limit", "int", 0, low=0),
    _v("recall_library_max_limit", "int", 10000, low=1),
    _v("vector_scan_chunk_rows", "int", 512, low=1),
    _v("vector_index_max_excluded_ids", "int", 10000, low=0),
    _v("vector_min_similarity", "float", 0.3),
    _v("rrf_k", "int", 60, low=1),
    _v("rrf_threshold_factor", "float", 0.5),
    _v("confidence_enabled", "bool", False),
    _v("cosine_floor", "float", 0.20),
    _v("cosine_ceil", "float", 0.75),
    _v("decay_rate", "float", 0.005),
    _v("decay_floor", "float", 0.3),
    _v("decay_ceil", "float", 0.5),
    _v("recall_boost", "float", 0.02),
    _v("boost_decay_rate", "float", 0.002),
    _v("min_time_range_hours", "float", 24.0),
    _v("reference_hours", "float", 168.0),
    _v("resolved_decay_factor", "float", 0.3),
    _v("recent_recall_penalty", "float", 0.7),
    _v("recent_recall_window_min", "float", 5.0),
    _v("episode_penalty_enabled", "bool", True),
    _v("episode_decay_rate", "float", 0.01),
    _v("episode_decay_floor", "float", 0.5),
    _v("autocut_enabled", "bool", True),
    _v("autocut_min_gap_ratio", "float", 0.15),
    _v("autocut_min_results", "int", 3, low=2),
    _v("fused_gate_enabled", "bool", True),
    _v("fused_gate_sample_queries", "int", 40, low=1),
    _v("fused_gate_calibration_draws", "int", 5, low=1),
    _v("recall_precision", "choice", "balanced", choices=tuple(PRECISION_BETAS)),
    _v("fused_gate_beta", "optfloat", None),
    _v("auto_calibrate", "bool", False),
    _v("calibrate_on_model_change", "bool", True),
    _v("calibrate_sample_size", "int", 200, low=1),
    _v("calibrate_max_sample", "int", 5000, low=1),
    _v("calibrate_z_factor", "float", 1.0),
    _v("calibrate_floor", "float", 0.05),
    _v("calibrate_method", "choice", "separation", choices=("separation", "percentile", "zscore")),
    _v("calibrate_percentile", "float", 0.95),
    _v("calibrate_temporal_window_min", "float", 30.0),
    _v("scope_stats_cache", "bool", True),
    _v("scope_stats_ttl_seconds", "float", 60.0, low=0.0),
    # cpersona's own
    _v("log_level", "choice", "info", choices=("debug", "info", "warning", "error")),
    _v("sql_trace", "bool", False),
    # Metrics (issue 14): /metrics on HTTP, authenticated unless public; a stdio server serves
    # them only when given a loopback port (0: any free port, shown on stderr).
    _v("metrics_public", "bool", False),
    _v("metrics_port", "optint", None, low=0, high=65535),
)


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of the server. Build with `Settings.from_env()`; replace() for tests."""

    db_path: str = "data/cpersona.db"
    database_url: str | None = None
    pg_pool_size: int = 8
    pg_connect_timeout_seconds: float = 5.0
    pg_vector_index: bool = True
    cache_dir: str | None = None
    fts_enabled: bool = True
    fts_index: bool = True
    kernel: str = "auto"
    max_content_length: int = 16000
    max_profile_length: int = 2000
    max_metadata_length: int = 8000
    future_timestamp_skew_seconds: int = 300
    future_timestamp_mode: str = "warn"
    secrets: str = "redact"
    recall_preview_chars: int = 500
    external_context_mode: str = "warn"
    export_dir: str | None = None
    max_import_bytes: int = 104857600
    task_queue_enabled: bool = True
    task_max_retries: int = 3
    task_retry_delay: int = 30
    degraded_advisory: bool = True
    operating_context: str | None = None
    operating_context_path: str = "~/.cpersona/operating-context.toml"
    update_check: bool = False
    update_check_interval_seconds: int = 86400
    reembed_row_cap: int = 5000
    near_duplicate_row_cap: int = 5000
    invalid_source_classify_cap: int = 10000
    normalization_scan_cap: int = 10000
    embedding_mode: str = "local"
    embedding_url: str = ""
    embedding_api_key: str = ""
    embedding_api_url: str = "https://api.openai.com/v1/embeddings"
    embedding_model: str = "text-embedding-3-small"
    embedding_timeout_secs: int = 30
    embedding_cache_size: int = 256
    embedding_cache_ttl: int = 300
    embedding_threads: int = 1
    vector_search_mode: str = "local"
    store_blob: bool = True
    remote_search_timeout_secs: float = 5.0
    remote_index_timeout_secs: float = 10.0
    transport: str = "stdio"
    http_host: str = "127.0.0.1"
    http_port: int = 8402
    auth_token: str | None = None
    allow_unauthenticated_http: bool = False
    acl_file: str | None = None
    alias_ledger_file: str | None = None
    http_max_body_bytes: int = 4194304
    http_body_limit_mode: str = "warn"
    http_header_timeout_seconds: float = 10.0
    http_body_timeout_seconds: float = 60.0
    http_keepalive_timeout_seconds: float = 5.0
    http_max_connections: int = 512
    oauth_resource: str | None = None
    oauth_authorization_servers: str | None = None
    oauth_scopes: str | None = None
    oauth_jwks_uri: str | None = None
    remote_url: str = "http://localhost:8402/mcp"
    web_host: str = "127.0.0.1"
    web_port: int = 8403
    proxy_max_inflight: int = 8
    proxy_timeout_seconds: float = 300.0
    recall_mode: str = "rrf"
    max_memories: int = 10000
    vector_reach: int = 0
    vector_far_limit: int = 0
    recall_library_max_limit: int = 10000
    vector_scan_chunk_rows: int = 512
    vector_index_max_excluded_ids: int = 10000
    vector_min_similarity: float = 0.3
    rrf_k: int = 60
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
    autocut_enabled: bool = True
    autocut_min_gap_ratio: float = 0.15
    autocut_min_results: int = 3
    fused_gate_enabled: bool = True
    fused_gate_sample_queries: int = 40
    fused_gate_calibration_draws: int = 5
    recall_precision: str = "balanced"
    fused_gate_beta: float | None = None
    auto_calibrate: bool = False
    calibrate_on_model_change: bool = True
    calibrate_sample_size: int = 200
    calibrate_max_sample: int = 5000
    calibrate_z_factor: float = 1.0
    calibrate_floor: float = 0.05
    calibrate_method: str = "separation"
    calibrate_percentile: float = 0.95
    calibrate_temporal_window_min: float = 30.0
    scope_stats_cache: bool = True
    scope_stats_ttl_seconds: float = 60.0
    log_level: str = "info"
    sql_trace: bool = False
    metrics_public: bool = False
    metrics_port: int | None = None
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
