"""The recon indexer's loader: parsed files streamed into the database, ids assigned in
path order, and what name resolution and the next run need of them kept in memory."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from ctxdb.entities import is_test_path
from ctxdb.recon import schema
from ctxdb.recon.extract import ParsedFile, Reference, code_terms, own_texts, split_body_terms
from ctxdb.recon.fulltext import (
    index_symbol_names,
    insert_body_terms,
    remove_body_terms,
    stored_own_texts,
    update_symbol_names,
)
from ctxdb.recon.resolve import ModuleBinding, ResolverFile, ResolverSymbol, WrittenBase
from ctxdb.recon.walk import SkippedPath, StatKey
from ctxdb.recon.writer import Writer

if TYPE_CHECKING:
    from ctxdb.recon.incremental import OldFile, StoredSymbol


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
# The parameters of `recon/index_update_file` and `recon/index_update_symbol`.
FILE_UPDATE_COLUMNS = ("id",) + FILE_COLUMNS[2:]  # a file keeps its path
SYMBOL_UPDATE_COLUMNS = ("id", "parent_id") + SYMBOL_COLUMNS[4:]
SYMBOL_ID = ("symbol_id",)


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
        # per file: its symbols' ids by ordinal, and its references (by source ordinal)
        self._references: list[tuple[Sequence[int], list[Reference]]] = []
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
        self._add_references(fid, range(first, self.next_symbol), parsed)
        if len(self._file_rows) >= self.FLUSH_FILES:
            self.flush()

    def _add_references(self, fid: int, ids: Sequence[int], parsed: ParsedFile) -> None:
        """Keep a file's references and bindings for name resolution (`ids`: its symbols'
        ids by ordinal)."""
        self._references.append((ids, parsed.references))
        self.bases += [WrittenBase(ids[r.src_index], r.dst_name, r.typed_name)
                       for r in parsed.references if r.kind == "inherits"]
        for binding in parsed.bindings:
            self._binding_rows.append((fid, binding.name, binding.target, binding.line))
            self.bindings.append(ModuleBinding(fid, binding.name, binding.target))

    def replace(self, old: OldFile, module: str, parsed: ParsedFile) -> None:
        """A re-parsed file written over its old rows (an incremental run): the file keeps
        its id and each symbol whose key stays keeps its id, so edges into it stay valid;
        only the symbols that moved are written, and only the full-text entries whose
        values changed. The edges out of the file, its bindings and stat key were
        cleared (`clear_replaced_files`) and are written anew."""
        self.flush()  # the id range of the names to index holds added files only
        w, fid, rel = self.w, old.id, old.path
        # what the old body terms were made of, from the text about to be replaced: a
        # symbol's terms are computed again (to delete them) only where that moved
        old_texts = stored_own_texts(w, fid)
        is_test = is_test_path(rel)
        self.flagged += bool(parsed.syntax_error or parsed.not_utf8)
        w.run_rows("recon/index_update_file", FILE_UPDATE_COLUMNS, [
            (fid, module, parsed.sha256, parsed.size_bytes, parsed.line_count, is_test,
             parsed.syntax_error, parsed.not_utf8, parsed.skipped)])
        w.run("recon/index_delete_source_of_file", file_id=fid)
        self.files.append(ResolverFile(fid, rel, module, is_test))
        self.states[rel] = FileState(fid, parsed.sha256, module, None)
        if parsed.skipped is not None:
            self.skipped.append(SkippedPath(rel, parsed.skipped))
        else:
            w.insert(schema.file_source, [(fid, parsed.source.decode("utf-8"))],
                     ("file_id", "text"))
        old_by_key = {symbol.key: symbol for symbol in old.symbols}
        ids = []
        for symbol in parsed.symbols:
            kept = old_by_key.get(symbol.key)
            if kept is not None:
                ids.append(kept.id)
            else:
                ids.append(self.next_symbol)
                self.next_symbol += 1
        new_terms = split_body_terms(parsed.body_terms, len(parsed.symbols))
        new_texts = own_texts(parsed.source, parsed.symbols)
        rows = [(sid, fid, ids[symbol.parent_index] if symbol.parent_index >= 0 else None,
                 symbol.key, symbol.kind, symbol.name, symbol.qualname, symbol.start_line,
                 symbol.end_line, symbol.start_byte, symbol.end_byte, symbol.signature,
                 symbol.doc)
                for sid, symbol in zip(ids, parsed.symbols, strict=True)]
        kept_ids = set(ids)
        removed = [symbol for symbol in old.symbols if symbol.id not in kept_ids]
        old_by_id = {symbol.id: symbol for symbol in old.symbols}
        moved, added, names_old, names_new = [], [], list(removed), []
        terms_old = [(symbol.id, code_terms(old_texts[symbol.id])) for symbol in removed
                     if symbol.id in old_texts]
        terms_new = []
        for row, terms, text in zip(rows, new_terms, new_texts, strict=True):
            sid = row[0]
            before = old_by_id.get(sid)
            if before is None:
                added.append(row)
                names_new.append(row)
                terms_new.append((sid, terms))
                continue
            if _symbol_fields(before) != row[2:]:
                moved.append(row)
                if _name_fields(before) != (row[5], row[6], row[11], row[12]):
                    names_old.append(before)
                    names_new.append(row)
            if old_texts.get(sid) != text:
                if sid in old_texts:
                    terms_old.append((sid, code_terms(old_texts[sid])))
                terms_new.append((sid, terms))
        # out of the full-text indexes with the values they went in with, before the rows
        update_symbol_names(w, [_name_values(symbol) for symbol in names_old], [])
        remove_body_terms(w, terms_old)
        w.run_rows("recon/index_delete_symbol", SYMBOL_ID, [(s.id,) for s in removed])
        w.run_rows("recon/index_update_symbol", SYMBOL_UPDATE_COLUMNS,
                   [(row[0], row[2], *row[4:]) for row in moved])
        w.insert(schema.symbol, added, SYMBOL_COLUMNS)
        update_symbol_names(w, [], [(row[0], row[5], row[6], row[11], row[12])
                                    for row in names_new])
        insert_body_terms(w, terms_new)
        for row, symbol in zip(rows, parsed.symbols, strict=True):
            self.symbols.append(ResolverSymbol(row[0], fid, row[2], symbol.kind, symbol.name))
            self.symbol_keys[row[0]] = symbol.key
        self._add_references(fid, ids, parsed)

    def reference_count(self) -> int:
        return sum(len(references) for _, references in self._references)

    def references(self) -> Iterator[tuple[int, Reference]]:
        """Every loaded reference, in load order, with its source's symbol id."""
        for ids, references in self._references:
            for reference in references:
                yield ids[reference.src_index], reference

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


def _symbol_fields(symbol: StoredSymbol) -> tuple:
    """A stored symbol's row from its parent on (SYMBOL_COLUMNS[2:]), as the loader
    builds it, but for the file (a replaced file keeps its id)."""
    return (symbol.parent_id, symbol.key, symbol.kind, symbol.name, symbol.qualname,
            symbol.start_line, symbol.end_line, symbol.start_byte, symbol.end_byte,
            symbol.signature, symbol.doc)


def _name_fields(symbol: StoredSymbol) -> tuple:
    """What the names index holds of a symbol: name, qualname, signature, doc."""
    return (symbol.name, symbol.qualname, symbol.signature, symbol.doc)


def _name_values(symbol: StoredSymbol) -> tuple:
    """A stored symbol's id and names-index values (`update_symbol_names`)."""
    return (symbol.id, *_name_fields(symbol))
