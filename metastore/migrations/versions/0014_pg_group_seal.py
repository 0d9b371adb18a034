"""Postgres only: the optimistic group commit's seal (issue 18).

Migration 0005's fast path locks the touched partition rows first and COPYs the
batch rows while holding them, so two groups touching the same partitions (at
width, every group touches nearly every partition) commit one after the other,
each holding the locks for its whole COPY. The sequencer process knows the
high watermarks its own groups will leave behind, so it can COPY a group's
rows at the offsets it expects *before* taking any partition lock (while the
previous group still holds them), and only then seal the group:

``floe_group_seal`` locks the partitions once, in sorted order, and checks
that every high watermark is exactly the one the caller expected (no other
writer moved it, the previous group committed as planned); then it applies
the same idempotent-producer check as ``floe_group_begin`` and updates the
partition and producer rows. Any mismatch returns ``fast = false``: the caller
rolls back (its COPYed rows go with the transaction) and commits the group
through the ordinary path. The check under the lock is what keeps offsets
contiguous; the caller's expectation only decides whether the work is kept.

Arguments as ``floe_group_begin``'s from ``p_t_topic`` on, with ``p_expected``
(the high watermark expected before the group, per partition) after
``p_t_part``. The object rows are inserted by the caller beforehand (one
``INSERT ... ON CONFLICT DO NOTHING``), so the COPY knows their ids.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

SIGNATURE = (
    "floe_group_seal(bigint, uuid[], integer[], bigint[], bigint[], bigint[], integer[], "
    "integer[], bigint[], integer[], bigint[], smallint[], integer[])"
)

GROUP_SEAL = r"""
CREATE OR REPLACE FUNCTION floe_group_seal(
    p_now bigint,
    p_t_topic uuid[], p_t_part integer[], p_expected bigint[], p_t_size bigint[], p_t_bytes bigint[],
    p_pb_index integer[], p_pb_idx integer[], p_pb_rel bigint[], p_pb_delta integer[],
    p_producer_ids bigint[], p_producer_epochs smallint[], p_base_sequences integer[]
) RETURNS TABLE (fast boolean, log_start_offsets bigint[])
LANGUAGE plpgsql AS $fn$
DECLARE
    m integer := coalesce(cardinality(p_t_topic), 0);
    k integer := coalesce(cardinality(p_pb_index), 0);
    f_ord bigint[]; f_lso bigint[]; f_hwm bigint[];
    in_order boolean := true;
    s_x integer[]; s_pid bigint[]; s_epoch smallint[]; s_lseq integer[]; s_off bigint[];
    s_rd integer[];
BEGIN
    IF coalesce(cardinality(p_t_part), 0) <> m OR coalesce(cardinality(p_expected), 0) <> m
       OR coalesce(cardinality(p_t_size), 0) <> m OR coalesce(cardinality(p_t_bytes), 0) <> m
       OR coalesce(cardinality(p_pb_idx), 0) <> k OR coalesce(cardinality(p_pb_rel), 0) <> k
       OR coalesce(cardinality(p_pb_delta), 0) <> k OR coalesce(cardinality(p_producer_ids), 0) <> k
       OR coalesce(cardinality(p_producer_epochs), 0) <> k
       OR coalesce(cardinality(p_base_sequences), 0) <> k THEN
        RAISE EXCEPTION 'floe_group_seal: argument arrays differ in length';
    END IF;

    -- 1. Lock the touched partitions once, in sorted order; all must exist and be
    --    exactly where the caller expected them.
    SELECT array_agg(l.ord ORDER BY l.ord), array_agg(l.lso ORDER BY l.ord),
           array_agg(l.hwm ORDER BY l.ord)
      INTO f_ord, f_lso, f_hwm
      FROM (SELECT u.ord, p.log_start_offset AS lso, p.high_watermark AS hwm
              FROM unnest(p_t_topic, p_t_part) WITH ORDINALITY AS u(topic_id, partition, ord)
              JOIN partitions p ON p.topic_id = u.topic_id AND p.partition = u.partition
             ORDER BY p.topic_id, p.partition
               FOR UPDATE OF p) l;
    IF coalesce(cardinality(f_ord), 0) <> m OR f_hwm IS DISTINCT FROM p_expected THEN
        RETURN QUERY SELECT false, NULL::bigint[];
        RETURN;
    END IF;

    -- 2. Idempotent producers: each batch must be the next of its sequence.
    IF k > 0 THEN
        SELECT array_agg(x.idx ORDER BY x.idx, x.pid, x.off), array_agg(x.pid ORDER BY x.idx, x.pid, x.off),
               array_agg(x.epoch ORDER BY x.idx, x.pid, x.off), array_agg(x.lseq ORDER BY x.idx, x.pid, x.off),
               array_agg(x.off ORDER BY x.idx, x.pid, x.off), array_agg(x.rd ORDER BY x.idx, x.pid, x.off)
          INTO s_x, s_pid, s_epoch, s_lseq, s_off, s_rd
          FROM (SELECT kk.idx, kk.pid, s.producer_epoch AS epoch, s.last_sequence AS lseq,
                       s.base_offset AS off,
                       row_number() OVER (PARTITION BY kk.idx, kk.pid ORDER BY s.base_offset DESC)::integer AS rd
                  FROM (SELECT DISTINCT u.idx, u.pid FROM unnest(p_pb_idx, p_producer_ids) AS u(idx, pid)) kk
                  JOIN producer_batches s
                    ON s.topic_id = p_t_topic[kk.idx] AND s.partition = p_t_part[kk.idx]
                   AND s.producer_id = kk.pid) x;
        SELECT coalesce(bool_and(CASE
                   WHEN x.prev_lseq IS NOT NULL THEN
                        x.epoch = x.prev_epoch AND (x.seq::bigint = x.prev_lseq + 1
                            OR (x.seq = 0 AND x.prev_lseq = 2147483647))
                   WHEN st.lseq IS NOT NULL THEN
                        x.epoch = st.epoch AND (x.seq::bigint = st.lseq::bigint + 1
                            OR (x.seq = 0 AND st.lseq = 2147483647))
                   ELSE true END), true)
          INTO in_order
          FROM (SELECT u.idx, u.pid, u.epoch, u.seq,
                       lag(u.epoch) OVER w AS prev_epoch,
                       (lag(u.seq::bigint + u.delta) OVER w) % 2147483648 AS prev_lseq
                  FROM unnest(p_pb_index, p_pb_idx, p_producer_ids, p_producer_epochs,
                              p_base_sequences, p_pb_delta) AS u(bi, idx, pid, epoch, seq, delta)
                WINDOW w AS (PARTITION BY u.idx, u.pid ORDER BY u.bi)) x
          LEFT JOIN (SELECT z.idx, z.pid, z.epoch, z.lseq
                       FROM unnest(s_x, s_pid, s_epoch, s_lseq, s_rd) AS z(idx, pid, epoch, lseq, rd)
                      WHERE z.rd = 1) st
            ON x.prev_lseq IS NULL AND st.idx = x.idx AND st.pid = x.pid;
        IF NOT in_order THEN
            RETURN QUERY SELECT false, NULL::bigint[];
            RETURN;
        END IF;
    END IF;

    -- 3. Every batch is accepted where the caller put it: each partition row is
    --    updated once, the producer state keeps the last 5 per key.
    UPDATE partitions p
       SET high_watermark = p.high_watermark + u.size, bytes = p.bytes + u.nbytes
      FROM unnest(p_t_topic, p_t_part, p_t_size, p_t_bytes) AS u(topic_id, partition, size, nbytes)
     WHERE p.topic_id = u.topic_id AND p.partition = u.partition AND u.size > 0;

    IF k > 0 THEN
        WITH pbs AS (
            SELECT u.idx, u.pid, u.epoch, u.seq, u.rel, u.delta,
                   row_number() OVER (PARTITION BY u.idx, u.pid ORDER BY u.bi DESC) AS rd,
                   count(*) OVER (PARTITION BY u.idx, u.pid) AS c
              FROM unnest(p_pb_index, p_pb_idx, p_producer_ids, p_producer_epochs,
                          p_base_sequences, p_pb_rel, p_pb_delta)
                   AS u(bi, idx, pid, epoch, seq, rel, delta)
        ), gone AS (
            DELETE FROM producer_batches d
             USING (SELECT DISTINCT z.idx, z.pid, z.off
                      FROM unnest(s_x, s_pid, s_off, s_rd) AS z(idx, pid, off, rd)
                      JOIN pbs ON pbs.idx = z.idx AND pbs.pid = z.pid AND pbs.rd = 1
                     WHERE z.rd + pbs.c > 5) old
             WHERE d.topic_id = p_t_topic[old.idx] AND d.partition = p_t_part[old.idx]
               AND d.producer_id = old.pid AND d.base_offset = old.off
        )
        INSERT INTO producer_batches (topic_id, partition, producer_id, base_offset,
                                      producer_epoch, base_sequence, last_sequence,
                                      last_offset, append_time)
        SELECT p_t_topic[x.idx], p_t_part[x.idx], x.pid, f_hwm[x.idx] + x.rel, x.epoch, x.seq,
               ((x.seq::bigint + x.delta) % 2147483648)::integer,
               f_hwm[x.idx] + x.rel + x.delta, p_now
          FROM pbs x
         WHERE x.rd <= 5;
    END IF;

    RETURN QUERY SELECT true, f_lso;
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(GROUP_SEAL))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(f"DROP FUNCTION IF EXISTS {SIGNATURE}"))
