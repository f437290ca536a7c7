"""The decisions a harness would make on an instance: localize, then edit.

Localize gets the retriever's top candidates (`ctxdb.retrieval`, component 04: body
BM25, names, traceback frames, failing tests, structure, fused), the failing tests'
source, the symbols on the task's traceback frames and module skeletons of the hit
files; edit gets a target — ``oracle``: what a planner with perfect localization hands
over, ``retrieval``: the top candidate — with derived impact and the tests that reach
it. `fts_query` is the stand-in retrieval it replaced (BM25 over names, signatures and
docstrings), kept so ``ctxdb retrieve --eval`` can measure the two side by side.

Oracle localization targets the patch's first gold symbol (def/class), with the lines
the patch changes in it as the insertion point; the patch's other gold locations are
05 changed entities and the plan node's dependencies — a function by its key, a
change inside a class or module body (between its methods) by the changed lines
(``path:START-END``), which is where that edit happens — and the lines each changes
are the plan node's change sites, so each is shown around its own change (a fix in
a nested function and the function around it). Only a patch that changes nothing
but module-level lines targets those lines.
"""

from __future__ import annotations

import re

from ..entities import is_symbol_key, path_of_key
from ..request import DecisionRequest, EvidenceInput, InsertionPoint, PlanNode
from ..request_limits import LIST_MAX_ITEMS
from ..retrieval.localize import localize_pool
from ..sqlfiles import sql_statement
from ..terms import terms
from .gold import GoldFact, def_line
from .instances import Instance

LOCALIZATIONS = ("oracle", "retrieval")
RETRIEVAL_TOP_K = 30  # the component-04 stand-in: top 30 symbols by BM25
QUERY_MAX_TERMS = 40
# retrieval localization: the top candidates an edit decision gets as change sites. Set
# on the whole development set (docs/recon.md, "Retrieval"): a gold symbol verbatim in 22%, 28%
# and 37% of edit windows with 1, 2 and 3, at a median of 2,341, 3,043 and 3,545 tokens.
RETRIEVAL_EDIT_SITES = 3
FUNCTION_KINDS = frozenset({"function", "method"})  # recon's symbol kinds of a def
SKELETON_MAX_SYMBOLS = 60


def fts_query(connection, problem: str):
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
        head = def_line(row.signature) or row.qualname
        indent = "    " * row.qualname.count(".")
        lines.append(f"{indent}{head}  # L{row.start_line}")
    if len(rows) > SKELETON_MAX_SYMBOLS:
        lines.append(f"# … {len(rows) - SKELETON_MAX_SYMBOLS} more symbols")
    return "\n".join(lines)


def oracle_localization(gold_edited: list[GoldFact]):
    """(target, insertion point, the other gold locations, the lines they change) of
    perfect localization."""
    if not gold_edited:
        return None, None, [], []
    target = next((f for f in gold_edited if is_symbol_key(f.entity_key)), gold_edited[0])
    point = None
    if target.changed_lines is not None:
        point = InsertionPoint(path_of_key(target.entity_key), *target.changed_lines)
    others = [f for f in gold_edited if f is not target]
    sites = [InsertionPoint(path_of_key(f.entity_key), *f.changed_lines)
             for f in others if f.changed_lines is not None]
    return target.entity_key, point, [_edit_site(f) for f in others], sites


def _edit_site(fact: GoldFact) -> str:
    """A location of the change as a planner would name it: a function or method by its
    key; a change in a class's own body by the lines it changes."""
    if fact.symbol_kind in FUNCTION_KINDS or fact.changed_lines is None:
        return fact.entity_key
    first, last = fact.changed_lines
    return f"{path_of_key(fact.entity_key)}:{first}-{last}"


def build_decisions(recon_connection, instance: Instance, gold_edited: list[GoldFact],
                    localization: str, run_for_arm) -> list[DecisionRequest]:
    pool = localize_pool(recon_connection, instance)
    hit_items = list(pool.hit_items)
    test_items = [EvidenceInput(source="03", kind="source_code", entity=key,
                                provenance="03: source of a FAIL_TO_PASS test")
                  for key in pool.test_keys]
    paths = sorted({c.entity_key.split("::", 1)[0] for c in pool.candidates})
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
            required_validation=pool.test_ids, acceptance_criteria=(criterion,),
            decision_question="Which functions must change to resolve the issue?",
        ),
        evidence=tuple(hit_items + test_items + list(pool.frame_items) + skeletons),
    )
    point, dependencies, change_sites = None, [], []
    if localization == "oracle" and gold_edited:
        target, point, dependencies, change_sites = oracle_localization(gold_edited)
    else:
        target = pool.candidates[0].entity_key if pool.candidates else None
        # the retriever's next suspects are handed over as further change sites, as a
        # localizer returning its top few locations would
        dependencies = [c.entity_key for c in pool.candidates[1:RETRIEVAL_EDIT_SITES]]
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
    edit_evidence[1:1] = [EvidenceInput(source="05", kind="changed_entity", entity=key,
                                        provenance=f"05: {localization} localization, "
                                                   "another location of the change")
                          for key in dependencies]
    # the failing tests first, then those that reach the target, while the request's
    # evidence stays within its list limit (a core symbol is reached by 1,000 tests)
    tests = list(dict.fromkeys([*pool.test_keys, *reaching]))
    room = max(LIST_MAX_ITEMS - len(edit_evidence), 0)
    edit_evidence += [EvidenceInput(source="03", kind="source_code", entity=key,
                                    provenance="03: a test that calls the target")
                      for key in sorted(tests[:room])]
    edit = DecisionRequest(
        run_id=run_for_arm, instance_id=instance.instance_id, seq=2, decision_type="edit",
        task=instance.problem_statement,
        plan_node=PlanNode(
            node_id="edit",
            obligation=f"Change {target or 'the localized code'} to resolve the issue",
            target_entity=target, dependencies=tuple(dependencies), insertion_point=point,
            change_sites=tuple(change_sites),
            required_validation=pool.test_ids,
            acceptance_criteria=(criterion,
                                 instance.problem_statement.strip().splitlines()[0][:300]),
            decision_question="What change to the target makes the failing tests pass?",
        ),
        evidence=tuple(edit_evidence),
        derive_impact=True,
    )
    return [localize, edit]
