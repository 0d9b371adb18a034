"""The agent's write side: a produce request, step by step, into one object for many requests.

A validated Produce (:mod:`agent.handlers.produce`) takes these steps, each a
module of this package, in this order:

1. :mod:`~agent.produce.budget` — its bytes are reserved (back-pressure);
2. :mod:`~agent.produce.append` — its batches join the one open segment of the
   agent, which is sealed by size, age, or as soon as waiting longer cannot
   bring more data (the rule: :mod:`~agent.produce.autobatch`);
3. :mod:`~agent.produce.upload` — the sealed segment is PUT (create-only key,
   bounded concurrency);
4. :mod:`~agent.produce.commit` — uploaded segments are committed in seal order,
   in groups, one metastore transaction per group: the batches get offsets;
5. :mod:`~agent.produce.ack` — every waiting request is answered, in seal order.

:class:`~agent.produce.pipeline.ProducePipeline` is the one object the agent
holds (``broker.pipeline``); its steps are mixins of it, sharing the state that
:mod:`~agent.produce.segment` declares. Nothing is acknowledged before the
object is durable and the commit has returned.
"""

from agent.produce.pipeline import (
    KAFKA_STORAGE_ERROR,
    REQUEST_TIMED_OUT,
    ProduceItem,
    ProducePipeline,
)

__all__ = ["KAFKA_STORAGE_ERROR", "REQUEST_TIMED_OUT", "ProduceItem", "ProducePipeline"]
