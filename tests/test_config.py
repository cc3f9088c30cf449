"""Settings from the environment: every variable parses, every bad value names its variable."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from cpersona import config
from cpersona.config import Settings, field_names, variables
from cpersona.errors import ConfigError

VARS = config._VARS
DEFAULTS = Settings()


def _by_kind(kind: str) -> list[Any]:
    return [v for v in VARS if v.kind == kind]


def _id(var: Any) -> str:
    return var.names[0]


def test_every_field_has_exactly_one_variable():
    declared = [v.field for v in VARS]
    assert len(declared) == len(set(declared))
    assert set(declared) == field_names()
    for var in VARS:
        assert var.names[0] == "CPERSONA_" + var.field.upper()


def test_empty_environment_gives_the_defaults():
    settings = Settings.from_env({})
    assert settings == DEFAULTS and settings.explicit == frozenset()
    for var in VARS:
        assert getattr(DEFAULTS, var.field) == var.default, var.names[0]


def test_documented_defaults_are_the_spec_ones():
    s = DEFAULTS
    assert (s.db_path, s.max_content_length, s.max_profile_length, s.max_metadata_length) == (
        "data/cpersona.db", 16000, 2000, 8000,
    )  # fmt: skip
    assert (s.future_timestamp_mode, s.future_timestamp_skew_seconds) == ("warn", 300)
    assert (s.recall_preview_chars, s.fts_enabled, s.transport) == (500, True, "stdio")
    assert (s.http_host, s.http_port, s.max_import_bytes) == ("127.0.0.1", 8402, 104857600)


def test_settings_table_in_docs_is_current():
    docs = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
    if not docs.exists():
        pytest.skip("docs/settings.md is not in this checkout")
    text = docs.read_text(encoding="utf-8")
    for name, kind, default in variables():
        assert f"| `{name}` | {kind} | `{default}` |" in text, name


@pytest.mark.parametrize("var", _by_kind("bool"), ids=_id)
def test_bool_variables(var):
    for raw, value in [("true", True), ("FALSE", False), (" True ", True), ("false\n", False)]:
        assert getattr(Settings.from_env({var.names[0]: raw}), var.field) is value
    for raw in ["1", "0", "yes", "on", "tru"]:
        with pytest.raises(ConfigError, match=var.names[0]):
            Settings.from_env({var.names[0]: raw})


def _valid_number(var: Any) -> float:
    low = var.low if var.low is not None else -3
    high = var.high if var.high is not None else low + 10
    return low + (high - low) // 2 if var.kind == "int" else (low + high) / 2


@pytest.mark.parametrize("var", _by_kind("int") + _by_kind("optint"), ids=_id)
def test_int_variables(var):
    name = var.names[0]
    value = int(_valid_number(var))
    assert getattr(Settings.from_env({name: f" {value} "}), var.field) == value
    if var.low is not None:
        assert getattr(Settings.from_env({name: str(int(var.low))}), var.field) == var.low
    bad = ["abc", "1.5", "1e3", "0x10", "inf"]
    if var.low is not None:
        bad.append(str(int(var.low) - 1))
    if var.high is not None:
        bad.append(str(int(var.high) + 1))
    for raw in bad:
        with pytest.raises(ConfigError, match=name) as info:
            Settings.from_env({name: raw})
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("var", _by_kind("float") + _by_kind("optfloat"), ids=_id)
def test_float_variables(var):
    name = var.names[0]
    value = float(_valid_number(var))
    assert getattr(Settings.from_env({name: str(value)}), var.field) == pytest.approx(value)
    bad = ["abc", "nan", "inf", "-inf", ""]
    if var.low is not None:
        bad.append(str(var.low - 1))
    for raw in bad:
        if raw == "":
            # An empty value is unset, never an error.
            assert getattr(Settings.from_env({name: raw}), var.field) == var.default
            continue
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: raw})


@pytest.mark.parametrize("var", _by_kind("choice"), ids=_id)
def test_choice_variables(var):
    name = var.names[0]
    for choice in var.choices:
        assert getattr(Settings.from_env({name: f" {choice.upper()} "}), var.field) == choice
    with pytest.raises(ConfigError, match=name) as info:
        Settings.from_env({name: "definitely-not-a-choice"})
    for choice in var.choices:
        assert choice in str(info.value)


@pytest.mark.parametrize("var", _by_kind("str") + _by_kind("optstr"), ids=_id)
def test_string_variables(var):
    name = var.names[0]
    assert getattr(Settings.from_env({name: "some value"}), var.field) == "some value"
    # Blank is unset.
    assert getattr(Settings.from_env({name: "   "}), var.field) == var.default


def test_every_kind_is_covered():
    assert {v.kind for v in VARS} <= {
        "bool",
        "int",
        "optint",
        "float",
        "optfloat",
        "choice",
        "str",
        "optstr",
    }


def test_explicit_records_the_names_that_were_set():
    s = Settings.from_env({"CPERSONA_RRF_K": "10", "EMBEDDING_MODE": "none", "UNRELATED": "x"})
    assert s.explicit == frozenset({"CPERSONA_RRF_K", "EMBEDDING_MODE"})


def test_generic_embedding_mode_alias():
    assert Settings.from_env({"EMBEDDING_MODE": "hashing"}).embedding_mode == "hashing"
    # The CPERSONA_ form wins; an empty one falls through to the alias.
    both = {"CPERSONA_EMBEDDING_MODE": "none", "EMBEDDING_MODE": "hashing"}
    assert Settings.from_env(both).embedding_mode == "none"
    empty = {"CPERSONA_EMBEDDING_MODE": "", "EMBEDDING_MODE": "http"}
    assert Settings.from_env(empty).embedding_mode == "http"
    with pytest.raises(ConfigError, match="EMBEDDING_MODE"):
        Settings.from_env({"EMBEDDING_MODE": "bogus"})


@pytest.mark.parametrize(
    ("alias", "field"),
    [
        ("EMBEDDING_HTTP_URL", "embedding_url"),
        ("EMBEDDING_API_KEY", "embedding_api_key"),
        ("EMBEDDING_API_URL", "embedding_api_url"),
        ("EMBEDDING_MODEL", "embedding_model"),
    ],
)
def test_other_generic_aliases(alias, field):
    assert getattr(Settings.from_env({alias: "v"}), field) == "v"


def test_from_env_reads_the_process_environment(monkeypatch):
    monkeypatch.setenv("CPERSONA_MAX_CONTENT_LENGTH", "123")
    monkeypatch.setenv("CPERSONA_FUTURE_TIMESTAMP_MODE", "Reject")
    s = Settings.from_env()
    assert (s.max_content_length, s.future_timestamp_mode) == (123, "reject")
    monkeypatch.setenv("CPERSONA_MAX_CONTENT_LENGTH", "0")
    with pytest.raises(ConfigError, match="CPERSONA_MAX_CONTENT_LENGTH"):
        Settings.from_env()


def test_config_error_is_a_value_error_with_one_line():
    with pytest.raises(ValueError) as info:
        Settings.from_env({"CPERSONA_HTTP_PORT": "70000"})
    message = str(info.value)
    assert message.startswith("CPERSONA_HTTP_PORT=") and "\n" not in message
    assert "0 to 65535" in message


def test_settings_are_frozen_and_replaceable():
    s = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.db_path = "x"  # type: ignore[misc]
    assert dataclasses.replace(s, recall_preview_chars=7).recall_preview_chars == 7


def test_precision_and_provider_properties():
    assert Settings().fused_beta == 1.0
    assert Settings.from_env({"CPERSONA_RECALL_PRECISION": "strict"}).fused_beta == 2.0
    assert Settings.from_env({"CPERSONA_FUSED_GATE_BETA": "0.7"}).fused_beta == 0.7
    assert Settings().embedding_provider == "local-e5"
    assert Settings(embedding_mode="hashing").embedding_provider == "hashing"


PG = {"CPERSONA_DATABASE_URL": "postgresql://app@db1/memory"}


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"CPERSONA_FTS_INDEX": "false"}, "CPERSONA_FTS_INDEX=false"),
        ({"CPERSONA_KERNEL": "numpy"}, "CPERSONA_KERNEL=numpy"),
    ],
)
def test_postgresql_refuses_settings_without_a_full_text_arm(env, named):
    """PostgreSQL has no FTS5: the full-text arms are the Rust core's index (docs/fts-index.md)."""
    with pytest.raises(ConfigError) as info:
        Settings.from_env({**PG, **env})
    message = str(info.value)
    assert named in message and "CPERSONA_FTS_ENABLED=false" in message
    assert "\n" not in message
    # SQLite answers these arms from FTS5; without full-text search there is nothing to refuse.
    assert Settings.from_env(env).database_url is None
    assert Settings.from_env({**PG, **env, "CPERSONA_FTS_ENABLED": "false"}).fts_enabled is False
