"""The recon indexer's loader: parsed files streamed into the database, ids assigned in
path order, and what name resolution and the next run need of them kept in memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from ctxdb.entities import is_test_path
from ctxdb.recon import schema
from ctxdb.recon.extract import ParsedFile, Reference, split_body_terms
from ctxdb.recon.fulltext import index_symbol_names, insert_body_terms
from ctxdb.recon.resolve import ModuleBinding, ResolverFile, ResolverSymbol, WrittenBase
from ctxdb.recon.walk import SkippedPath, StatKey
from ctxdb.recon.writer import Writer


class FileState(NamedTuple):
    """An indexed file as change detection compares it (`recon.file`, `recon.file_stat`)."""

    id: int
    sha256: str
    module: str
    stat_key: StatKey | None  # when its content was last hashed; None: hash it to be sure


class EdgeRecord(NamedTuple):
    """A row of recon.edge (EDGE_COLUMNS)."""

    id: int
    kind: str
    src_symbol_id: int
    dst_symbol_id: int | None
    dst_name: str
    typed_name: str | None
    line: int

    def as_tests_edge(self, eid: int) -> tuple:
        """The tests edge row a resolved call from a test function gives: same site."""
        return (eid, "tests", self.src_symbol_id, self.dst_symbol_id, self.dst_name,
                self.typed_name, self.line)


# The rows the indexer inserts are plain tuples in these columns' order: Django's sdist
# writes ~220k of them, and a NamedTuple is built ~4x slower than a tuple and bound
# ~40% slower by the sqlite3 driver (through the sequence protocol).
FILE_COLUMNS = ("id", "path", "module", "sha256", "size_bytes", "line_count", "is_test",
                "syntax_error", "not_utf8", "skipped")
SYMBOL_COLUMNS = ("id", "file_id", "parent_id", "key", "kind", "name", "qualname",
                  "start_line", "end_line", "start_byte", "end_byte", "signature", "doc")
EDGE_COLUMNS = EdgeRecord._fields
BINDING_COLUMNS = ("file_id", "name", "target", "line")


class Loader:
    """Streams freshly parsed files into the database, ids assigned in path order.

    Keeps only what name resolution needs; source text and symbol details go to the
    database in batches while the workers are still parsing.
    """

    FLUSH_FILES = 64

    def __init__(self, w: Writer, next_file: int, next_symbol: int, *,
                 defer_body_terms: bool = False) -> None:
        self.w = w
        self.next_file = next_file
        self.next_symbol = next_symbol
        # kept for name resolution
        self.files: list[ResolverFile] = []
        self.states: dict[str, FileState] = {}  # what the next run compares with, by path
        self.symbols: list[ResolverSymbol] = []
        self.bindings: list[ModuleBinding] = []
        self.bases: list[WrittenBase] = []  # inherits references: resolved first
        # per file: its first symbol id and its references (src_index counts from it)
        self._references: list[tuple[int, list[Reference]]] = []
        self.flagged = 0
        self.skipped: list[SkippedPath] = []  # files indexed without symbols
        # rows for the next flush, in FILE_COLUMNS, ("file_id", "text"), SYMBOL_COLUMNS
        # and BINDING_COLUMNS order
        self._file_rows: list[tuple] = []
        self._source_rows: list[tuple[int, str]] = []
        self._symbol_rows: list[tuple] = []
        self._binding_rows: list[tuple] = []
        self._body_rows: list[tuple[int, str]] = []  # (symbol id, body terms)
        # A cold build writes the body index on the database thread once parsing is done
        # (beside name resolution) rather than here, where it competes with the parsers:
        # each file's joined terms, in symbol id order from deferred_first_symbol.
        self.defer_body_terms = defer_body_terms
        self.deferred_first_symbol = next_symbol
        self.deferred_body_terms: list[str] = []
        self._symbol_ids_to_flush = range(next_symbol, next_symbol)
        # entity keys of the loaded symbols, by id: an incremental run compares a file's
        # definitions before and after by key (a cold build needs none)
        self.symbol_keys: dict[int, str] = {}

    def add(self, rel: str, module: str, parsed: ParsedFile) -> None:
        fid = self.next_file
        self.next_file += 1
        is_test = is_test_path(rel)
        self.flagged += bool(parsed.syntax_error or parsed.not_utf8)
        self._file_rows.append((fid, rel, module, parsed.sha256, parsed.size_bytes,
                                parsed.line_count, is_test, parsed.syntax_error,
                                parsed.not_utf8, parsed.skipped))
        self.files.append(ResolverFile(fid, rel, module, is_test))
        self.states[rel] = FileState(fid, parsed.sha256, module, None)
        if parsed.skipped is not None:  # a file row alone
            self.skipped.append(SkippedPath(rel, parsed.skipped))
            return
        self._source_rows.append((fid, parsed.source.decode("utf-8")))
        first = self.next_symbol  # symbol ids: the file's symbol ordinals shifted by first
        self.next_symbol += len(parsed.symbols)
        for symbol in parsed.symbols:
            sid = first + symbol.ordinal
            parent = first + symbol.parent_index if symbol.parent_index >= 0 else None
            kind, name = symbol.kind, symbol.name
            self._symbol_rows.append(
                (sid, fid, parent, symbol.key, kind, name, symbol.qualname, symbol.start_line,
                 symbol.end_line, symbol.start_byte, symbol.end_byte, symbol.signature,
                 symbol.doc)
            )
            self.symbols.append(ResolverSymbol(sid, fid, parent, kind, name))
        if not self.defer_body_terms:
            self.symbol_keys.update((first + symbol.ordinal, symbol.key)
                                    for symbol in parsed.symbols)
        if self.defer_body_terms:
            self.deferred_body_terms.append(parsed.body_terms)
        else:
            self._body_rows += zip(range(first, self.next_symbol),
                                   split_body_terms(parsed.body_terms, len(parsed.symbols)),
                                   strict=True)
        self._symbol_ids_to_flush = range(self._symbol_ids_to_flush.start, self.next_symbol)
        self._references.append((first, parsed.references))
        self.bases += [WrittenBase(first + r.src_index, r.dst_name, r.typed_name)
                       for r in parsed.references if r.kind == "inherits"]
        for binding in parsed.bindings:
            self._binding_rows.append((fid, binding.name, binding.target, binding.line))
            self.bindings.append(ModuleBinding(fid, binding.name, binding.target))
        if len(self._file_rows) >= self.FLUSH_FILES:
            self.flush()

    def reference_count(self) -> int:
        return sum(len(references) for _, references in self._references)

    def references(self) -> Iterator[tuple[int, Reference]]:
        """Every loaded reference, in load order, with its source's symbol id."""
        for first, references in self._references:
            for reference in references:
                yield first + reference.src_index, reference

    def flush(self) -> None:
        w = self.w
        w.insert(schema.file, self._file_rows, FILE_COLUMNS)
        w.insert(schema.file_source, self._source_rows, ("file_id", "text"))
        w.insert(schema.symbol, self._symbol_rows, SYMBOL_COLUMNS)
        index_symbol_names(w, self._symbol_ids_to_flush)
        insert_body_terms(w, self._body_rows)
        w.insert(schema.binding, self._binding_rows, BINDING_COLUMNS)
        self._file_rows, self._source_rows = [], []
        self._symbol_rows, self._binding_rows, self._body_rows = [], [], []
        self._symbol_ids_to_flush = range(self.next_symbol, self.next_symbol)
