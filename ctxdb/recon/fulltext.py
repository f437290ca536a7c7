"""The recon index's full-text entries: symbol names (FTS5 `symbol_fts` on SQLite, a
tsvector column on PostgreSQL) and symbol bodies (contentless FTS5 `symbol_body_fts`, or
the `symbol_body` table's tsvectors), added and removed with their symbols."""

from __future__ import annotations

from ctxdb.recon.extract import Symbol, code_terms, own_texts
from ctxdb.recon.writer import Writer

# A cold build inserts its body terms in statements of about this many characters:
# few enough to run without the GIL, small enough to keep the copies in memory small.
BODY_INSERT_CHUNK_CHARS = 1 << 22
# PostgreSQL's tsvector limits: positions above 16383 are clipped, and a lexeme keeps at
# most 256 of them (more is an error in a literal, not a clip).
TSVECTOR_MAX_POSITION = 16383
TSVECTOR_MAX_POSITIONS = 256


def tsvector_literal(terms: str) -> str:
    """A tsvector in PostgreSQL's literal form (``'term':1,4 'other':2``): the terms are
    already code-aware and lower-case, and PostgreSQL's own parser would split them at
    underscores. They hold only [a-z0-9_], so no quoting is needed."""
    positions: dict[str, list[str]] = {}
    for position, term in enumerate(terms.split(), start=1):
        positions.setdefault(term, []).append(str(min(position, TSVECTOR_MAX_POSITION)))
    return " ".join(f"'{term}':{','.join(at[:TSVECTOR_MAX_POSITIONS])}"
                    for term, at in positions.items())


BODY_TERMS_COLUMNS = ("symbol_id", "terms")


def index_symbol_names(w: Writer, symbol_ids: range) -> None:
    """Index the names of the symbols just inserted with these ids (SQLite's external-
    content FTS5 table; PostgreSQL's column is generated with the row)."""
    if w.sqlite and symbol_ids:
        w.run("recon/index_symbol_names_add", first_id=symbol_ids[0], last_id=symbol_ids[-1])


def insert_body_terms(w: Writer, rows: list[tuple[int, str]]) -> None:
    """Rows of the body index: (symbol id, terms) — FTS5 on SQLite, tsvector elsewhere."""
    if not w.sqlite:
        rows = [(sid, tsvector_literal(terms)) for sid, terms in rows]
    w.run_rows("recon/index_body_terms_add", BODY_TERMS_COLUMNS, rows)


# The parameters of `recon/index_symbol_name_add` and `recon/index_symbol_name_remove`.
SYMBOL_NAME_COLUMNS = ("id", "name", "qualname", "signature", "doc")


def update_symbol_names(w: Writer, removed: list[tuple], added: list[tuple]) -> None:
    """Take symbols out of the names index and put symbols in, one by one: rows of
    SYMBOL_NAME_COLUMNS, those removed with the values they were indexed with (SQLite's
    external-content FTS5 table; PostgreSQL's column follows its row)."""
    if w.sqlite:
        w.run_rows("recon/index_symbol_name_remove", SYMBOL_NAME_COLUMNS, removed)
        w.run_rows("recon/index_symbol_name_add", SYMBOL_NAME_COLUMNS, added)


def remove_body_terms(w: Writer, rows: list[tuple[int, str]]) -> None:
    """Take symbols out of the body index: (symbol id, the terms it was indexed with)."""
    if w.sqlite:
        w.run_rows("recon/index_body_terms_remove", BODY_TERMS_COLUMNS, rows)
    else:
        w.run_rows("recon/index_body_terms_remove", ("symbol_id",),
                   [(symbol_id,) for symbol_id, _ in rows])


def remove_fulltext_entries(w: Writer, file_ids: list[int]) -> None:
    """Take these files' symbols out of SQLite's full-text tables, before their rows go
    (PostgreSQL's entries go with the rows: a column, and ON DELETE CASCADE)."""
    if not w.sqlite:
        return
    # external-content FTS5: removed with the values they were indexed with
    w.run_rows("recon/index_symbol_names_remove", ("file_id",), [(i,) for i in file_ids])
    # contentless FTS5: the same, with the terms computed again
    for file_id in file_ids:
        w.run_rows("recon/index_body_terms_remove", BODY_TERMS_COLUMNS,
                   [(symbol_id, code_terms(text))
                    for symbol_id, text in stored_own_texts(w, file_id).items()])


def insert_deferred_body_terms(w: Writer, first_symbol: int, per_file: list[str]) -> None:
    """A cold build's body index: the files' joined terms (`ParsedFile.body_terms`, in
    load order), whose symbols have consecutive ids from `first_symbol`. Consumes
    `per_file` (each piece is released once written).

    On SQLite as a few statements over JSON arrays of the terms, BODY_INSERT_CHUNK_CHARS
    at a time: an executemany steps the driver once per row and takes the GIL back each
    time, which on the database thread beside name resolution made the 41,700 rows of
    Django's sdist take 2 s instead of 0.5 s; a statement runs without the GIL
    throughout. The terms hold only [a-z0-9_ ] (code-aware terms), so they need no JSON
    escaping.
    """
    if not w.sqlite:
        terms = [row for joined in per_file for row in joined.split("\n")]
        per_file.clear()
        insert_body_terms(w, list(zip(range(first_symbol, first_symbol + len(terms)), terms,
                                       strict=True)))
        return
    while per_file:
        n_files = size = 0
        while n_files < len(per_file) and size < BODY_INSERT_CHUNK_CHARS:
            size += len(per_file[n_files])
            n_files += 1
        chunk = [joined.replace("\n", '","') for joined in per_file[:n_files]]
        del per_file[:n_files]
        w.run("recon/index_body_terms_add_json", first_symbol=first_symbol,
              terms='["' + '","'.join(chunk) + '"]')
        first_symbol += sum(joined.count('","') + 1 for joined in chunk)


def stored_own_texts(w: Writer, file_id: int) -> dict[int, str]:
    """What the body terms the index holds for a file's symbols were made of (`own_texts`
    of the stored text and spans), by symbol id: the FTS5 table is contentless, so a row
    is deleted by giving the very terms it was inserted with, computed again."""
    text = w.run("recon/index_file_text", file_id=file_id).fetchone()
    rows = w.run("recon/index_symbol_spans_of_file", file_id=file_id).fetchall()
    if text is None or not rows:
        return {}
    ordinal_of = {row[0]: ordinal for ordinal, row in enumerate(rows)}
    symbols = [Symbol(ordinal_of[sid], ordinal_of.get(parent, -1), key, kind, name, qualname,
                      start_line, end_line, start_byte, end_byte, None, None)
               for sid, parent, key, kind, name, qualname, start_line, end_line, start_byte,
               end_byte in rows]
    texts = own_texts(text[0].encode("utf-8"), symbols)
    return {row[0]: own for row, own in zip(rows, texts, strict=True)}
