"""``ctxdb construct``: build, record and print the window for one decision request."""

from __future__ import annotations

import argparse
import sys
import warnings

from .shared import (
    EXIT_OK,
    RECON_BY_DEFAULT_HELP,
    add_db_option,
    add_recon_option,
    context_store,
    recon_by_default,
)


def register(commands: argparse._SubParsersAction) -> None:
    construct = commands.add_parser(
        "construct", help="build the window for one decision request (JSON)",
        description="Construct, record and print the window for REQUEST.json, then a summary: "
        "items by verdict, tokens by tier, eviction steps. A bad request exits 2, writing nothing.",
    )
    construct.add_argument("request", metavar="REQUEST.json", help="a DecisionRequest as JSON")
    add_db_option(construct)
    add_recon_option(construct, help_text=RECON_BY_DEFAULT_HELP)
    construct.add_argument("--strict", action="store_true",
                           help="an item naming an entity recon cannot resolve is an error "
                           "(exit 2, nothing written) instead of a flagged placeholder")
    construct.add_argument("--arm", choices=("ctx08", "current"),
                           help="override the request's A/B arm")
    construct.add_argument("--json", action="store_true",
                           help="print the DecisionContext as JSON instead")
    construct.add_argument("--summary", action="store_true",
                           help="print only the summary, not the rendered window")
    construct.set_defaults(func=_cmd_construct)


def _cmd_construct(args) -> int:
    from dataclasses import replace

    from .. import forensics
    from ..request import (
        REQUEST_JSON_MAX_BYTES,
        DecisionRequest,
        RequestError,
        UnresolvedEntityWarning,
    )

    try:
        with open(args.request, "rb") as fh:
            raw = fh.read(REQUEST_JSON_MAX_BYTES + 1)  # past the limit: refused unread
    except OSError as exc:
        raise FileNotFoundError(f"request file {args.request}: {exc.strerror}") from exc
    try:
        request = DecisionRequest.from_json(raw)
    except RequestError as exc:
        raise RequestError(f"request file {args.request}: {exc}") from exc
    if args.arm:
        request = replace(request, arm=args.arm)
    from ..config import load_settings
    from ..pipeline.state import check_request_ceiling

    try:  # before the store is opened: a refused request creates no store file
        check_request_ceiling(request, load_settings())
    except RequestError as exc:
        raise RequestError(f"request file {args.request}: {exc}") from exc
    with context_store().open(args.db, recon=recon_by_default(args)) as store:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnresolvedEntityWarning)
            context = store.construct(request, strict=args.strict)
        for warning in caught:
            if issubclass(warning.category, UnresolvedEntityWarning):
                print(f"ctxdb: warning: {warning.message}", file=sys.stderr)
            else:  # not ours to word: shown as Python would have
                warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                       warning.lineno)
        if args.json:
            print(context.to_json())
            return EXIT_OK
        with store.engine.connect() as connection:
            summary = forensics.summary(connection, context.decision_id)
    if not args.summary:
        print(context.render(), end="")
        print("─" * 72)
    print(summary)
    return EXIT_OK
