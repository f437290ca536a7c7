"""The A/B protocol (spec §7; §5 phase 8): the constructor against "stuff everything".

``run_ab`` takes SWE-bench-format instances, materializes each repository at its base
commit with the instance's test patch applied (never the gold patch), indexes it
(cached by repository, commit and test patch), stores the instance's gold facts, and
constructs the decisions a harness would make — localize, then edit — for every arm
and variant. Instances run in a bounded pool of worker processes, each writing its own
decisions; one instance's failure is logged and the others go on. Every figure is then
SQL over the store (``sql/reports/``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path


from . import models
from .entities import entity_key_of_test_id
from .request import DecisionRequest, EvidenceInput, PlanNode
from .sqlfiles import sql_statement
from .terms import terms
from .variants import DEFAULT, VARIANTS, apply_variant

REQUIRED_FIELDS = ("instance_id", "repo", "base_commit", "problem_statement", "patch",
                   "test_patch", "FAIL_TO_PASS")
ARMS = ("ctx08", "current")
LOCALIZATIONS = ("oracle", "retrieval")
RETRIEVAL_TOP_K = 30  # the component-04 stand-in: top 30 symbols by BM25
QUERY_MAX_TERMS = 40
SKELETON_MAX_SYMBOLS = 60
DEFAULT_CACHE = Path.home() / ".cache" / "ctxdb" / "ab"
RECON_FILE = "recon.db"
TREE_DIR = "tree"
READY_MARK = ".ctxdb-ready"


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
    else:
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
    with path.open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.append(f"{path} line {line_no}: not valid JSON ({exc.msg})")
                continue
            try:
                instance = parse_instance(data, str(path), line_no, path.parent)
            except InstanceError as exc:
                errors.append(str(exc))
                continue
            if instance.instance_id in seen:
                errors.append(f"{path} line {line_no}: field 'instance_id': "
                              f"{instance.instance_id!r} appears twice")
                continue
            seen.add(instance.instance_id)
            instances.append(instance)
    return instances, errors


# --- the repository at the base commit, with the test patch ----------------------------------


def _safe_name(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", value)[:80]


def materialize(instance: Instance, cache_dir: Path) -> Path:
    """A cached directory holding the tree (base commit + test patch) and its recon.db."""
    key = hashlib.sha256(
        "\0".join([instance.repo, instance.base_commit, instance.test_patch]).encode()
    ).hexdigest()[:16]
    home = cache_dir / f"{_safe_name(instance.repo)}-{key}"
    if (home / READY_MARK).exists():
        return home
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=cache_dir))
    try:
        tree = staging / TREE_DIR
        if instance.repo_path is not None:
            shutil.copytree(instance.repo_path, tree, symlinks=True,
                            ignore=shutil.ignore_patterns(".git", "__pycache__"))
        else:
            tree.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(instance.repo_git), "archive", instance.base_commit],
                capture_output=True, check=False,
            )
            if archive.returncode != 0:
                raise RuntimeError(f"git archive {instance.base_commit} failed: "
                                   f"{archive.stderr.decode(errors='replace').strip()}")
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        if instance.test_patch.strip():
            applied = subprocess.run(
                ["git", "apply", "--whitespace=nowarn", "-"], cwd=tree,
                input=instance.test_patch.encode(), capture_output=True, check=False,
            )
            if applied.returncode != 0:
                raise RuntimeError("the test_patch does not apply at the base commit: "
                                   + applied.stderr.decode(errors="replace").strip())
        from .recon import index_repository

        index_repository(tree, str(staging / RECON_FILE))
        (staging / READY_MARK).write_text(instance.base_commit + "\n")
        try:
            staging.rename(home)
        except OSError:  # another worker made it first: theirs is as good
            shutil.rmtree(staging, ignore_errors=True)
        return home
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# --- the decisions a harness would make -------------------------------------------------------


def _fts_query(connection, problem: str):
    words = sorted(terms(problem))[:QUERY_MAX_TERMS]
    words = [w for w in words if re.fullmatch(r"[a-z0-9_]+", w)]
    if not words:
        return []
    dialect = connection.dialect.name
    query = " OR ".join(f'"{w}"' for w in words) if dialect == "sqlite" else " | ".join(words)
    return connection.execute(
        sql_statement(f"recon/fts_any_terms.{dialect}"),
        {"query": query, "limit": RETRIEVAL_TOP_K},
    ).mappings().all()


def _skeleton(connection, path: str) -> str:
    rows = connection.execute(sql_statement("recon/module_skeleton"), {"path": path}).all()
    lines = [f"# {path}: module skeleton"]
    for row in rows[:SKELETON_MAX_SYMBOLS]:
        head = (row.signature or row.qualname).splitlines()[0]
        indent = "    " * row.qualname.count(".")
        lines.append(f"{indent}{head.strip()}  # L{row.start_line}")
    if len(rows) > SKELETON_MAX_SYMBOLS:
        lines.append(f"# … {len(rows) - SKELETON_MAX_SYMBOLS} more symbols")
    return "\n".join(lines)


def build_decisions(recon_connection, instance: Instance, gold_edited: list[str],
                    localization: str, run_for_arm) -> list[DecisionRequest]:
    hits = [h for h in _fts_query(recon_connection, instance.problem_statement)
            if h["kind"] != "module"]
    tests = [entity_key_of_test_id(t) for t in instance.fail_to_pass]
    hit_items = [
        EvidenceInput(source="04", kind="retrieved_hit", entity=h["key"],
                      score=round(-float(h["score"]), 4),
                      provenance=f"04: BM25 rank {rank} for the problem statement")
        for rank, h in enumerate(hits, start=1)
    ]
    test_items = [EvidenceInput(source="03", kind="source_code", entity=key,
                                provenance="03: source of a FAIL_TO_PASS test")
                  for key in tests]
    paths = sorted({h["key"].split("::", 1)[0] for h in hits})
    skeletons = [EvidenceInput(source="03", kind="symbol", entity=path,
                               content=_skeleton(recon_connection, path),
                               provenance="03: module skeleton of a file the hits fall in")
                 for path in paths]
    criterion = ("The FAIL_TO_PASS tests pass: " + ", ".join(instance.fail_to_pass)
                 if instance.fail_to_pass else "The issue in the task is resolved")
    localize = DecisionRequest(
        run_id=run_for_arm, instance_id=instance.instance_id, seq=1, decision_type="localize",
        task=instance.problem_statement,
        plan_node=PlanNode(
            node_id="localize", obligation="Find the code to change to resolve the issue",
            required_validation=instance.fail_to_pass, acceptance_criteria=(criterion,),
            decision_question="Which functions must change to resolve the issue?",
        ),
        evidence=tuple(hit_items + test_items + skeletons),
    )
    if localization == "oracle" and gold_edited:
        target = gold_edited[0]
    else:
        target = hits[0]["key"] if hits else None
    reaching = []
    if target:
        reaching = recon_connection.execute(
            sql_statement("recon/tests_reaching"), {"entity_key": target}
        ).scalars().all()
    edit_evidence = list(hit_items)
    if target:
        edit_evidence.insert(0, EvidenceInput(
            source="05", kind="fault_entity", entity=target,
            provenance=f"05: {localization} localization"))
    edit_evidence += [EvidenceInput(source="03", kind="source_code", entity=key,
                                    provenance="03: a test that calls the target")
                      for key in sorted(set(reaching) | set(tests))]
    edit = DecisionRequest(
        run_id=run_for_arm, instance_id=instance.instance_id, seq=2, decision_type="edit",
        task=instance.problem_statement,
        plan_node=PlanNode(
            node_id="edit", obligation=f"Change {target or 'the localized code'} to resolve the issue",
            target_entity=target, required_validation=instance.fail_to_pass,
            acceptance_criteria=(criterion, instance.problem_statement.strip().splitlines()[0][:300]),
            decision_question="What change to the target makes the failing tests pass?",
        ),
        evidence=tuple(edit_evidence),
        derive_impact=True,
    )
    return [localize, edit]


# --- running -----------------------------------------------------------------------------------


@dataclass
class AbOptions:
    arms: tuple[str, ...] = ARMS
    variants: tuple[str, ...] = (DEFAULT,)
    localization: str = "oracle"
    workers: int = os.cpu_count() or 1
    cache_dir: Path = DEFAULT_CACHE
    run_prefix: str = "ab"

    def validate(self) -> None:
        for arm in self.arms:
            if arm not in ARMS:
                raise ValueError(f"--arms: {arm!r} is not one of {', '.join(ARMS)}")
        for variant in self.variants:
            if variant not in VARIANTS:
                raise ValueError(f"--variants: {variant!r} is not one of {', '.join(VARIANTS)}")
        if self.localization not in LOCALIZATIONS:
            raise ValueError(f"--localization: expected one of {', '.join(LOCALIZATIONS)}")
        if self.workers < 1:
            raise ValueError("--workers: expected at least 1")


def run_id_for(prefix: str, arm: str, variant: str) -> str:
    return f"{prefix}/{arm}/{variant}"


def arm_variants(options: AbOptions) -> list[tuple[str, str]]:
    """(arm, variant) pairs: variants are the constructor's; the baseline runs once."""
    pairs = []
    for arm in options.arms:
        for variant in (options.variants if arm == "ctx08" else (DEFAULT,)):
            pairs.append((arm, variant))
    return pairs


@dataclass
class InstanceResult:
    instance_id: str
    decisions: int = 0
    error: str | None = None


@dataclass
class AbSummary:
    results: list[InstanceResult] = field(default_factory=list)
    input_errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[InstanceResult]:
        return [r for r in self.results if r.error]


def store_gold_facts(store, instance: Instance, recon_connection) -> list[str]:
    from .gold import gold_facts

    facts = gold_facts(recon_connection, instance.patch, instance.test_patch,
                       list(instance.fail_to_pass))
    spans = {}
    for fact in facts:
        row = recon_connection.execute(sql_statement("recon/symbol_by_key"),
                                       {"entity_key": fact.entity_key}).first()
        spans[fact.entity_key] = (row.path, row.start_line, row.end_line) if row else (
            fact.entity_key.split("::", 1)[0], None, None)
    with store.write_transaction() as connection:
        connection.execute(sql_statement("ab/delete_gold_facts"),
                           {"instance_id": instance.instance_id})
        models.insert_many(connection, models.gold_fact, [
            {"instance_id": instance.instance_id, "fact_no": number, "fact_kind": f.fact_kind,
             "entity_key": f.entity_key, "detail": f.detail, "path": spans[f.entity_key][0],
             "start_line": spans[f.entity_key][1], "end_line": spans[f.entity_key][2]}
            for number, f in enumerate(facts, start=1)
        ])
    return [f.entity_key for f in facts if f.fact_kind == "edited_entity"]


def run_instance(db_url: str, instance: Instance, options: AbOptions) -> InstanceResult:
    """Everything for one instance; errors are caught and reported, never raised."""
    from .store import ContextStore

    result = InstanceResult(instance.instance_id)
    try:
        home = materialize(instance, Path(options.cache_dir))
        recon = str(home / RECON_FILE)
        with ContextStore.open(db_url, recon=recon) as store:
            from .recon.schema import create_recon_engine

            engine = create_recon_engine(recon)
            try:
                with engine.connect() as recon_connection:
                    edited = store_gold_facts(store, instance, recon_connection)
                    base = build_decisions(recon_connection, instance, edited,
                                           options.localization, "pending")
            finally:
                engine.dispose()
            for arm, variant in arm_variants(options):
                run_id = run_id_for(options.run_prefix, arm, variant)
                for request in base:
                    request = dataclasses.replace(request, run_id=run_id, arm=arm)
                    request = apply_variant(request, variant)
                    store.construct(request)
                    result.decisions += 1
    except Exception as exc:  # one instance's failure must not stop the run
        detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result.error = f"{instance.instance_id}: {detail}"
    return result


def _worker(db_url: str, instance: Instance, options: AbOptions) -> InstanceResult:
    return run_instance(db_url, instance, options)


def run_ab(db_url: str, instances_path, options: AbOptions, progress=None) -> AbSummary:
    from .store import ContextStore

    options.validate()
    instances, errors = load_instances(instances_path)
    summary = AbSummary(input_errors=errors)
    ContextStore.open(db_url).close()  # create/upgrade once, before the workers race
    if options.workers == 1 or len(instances) <= 1:
        for instance in instances:
            summary.results.append(run_instance(db_url, instance, options))
            if progress:
                progress(len(summary.results), len(instances))
        return summary
    import multiprocessing

    # fork where there is one: the parent holds no open engine or connection by now
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=options.workers, mp_context=context) as pool:
        futures = [pool.submit(_worker, db_url, i, options) for i in instances]
        for future in as_completed(futures):
            summary.results.append(future.result())
            if progress:
                progress(len(summary.results), len(instances))
    summary.results.sort(key=lambda r: r.instance_id)
    return summary


# --- outcomes ------------------------------------------------------------------------------------


def record_outcome(store, run_id: str, instance_id: str, solved: bool, cost_usd=None,
                   model_tokens_in=None, model_tokens_out=None) -> None:
    if not isinstance(solved, bool):
        raise ValueError(f"solved: expected true or false, got {solved!r}")
    for name, value in (("cost_usd", cost_usd), ("model_tokens_in", model_tokens_in),
                        ("model_tokens_out", model_tokens_out)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or value < 0):
            raise ValueError(f"{name}: expected a non-negative number or null, got {value!r}")
    with store.write_transaction() as connection:
        if connection.execute(sql_statement("ab/run_exists"), {"run_id": run_id}).first() is None:
            raise ValueError(f"run_id: no run {run_id!r} in this store (record outcomes after "
                             "`ctxdb ab run`)")
        connection.execute(sql_statement("ab/delete_outcome"),
                           {"run_id": run_id, "instance_id": instance_id})
        models.insert_many(connection, models.outcome, [{
            "run_id": run_id, "instance_id": instance_id, "solved": solved,
            "cost_usd": cost_usd, "model_tokens_in": model_tokens_in,
            "model_tokens_out": model_tokens_out,
            "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }])


def import_outcomes(store, path) -> tuple[int, list[str]]:
    """Record every line of an outcomes JSONL; bad lines are reported, the rest recorded."""
    recorded, errors = 0, []
    with Path(path).open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("expected a JSON object")
                missing = [k for k in ("run_id", "instance_id", "solved") if k not in data]
                if missing:
                    raise ValueError(f"field {missing[0]!r}: missing")
                record_outcome(store, data["run_id"], data["instance_id"], data["solved"],
                               data.get("cost_usd"), data.get("model_tokens_in"),
                               data.get("model_tokens_out"))
                recorded += 1
            except (ValueError, json.JSONDecodeError) as exc:
                errors.append(f"{path} line {line_no}: {exc}")
    return recorded, errors

