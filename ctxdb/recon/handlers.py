"""The ``ctxdb recon`` handlers (`ctxdb.cli.recon` adds the parsers and points at
these): each takes the parsed namespace and returns the exit code."""

from __future__ import annotations

import argparse
import sys

import sqlalchemy as sa

from ctxdb.recon.indexer import SkippedPath, index_repository, read_skipped
from ctxdb.recon.schema import (
    ReconVersionError,
    default_target,
    describe_target,
    lookup_symbol,
    open_recon,
    search_symbols,
)

EXIT_OK = 0
EXIT_USAGE = 2


def _err(message: str) -> None:
    """One error line, as every ctxdb command says one (docs/commands.md)."""
    print(f"ctxdb: error: {message}", file=sys.stderr)


def cmd_index(args: argparse.Namespace) -> int:
    target = args.recon or default_target()
    try:
        stats = index_repository(args.path, target, rebuild=args.rebuild, progress=args.progress,
                                 changed=args.changed)
    except (ReconVersionError, NotADirectoryError, ValueError) as exc:
        _err(str(exc))
        return EXIT_USAGE
    print(
        f"indexed {args.path} into {describe_target(target)}: "
        f"{stats.files_seen} files ({stats.files_parsed} parsed, {stats.files_removed} removed, "
        f"{stats.files_flagged} flagged, {stats.files_skipped} skipped), {stats.symbols} "
        f"symbols, {stats.edges} edges in {stats.seconds:.2f}s"
    )
    _print_skipped(stats.skipped)
    return EXIT_OK


def _print_skipped(skipped: tuple[SkippedPath, ...]) -> None:
    """The skipped paths, one a line, after a count by reason."""
    if not skipped:
        return
    by_reason: dict[str, int] = {}
    for entry in skipped:
        by_reason[entry.reason] = by_reason.get(entry.reason, 0) + 1
    counts = ", ".join(f"{n} {reason}" for reason, n in sorted(by_reason.items()))
    print(f"skipped  {len(skipped):>8}  ({counts})")
    for entry in skipped:
        print(f"  {entry.reason:<20} {entry.path}")


_EDGES_OUT = sa.text(
    "SELECT e.kind, e.dst_name, e.line, d.key AS dst_key FROM recon.edge e"
    " LEFT JOIN recon.symbol d ON d.id = e.dst_symbol_id"
    " WHERE e.src_symbol_id = :id ORDER BY e.kind, e.line, e.dst_name, e.id"
)
_EDGES_IN = sa.text(
    "SELECT e.kind, e.dst_name, e.line, s.key AS src_key FROM recon.edge e"
    " JOIN recon.symbol s ON s.id = e.src_symbol_id"
    " WHERE e.dst_symbol_id = :id ORDER BY e.kind, s.key, e.line, e.id"
)
_PARENT_KEY = sa.text("SELECT key FROM recon.symbol WHERE id = :id")


def cmd_show(args: argparse.Namespace) -> int:
    target = args.recon or default_target()
    try:
        with open_recon(target) as conn:
            sym = lookup_symbol(conn, args.entity)
            if sym is None:
                _err(f"no entity {args.entity!r} in {describe_target(target)}")
                name = args.entity.rsplit("::", 1)[-1].rsplit(".", 1)[-1]
                hits = search_symbols(conn, name, limit=5) if name else []
                if hits:
                    print("  did you mean:", file=sys.stderr)
                    for hit in hits:
                        print(f"    {hit['key']}", file=sys.stderr)
                return EXIT_USAGE
            out_edges = conn.execute(_EDGES_OUT, {"id": sym["id"]}).mappings().all()
            in_edges = conn.execute(_EDGES_IN, {"id": sym["id"]}).mappings().all()
            parent = (
                conn.execute(_PARENT_KEY, {"id": sym["parent_id"]}).scalar()
                if sym["parent_id"] is not None
                else None
            )
    except ReconVersionError as exc:
        _err(str(exc))
        return EXIT_USAGE

    print(f"{sym['key']}  ({sym['kind']})")
    print(f"  span       {sym['path']}:{sym['start_line']}-{sym['end_line']}"
          f"  (bytes {sym['start_byte']}-{sym['end_byte']})")
    if sym["signature"]:
        lines = sym["signature"].splitlines()
        print(f"  signature  {lines[0]}")
        for line in lines[1:]:
            print(f"             {line}")
    print(f"  doc        {sym['doc'] if sym['doc'] is not None else '-'}")
    if parent is not None:
        print(f"  parent     {parent}")
    print(f"  edges out  {len(out_edges)}")
    for e in out_edges:
        dst = e["dst_key"] if e["dst_key"] is not None else "(unresolved)"
        print(f"    {e['kind']:<9} {dst}  [{e['dst_name']}, line {e['line']}]")
    print(f"  edges in   {len(in_edges)}")
    for e in in_edges:
        print(f"    {e['kind']:<9} {e['src_key']}  [line {e['line']}]")
    return EXIT_OK


_SYMBOL_KINDS = sa.text(
    "SELECT kind, count(*) AS n FROM recon.symbol GROUP BY kind ORDER BY kind"
)
_EDGE_KINDS = sa.text(
    "SELECT kind, count(*) AS n, count(dst_symbol_id) AS resolved FROM recon.edge"
    " GROUP BY kind ORDER BY kind"
)
_FILES = sa.text(
    "SELECT count(*) AS n,"
    " coalesce(sum(CASE WHEN is_test THEN 1 ELSE 0 END), 0) AS tests,"
    " coalesce(sum(CASE WHEN syntax_error THEN 1 ELSE 0 END), 0) AS syntax_error,"
    " coalesce(sum(CASE WHEN not_utf8 THEN 1 ELSE 0 END), 0) AS not_utf8,"
    " coalesce(sum(line_count), 0) AS lines FROM recon.file"
)


def cmd_stats(args: argparse.Namespace) -> int:
    target = args.recon or default_target()
    try:
        with open_recon(target) as conn:
            files = conn.execute(_FILES).mappings().one()
            symbols = conn.execute(_SYMBOL_KINDS).mappings().all()
            edges = conn.execute(_EDGE_KINDS).mappings().all()
            skipped = read_skipped(conn)
    except ReconVersionError as exc:
        _err(str(exc))
        return EXIT_USAGE
    print(f"recon index {describe_target(target)}")
    print(f"files    {files['n']:>8}  ({files['lines']} lines, {files['tests']} test files, "
          f"{files['syntax_error']} with syntax errors, {files['not_utf8']} not UTF-8)")
    print(f"symbols  {sum(r['n'] for r in symbols):>8}")
    for r in symbols:
        print(f"  {r['kind']:<8} {r['n']:>8}")
    print(f"edges    {sum(r['n'] for r in edges):>8}  (resolved)")
    for r in edges:
        print(f"  {r['kind']:<8} {r['n']:>8}  ({r['resolved']})")
    if skipped:
        _print_skipped(skipped)
    else:
        print(f"skipped  {0:>8}")
    return EXIT_OK
