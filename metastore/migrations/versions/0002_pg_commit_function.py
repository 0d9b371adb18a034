"""Postgres only: the plpgsql sequencer ``floe_commit_object`` (one round trip per object).

A port of ``metastore.sequencer.plan_commit``: insert the object row, lock the
touched partition rows with an explicit ``SELECT ... ORDER BY topic_id, partition
FOR UPDATE`` (Postgres locks rows after sorting them, so all committers lock in
the same order and cannot deadlock; a set-based ``UPDATE ... FROM unnest(...)``
locks in plan order and does deadlock), check producers, assign offsets, then
insert the batch rows and update the partitions set-based. Returns one row of
arrays: per-batch error code, base offset and log start offset.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SIGNATURE = (
    "floe_commit_object(text, bigint, text, bigint, uuid[], integer[], bigint[], bigint[], "
    "integer[], integer[], bigint[], bigint[], bigint[], smallint[], integer[], boolean[])"
)

FUNCTION = r"""
CREATE OR REPLACE FUNCTION floe_commit_object(
    p_key text, p_size bigint, p_agent_id text, p_now bigint,
    p_topic_ids uuid[], p_partitions integer[], p_byte_pos bigint[], p_byte_len bigint[],
    p_record_counts integer[], p_last_offset_deltas integer[], p_base_timestamps bigint[],
    p_max_timestamps bigint[], p_producer_ids bigint[], p_producer_epochs smallint[],
    p_base_sequences integer[], p_is_transactional boolean[]
) RETURNS TABLE (object_id bigint, errors smallint[], base_offsets bigint[],
                 log_start_offsets bigint[])
LANGUAGE plpgsql AS $fn$
DECLARE
    n integer := coalesce(cardinality(p_topic_ids), 0);
    m integer;
    v_object_id bigint;
    t_topic uuid[];
    t_part integer[];
    t_lso bigint[];
    t_hwm bigint[];
    t_bytes bigint[];
    t_changed boolean[];
    b_idx integer[];
    r_err smallint[] := array_fill(0::smallint, ARRAY[n]);
    r_base bigint[] := array_fill((-1)::bigint, ARRAY[n]);
    r_lso bigint[] := array_fill((-1)::bigint, ARRAY[n]);
    r_ok boolean[] := array_fill(false, ARRAY[n]);
    any_ok boolean := false;
    any_producer boolean := false;
    i integer;
    j integer;
    v_pid bigint;
    v_epoch smallint;
    v_seq bigint;
    v_last_seq bigint;
    has_state boolean;
    cur_epoch smallint;
    cur_last_seq bigint;
    dup_offset bigint;
    pb record;
BEGIN
    IF cardinality(p_partitions) IS DISTINCT FROM cardinality(p_topic_ids) THEN
        RAISE EXCEPTION 'floe_commit_object: argument arrays differ in length';
    END IF;

    -- 1. Lock the touched partitions in sorted order.
    SELECT array_agg(l.topic_id ORDER BY l.topic_id, l.partition),
           array_agg(l.partition ORDER BY l.topic_id, l.partition),
           array_agg(l.log_start_offset ORDER BY l.topic_id, l.partition),
           array_agg(l.high_watermark ORDER BY l.topic_id, l.partition)
      INTO t_topic, t_part, t_lso, t_hwm
      FROM (SELECT p.topic_id, p.partition, p.log_start_offset, p.high_watermark
              FROM partitions p
             WHERE (p.topic_id, p.partition) IN (
                    SELECT DISTINCT u.topic_id, u.partition
                      FROM unnest(p_topic_ids, p_partitions) AS u(topic_id, partition))
             ORDER BY p.topic_id, p.partition
               FOR UPDATE OF p) l;
    m := coalesce(cardinality(t_topic), 0);
    t_bytes := array_fill(0::bigint, ARRAY[m]);
    t_changed := array_fill(false, ARRAY[m]);

    -- 2. Map every batch to its locked partition (NULL: unknown or deleted).
    SELECT array_agg(t.idx::integer ORDER BY b.ord) INTO b_idx
      FROM unnest(p_topic_ids, p_partitions) WITH ORDINALITY AS b(topic_id, partition, ord)
      LEFT JOIN unnest(t_topic, t_part) WITH ORDINALITY AS t(topic_id, partition, idx)
        ON t.topic_id = b.topic_id AND t.partition = b.partition;

    -- 3. Decide each batch in order (metastore.sequencer.plan_commit).
    FOR i IN 1..n LOOP
        j := b_idx[i];
        IF j IS NULL THEN
            r_err[i] := 3;  -- UNKNOWN_TOPIC_OR_PARTITION
            CONTINUE;
        END IF;
        r_lso[i] := t_lso[j];
        v_pid := p_producer_ids[i];
        IF v_pid >= 0 THEN
            v_epoch := p_producer_epochs[i];
            v_seq := p_base_sequences[i];
            v_last_seq := v_seq + p_last_offset_deltas[i];
            IF v_last_seq > 2147483647 THEN
                v_last_seq := v_last_seq - 2147483648;
            END IF;
            has_state := false;
            dup_offset := NULL;
            FOR pb IN
                SELECT s.producer_epoch, s.base_sequence, s.last_sequence, s.base_offset
                  FROM producer_batches s
                 WHERE s.topic_id = t_topic[j] AND s.partition = t_part[j]
                   AND s.producer_id = v_pid
                 ORDER BY s.base_offset DESC
                 LIMIT 5
            LOOP
                IF NOT has_state THEN
                    has_state := true;
                    cur_epoch := pb.producer_epoch;
                    cur_last_seq := pb.last_sequence;
                END IF;
                IF pb.producer_epoch = v_epoch AND pb.base_sequence = v_seq
                   AND pb.last_sequence = v_last_seq THEN
                    dup_offset := pb.base_offset;
                    EXIT;
                END IF;
            END LOOP;
            IF dup_offset IS NOT NULL THEN
                r_base[i] := dup_offset;  -- duplicate: NONE with the original offset
                CONTINUE;
            END IF;
            IF has_state THEN
                IF v_epoch < cur_epoch THEN
                    r_err[i] := 47;  -- INVALID_PRODUCER_EPOCH
                    CONTINUE;
                ELSIF v_epoch > cur_epoch THEN
                    IF v_seq <> 0 THEN
                        r_err[i] := 45;  -- OUT_OF_ORDER_SEQUENCE_NUMBER
                        CONTINUE;
                    END IF;
                    DELETE FROM producer_batches s
                     WHERE s.topic_id = t_topic[j] AND s.partition = t_part[j]
                       AND s.producer_id = v_pid;
                ELSIF NOT (v_seq = cur_last_seq + 1 OR (v_seq = 0 AND cur_last_seq = 2147483647)) THEN
                    r_err[i] := 45;  -- OUT_OF_ORDER_SEQUENCE_NUMBER
                    CONTINUE;
                END IF;
            END IF;
            INSERT INTO producer_batches (topic_id, partition, producer_id, base_offset,
                                          producer_epoch, base_sequence, last_sequence,
                                          last_offset, append_time)
            VALUES (t_topic[j], t_part[j], v_pid, t_hwm[j], v_epoch, v_seq, v_last_seq,
                    t_hwm[j] + p_last_offset_deltas[i], p_now);
            any_producer := true;
        END IF;
        r_base[i] := t_hwm[j];
        r_ok[i] := true;
        any_ok := true;
        t_hwm[j] := t_hwm[j] + p_last_offset_deltas[i] + 1;
        t_bytes[j] := t_bytes[j] + p_byte_len[i];
        t_changed[j] := true;
    END LOOP;

    -- 4. Keep only the last 5 batches per producer and partition.
    IF any_producer THEN
        DELETE FROM producer_batches d
         USING (SELECT s.topic_id, s.partition, s.producer_id, s.base_offset,
                       row_number() OVER (PARTITION BY s.topic_id, s.partition, s.producer_id
                                          ORDER BY s.base_offset DESC) AS rn
                  FROM producer_batches s
                  JOIN (SELECT DISTINCT u.topic_id, u.partition, u.producer_id
                          FROM unnest(p_topic_ids, p_partitions, p_producer_ids, r_ok)
                               AS u(topic_id, partition, producer_id, ok)
                         WHERE u.ok AND u.producer_id >= 0) k
                    ON s.topic_id = k.topic_id AND s.partition = k.partition
                   AND s.producer_id = k.producer_id) old
         WHERE old.rn > 5 AND d.topic_id = old.topic_id AND d.partition = old.partition
           AND d.producer_id = old.producer_id AND d.base_offset = old.base_offset;
    END IF;

    -- 5. The object: live when it holds a stored batch, else straight to 'deleting'.
    INSERT INTO objects (key, agent_id, size, state, created_at, deleting_since)
    VALUES (p_key, p_agent_id, p_size, CASE WHEN any_ok THEN 'live' ELSE 'deleting' END,
            p_now, CASE WHEN any_ok THEN NULL ELSE p_now END)
    RETURNING id INTO v_object_id;

    -- 6. Batch rows and partition updates, set-based (rows are already locked).
    IF any_ok THEN
        INSERT INTO batches (topic_id, partition, last_offset, base_offset, object_id, byte_pos,
                             byte_len, record_count, base_timestamp, max_timestamp, append_time,
                             producer_id, producer_epoch, base_sequence, is_transactional)
        SELECT u.topic_id, u.partition, u.base + u.delta, u.base, v_object_id, u.byte_pos,
               u.byte_len, u.record_count, u.base_ts, u.max_ts, p_now,
               u.pid, u.epoch, u.seq, u.txn
          FROM unnest(p_topic_ids, p_partitions, r_base, p_last_offset_deltas, p_byte_pos,
                      p_byte_len, p_record_counts, p_base_timestamps, p_max_timestamps,
                      p_producer_ids, p_producer_epochs, p_base_sequences, p_is_transactional,
                      r_ok)
               AS u(topic_id, partition, base, delta, byte_pos, byte_len, record_count,
                    base_ts, max_ts, pid, epoch, seq, txn, ok)
         WHERE u.ok;

        UPDATE partitions p
           SET high_watermark = t.hwm, bytes = p.bytes + t.added
          FROM unnest(t_topic, t_part, t_hwm, t_bytes, t_changed)
               AS t(topic_id, partition, hwm, added, changed)
         WHERE t.changed AND p.topic_id = t.topic_id AND p.partition = t.partition;
    END IF;

    RETURN QUERY SELECT v_object_id, r_err, r_base, r_lso;
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(FUNCTION))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(f"DROP FUNCTION IF EXISTS {SIGNATURE}"))
