"""Settings come from the config file and the environment; bad values name themselves."""

from __future__ import annotations

import pytest

from ctxdb.config import ConfigError, load_settings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch, tmp_path):
    for name in ("CTXDB_CONFIG", "CTXDB_RANK_TIMEOUT", "CTXDB_TOKENIZER", "CTXDB_RANK_BASE_URL",
                 "CTXDB_RANK_MODEL", "CTXDB_RANK_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no stray ./ctxdb.toml


def test_defaults_are_the_spec_numbers():
    settings = load_settings()
    assert settings.token_ceiling == 24_000
    assert settings.rank_threshold == 0.5
    assert settings.tokenizer == "cl100k_base"
    assert settings.rank_model == "deepseek-v4-pro" and settings.rank_base_url == ""


def test_config_file_overrides_and_environment_overrides_the_file(tmp_path, monkeypatch):
    (tmp_path / "ctxdb.toml").write_text(
        "[budget]\ntoken_ceiling = 8000\n[rank]\nthreshold = 0.7\nbase_url = 'http://x/v1'\n"
    )
    settings = load_settings()
    assert (settings.token_ceiling, settings.rank_threshold, settings.rank_base_url) == (
        8000, 0.7, "http://x/v1")
    monkeypatch.setenv("CTXDB_RANK_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("CTXDB_TOKENIZER", "deepseek-v4")
    settings = load_settings()
    assert settings.rank_base_url == "http://127.0.0.1:9/v1"
    assert settings.tokenizer == "deepseek-v4"
    assert "ctxdb.toml" in settings.source


@pytest.mark.parametrize("text,message", [
    ("[budget]\ntoken_ceiling = 10\n", r"\[budget\].token_ceiling must be an integer >= 256"),
    ("[rank]\nthreshold = true\n", r"\[rank\].threshold must be a number in \[0, 1\]"),
    ("[rank]\nthreshold = 1.5\n", r"\[rank\].threshold must be a number in \[0, 1\]"),
    ("[rank]\ntimeout_seconds = nan\n", r"\[rank\].timeout_seconds must be a positive number"),
    ("[budget]\nceiling = 1\n", r"unknown config key \[budget\].ceiling"),
    ("[ranking]\nx = 1\n", r"unknown config section \[ranking\]"),
    ("[budget]\ntokenizer = 'gpt2'\n", r"expected one of cl100k_base, deepseek-v4"),
    ("not toml = = 1\n", r"not valid TOML"),
])
def test_bad_config_names_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as refused:
        load_settings(path)
    assert str(path) in str(refused.value)  # and the file that set it


def test_bad_timeout_variable_is_named(monkeypatch):
    monkeypatch.setenv("CTXDB_RANK_TIMEOUT", "abc")
    with pytest.raises(ConfigError, match="CTXDB_RANK_TIMEOUT must be a positive number "
                                          "of seconds, got 'abc'"):
        load_settings()


def test_missing_config_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXDB_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="nope.toml does not exist"):
        load_settings()


def test_a_run_records_the_settings_and_the_files_they_came_from(tmp_path, fixtures_dir):
    """Settings.source is for the audit: the run row's settings_json holds it."""
    import json

    from sqlalchemy import text

    from ctxdb import ContextStore, UnresolvedEntityWarning

    config = tmp_path / "ctx.toml"
    config.write_text("[budget]\ntoken_ceiling = 9000\n")
    request = json.loads((fixtures_dir / "decisions" / "edit.json").read_text())
    with ContextStore.open(tmp_path / "ctx08.db", settings=load_settings(config)) as store:
        # no recon here: the entities are flagged placeholders, which this test does not need
        with pytest.warns(UnresolvedEntityWarning):
            store.construct(request)
        with store.engine.connect() as connection:
            recorded = json.loads(connection.execute(
                text("SELECT settings_json FROM run WHERE run_id = :run"),
                {"run": request["run_id"]}).scalar_one())
    assert recorded["token_ceiling"] == 9000
    assert recorded["source"].endswith(f" + {config}")
    from ctxdb import __version__

    assert recorded["ctxdb_version"] == __version__ and __version__
