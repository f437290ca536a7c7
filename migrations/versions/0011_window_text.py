"""Window texts stored once, by content hash (issue 22).

- `window_item.rendered_sha256` names the item's text in `evidence_text`, replacing the
  `rendered_text` column. An agent loop's windows repeat most of their parts decision
  after decision, and a `current` decision's window is the whole history as sent: each
  decision wrote every text again, so a live `current` run's store grew with the square
  of its length (84 MB for a synthetic 300-step run), and on the 97 development runs
  70 MB of window texts were 8 MB of distinct ones. A text also in the pool (a message
  shown verbatim) is the pool's row. The view `v_window_item` shows the window with its
  texts, in the old column order.

On SQLite `window_item` is rebuilt (batch copy-and-swap); every row is kept, and the old
table's pages stay free in the file until a `VACUUM` (`ctxdb db upgrade` says how much);
on PostgreSQL the old texts stay on disk until `VACUUM FULL window_item`.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# window rows read and rewritten at a time: a large store's texts never all in memory
ROWS_A_BATCH = 5000


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


TEXTS_COMMENT_BEFORE = "Each distinct pool text once; evidence_item rows refer to it by hash."
TEXTS_COMMENT = ("Each distinct text once: evidence_item and window_item rows (0011) refer"
                 " to it by hash.")


def _comment_texts(comment: str, existing: str) -> None:
    if op.get_bind().dialect.name != "sqlite":  # SQLite keeps no comments
        op.create_table_comment("evidence_text", comment, existing_comment=existing)


def upgrade() -> None:
    connection = op.get_bind()
    _comment_texts(TEXTS_COMMENT, TEXTS_COMMENT_BEFORE)
    op.add_column("window_item", sa.Column("rendered_sha256", sa.String(64)))
    after = (-1, -1)
    while True:
        rows = connection.execute(sa.text(
            "SELECT decision_id, position, rendered_text FROM window_item"
            " WHERE (decision_id, position) > (:decision_id, :position)"
            " ORDER BY decision_id, position LIMIT :rows"
        ), {"decision_id": after[0], "position": after[1], "rows": ROWS_A_BATCH}).all()
        if not rows:
            break
        digests = [(d, p, _sha256(rendered), rendered) for d, p, rendered in rows]
        texts = sorted({digest: rendered for _d, _p, digest, rendered in digests}.items())
        connection.execute(sa.text(
            "INSERT INTO evidence_text (content_sha256, content) VALUES (:digest, :content)"
            " ON CONFLICT (content_sha256) DO NOTHING"
        ), [{"digest": digest, "content": content} for digest, content in texts])
        connection.execute(sa.text(
            "UPDATE window_item SET rendered_sha256 = :digest"
            " WHERE decision_id = :decision_id AND position = :position"
        ), [{"digest": h, "decision_id": d, "position": p} for d, p, h, _r in digests])
        after = rows[-1][0], rows[-1][1]
    with op.batch_alter_table("window_item") as batch:
        batch.drop_column("rendered_text")
        batch.alter_column("rendered_sha256", existing_type=sa.String(64), nullable=False)
        batch.create_foreign_key("fk_window_item_rendered", "evidence_text",
                                 ["rendered_sha256"], ["content_sha256"])


def downgrade() -> None:
    connection = op.get_bind()
    with op.batch_alter_table("window_item") as batch:
        batch.add_column(sa.Column("rendered_text", sa.Text))
    connection.execute(sa.text(
        "UPDATE window_item SET rendered_text = (SELECT t.content FROM evidence_text t"
        " WHERE t.content_sha256 = window_item.rendered_sha256)"
    ))
    with op.batch_alter_table("window_item") as batch:
        batch.drop_constraint("fk_window_item_rendered", type_="foreignkey")
        batch.drop_column("rendered_sha256")
        batch.alter_column("rendered_text", existing_type=sa.Text, nullable=False)
    _comment_texts(TEXTS_COMMENT_BEFORE, TEXTS_COMMENT)
