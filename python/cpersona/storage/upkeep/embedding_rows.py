"""SQL of the embedding checks: stored vector widths and values, rows without a vector,
and the repairs that clear or write vectors; the model record read through a handle."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from cpersona.storage import vector_models
from cpersona.storage.db import embedding_param, quote_identifier
from cpersona.storage.upkeep.handle import Conn, chunks, ids_clause, scope, write_by_ids
from cpersona.storage.upkeep.texts import id_texts


def recorded_models(conn: Conn) -> dict[str, vector_models.Recorded]:
    return vector_models.recorded(conn._conn)


def open_conversions(conn: Conn) -> dict[str, vector_models.Conversion]:
    return vector_models.conversions(conn._conn)


def conversion_progress(conn: Conn, table: str) -> tuple[int, int]:
    return vector_models.progress(conn._conn, table)


def has_vectors(conn: Conn, table: str) -> bool:
    return vector_models.has_vectors(conn._conn, table)


def wrong_width(conn: Conn, table: str, width_bytes: int, agent_id: str) -> list[int]:
    where, params = scope(agent_id)
    rows = conn.execute(
        f"SELECT id FROM {quote_identifier(table)} WHERE embedding IS NOT NULL "
        f"AND {conn.ops.byte_length('embedding')} != ?{where} ORDER BY id",
        [width_bytes, *params],
    ).fetchall()
    return [int(r[0]) for r in rows]


def width_counts(conn: Conn, table: str, agent_id: str) -> dict[int, int]:
    """Stored vector widths (in float32 components) -> rows."""
    where, params = scope(agent_id)
    rows = conn.execute(
        f"SELECT {conn.ops.byte_length('embedding')} / 4 AS w, COUNT(*) "
        f"FROM {quote_identifier(table)} "
        f"WHERE embedding IS NOT NULL{where} GROUP BY w",
        params,
    ).fetchall()
    return {int(r[0]): int(r[1]) for r in rows}


def iter_embeddings(
    conn: Conn,
    table: str,
    agent_id: str,
    batch: int = 2000,
    newest_first: bool = False,
    limit: int | None = None,
) -> Iterator[list[tuple[int, bytes]]]:
    """Batches of (id, BLOB) of the embedded rows, by id (or newest first)."""
    where, params = scope(agent_id)
    order = "DESC" if newest_first else "ASC"
    last: int | None = None
    taken = 0
    while limit is None or taken < limit:
        size = batch if limit is None else min(batch, limit - taken)
        cursor = "" if last is None else (" AND id < ?" if newest_first else " AND id > ?")
        rows = conn.execute(
            f"SELECT id, embedding FROM {quote_identifier(table)} WHERE embedding IS NOT NULL"
            f"{where}{cursor} ORDER BY id {order} LIMIT ?",
            [*params, *([] if last is None else [last]), size],
        ).fetchall()
        if not rows:
            return
        last = int(rows[-1][0])
        taken += len(rows)
        yield [(int(r[0]), bytes(r[1])) for r in rows]


def null_embeddings(conn: Conn, table: str, ids: Sequence[int]) -> int:
    return write_by_ids(conn, f"UPDATE {quote_identifier(table)} SET embedding = NULL WHERE", ids)


def null_all_embeddings(conn: Conn, table: str, agent_id: str) -> int:
    where, params = scope(agent_id)
    cur = conn.execute(
        f"UPDATE {quote_identifier(table)} SET embedding = NULL WHERE embedding IS NOT NULL{where}",
        params,
    )
    return int(cur.rowcount)


def missing_embeddings(conn: Conn, table: str, agent_id: str) -> int:
    where, params = scope(agent_id)
    row = conn.execute(
        f"SELECT COUNT(*) FROM {quote_identifier(table)} WHERE embedding IS NULL{where}", params
    ).fetchone()
    return int(row[0])


def texts_to_embed(conn: Conn, table: str, agent_id: str, limit: int) -> list[tuple[int, str]]:
    """(id, text) of rows without an embedding, oldest first, at most `limit`."""
    column = "content" if table == "memories" else "summary"
    return id_texts(conn, table, column, agent_id, limit, where="embedding IS NULL")


def texts_by_id(conn: Conn, table: str, ids: Sequence[int]) -> dict[int, str]:
    column = "content" if table == "memories" else "summary"
    out: dict[int, str] = {}
    for chunk in chunks(list(ids)):
        for r in conn.execute(
            f"SELECT id, {column} FROM {quote_identifier(table)} WHERE id IN ({ids_clause(chunk)})",
            chunk,
        ):
            out[int(r[0])] = str(r[1])
    return out


def set_embeddings(conn: Conn, table: str, rows: Sequence[tuple[int, bytes]]) -> int:
    """Write vectors to rows that still have none (a row re-embedded meanwhile is left)."""
    changed = 0
    for row_id, blob in rows:
        changed += conn.execute(
            f"UPDATE {quote_identifier(table)} SET embedding = ? "
            "WHERE id = ? AND embedding IS NULL",
            (embedding_param(conn, blob), row_id),
        ).rowcount
    return changed
