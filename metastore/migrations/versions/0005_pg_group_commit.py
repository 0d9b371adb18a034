"""Postgres only: the group-commit sequencer (many objects, one transaction).

A group of objects (one agent's ready segments, or the concurrent commits of
many agents through ``floe metastore serve``) is sequenced in one transaction,
in the order given, with exactly the per-batch outcome of committing the
objects one by one (``metastore.sequencer.plan_commit``; the contract and
parity tests hold all implementations to it). Each touched partition row is
locked ONCE per group, in sorted order (an explicit ``ORDER BY topic_id,
partition FOR UPDATE``: every committer locks in the same order, so groups
cannot deadlock), and updated once.

``floe_group_begin`` is the fast path, the normal case: every object key is
new, every partition exists, and every idempotent-producer batch is the next
of its sequence (same epoch, sequence = last + 1, so none can be a retry or
fenced). Then every batch is accepted, and its offset is its partition's high
watermark plus ``rel``, the sizes of the batches before it in the group,
which the caller computed. The function inserts the object rows, locks and
updates the partition rows, writes the producer state, and returns the high
watermarks before the group; the caller then COPYs the batch rows (binary
COPY is ~40% cheaper for the server than ``INSERT ... SELECT FROM unnest``)
and commits. If any condition fails it returns ``fast = false`` and the caller
rolls back and calls:

``floe_commit_objects``, the general path: an object already committed (or
repeated in the group) gets a NULL id and its batches are skipped; batches of
unknown partitions get UNKNOWN_TOPIC_OR_PARTITION; producer batches are
decided key by key (a port of ``_check_producer``) against the stored state
loaded in one query; offsets are assigned set-based from the accepted
batches; rows are written set-based; per-batch errors and offsets come back.

Arrays: per object its key, size, agent id and ``p_starts`` (1-based index of
its first batch; the batch arrays hold the objects' batches one after the
other) or ``p_empty``; the distinct partitions ``p_t_topic``/``p_t_part`` (in
Postgres' order) with their totals in offsets and bytes; per batch ``p_idx``
(1-based partition index) and its fields; sparse arrays for the batches with
a producer id (``p_pb_index``: batch index). Migration 0002's
``floe_commit_object`` stays for agents of older versions.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SIGNATURES = (
    "floe_group_begin(bigint, text[], bigint[], text[], boolean[], uuid[], integer[], bigint[], "
    "bigint[], integer[], integer[], bigint[], integer[], bigint[], smallint[], integer[])",
    "floe_commit_objects(bigint, text[], bigint[], text[], integer[], uuid[], integer[], "
    "integer[], bigint[], bigint[], integer[], integer[], bigint[], bigint[], integer[], bigint[], "
    "smallint[], integer[], boolean[])",
)

# The fast path: objects, locks, checks and partition/producer updates; the
# caller then COPYs the batch rows in the same transaction and commits.
GROUP_BEGIN = r"""
CREATE OR REPLACE FUNCTION floe_group_begin(
    p_now bigint,
    p_keys text[], p_sizes bigint[], p_agent_ids text[], p_empty boolean[],
    p_t_topic uuid[], p_t_part integer[], p_t_size bigint[], p_t_bytes bigint[],
    p_pb_index integer[], p_pb_idx integer[], p_pb_rel bigint[], p_pb_delta integer[],
    p_producer_ids bigint[], p_producer_epochs smallint[], p_base_sequences integer[]
) RETURNS TABLE (fast boolean, object_ids bigint[], high_watermarks bigint[],
                 log_start_offsets bigint[])
LANGUAGE plpgsql AS $fn$
DECLARE
    g integer := coalesce(cardinality(p_keys), 0);
    m integer := coalesce(cardinality(p_t_topic), 0);
    k integer := coalesce(cardinality(p_pb_index), 0);
    o_ids bigint[];
    f_ord bigint[]; f_lso bigint[]; f_hwm bigint[];
    in_order boolean := true;
    s_x integer[]; s_pid bigint[]; s_epoch smallint[]; s_lseq integer[]; s_off bigint[];
    s_rd integer[];
BEGIN
    IF coalesce(cardinality(p_sizes), 0) <> g OR coalesce(cardinality(p_agent_ids), 0) <> g
       OR coalesce(cardinality(p_empty), 0) <> g
       OR coalesce(cardinality(p_t_part), 0) <> m OR coalesce(cardinality(p_t_size), 0) <> m
       OR coalesce(cardinality(p_t_bytes), 0) <> m
       OR coalesce(cardinality(p_pb_idx), 0) <> k OR coalesce(cardinality(p_pb_rel), 0) <> k
       OR coalesce(cardinality(p_pb_delta), 0) <> k OR coalesce(cardinality(p_producer_ids), 0) <> k
       OR coalesce(cardinality(p_producer_epochs), 0) <> k
       OR coalesce(cardinality(p_base_sequences), 0) <> k THEN
        RAISE EXCEPTION 'floe_group_begin: argument arrays differ in length';
    END IF;

    -- 1. Object rows: every key must be new.
    WITH ins AS (
        INSERT INTO objects (key, agent_id, size, state, created_at, deleting_since)
        SELECT u.key, u.agent_id, u.size, CASE WHEN u.empty THEN 'deleting' ELSE 'live' END,
               p_now, CASE WHEN u.empty THEN p_now END
          FROM unnest(p_keys, p_agent_ids, p_sizes, p_empty) WITH ORDINALITY
               AS u(key, agent_id, size, empty, ord)
         ORDER BY u.key, u.ord  -- concurrent groups take key locks in one order
        ON CONFLICT (key) DO NOTHING
        RETURNING id, key
    )
    SELECT array_agg(x.id ORDER BY u.ord) INTO o_ids
      FROM unnest(p_keys) WITH ORDINALITY AS u(key, ord)
      LEFT JOIN ins x ON x.key = u.key
                     AND u.ord = (SELECT min(v.ord) FROM unnest(p_keys) WITH ORDINALITY
                                  AS v(key, ord) WHERE v.key = u.key);
    IF g > 0 AND array_position(o_ids, NULL) IS NOT NULL THEN
        RETURN QUERY SELECT false, o_ids, NULL::bigint[], NULL::bigint[];
        RETURN;
    END IF;

    -- 2. Lock the touched partitions once, in sorted order; all must exist.
    SELECT array_agg(l.ord ORDER BY l.ord), array_agg(l.lso ORDER BY l.ord),
           array_agg(l.hwm ORDER BY l.ord)
      INTO f_ord, f_lso, f_hwm
      FROM (SELECT u.ord, p.log_start_offset AS lso, p.high_watermark AS hwm
              FROM unnest(p_t_topic, p_t_part) WITH ORDINALITY AS u(topic_id, partition, ord)
              JOIN partitions p ON p.topic_id = u.topic_id AND p.partition = u.partition
             ORDER BY p.topic_id, p.partition
               FOR UPDATE OF p) l;
    IF coalesce(cardinality(f_ord), 0) <> m THEN
        RETURN QUERY SELECT false, o_ids, NULL::bigint[], NULL::bigint[];
        RETURN;
    END IF;

    -- 3. Idempotent producers: each batch must be the next of its sequence (same
    --    epoch, sequence = last + 1), so none can be a retry or fenced.
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
            RETURN QUERY SELECT false, o_ids, NULL::bigint[], NULL::bigint[];
            RETURN;
        END IF;
    END IF;

    -- 4. Every batch is accepted at its partition's high watermark + its offset in
    --    the group: each partition row is updated once (the caller COPYs the rows).
    UPDATE partitions p
       SET high_watermark = p.high_watermark + u.size, bytes = p.bytes + u.nbytes
      FROM unnest(p_t_topic, p_t_part, p_t_size, p_t_bytes) AS u(topic_id, partition, size, nbytes)
     WHERE p.topic_id = u.topic_id AND p.partition = u.partition AND u.size > 0;

    IF k > 0 THEN
        -- Producer state: the last 5 of (stored, then this group's) per key.
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

    RETURN QUERY SELECT true, o_ids, f_hwm, f_lso;
END
$fn$
"""

# The general path (any outcome), used when the fast path declines.
COMMIT_OBJECTS = r"""
CREATE OR REPLACE FUNCTION floe_commit_objects(
    p_now bigint,
    p_keys text[], p_sizes bigint[], p_agent_ids text[], p_starts integer[],
    p_t_topic uuid[], p_t_part integer[],
    p_idx integer[], p_byte_pos bigint[], p_byte_len bigint[],
    p_record_counts integer[], p_deltas integer[], p_base_ts bigint[], p_max_ts bigint[],
    p_pb_index integer[], p_producer_ids bigint[], p_producer_epochs smallint[],
    p_base_sequences integer[], p_is_transactional boolean[]
) RETURNS TABLE (object_ids bigint[], high_watermarks bigint[], log_start_offsets bigint[],
                 errors smallint[], base_offsets bigint[])
LANGUAGE plpgsql AS $fn$
DECLARE
    g integer := coalesce(cardinality(p_keys), 0);
    m integer := coalesce(cardinality(p_t_topic), 0);
    n integer := coalesce(cardinality(p_idx), 0);
    k integer := coalesce(cardinality(p_pb_index), 0);
    o_ids bigint[];
    f_ord bigint[]; f_lso bigint[]; f_hwm bigint[];
    t_hwm bigint[]; t_lso bigint[];
    all_known boolean;
    -- stored producer state of the touched keys (partition index, producer id),
    -- sorted by key then base offset; s_rd: rank from the newest (1 = latest)
    s_x integer[]; s_pid bigint[]; s_epoch smallint[]; s_bseq integer[]; s_lseq integer[];
    s_off bigint[]; s_rd integer[];
    sn integer := 0; si integer := 1;
    -- slow path
    b_obj integer[];
    b_idx integer[];
    r_err smallint[];
    r_base bigint[];
    r_lso bigint[];
    r_dup bigint[];
    r_dup_bi integer[];
    r_ok boolean[];
    q_bi integer[]; q_x integer[]; q_pid bigint[]; q_epoch smallint[]; q_seq integer[];
    q_lseq integer[]; q integer;
    w_src integer[]; w_epoch smallint[]; w_bseq integer[]; w_lseq integer[]; wn integer;
    del_i integer[] := '{}'; nd integer := 0;
    ins_bi integer[] := '{}'; ni integer := 0;
    i integer; e integer;
    cur_epoch smallint; cur_lseq bigint; dup integer; bi integer;
    new_key boolean;
    acc boolean;
BEGIN
    IF coalesce(cardinality(p_sizes), 0) <> g OR coalesce(cardinality(p_agent_ids), 0) <> g
       OR coalesce(cardinality(p_starts), 0) <> g
       OR coalesce(cardinality(p_t_part), 0) <> m
       OR coalesce(cardinality(p_byte_pos), 0) <> n
       OR coalesce(cardinality(p_byte_len), 0) <> n OR coalesce(cardinality(p_record_counts), 0) <> n
       OR coalesce(cardinality(p_deltas), 0) <> n OR coalesce(cardinality(p_base_ts), 0) <> n
       OR coalesce(cardinality(p_max_ts), 0) <> n
       OR coalesce(cardinality(p_producer_ids), 0) <> k OR coalesce(cardinality(p_producer_epochs), 0) <> k
       OR coalesce(cardinality(p_base_sequences), 0) <> k
       OR coalesce(cardinality(p_is_transactional), 0) <> k THEN
        RAISE EXCEPTION 'floe_commit_objects: argument arrays differ in length';
    END IF;

    -- 1. Object rows; a key already registered (or repeated here) gets no row.
    WITH ins AS (
        INSERT INTO objects (key, agent_id, size, state, created_at)
        SELECT u.key, u.agent_id, u.size, 'live', p_now
          FROM unnest(p_keys, p_agent_ids, p_sizes) WITH ORDINALITY AS u(key, agent_id, size, ord)
         ORDER BY u.key, u.ord  -- concurrent groups take key locks in one order
        ON CONFLICT (key) DO NOTHING
        RETURNING id, key
    )
    SELECT array_agg(x.id ORDER BY u.ord) INTO o_ids
      FROM unnest(p_keys) WITH ORDINALITY AS u(key, ord)
      LEFT JOIN ins x ON x.key = u.key
                     AND u.ord = (SELECT min(v.ord) FROM unnest(p_keys) WITH ORDINALITY
                                  AS v(key, ord) WHERE v.key = u.key);

    -- 2. Lock the touched partitions once, in sorted order.
    SELECT array_agg(l.ord ORDER BY l.ord), array_agg(l.lso ORDER BY l.ord),
           array_agg(l.hwm ORDER BY l.ord)
      INTO f_ord, f_lso, f_hwm
      FROM (SELECT u.ord, p.log_start_offset AS lso, p.high_watermark AS hwm
              FROM unnest(p_t_topic, p_t_part) WITH ORDINALITY AS u(topic_id, partition, ord)
              JOIN partitions p ON p.topic_id = u.topic_id AND p.partition = u.partition
             ORDER BY p.topic_id, p.partition
               FOR UPDATE OF p) l;
    all_known := coalesce(cardinality(f_ord), 0) = m;
    IF all_known THEN
        t_hwm := coalesce(f_hwm, '{}'); t_lso := coalesce(f_lso, '{}');
    ELSE  -- unknown or deleted partitions stay NULL
        t_hwm := array_fill(NULL::bigint, ARRAY[m]); t_lso := array_fill(NULL::bigint, ARRAY[m]);
        FOR i IN 1..coalesce(cardinality(f_ord), 0) LOOP
            t_hwm[f_ord[i]] := f_hwm[i]; t_lso[f_ord[i]] := f_lso[i];
        END LOOP;
    END IF;

    -- 3. Stored state of the touched idempotent producers (one index probe each).
    IF k > 0 THEN
        SELECT array_agg(x.idx ORDER BY x.idx, x.pid, x.off), array_agg(x.pid ORDER BY x.idx, x.pid, x.off),
               array_agg(x.epoch ORDER BY x.idx, x.pid, x.off), array_agg(x.bseq ORDER BY x.idx, x.pid, x.off),
               array_agg(x.lseq ORDER BY x.idx, x.pid, x.off), array_agg(x.off ORDER BY x.idx, x.pid, x.off),
               array_agg(x.rd ORDER BY x.idx, x.pid, x.off)
          INTO s_x, s_pid, s_epoch, s_bseq, s_lseq, s_off, s_rd
          FROM (SELECT kk.idx, kk.pid, s.producer_epoch AS epoch, s.base_sequence AS bseq,
                       s.last_sequence AS lseq, s.base_offset AS off,
                       row_number() OVER (PARTITION BY kk.idx, kk.pid ORDER BY s.base_offset DESC)::integer AS rd
                  FROM (SELECT DISTINCT p_idx[u.bi] AS idx, u.pid
                          FROM unnest(p_pb_index, p_producer_ids) AS u(bi, pid)
                         WHERE u.pid >= 0 AND t_hwm[p_idx[u.bi]] IS NOT NULL) kk
                  JOIN producer_batches s
                    ON s.topic_id = p_t_topic[kk.idx] AND s.partition = p_t_part[kk.idx]
                   AND s.producer_id = kk.pid) x;
        sn := coalesce(cardinality(s_x), 0);
    END IF;

    -- 4. Decide (producers key by key), assign offsets, write.
    SELECT array_agg(width_bucket(u.ord::integer, p_starts) ORDER BY u.ord) INTO b_obj
      FROM unnest(p_idx) WITH ORDINALITY AS u(idx, ord);
    SELECT array_agg(CASE WHEN o_ids[b_obj[u.ord]] IS NOT NULL AND t_hwm[u.idx] IS NOT NULL
                          THEN u.idx END ORDER BY u.ord) INTO b_idx
      FROM unnest(p_idx) WITH ORDINALITY AS u(idx, ord);
    r_err := array_fill(0::smallint, ARRAY[n]);
    r_dup := array_fill(NULL::bigint, ARRAY[n]);
    r_dup_bi := array_fill(NULL::integer, ARRAY[n]);

    IF k > 0 THEN
        SELECT array_agg(x.bi ORDER BY x.idx, x.pid, x.bi), array_agg(x.idx ORDER BY x.idx, x.pid, x.bi),
               array_agg(x.pid ORDER BY x.idx, x.pid, x.bi), array_agg(x.epoch ORDER BY x.idx, x.pid, x.bi),
               array_agg(x.seq ORDER BY x.idx, x.pid, x.bi), array_agg(x.lseq ORDER BY x.idx, x.pid, x.bi)
          INTO q_bi, q_x, q_pid, q_epoch, q_seq, q_lseq
          FROM (SELECT s.bi, b_idx[s.bi] AS idx, s.pid, s.epoch, s.seq,
                       ((s.seq::bigint + p_deltas[s.bi]) % 2147483648)::integer AS lseq
                  FROM unnest(p_pb_index, p_producer_ids, p_producer_epochs, p_base_sequences)
                       AS s(bi, pid, epoch, seq)
                 WHERE s.pid >= 0 AND b_idx[s.bi] IS NOT NULL) x;
        q := coalesce(cardinality(q_bi), 0);
        IF q > 0 THEN
            FOR i IN 1..q LOOP
                new_key := i = 1 OR q_x[i] <> q_x[i - 1]
                           OR q_pid[i] <> q_pid[i - 1];
                IF new_key THEN
                    -- this key's stored rows: the run of s_* equal to it
                    WHILE si <= sn AND (s_x[si], s_pid[si]) < (q_x[i], q_pid[i]) LOOP
                        si := si + 1;
                    END LOOP;
                    w_src := '{}'; w_epoch := '{}'; w_bseq := '{}'; w_lseq := '{}'; wn := 0;
                    WHILE si <= sn AND s_x[si] = q_x[i] AND s_pid[si] = q_pid[i] LOOP
                        wn := wn + 1;
                        w_src[wn] := si; w_epoch[wn] := s_epoch[si];
                        w_bseq[wn] := s_bseq[si]; w_lseq[wn] := s_lseq[si];
                        si := si + 1;
                    END LOOP;
                    IF wn > 5 THEN  -- keep the last 5, as the stored state does
                        FOR e IN 1..wn - 5 LOOP
                            nd := nd + 1; del_i[nd] := w_src[e];
                        END LOOP;
                        w_src := w_src[wn - 4:wn]; w_epoch := w_epoch[wn - 4:wn];
                        w_bseq := w_bseq[wn - 4:wn]; w_lseq := w_lseq[wn - 4:wn];
                        wn := 5;
                    END IF;
                END IF;
                bi := q_bi[i];
                dup := NULL;
                acc := true;
                IF wn > 0 THEN
                    cur_epoch := w_epoch[wn];
                    cur_lseq := w_lseq[wn];
                    IF q_epoch[i] = cur_epoch THEN
                        FOR e IN 1..wn LOOP
                            IF w_bseq[e] = q_seq[i] AND w_lseq[e] = q_lseq[i] THEN
                                dup := e;
                                EXIT;
                            END IF;
                        END LOOP;
                        IF dup IS NOT NULL THEN  -- a retry: NONE with the original offset
                            acc := false;
                            IF w_src[dup] > 0 THEN
                                r_dup[bi] := s_off[w_src[dup]];
                            ELSE
                                r_dup_bi[bi] := -w_src[dup];
                            END IF;
                        ELSIF NOT (q_seq[i] = cur_lseq + 1 OR (q_seq[i] = 0 AND cur_lseq = 2147483647)) THEN
                            acc := false;
                            r_err[bi] := 45;  -- OUT_OF_ORDER_SEQUENCE_NUMBER
                        END IF;
                    ELSIF q_epoch[i] < cur_epoch THEN
                        acc := false;
                        r_err[bi] := 47;  -- INVALID_PRODUCER_EPOCH
                    ELSIF q_seq[i] <> 0 THEN
                        acc := false;
                        r_err[bi] := 45;
                    ELSE
                        -- epoch bump: the old epoch's state is gone
                        FOR e IN 1..wn LOOP
                            IF w_src[e] > 0 THEN
                                nd := nd + 1; del_i[nd] := w_src[e];
                            END IF;
                        END LOOP;
                        w_src := '{}'; w_epoch := '{}'; w_bseq := '{}'; w_lseq := '{}'; wn := 0;
                    END IF;
                END IF;
                IF acc THEN  -- append, keep the last 5
                    wn := wn + 1;
                    w_src[wn] := -bi; w_epoch[wn] := q_epoch[i]; w_bseq[wn] := q_seq[i];
                    w_lseq[wn] := q_lseq[i];
                    IF wn > 5 THEN
                        IF w_src[1] > 0 THEN
                            nd := nd + 1; del_i[nd] := w_src[1];
                        END IF;
                        w_src := w_src[2:6]; w_epoch := w_epoch[2:6]; w_bseq := w_bseq[2:6];
                        w_lseq := w_lseq[2:6];
                        wn := 5;
                    END IF;
                END IF;
                -- end of this key: the accepted batches left in its state are stored
                IF i = q OR q_x[i + 1] <> q_x[i] OR q_pid[i + 1] <> q_pid[i] THEN
                    FOR e IN 1..wn LOOP
                        IF w_src[e] < 0 THEN
                            ni := ni + 1; ins_bi[ni] := -w_src[e];
                        END IF;
                    END LOOP;
                END IF;
            END LOOP;
        END IF;
    END IF;

    -- Offsets, set-based: high watermark + accepted sizes before, per partition.
    SELECT array_agg(x.ok ORDER BY x.ord),
           array_agg(CASE WHEN x.ok THEN x.hwm0 + x.cum - x.sz
                          WHEN x.dup IS NOT NULL THEN x.dup ELSE -1 END ORDER BY x.ord),
           array_agg(CASE WHEN x.idx IS NULL THEN -1 ELSE x.lso END ORDER BY x.ord),
           array_agg(CASE WHEN x.known AND x.idx IS NULL THEN 3::smallint ELSE x.err END ORDER BY x.ord)
      INTO r_ok, r_base, r_lso, r_err
      FROM (SELECT b.ord, b.idx, b.known, b.err, b.dup, b.ok, b.sz,
                   t_hwm[b.idx] AS hwm0, t_lso[b.idx] AS lso,
                   sum(CASE WHEN b.ok THEN b.sz ELSE 0 END)
                       OVER (PARTITION BY b.idx ORDER BY b.ord ROWS UNBOUNDED PRECEDING) AS cum
              FROM (SELECT u.ord, u.idx, o_ids[u.obj] IS NOT NULL AS known, u.err, u.dup,
                           u.idx IS NOT NULL AND u.err = 0 AND u.dup IS NULL AND u.dupbi IS NULL AS ok,
                           u.delta::bigint + 1 AS sz
                      FROM unnest(b_idx, b_obj, r_err, r_dup, r_dup_bi, p_deltas)
                           WITH ORDINALITY AS u(idx, obj, err, dup, dupbi, delta, ord)) b) x;

    -- Duplicates of batches accepted earlier in this group: the original's offset.
    FOR i IN SELECT u.ord FROM unnest(r_dup_bi) WITH ORDINALITY AS u(bi, ord) WHERE u.bi IS NOT NULL LOOP
        r_base[i] := r_base[r_dup_bi[i]];
    END LOOP;

    INSERT INTO batches (topic_id, partition, last_offset, base_offset, object_id, byte_pos,
                         byte_len, record_count, base_timestamp, max_timestamp, append_time,
                         producer_id, producer_epoch, base_sequence, is_transactional)
    SELECT p_t_topic[u.idx], p_t_part[u.idx], u.base + u.delta, u.base, o_ids[u.obj], u.byte_pos,
           u.byte_len, u.record_count, u.base_ts, u.max_ts, p_now,
           coalesce(s.pid, -1), coalesce(s.epoch, -1), coalesce(s.seq, -1), coalesce(s.txn, false)
      FROM unnest(b_idx, r_base, p_deltas, p_byte_pos, p_byte_len, p_record_counts, p_base_ts,
                  p_max_ts, b_obj, r_ok) WITH ORDINALITY
           AS u(idx, base, delta, byte_pos, byte_len, record_count, base_ts, max_ts, obj, ok, ord)
      LEFT JOIN unnest(p_pb_index, p_producer_ids, p_producer_epochs, p_base_sequences,
                       p_is_transactional) AS s(bi, pid, epoch, seq, txn)
        ON s.bi = u.ord
     WHERE u.ok;

    UPDATE partitions p
       SET high_watermark = t.hwm, bytes = p.bytes + t.added
      FROM (SELECT u.idx, max(u.base + u.delta + 1) AS hwm, sum(u.byte_len) AS added
              FROM unnest(b_idx, r_base, p_deltas, p_byte_len, r_ok) AS u(idx, base, delta, byte_len, ok)
             WHERE u.ok
             GROUP BY u.idx) t
     WHERE p.topic_id = p_t_topic[t.idx] AND p.partition = p_t_part[t.idx];

    IF nd > 0 THEN
        DELETE FROM producer_batches s
         USING unnest(del_i) AS d(si)
         WHERE s.topic_id = p_t_topic[s_x[d.si]] AND s.partition = p_t_part[s_x[d.si]]
           AND s.producer_id = s_pid[d.si] AND s.base_offset = s_off[d.si];
    END IF;
    IF ni > 0 THEN
        INSERT INTO producer_batches (topic_id, partition, producer_id, base_offset,
                                      producer_epoch, base_sequence, last_sequence,
                                      last_offset, append_time)
        SELECT p_t_topic[b_idx[x.bi]], p_t_part[b_idx[x.bi]], s.pid, r_base[x.bi], s.epoch, s.seq,
               ((s.seq::bigint + p_deltas[x.bi]) % 2147483648)::integer,
               r_base[x.bi] + p_deltas[x.bi], p_now
          FROM unnest(ins_bi) AS x(bi)
          JOIN unnest(p_pb_index, p_producer_ids, p_producer_epochs, p_base_sequences)
               AS s(bi, pid, epoch, seq) ON s.bi = x.bi;
    END IF;

    UPDATE objects o
       SET state = 'deleting', deleting_since = p_now
      FROM (SELECT u.id
              FROM unnest(o_ids) WITH ORDINALITY AS u(id, ord)
              LEFT JOIN (SELECT DISTINCT b.obj FROM unnest(b_obj, r_ok) AS b(obj, ok) WHERE b.ok) a
                ON a.obj = u.ord
             WHERE a.obj IS NULL AND u.id IS NOT NULL) d
     WHERE o.id = d.id;

    RETURN QUERY SELECT o_ids, t_hwm, t_lso, coalesce(r_err, '{}'), coalesce(r_base, '{}');
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(sa.text(GROUP_BEGIN))
        op.execute(sa.text(COMMIT_OBJECTS))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for signature in SIGNATURES:
            op.execute(sa.text(f"DROP FUNCTION IF EXISTS {signature}"))
