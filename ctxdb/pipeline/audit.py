"""The admission log: every stage action on every item, in order.

Each event becomes an ``item_event`` row; exactly one per item is final, and
its action is the item's verdict.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

from .vocabulary import FINAL_VERDICTS


class Event(NamedTuple):  # a tuple: a 256-item decision logs about 400 of them
    # in item_event's column order (after decision_id)
    item_id: str
    event_no: int
    stage: str
    action: str
    driver: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    is_final: bool = False
    detail: str | None = None


# An Event made from its values in order by tuple's own constructor: NamedTuple's
# generated __new__ is a Python call, ~0.3 µs of each of a 256-item decision's ~400.
_make_event = functools.partial(tuple.__new__, Event)


class AuditLog:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self._final: dict[str, str] = {}

    def add(
        self,
        item_id: str,
        stage: str,
        action: str,
        driver: str | None = None,
        *,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
        detail: str | None = None,
    ) -> None:
        events = self.events
        events.append(_make_event((item_id, len(events) + 1, stage, action, driver,
                                   tokens_before, tokens_after, False, detail)))

    def final(
        self,
        item_id: str,
        stage: str,
        verdict: str,
        driver: str | None = None,
        *,
        tokens_after: int | None = None,
        detail: str | None = None,
    ) -> None:
        if verdict not in FINAL_VERDICTS:
            raise ValueError(f"final verdict {verdict!r} is not one of {FINAL_VERDICTS}")
        if item_id in self._final:
            raise RuntimeError(
                f"{item_id} already has the final verdict {self._final[item_id]!r}; "
                f"stage {stage} tried {verdict!r}"
            )
        self._final[item_id] = verdict
        events = self.events
        events.append(_make_event((item_id, len(events) + 1, stage, verdict, driver, None,
                                   tokens_after, True, detail)))

    def verdict(self, item_id: str) -> str | None:
        return self._final.get(item_id)

    def rows(self, decision_id: int,
             flag: Callable[[bool], object] = bool) -> list[tuple[object, ...]]:
        """The ``item_event`` rows, values in ``EVENT_COLUMNS`` order; ``is_final`` as
        ``flag`` makes it (``models.flag_type``)."""
        return [(decision_id, item_id, event_no, stage, action, driver, tokens_before,
                 tokens_after, flag(is_final), detail)
                for (item_id, event_no, stage, action, driver, tokens_before, tokens_after,
                     is_final, detail) in self.events]


EVENT_COLUMNS = ("decision_id", "item_id", "event_no", "stage", "action", "driver",
                 "tokens_before", "tokens_after", "is_final", "detail")
