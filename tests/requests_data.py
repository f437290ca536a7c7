"""Decision requests shared by the pipeline tests (content given inline: no recon needed)."""

from __future__ import annotations

import copy

TARGET = "shop/cart.py::Cart.total"
TOTAL_BODY = (
    "def total(self):\n"
    "    taxed = self.subtotal() * (1 + self.tax)\n"
    "    return taxed * (1 - self.discount)\n"
)

EDIT_REQUEST = {
    "run_id": "run-edit",
    "instance_id": "shop-1",
    "seq": 1,
    "decision_type": "edit",
    "task": "Fix the discount: it must apply before tax.",
    "plan_node": {
        "node_id": "n1",
        "obligation": "Apply the discount before tax in Cart.total",
        "target_entity": TARGET,
        "required_validation": ["tests/test_cart.py::test_discount_before_tax"],
        "acceptance_criteria": [
            "A 100.00 cart with 10% off and 20% tax totals 108.00",
            "No other totals change",
        ],
        "decision_question": "Which lines of Cart.total must change?",
    },
    "evidence": [
        {"source": "05", "kind": "fault_entity", "entity": TARGET, "content": TOTAL_BODY,
         "provenance": "05: localized by the failing test"},
        {"source": "04", "kind": "retrieved_hit", "entity": TARGET, "content": TOTAL_BODY,
         "provenance": "04: bm25 9.1", "score": 9.1},
        {"source": "04", "kind": "retrieved_hit", "entity": "shop/report.py::render_report",
         "content": "def render_report(cart):\n    return cart.total()\n",
         "provenance": "04: bm25 3.2", "score": 3.2},
        {"source": "04", "kind": "retrieved_hit", "entity": "shop/util.py::slugify",
         "content": "def slugify(s):\n    return s.lower()\n", "provenance": "04: bm25 0.4"},
        {"source": "04", "kind": "retrieved_hit",
         "entity": "tests/test_cart.py::test_discount_before_tax",
         "content": "def test_discount_before_tax():\n"
                    "    assert Cart(100, tax=.2, discount=.1).total() == 108.0\n",
         "provenance": "04: bm25 5.0"},
    ],
    "impact_edges": [
        {"head": TARGET, "tail": "shop/report.py::render_report", "kind": "CalledBy", "depth": 1},
    ],
    "live": {
        "test_outputs": [
            "older run: 1 failed",
            "FAILED tests/test_cart.py::test_discount_before_tax"
            " - assert 108.00000000000001 == 108.0",
        ],
        "tool_outputs": ["$ ls shop\ncart.py report.py util.py\n"],
    },
}


def edit_request(**changes) -> dict:
    data = copy.deepcopy(EDIT_REQUEST)
    data.update(changes)
    return data
