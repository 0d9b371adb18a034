"""The agent's read side: a Fetch, step by step (the entry point is :func:`serve`).

A Fetch request, from the handler (:mod:`agent.handlers.fetch`), takes these
steps, each a module of this package, in this order:

1. :mod:`~agent.fetch.request` — which form the request is (sessionless, a new
   session, or a session's incremental request), the byte cap; :func:`serve`
   walks the following steps;
2. :mod:`~agent.fetch.resolve` — the request's topics -> one
   :class:`~agent.fetch.model.Want` per partition (topic ids, READ checked);
3. :mod:`~agent.fetch.session` — KIP-227: a new session holds the wants, an
   incremental request updates its session;
4. :mod:`~agent.fetch.poll` — the long-poll: one look, and another on each
   commit to a wanted partition, until ``min_bytes`` or ``max_wait_ms``;
5. :mod:`~agent.fetch.plan` — one look, which takes steps 6-8 and, between the
   lookups and the read, cuts read_committed answers at the last stable offset
   and applies Kafka's byte budgets;
6. :mod:`~agent.fetch.width` — partitions of a topic asked at width that are
   caught up, or at this agent's own tail, settled from one watermark query;
7. :mod:`~agent.fetch.lookup` — the rest from the metastore's batch index
   (briefly cached);
8. :mod:`~agent.fetch.read` — the chosen batches' bytes through the block cache,
   base offsets patched;
9. :mod:`~agent.fetch.answer` — the response entries, and what a session learns
   it told the client.

The state those steps share, one per agent: :mod:`~agent.fetch.reader`
(:class:`FetchReader`: lookup cache, block cache, Parquet rebuilds
(:mod:`~agent.fetch.parquet`), read leases (:mod:`~agent.fetch.leases`),
watermark views (:mod:`~agent.fetch.watermark_views`) and the tail index of this
agent's own commits (:mod:`~agent.fetch.tail_index`)), and the session cache.
The steps take the agent as a :class:`~agent.fetch.host.FetchHost` (an
interface), so nothing here imports the broker. Rows passed between steps:
:mod:`~agent.fetch.model`.
"""

from agent.fetch.request import serve

__all__ = ["serve"]
