"""§4 — the one learned step: relevance ranking of the gate's residue, and the fold rule
that stands in for it.

The call (rank_client.py) fires iff the gate left 1..RESIDUE_MAX (32) residual items and
an endpoint is configured. A candidate is admitted iff its score ≥ the configured
threshold; a call that failed in any way rejects the whole residue. A residue the step
may not rank (over 32, or no endpoint configured) goes through the fold rule instead.

The call is made by :func:`rank_client.rank_residue` before the decision's write
transaction opens (construct.py), so the store's write lock is never held across it;
:func:`resolve_residue` turns its answer into verdicts — or applies the fold rule — and
the call is recorded (persist.py).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from ..spec import ADMITTED_MAX, RESIDUE_MAX
from .gate_inputs import NEAR_HOP_SCORE
from .rank_client import ResidueCandidate
from .render import signature_of
from .state import Attempt, Candidate, PoolItem, RankScore
from .vocabulary import FOLD, FOLDED, OUTLINE_OF_FOLDED_IN, RANK, RANK_ADMITTED, REJECTED

STAGE = RANK
# The fold rule admits an item this many recon edges from its bucket's symbol at most —
# a neighbour's neighbour (the callee of a callee of a failing test). Set on the whole
# development set with no ranker (docs/ab.md, "The development set"): at 1 hop the localize
# window kept 0.16 of the edited code its pool held, at 2 hops 0.39, for a median of
# 519 -> 1,460 tokens.
FOLD_MAX_RECON_HOPS = 2
# ... or an item whose near_score reaches a direct recon neighbour's structural score: a
# term of its own, or a few terms that few other items share, say as much as an edge.
# Set on the whole development set with no ranker (docs/ab.md, "The development set"): the
# localize window kept 0.851 of the edited code its pool held with recon edges alone,
# 0.942 with this (lone outlines by edges only), for a median of 3,213 -> 3,538 tokens
# (without that exception 0.950 at 3,655; at 1.5, 0.926; at 0.5, 0.967 at 3,894).
FOLD_MIN_NEAR_SCORE = NEAR_HOP_SCORE[1]
# context flags: the residue went through the fold rule, and why
FOLDED_OVER_CAP = "residue_folded_over_32"
FOLDED_NO_RANKER = "residue_folded_no_ranker"

log = logging.getLogger(__name__)

# The residue at write time is not the one ranked: the gate reads only the decision's own
# rows (the same in preview and write) and the store's policy tables, so only a change of
# those between the two can do it.
RESIDUE_CHANGED = "residue_changed"



_announced_unavailable: set[tuple[str, str]] = set()


def announce_unavailable(store_url: str, run_id: str) -> None:
    """Say once per run (of this store, in this process) that ranking is off; never crash."""
    if (store_url, run_id) not in _announced_unavailable:
        _announced_unavailable.add((store_url, run_id))
        log.warning(
            "ctxdb: no ranking endpoint configured (CTXDB_RANK_BASE_URL / [rank].base_url): "
            "run %s folds the gate's residue instead (flag %s)", run_id, FOLDED_NO_RANKER
        )


def residue_candidates(attempt: Attempt) -> list[ResidueCandidate]:
    """The gate's residue as the ranking prompt shows it: id, kind, signature — the
    signature under its entity key, so two `def raw_amount(self, …)` of two classes
    read apart."""
    by_id = attempt.inputs.by_id
    return [
        ResidueCandidate(item_id, by_id[item_id].kind, _named_signature(by_id[item_id]))
        for item_id in attempt.residue
    ]


def _named_signature(item: PoolItem) -> str:
    signature = signature_of(Candidate(item=item, driver="residual"))
    if item.entity_key and item.entity_key not in signature:
        return f"{item.entity_key}\n{signature}"
    return signature


def resolve_residue(attempt: Attempt) -> None:
    """§4: the ranked residue's verdicts. A residue the step may not rank — over 32, or
    no endpoint configured — goes through the fold rule, flagged on the context; a call
    that was made and failed rejects the whole residue. Admitted items join the
    attempt's candidates."""
    ranking, residue, audit = attempt.ranking, attempt.residue, attempt.audit
    settings = attempt.inputs.settings
    if ranking is not None and list(ranking.residue_ids) != residue:
        # A call that happened is always recorded, with what its answer came to mean
        # (for this attempt: the call's own outcome stays as it was for another).
        ranking = attempt.ranking = dataclasses.replace(
            ranking, status=RESIDUE_CHANGED,
            error="the residue at write time differs from the one ranked")
    if not residue:
        return
    if len(residue) > RESIDUE_MAX:
        attempt.flags.append(FOLDED_OVER_CAP)
        if not settings.rank_base_url:
            attempt.flags.append(FOLDED_NO_RANKER)  # it could not have ranked any residue
        attempt.candidates += _fold(attempt, f"residue > {RESIDUE_MAX}")
        return
    if ranking is None and not settings.rank_base_url:
        attempt.flags.append(FOLDED_NO_RANKER)
        attempt.candidates += _fold(attempt, "no ranker")
        return
    if ranking is None:
        for item_id in _with_members(attempt):
            audit.final(item_id, STAGE, REJECTED,
                        "rank_not_called: the residue appeared after the call was prepared")
        return
    by_id, threshold = attempt.inputs.by_id, settings.rank_threshold
    members = attempt.outline_members
    for item_id in residue:
        score = ranking.scores.get(item_id) if ranking.ok else None
        if not ranking.ok:
            verdict, reason = "reject", f"rank_failed: {ranking.status}"
        elif score is None:
            verdict, reason = "reject", "rank: not scored by the model"
        elif score >= threshold:
            verdict, reason = "admit", f"rank: score {score:.2f} >= {threshold}"
        else:
            verdict, reason = "reject", f"rank: score {score:.2f} < {threshold}"
        attempt.rank_scores.append(RankScore(item_id, score, verdict))
        for ranked_as in [item_id, *members.get(item_id, ())]:
            why = reason if ranked_as == item_id else f"{reason} (its file's outline {item_id})"
            if verdict == "admit":  # then capped with the gate's by source priority (§3.2)
                audit.add(ranked_as, STAGE, "admitted", why)
                attempt.candidates.append(Candidate(item=by_id[ranked_as], driver=RANK_ADMITTED))
            else:
                audit.final(ranked_as, STAGE, REJECTED, why)


def _with_members(attempt: Attempt) -> list[str]:
    """Every residual item: the residue's candidates and the symbols their outlines
    stand for."""
    out = []
    for item_id in attempt.residue:
        out.append(item_id)
        out.extend(attempt.outline_members.get(item_id, ()))
    return out


def _fold(attempt: Attempt, why: str) -> list[Candidate]:
    """§4's deterministic rule for a residue the step may not rank: each item goes to
    the obligation bucket (link) it is nearest to, and is admitted under that link's
    driver — rendered as its role's cheapest form, a signature in the spec's policy —
    only if it is within FOLD_MAX_RECON_HOPS recon edges of the linked symbol or its
    near_score reaches FOLD_MIN_NEAR_SCORE; otherwise it is folded away, or rejected
    outright when no bucket is near it. A file's outline that stands for residual
    symbols is not folded itself: it follows them, admitted when one of them is.

    The fold fills only the room the gate left under §3.2's ADMITTED_MAX, in residue
    order: what the gate admitted itself (the live failure, the patch) is never pushed
    out by the cap for an item folded in. (What the ranking step admits is §4's own
    verdict and is capped with the gate's admissions by source priority, as §3.2 says;
    the fold's reach is this module's choice, so it only fills room.)"""
    audit, by_id = attempt.audit, attempt.inputs.by_id
    room = ADMITTED_MAX - len(attempt.candidates)
    admitted: list[Candidate] = []

    def admit(item_id: str, reach: Reach) -> bool:
        nonlocal room
        if room <= 0:
            audit.final(item_id, STAGE, FOLDED, f"{why}: {reach.why}; no room left under the "
                                                f"{ADMITTED_MAX}-item cap", detail=reach.detail)
            return False
        room -= 1
        audit.add(item_id, STAGE, "folded_in", f"{why}: {reach.why}", detail=reach.detail)
        admitted.append(Candidate(item=by_id[item_id], driver=reach.driver))
        return True

    for item_id in attempt.residue:
        members = attempt.outline_members.get(item_id)
        if members is None:
            reach = _fold_reach(attempt, item_id, why)
            if reach is not None:
                admit(item_id, reach)
            continue
        reached = folded_in = False
        for member in members:
            reach = _fold_reach(attempt, member, why)
            if reach is not None:
                reached = True
                folded_in = admit(member, reach) or folded_in
        if folded_in:
            admit(item_id, Reach(OUTLINE_OF_FOLDED_IN, "the outline of folded-in code"))
        elif reached:  # its code was in reach, the cap had no room for it
            audit.final(item_id, STAGE, FOLDED, f"{why}: its file's code in reach; no room "
                                                f"left under the {ADMITTED_MAX}-item cap")
        else:
            audit.final(item_id, STAGE, FOLDED, f"{why}: no code of its file folded in")
    return admitted


@dataclass(frozen=True)
class Reach:
    """How the fold rule reached an item: the driver it is admitted under, why (the
    audit's driver: one text per bucket and reason, so verdicts group) and the item's
    own figure (the audit's detail)."""

    driver: str
    why: str
    detail: str | None = None


def _fold_reach(attempt: Attempt, item_id: str, why: str) -> Reach | None:
    """How the fold rule reaches the item from its bucket; None when it does not, the
    item's final verdict recorded. A module outline with no residual symbols of its own
    is reached by recon edges only: on shared terms alone its whole skeleton would come
    in."""
    audit, inputs = attempt.audit, attempt.inputs
    links, near = inputs.links, inputs.nearness[item_id]
    if near.nearest_link_no is None:
        audit.final(item_id, STAGE, REJECTED, f"{why}: no obligation bucket to fold into")
        return None
    link = links[near.nearest_link_no - 1]
    bucket = f"link {near.nearest_link_no} ({link.link_kind} {link.entity_key})"
    if near.recon_hops is not None and near.recon_hops <= FOLD_MAX_RECON_HOPS:
        return Reach(FOLD + link.link_kind, bucket)
    lexical_reach = not inputs.by_id[item_id].is_outline
    score = f"near score {near.near_score:g}"
    if lexical_reach and near.near_score >= FOLD_MIN_NEAR_SCORE:
        return Reach(FOLD + link.link_kind, f"{bucket}, as near as a recon edge",
                     f"{score} >= {FOLD_MIN_NEAR_SCORE:g}")
    audit.final(item_id, STAGE, FOLDED,
                f"{why}: {bucket}, not within {FOLD_MAX_RECON_HOPS} recon edges",
                detail=(f"{score} < {FOLD_MIN_NEAR_SCORE:g}" if lexical_reach
                        else "a module outline: folded in by recon edges only"))
    return None
