"""SWE-bench-format instance lines, checked field by field (one error per bad line)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..request_limits import json_lines

REQUIRED_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch",
                   "test_patch", "FAIL_TO_PASS")


class InstanceError(ValueError):
    """A bad instance line; the message names the file, the line and the field."""


@dataclass(frozen=True)
class Instance:
    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    repo_path: Path | None
    repo_git: Path | None
    line_no: int


def _field_error(source: str, line_no: int, field_name: str, expected: str) -> InstanceError:
    return InstanceError(f"{source} line {line_no}: field {field_name!r}: expected {expected}")


def parse_instance(data, source: str, line_no: int, base_dir: Path) -> Instance:
    if not isinstance(data, dict):
        raise InstanceError(f"{source} line {line_no}: expected a JSON object")
    for name in REQUIRED_FIELDS:
        if name not in data:
            raise _field_error(source, line_no, name, "a value (the field is missing)")
    for name in ("instance_id", "repo", "base_commit", "problem_statement"):
        if not isinstance(data[name], str) or not data[name].strip():
            raise _field_error(source, line_no, name, "a non-empty string")
    for name in ("patch", "test_patch"):
        if not isinstance(data[name], str):
            raise _field_error(source, line_no, name, "a unified diff as a string")
    fail_to_pass = data["FAIL_TO_PASS"]
    if isinstance(fail_to_pass, str):  # SWE-bench stores it JSON-encoded
        try:
            fail_to_pass = json.loads(fail_to_pass)
        except json.JSONDecodeError:
            raise _field_error(source, line_no, "FAIL_TO_PASS", "a list of test ids") from None
    if not isinstance(fail_to_pass, list) or not all(isinstance(t, str) for t in fail_to_pass):
        raise _field_error(source, line_no, "FAIL_TO_PASS", "a list of test ids")
    repo_path = data.get("repo_path")
    repo_git = data.get("repo_git")
    if (repo_path is None) == (repo_git is None):
        raise _field_error(source, line_no, "repo_path",
                           "exactly one of repo_path (a tree at the base commit) or repo_git")
    resolved_path = resolved_git = None
    if repo_path is not None:
        resolved_path = (base_dir / repo_path).resolve()
        if not resolved_path.is_dir():
            raise _field_error(source, line_no, "repo_path", f"a directory ({resolved_path})")
    elif repo_git is not None:  # one of the two, checked above
        resolved_git = (base_dir / repo_git).resolve()
        if not (resolved_git / ".git").exists() and not (resolved_git / "HEAD").exists():
            raise _field_error(source, line_no, "repo_git", f"a git directory ({resolved_git})")
    return Instance(
        data["instance_id"], data["repo"], data["base_commit"], data["problem_statement"],
        data["patch"], data["test_patch"], tuple(fail_to_pass), resolved_path, resolved_git,
        line_no,
    )


def load_instances(path: str | os.PathLike) -> tuple[list[Instance], list[str]]:
    """Instances of a JSONL file, and one clear error per bad line (the others still run)."""
    path = Path(path)
    instances, errors, seen = [], [], set()
    for line_no, data, unread in json_lines(path):
        if unread is not None:
            errors.append(f"{path} line {line_no}: {unread}: expected one JSON object per "
                          "line")
            continue
        try:
            instance = parse_instance(data, str(path), line_no, path.parent)
        except InstanceError as exc:
            errors.append(str(exc))
            continue
        if instance.instance_id in seen:
            errors.append(f"{path} line {line_no}: field 'instance_id': "
                          f"{instance.instance_id!r} appears twice (expected one line "
                          "per instance)")
            continue
        seen.add(instance.instance_id)
        instances.append(instance)
    return instances, errors


def mirror_git_dir(mirrors: Path, repo: str) -> Path:
    """The bare git directory of ``owner/name`` in a directory of mirrors, as the
    search tool's ``fetch`` lays them out (``OWNER+NAME/repo``, or ``OWNER+NAME``)."""
    base = mirrors / repo.replace("/", "+")
    for candidate in (base / "repo", base):
        if (candidate / "HEAD").exists():
            return candidate
    raise InstanceError(f"MIRROR_DIR {mirrors}: no git directory for {repo} (looked for "
                        f"{base}/repo and {base})")


def listed_rows(path: Path, keys: tuple[str, ...], expected: str) -> list[dict]:
    """Each line of a JSON-lines list given as ``--instances`` (blank ones skipped) as its
    object, which holds ``keys``: a file that cannot be read as UTF-8 text, or a line that
    is not such an object, is an InstanceError naming the option, the file and the line;
    ``expected`` says what the file should be."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InstanceError(f"--instances {path}: {exc.strerror or exc}; expected {expected}"
                            ) from None
    except UnicodeDecodeError as exc:
        raise InstanceError(f"--instances {path}: not UTF-8 text (byte {exc.start}); "
                            f"expected {expected}") from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or not set(keys) <= row.keys():
                raise TypeError
        except (json.JSONDecodeError, RecursionError, TypeError):
            raise InstanceError(f"--instances {path}:{number}: expected a JSON object with "
                                f"{', '.join(keys)}") from None
        rows.append(row)
    return rows
