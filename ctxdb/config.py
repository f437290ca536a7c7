"""Build configuration: ``defaults.toml`` overlaid by a user file.

Lookup order for the user file: ``$CTXDB_CONFIG``, then ``./ctxdb.toml``.
Environment variables for the ranking endpoint (``CTXDB_RANK_BASE_URL``,
``CTXDB_RANK_MODEL``, ``CTXDB_RANK_TIMEOUT``, and ``OPENAI_API_KEY`` /
``CTXDB_RANK_API_KEY``) override the file, as an OpenAI-compatible client expects.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths import PACKAGE_DIR

# Names the CLI's help shows, kept here (no SQLAlchemy, no tokenizer import) so that
# `ctxdb --help` starts fast; ctxdb.db and ctxdb.tokens use these.
DEFAULT_DB_PATH = "ctx08.db"
DB_URL_ENV = "CTXDB_URL"
CL100K_BASE = "cl100k_base"
DEEPSEEK_V4 = "deepseek-v4"
TOKENIZER_NAMES = (CL100K_BASE, DEEPSEEK_V4)
DEFAULT_RECON = "recon.db"  # where `ctxdb recon index` writes, and construct looks
RECON_ENV = "CTXDB_RECON"

DEFAULTS_FILE = PACKAGE_DIR / "defaults.toml"
USER_CONFIG_NAME = "ctxdb.toml"
# Below this a window cannot hold the task header and one obligation line.
MIN_TOKEN_CEILING = 256
RESPONSE_FORMATS = ("json_schema", "json_object")


class ConfigError(ValueError):
    """A configuration file or value is not what ctxdb expects."""


@dataclass(frozen=True)
class Settings:
    token_ceiling: int
    tokenizer: str
    rank_threshold: float
    rank_base_url: str
    rank_api_key: str
    rank_model: str
    rank_timeout_seconds: float
    rank_response_format: str
    source: str  # which files were read, for the audit


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc


def _merge(base: dict[str, Any], override: dict[str, Any], path: Path) -> dict[str, Any]:
    merged = {section: dict(values) for section, values in base.items()}
    for section, values in override.items():
        if section not in merged or not isinstance(values, dict):
            raise ConfigError(f"{path}: unknown config section [{section}]; expected one of "
                              f"{sorted(base)}")
        for key, value in values.items():
            if key not in merged[section]:
                raise ConfigError(
                    f"{path}: unknown config key [{section}].{key}; "
                    f"expected one of {sorted(merged[section])}"
                )
            merged[section][key] = value
    return merged


def load_settings(config_path: str | os.PathLike[str] | None = None) -> Settings:
    data = _read_toml(DEFAULTS_FILE)
    sources = [str(DEFAULTS_FILE)]
    user_path = config_path or os.environ.get("CTXDB_CONFIG")
    if user_path is None and Path(USER_CONFIG_NAME).is_file():
        user_path = USER_CONFIG_NAME
    user: dict[str, Any] = {}
    if user_path is not None:
        path = Path(user_path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        user = _read_toml(path)
        data = _merge(data, user, path)
        sources.append(str(path))

    def named(section: str, key: str) -> str:
        """A setting as its error names it: after the user's file when it set it."""
        return (f"{user_path}: " if key in user.get(section, {}) else "") + f"[{section}].{key}"

    budget, rank = data["budget"], data["rank"]
    ceiling = budget["token_ceiling"]
    if not isinstance(ceiling, int) or isinstance(ceiling, bool) or ceiling < MIN_TOKEN_CEILING:
        raise ConfigError(f"{named('budget', 'token_ceiling')} must be an integer >= "
                          f"{MIN_TOKEN_CEILING}, got {ceiling!r}")
    threshold = rank["threshold"]
    if (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
            or not 0.0 <= float(threshold) <= 1.0):
        raise ConfigError(f"{named('rank', 'threshold')} must be a number in [0, 1], "
                          f"got {threshold!r}")
    timeout_source, timeout = named("rank", "timeout_seconds"), rank["timeout_seconds"]
    if "CTXDB_RANK_TIMEOUT" in os.environ:
        timeout_source, timeout = "CTXDB_RANK_TIMEOUT", os.environ["CTXDB_RANK_TIMEOUT"]
    raw_timeout = timeout
    try:
        timeout = float(timeout) if not isinstance(timeout, bool) else math.nan
    except (TypeError, ValueError):
        timeout = math.nan
    if not math.isfinite(timeout) or timeout <= 0:
        raise ConfigError(
            f"{timeout_source} must be a positive number of seconds, got {raw_timeout!r}"
        )
    response_format = rank["response_format"]
    if response_format not in RESPONSE_FORMATS:
        raise ConfigError(f"{named('rank', 'response_format')}: expected one of "
                          f"{', '.join(RESPONSE_FORMATS)}, got {response_format!r}")
    tokenizer = str(os.environ.get("CTXDB_TOKENIZER", budget["tokenizer"]))
    if tokenizer not in TOKENIZER_NAMES:
        raise ConfigError(
            f"{named('budget', 'tokenizer')} / CTXDB_TOKENIZER: expected one of "
            f"{', '.join(TOKENIZER_NAMES)}, got {tokenizer!r}"
        )

    return Settings(
        token_ceiling=ceiling,
        tokenizer=tokenizer,
        rank_threshold=float(threshold),
        rank_base_url=os.environ.get("CTXDB_RANK_BASE_URL", rank["base_url"]),
        rank_api_key=os.environ.get("CTXDB_RANK_API_KEY", os.environ.get("OPENAI_API_KEY", "")),
        rank_model=os.environ.get("CTXDB_RANK_MODEL", rank["model"]),
        rank_timeout_seconds=timeout,
        rank_response_format=response_format,
        source=" + ".join(sources),
    )
