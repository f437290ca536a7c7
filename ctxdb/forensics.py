"""Reading decisions back: summaries, an item's path, raw content, window diffs.

Everything here is a query in ``sql/forensics/``; the CLI prints what it returns.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from . import models
from .agent.cache_marks import cache_marked_messages
from .agent.loop import MASK_HINT, LoopStep
from .context import DecisionContext, WindowEntry
from .pipeline.budget import cut_task
from .pipeline.state import BudgetStep
from .pipeline.vocabulary import CACHE_MARKED_FLAG, FAILURE_KINDS, HARNESS_SENT_OVER_CEILING_FLAG
from .pipeline.window_text import DECISION_REF_PREFIX, window_head
from .request import storable_text
from .request_limits import STORE_INTEGER_MAX, quote_value
from .spec import ARM_CURRENT
from .sqlfiles import sql_statement

RUN_REF_PREFIX = "run:"  # ctxdb.agent.adapter's windows name their run so
# how ctxdb.agent.adapter names a loop window's item (evidence_item.provenance): its
# item ids are fixed per step, so a diff names it by its step and part
LOOP_PROVENANCE = "live: step {step} {part} of the agent loop"
_LOOP_PART = re.compile(r"^live: step (\d+) (.+) of the agent loop$")
# a loop window's first line, whatever run it names
_MASK_HINT_LINE = re.compile(".+".join(re.escape(part) for part in MASK_HINT.split("{ref}")))
REF_HEX_MIN_DIGITS = 8  # a req- name's shortest prefix of the request hash
_REF = re.compile(rf"^{DECISION_REF_PREFIX}(?P<hex>[0-9a-f]{{{REF_HEX_MIN_DIGITS},64}})$")


# an item's id in its pool (evidence_item.item_id: E7), however typed (e7)
_ITEM_ID_ANY_CASE = re.compile(r"[eE][1-9][0-9]*")
# an agent-loop request's steps as stored: each step's JSON an evidence_text row, named in
# order by its digest (a run's decisions re-send the same history)
STEP_DIGESTS_FIELD = "steps_sha256"
# a current-arm loop decision's messages as the harness sent them, named likewise
SENT_DIGESTS_FIELD = "sent_sha256"
# the harness's own messages a loop window is sent after, named likewise (each decision
# of a run sends the same prompt; a request stored before 2026-12-05 holds "prefix")
PREFIX_DIGESTS_FIELD = "prefix_sha256"
# (field naming digests, the field given, what its texts are), in a request's order
_DIGEST_FIELDS = ((PREFIX_DIGESTS_FIELD, "prefix", "prefix messages"),
                  (STEP_DIGESTS_FIELD, "steps", "steps"),
                  (SENT_DIGESTS_FIELD, "sent", "messages sent"))
# runs or instances named when a run reference names none the store holds
INSTANCES_NAMED = 3
# of a reference as given, repeated in its error: a run reference (run and instance, each
# up to 200 characters), an entity key (its file's path and its qualified name)
RUN_REF_SHOWN_CHARS = 80
ENTITY_KEY_SHOWN_CHARS = 200
# why an item id a reader took from a window may be missing from a decision
_NO_ITEM_HINT = ("an agent-loop decision records the parts its window holds: step k's "
                 "command, output, reasoning and note are E4k-3 to E4k while shown")


class NotFound(LookupError):
    """The named decision or item does not exist; the message says which."""


def _rows(connection: Connection, name: str, **params):
    return connection.execute(sql_statement(f"forensics/{name}"), params).mappings().all()


def resolve_decision(connection: Connection, ref: str | int) -> int:
    """A decision id from ``42``, a masking pointer's ``req-3f2a9c1d0b7e``, or an
    agent-loop window's ``run:RUN:INSTANCE`` (that run's newest decision)."""
    ref = str(ref)
    if ref.startswith(RUN_REF_PREFIX):
        return _newest_of_run(connection, ref[len(RUN_REF_PREFIX):])
    match = _REF.match(ref)
    if match:
        prefix = match["hex"]
        rows = _rows(connection, "decision_by_ref", prefix=prefix, prefix_length=len(prefix))
        if not rows:
            raise NotFound(f"no decision whose request hash starts with {prefix!r}")
        return rows[0]["decision_id"]
    if not (ref.isascii() and ref.isdigit()):
        raise NotFound(f"decision {quote_value(ref)}: expected a decision id, "
                       f"{DECISION_REF_PREFIX}<hex> (at least {REF_HEX_MIN_DIGITS} hex digits) "
                       f"or {RUN_REF_PREFIX}RUN:INSTANCE")
    if len(ref) > len(str(STORE_INTEGER_MAX)) or int(ref) > STORE_INTEGER_MAX:
        raise NotFound(f"decision {quote_value(ref)}: no decision id is above "
                       f"{STORE_INTEGER_MAX}")
    decision_id = int(ref)
    if not _rows(connection, "decision_header", decision_id=decision_id):
        (ids,) = _rows(connection, "decision_id_range")
        gaps = ", not every id between: a replay or a re-run removes its earlier decisions" \
            if ids["lowest"] is not None and ids["lowest"] < decision_id < ids["highest"] else ""
        held = ("this store holds no decision" if ids["lowest"] is None
                else f"this store holds decisions {ids['lowest']} to {ids['highest']}{gaps}")
        raise NotFound(f"decision {decision_id} does not exist ({held})")
    return decision_id


def _newest_of_run(connection: Connection, run_and_instance: str) -> int:
    # either id may hold a colon: each place it could part them is tried
    for at in [i for i, ch in enumerate(run_and_instance) if ch == ":"]:
        rows = _rows(connection, "newest_decision_of_run", run_id=run_and_instance[:at],
                     instance_id=run_and_instance[at + 1:])
        if rows:
            return rows[0]["decision_id"]
    given = f"{RUN_REF_PREFIX}{run_and_instance[:RUN_REF_SHOWN_CHARS]}"
    instances = _instances_of(connection, run_and_instance)
    if instances:  # the run alone: say which instances it has
        raise NotFound(f"{given}: expected {RUN_REF_PREFIX}RUN_ID:INSTANCE_ID, the instance "
                       f"after the run (this run's: {_some(instances, INSTANCES_NAMED)})")
    for at in [i for i, ch in enumerate(run_and_instance) if ch == ":"]:
        run_id, instance_id = run_and_instance[:at], run_and_instance[at + 1:]
        instances = _instances_of(connection, run_id)
        if instances:  # a run the store holds, another instance: the nearest names
            near = difflib.get_close_matches(instance_id, instances, n=INSTANCES_NAMED)
            said = (f"the nearest: {_some(near, INSTANCES_NAMED)}" if near
                    else f"its instances: {_some(instances, INSTANCES_NAMED)}")
            raise NotFound(f"{given}: run {quote_value(run_id)} has no decision of instance "
                           f"{quote_value(instance_id)} ({said})")
    runs = [row["run_id"] for row in _rows(connection, "runs_of_store")]
    near = difflib.get_close_matches(run_and_instance.split(":", 1)[0], runs,
                                     n=INSTANCES_NAMED)
    held = (f"the nearest: {_some(near, INSTANCES_NAMED)}" if near
            else f"this store's runs: {_some(runs, INSTANCES_NAMED)}" if runs
            else "this store holds no decision")
    raise NotFound(f"{given}: no run of that name ({held}; expected "
                   f"{RUN_REF_PREFIX}RUN_ID:INSTANCE_ID)")


def _instances_of(connection: Connection, run_id: str) -> list[str]:
    return [row["instance_id"] for row in _rows(connection, "instances_of_run", run_id=run_id)]


def _some(names: list[str], named: int) -> str:
    """The first ``named`` of ``names``, quoted, and an ellipsis for the rest."""
    return ", ".join(repr(n) for n in names[:named]) + (", …" if len(names) > named else "")


def header(connection: Connection, decision_id: int):
    return _rows(connection, "decision_header", decision_id=decision_id)[0]


def rendered_window(connection: Connection, decision_id: int) -> str:
    """The exact text that was sent, rebuilt from the stored window rows."""
    head = header(connection, decision_id)
    window = _rows(connection, "window_of_decision", decision_id=decision_id)
    body = "".join(row["rendered_text"] for row in window)
    return window_head(_window_task(connection, head), (head["flags"] or "").split(",")) + body


def _window_task(connection: Connection, head) -> str:
    """The task as the window showed it: cut only when the decision is flagged so."""
    task = head["task_text"]
    if "task_truncated" in (head["flags"] or "").split(","):
        steps = _rows(connection, "budget_steps", decision_id=head["decision_id"])
        task = _cut_task(task, head["token_ceiling"], steps)
    return task


def context(connection: Connection, decision_id: int) -> DecisionContext:
    """The DecisionContext the decision's construction returned, read back from the
    store: the same window, messages, budget steps, flags and verdict counts."""
    head = header(connection, decision_id)
    node = _rows(connection, "obligation_of_decision", decision_id=decision_id)
    entries = tuple(
        WindowEntry(
            row["position"], row["item_id"], row["role"], row["rendering"], row["tier"],
            row["block"], bool(row["edge_critical"]), row["token_count"], row["rendered_text"],
            None if row["shown_start_line"] is None
            else (row["shown_start_line"], row["shown_end_line"]),
        )
        for row in _rows(connection, "window_of_decision", decision_id=decision_id)
    )
    steps = tuple(BudgetStep(**row) for row in _rows(connection, "budget_steps",
                                                     decision_id=decision_id))
    return DecisionContext(
        decision_id=decision_id, arm=head["arm"], task=_window_task(connection, head),
        acceptance_criteria=tuple(json.loads(node[0]["acceptance_criteria_json"])) if node
        else (),
        current_obligation=node[0]["obligation_text"] if node else "",
        window=entries, token_count=head["token_count"], ceiling=head["token_ceiling"],
        tokenizer=head["tokenizer"], budget_log=steps,
        flags=tuple(head["flags"].split(",")) if head["flags"] else (),
        verdicts={row["verdict"]: row["items"]
                  for row in _rows(connection, "verdict_counts", decision_id=decision_id)},
        prefix=_loop_prefix(connection, decision_id), decision_type=head["decision_type"],
        harness_sent=tuple(request_as_given(connection, decision_id)["sent"])
        if HARNESS_SENT_OVER_CEILING_FLAG in (head["flags"] or "").split(",") else (),
    )


def request_as_given(connection: Connection, decision_id: int) -> Any:
    """The request a decision was built from, exactly as given (JSON-decoded): an
    agent-loop decision's prefix, steps and messages sent put back in order from the
    texts they are stored as once per run (``_DIGEST_FIELDS``). None when the store has
    no such decision."""
    rows = _rows(connection, "request_of_decision", decision_id=decision_id)
    if not rows:
        return None
    request = json.loads(rows[0]["request_json"])
    if not isinstance(request, dict):
        return request
    return _with_stored_texts(connection, decision_id, request)


def _with_stored_texts(connection: Connection, decision_id: int,
                       request: dict[str, Any]) -> dict[str, Any]:
    """``request`` with each list its digests name put back in their place, in order."""
    named = {field: request[field] for field, _given, _what in _DIGEST_FIELDS
             if field in request}
    if not named:
        return request
    text = models.evidence_text.c
    wanted = sorted({digest for digests in named.values() for digest in digests})
    stored = dict(connection.execute(select(text.content_sha256, text.content).where(
        text.content_sha256.in_(wanted))).tuples().all())
    given_request: dict[str, Any] = {}
    fields = {field: (given, what) for field, given, what in _DIGEST_FIELDS}
    for key, value in request.items():
        if key not in named:
            given_request[key] = value
            continue
        given, what = fields[key]
        missing = [digest for digest in value if digest not in stored]
        if missing:
            raise NotFound(f"decision {decision_id}: {len(missing)} of its {what} are not in "
                           f"evidence_text (first: {missing[0]}): the store was cut short")
        given_request[given] = [json.loads(stored[digest]) for digest in value]
    return given_request


def messages_sent(connection: Connection, decision_id: int) -> list[dict[str, Any]]:
    """The chat messages a decision sent: a current loop decision given the harness's
    messages (``SENT_DIGESTS_FIELD``) has them as given (each key, a tool call's id too);
    a loop window sent with cache marks (flagged ``cache_marked``), the marked blocks the
    model got (``cache_marks.cache_marked_messages``); any other, its window as messages
    (``DecisionContext.messages``)."""
    request = request_as_given(connection, decision_id)
    if isinstance(request, dict) and isinstance(request.get("sent"), list):
        return request["sent"]
    window = context(connection, decision_id)
    if CACHE_MARKED_FLAG in window.flags:
        return cache_marked_messages(window, window.prefix)
    return window.messages()


def _loop_request(connection: Connection, decision_id: int) -> dict[str, Any] | None:
    """The request as stored when an agent loop built the decision (it names its steps),
    else None."""
    rows = _rows(connection, "request_of_decision", decision_id=decision_id)
    request = json.loads(rows[0]["request_json"]) if rows else None
    if isinstance(request, dict) and {"steps", STEP_DIGESTS_FIELD} & request.keys():
        return request
    return None


def _is_loop_decision(connection: Connection, decision_id: int) -> bool:
    return _loop_request(connection, decision_id) is not None


def _loop_prefix(connection: Connection, decision_id: int) -> tuple[dict[str, str], ...]:
    """The harness's messages an agent-loop decision was built after (its request as
    given holds them); none for any other decision."""
    request = _loop_request(connection, decision_id)
    if request is None:
        return ()
    if PREFIX_DIGESTS_FIELD in request:  # the prefix alone: not the steps
        request = _with_stored_texts(connection, decision_id,
                                     {PREFIX_DIGESTS_FIELD: request[PREFIX_DIGESTS_FIELD]})
    # as the decision stored its texts (a NUL or lone surrogate made storable)
    return tuple({key: storable_text(text) if isinstance(text, str) else text
                  for key, text in message.items()} for message in request.get("prefix", ()))


def _cut_task(task: str, ceiling: int, steps) -> str:
    """The task as a window flagged ``task_truncated`` showed it.

    The store keeps the task uncut; the budgeter's last resort (``Budgeter.
    _evict_for_exactness``) cuts it from the exact count it logs on each recount, so
    the cut is replayed from ``budget_log`` here. tests/test_forensics.py holds the two
    together.
    """
    for previous, step in zip([None, *steps], steps, strict=False):
        bare_recount = step["ladder_step"] == "exact_recount" and step["item_id"] is None
        # an eviction for exactness logs the evicted item's row just before its recount
        after_eviction = (previous is not None and previous["ladder_step"] == "exact_recount"
                          and previous["item_id"] is not None)
        if not bare_recount or after_eviction:
            continue
        if not task:
            break  # later recounts cut the rest of the stable core, not the task
        task = cut_task(task, ceiling, step["tokens_before"])
    return task


def summary(connection: Connection, decision_id: int) -> str:
    head = header(connection, decision_id)
    lines = [
        f"decision {decision_id} · run {head['run_id']} ({head['arm']}/{head['variant']}) · "
        f"{head['instance_id']} #{head['seq']} · {head['decision_type']}",
        f"tokens {head['token_count']} / ceiling {head['token_ceiling']} ({head['tokenizer']})"
        + (f" · flags: {head['flags']}" if head["flags"] else ""),
        "items by verdict: " + ", ".join(
            f"{r['verdict']} {r['items']}" for r in _rows(connection, "verdict_counts",
                                                           decision_id=decision_id)
        ),
        "tokens by tier: " + ", ".join(
            f"{r['tier']} {r['tokens']} ({r['items']} items)"
            for r in _rows(connection, "tokens_by_tier", decision_id=decision_id)
        ),
    ]
    calls = _rows(connection, "rank_of_decision", decision_id=decision_id)
    fate = {r["action"]: r["items"] for r in _rows(connection, "residue_fate",
                                                      decision_id=decision_id)}
    if calls:
        call = calls[0]
        latency = f", {call['latency_ms']:.0f} ms" if call["latency_ms"] is not None else ""
        lines.append(
            f"ranking: 1 call to {call['model']} — {call['parse_status']}{latency}; "
            f"{call['candidates']} candidates scored, {call['admitted']} admitted"
            + (f" ({call['error']})" if call["error"] else "")
        )
    elif fate:
        lines.append("ranking: no call — residue " + ", ".join(
            f"{action} {items}" for action, items in sorted(fate.items())))
    steps = [s for s in _rows(connection, "budget_steps", decision_id=decision_id)
             if s["ladder_step"] != "measured"]
    if steps:
        lines.append(f"eviction steps ({len(steps)}):")
        for step in steps:
            lines.append(
                f"  {step['step_no']:>3} {step['ladder_step']:<28} {step['item_id'] or '-':<6}"
                f" {step['tokens_before']} -> {step['tokens_after']}"
                # why the rung took this item (``the largest first``, ``N tokens freed``)
                + (f"  ({step['detail']})" if step["detail"] else "")
            )
    elif head["arm"] == ARM_CURRENT:
        # the baseline sends everything, as the harness would: no ceiling is applied
        lines.append("eviction steps: none (the current arm sends all it is given)")
    elif HARNESS_SENT_OVER_CEILING_FLAG in (head["flags"] or "").split(","):
        lines.append("eviction steps: none: no window fitted the ceiling, so the harness "
                     "sent its own messages, recorded here (harness_sent_over_ceiling)")
    else:
        lines.append("eviction steps: none (the window fit)")
    return "\n".join(lines)


def why(connection: Connection, decision_id: int, item_id: str) -> list:
    item_id = _as_item_id(item_id)
    rows = _rows(connection, "why_item", decision_id=decision_id, item_id=item_id)
    if not rows:
        raise NotFound(f"decision {decision_id} has no item {item_id!r} ({_NO_ITEM_HINT})")
    return rows


def _as_item_id(item: str) -> str:
    """``e7`` as ``E7``: an item id however it was typed; anything else as given."""
    return item.upper() if _ITEM_ID_ANY_CASE.fullmatch(item) else item


def item_id_of(connection: Connection, decision_id: int, item: str) -> str:
    """An item id as given (``E7``, ``e7``), or the first evidence item of an entity key."""
    if _ITEM_ID_ANY_CASE.fullmatch(item):
        return _as_item_id(item)
    return items_of_entity(connection, decision_id, item)[0]  # (NotFound, with a hint)


def _last_name(entity_key: str) -> str:
    """What a reader would call an entity: ``method`` of ``pkg/mod.py::Class.method``,
    ``mod.py`` of ``pkg/mod.py``."""
    key = entity_key.rstrip("/")
    if "::" in key:
        return re.split(r"::|\.", key)[-1]
    if "/" in key or key.endswith(".py"):
        return key.rsplit("/", 1)[-1]
    return key.rsplit(".", 1)[-1]


def _like_escaped(text: str) -> str:
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def items_of_entity(connection: Connection, decision_id: int, entity_key: str) -> list[str]:
    """Every pool item of an entity in a decision, its evidence first. An entity not in
    the pool is NotFound, naming the pool's keys for the same symbol or file name."""
    rows = _rows(connection, "item_of_entity", decision_id=decision_id, entity_key=entity_key)
    if rows:
        return [row["item_id"] for row in rows]
    name = _like_escaped(_last_name(entity_key))
    similar = [row["entity_key"] for row in _rows(
        connection, "entities_like", decision_id=decision_id, symbol_pattern=f"%::{name}",
        member_pattern=f"%.{name}", file_pattern=f"%/{name}")]
    hint = (f"; the pool has {', '.join(similar)}" if similar
            else "; its pool's entities are in v_item_verdict (entity_key)")
    if _is_loop_decision(connection, decision_id):
        hint += ("; an agent loop's output names its file only while it is a view: name a "
                 "pointer by its item (step k's output is E(4k-2))")
    raise NotFound(f"decision {decision_id} has no pool item of entity "
                   f"{entity_key[:ENTITY_KEY_SHOWN_CHARS]!r}{hint}")


def item(connection: Connection, decision_id: int, item_id: str):
    item_id = _as_item_id(item_id)
    rows = _rows(connection, "item_of_decision", decision_id=decision_id, item_id=item_id)
    if not rows:
        raise NotFound(f"decision {decision_id} has no item {item_id!r} ({_NO_ITEM_HINT})")
    return rows[0]


@dataclass(frozen=True)
class WindowDiff:
    """Two windows compared fact by fact. A fact is named readably and the same way in
    both (item ids shift between decisions): a symbol by its entity key, the plan node and
    the patch as such, a criterion by its first line, a live observation by its kind, the
    decision it arrived in and its first line."""

    entered: list[tuple[str, str]]  # (fact, item id in B)
    left: list[tuple[str, str]]  # (fact, item id in A)
    changed: list[tuple[str, str, str]]  # (fact, rendering in A, rendering in B)
    # (fact, item id in A, item id in B): the same fact with another text (edited code, a
    # new obligation, the patch grown), or shown otherwise in the same form (a loop's view
    # read again from the tree)
    rewritten: list[tuple[str, str, str]] = field(default_factory=list)


LIVE_KINDS = FAILURE_KINDS | {"tool_output"}
ENDS_WITH_VERDICT = frozenset({"traceback", "test_output"})
FACT_LINE_CHARS = 60  # how much of a first line names a live item or a criterion
# how assembly names an event's arrival: "(traceback, from decision 2)"
_ARRIVED = re.compile(r"\((?:error|traceback|tool_output|test_output), from decision (\d+)\)")


def output_kept_whole(connection: Connection, decision_id: int, step: int) -> bool:
    """Whether the store keeps step ``step``'s output of a loop decision whole where the
    harness showed the model only a cut of it (``LoopStep.kept``: mini-swe-agent's
    ``raw_output``), rather than as the harness showed it."""
    request = request_as_given(connection, decision_id)
    steps = request.get("steps") if isinstance(request, dict) else None
    if not isinstance(steps, list) or not 0 < step <= len(steps) \
            or not isinstance(steps[step - 1], dict):
        return False
    given = {name: value for name, value in steps[step - 1].items() if name != "actions"}
    try:
        kept = LoopStep(**given)
    except TypeError:  # not a step as construct_step stores one
        return False
    return kept.kept != kept.shown


def loop_part_of(provenance: str | None) -> re.Match[str] | None:
    """A loop window item's step (group 1) and part (group 2), from its provenance."""
    return _LOOP_PART.match(provenance or "")


def fact_name(row) -> str:
    """The readable name of a window row's fact (``WindowDiff``)."""
    kind, entity = row["kind"], row["entity_key"]
    loop_part = loop_part_of(row["provenance"])
    if loop_part:  # a loop window's step part: its kind changes as it folds, not its step
        return f"step {loop_part[1]} {loop_part[2]}"
    if kind == "plan_node":
        return "plan node"
    if kind == "patch":
        return "patch"
    lines = [" ".join(line.split()) for line in (row["content"] or "").splitlines()]
    lines = [line for line in lines if line]
    first_line = lines[0][:FACT_LINE_CHARS] if lines else ""
    if kind == "acceptance_criteria":
        return f"acceptance criterion: {first_line}"
    if kind in LIVE_KINDS:
        arrived = _ARRIVED.search(row["provenance"] or "")
        when = f" (from decision {arrived[1]})" if arrived else ""
        # a traceback and a test run end with what they say (the exception, pytest's
        # summary); an error and a tool output start with it (the message, the command)
        telling = lines[-1] if kind in ENDS_WITH_VERDICT and lines else first_line
        return f"{kind}{when}: {telling[:FACT_LINE_CHARS]}"
    if row["fact_key"].startswith("item:"):
        return f"{kind}:{entity or first_line}"
    return entity or row["fact_key"]


def unique_names(names: list[str]) -> list[str]:
    """The names in order, a repeated one numbered ``#2``, ``#3`` … (two runs whose
    telling line is the same), never colliding with a name already given."""
    given: set[str] = set()
    uses: Counter[str] = Counter()
    out = []
    for base in names:
        uses[base] += 1
        name = base if uses[base] == 1 else f"{base} #{uses[base]}"
        while name in given:
            uses[base] += 1
            name = f"{base} #{uses[base]}"
        given.add(name)
        out.append(name)
    return out


def _natural_order(name: str) -> tuple[list[str | int], str]:
    """A fact name's sort key, its numbers read as numbers: step 9 before step 10 (then
    the name itself, so ``E01`` and ``E1`` keep one order)."""
    return [int(part) if index % 2 else part
            for index, part in enumerate(re.split(r"(\d+)", name))], name


def _without_mask_hint(text: str | None) -> str | None:
    """A loop window's item text without the window's first line (``loop.MASK_HINT``),
    which the first item carries and which names the run: two runs' parts compare alike."""
    if text is None:
        return None
    first, found, rest = text.partition("\n\n")
    return rest if found and _MASK_HINT_LINE.fullmatch(first) else text


def diff(connection: Connection, decision_a: int, decision_b: int) -> WindowDiff:
    """What entered, left, changed rendering or text between two windows, by fact."""

    def facts(decision_id):
        rows = _rows(connection, "window_facts_of_decision", decision_id=decision_id)
        return {name: (row["item_id"], row["rendering"], row["content_sha256"],
                       # what a loop part showed (a pipeline item's pointer names its own
                       # decision's request: not compared)
                       _without_mask_hint(row["rendered_text"])
                       if loop_part_of(row["provenance"]) else None)
                for name, row in zip(unique_names([fact_name(row) for row in rows]), rows,
                                     strict=True)}

    def rewritten(fact: str) -> bool:
        """Its text changed, or in the same form it shows another text (a loop's view read
        again from the tree after an edit). NULL: a store from before revision 0011."""
        (_, form_a, text_a, shown_a), (_, form_b, text_b, shown_b) = a[fact], b[fact]
        return text_a != text_b or (form_a == form_b and None not in (shown_a, shown_b)
                                    and shown_a != shown_b)

    a, b = facts(decision_a), facts(decision_b)
    both = sorted(set(a) & set(b), key=_natural_order)
    return WindowDiff(
        entered=[(f, b[f][0]) for f in sorted(set(b) - set(a), key=_natural_order)],
        left=[(f, a[f][0]) for f in sorted(set(a) - set(b), key=_natural_order)],
        changed=[(f, a[f][1], b[f][1]) for f in both if a[f][1] != b[f][1]],
        rewritten=[(f, a[f][0], b[f][0]) for f in both if rewritten(f)],
    )
