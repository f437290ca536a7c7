"""DecisionRequest: the JSON Schema and the dataclass fast path give the same verdicts."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from requests_data import edit_request  # noqa: E402

from ctxdb.request import (  # noqa: E402
    DecisionRequest,
    EvidenceInput,
    ImpactEdgeInput,
    InsertionPoint,
    RequestError,
    validate_request,
)
from ctxdb.request_schema import SCHEMA_FILE  # noqa: E402

VALID = DecisionRequest.from_dict(edit_request())


def _with_evidence(**fields):
    item = dataclasses.replace(VALID.evidence[0], **fields)
    return dataclasses.replace(VALID, evidence=(item,) + VALID.evidence[1:])


BROKEN = [
    ("request.seq", dataclasses.replace(VALID, seq=0)),
    ("request.decision_type", dataclasses.replace(VALID, decision_type="fix")),
    ("request.arm", dataclasses.replace(VALID, arm="both")),
    ("request.task", dataclasses.replace(VALID, task="")),
    ("request.run_id", dataclasses.replace(VALID, run_id="r" * 201)),
    ("request.evidence[0].source", _with_evidence(source="08")),
    ("request.evidence[0].kind", _with_evidence(kind="overview")),
    ("request.evidence[0]", _with_evidence(entity=None, content=None)),
    ("request.impact_edges[0].kind", dataclasses.replace(
        VALID, impact_edges=(ImpactEdgeInput("a", "b", "Calls", 1),))),
    ("request.impact_edges[0].depth", dataclasses.replace(
        VALID, impact_edges=(ImpactEdgeInput("a", "b", "CalledBy", 0),))),
    ("request.plan_node.insertion_point.line", dataclasses.replace(
        VALID, plan_node=dataclasses.replace(VALID.plan_node,
                                             insertion_point=InsertionPoint("a.py", 0)))),
    ("request.plan_node.obligation", dataclasses.replace(
        VALID, plan_node=dataclasses.replace(VALID.plan_node, obligation=""))),
]


def test_valid_request_passes_both():
    VALID.check()
    validate_request(VALID.to_dict())
    assert DecisionRequest.from_dict(VALID.to_dict()) == VALID
    assert DecisionRequest.from_json(VALID.to_json()) == VALID


def test_a_request_with_a_mutable_list_is_checked_every_time():
    """Only a request frozen all the way down keeps its verdict (and its JSON)."""
    evidence = list(VALID.evidence)
    request_ = dataclasses.replace(VALID, evidence=evidence)
    request_.check()
    before = request_.to_json()
    evidence[0] = dataclasses.replace(evidence[0], kind="overview")
    with pytest.raises(RequestError, match=r"request\.evidence\[0\]\.kind"):
        request_.check()
    assert request_.to_json() != before

    # a look-alike evidence object (not the frozen class) can change after the check
    class Mutable:
        def __init__(self, source):
            self.source, self.kind, self.entity, self.content = source, "symbol", None, "x"
            self.provenance, self.score = "p", None

    loose = Mutable("04")
    request_ = dataclasses.replace(VALID, evidence=(loose,))
    request_.check()
    loose.source = "99"
    with pytest.raises(RequestError, match=r"request\.evidence\[0\]\.source"):
        request_.check()

    frozen = dataclasses.replace(VALID, evidence=tuple(evidence))
    with pytest.raises(RequestError):
        frozen.check()  # a failed check is never remembered as a pass
    with pytest.raises(RequestError):
        frozen.check()


@pytest.mark.parametrize("field,request_", BROKEN, ids=[f for f, _ in BROKEN])
def test_schema_and_dataclass_agree_on_broken_requests(field, request_):
    with pytest.raises(RequestError) as fast:
        request_.check()
    with pytest.raises(RequestError) as schema:
        validate_request(request_.to_dict())
    assert field in str(fast.value)
    assert field in str(schema.value)


def test_schema_file_is_published_in_the_package():
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema["title"] == "DecisionRequest"
    assert set(schema["required"]) >= {"run_id", "instance_id", "seq", "decision_type", "task"}


def test_not_json_is_a_clear_error():
    with pytest.raises(RequestError, match="not valid JSON"):
        DecisionRequest.from_json("{nope")


def test_evidence_input_round_trip():
    item = EvidenceInput(source="04", kind="symbol", provenance="p", entity="a.py::f", score=1.5)
    request = dataclasses.replace(VALID, evidence=(item,))
    assert DecisionRequest.from_dict(request.to_dict()).evidence == (item,)


# evidence items the full checks find fault with, or that they must read field by field
# (non-ASCII text, a bool or int score, an empty entity): the plain path must give each
# the same verdict and count the same characters
UNPLAIN_EVIDENCE = [
    {"source": "08"}, {"kind": "overview"}, {"entity": None, "content": None},
    {"entity": ""}, {"entity": "é.py::f"}, {"content": "naïve"}, {"content": "\ud800"},
    {"provenance": "p" * 1_000}, {"provenance": "café"}, {"score": True},
    {"score": float("inf")}, {"score": 10**400}, {"score": 3}, {"source": ["04"]},
    {"entity": None, "content": ""},
]


@pytest.mark.parametrize("fields", UNPLAIN_EVIDENCE, ids=repr)
def test_the_plain_evidence_path_gives_the_full_checks_verdict(fields, monkeypatch):
    from ctxdb import request as request_module

    broken = _with_evidence(**fields)
    plain = request_module._Checks()
    request_module._check_evidence(plain, broken.evidence)
    monkeypatch.setattr(request_module, "_plainly_sound", lambda item: False)
    full = request_module._Checks()
    request_module._check_evidence(full, broken.evidence)
    assert (plain.problems, plain.characters) == (full.problems, full.characters)


def test_plainly_sound_evidence_is_counted_without_naming_its_fields(monkeypatch):
    from ctxdb import request as request_module

    named = []
    monkeypatch.setattr(request_module._Checks, "one_of",
                        lambda self, path, value, allowed: named.append(path))
    checks = request_module._Checks()
    request_module._check_evidence(checks, VALID.evidence)
    assert named == [] and checks.problems == []
    assert checks.characters == sum(len(item.provenance) + len(item.entity or "")
                                    + len(item.content or "") for item in VALID.evidence)
