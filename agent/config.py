"""Typed, frozen configuration of one agent.

Read from ``FLOE_*`` environment variables (e.g. ``FLOE_PORT=9093``), an
optional TOML file and CLI flags (the CLI passes them as keyword arguments).
URLs choose the implementations: ``--metastore sqlite:///data/meta.db`` or
``postgresql://...``, ``--objects file:///data/objects`` or ``s3://bucket/prefix``.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MiB = 1024 * 1024


class AgentConfig(BaseSettings):
    """Every knob of an agent, with the default `floe dev` uses."""

    model_config = SettingsConfigDict(env_prefix="FLOE_", frozen=True, extra="forbid")

    host: str = Field("0.0.0.0", description="Address the Kafka listener binds to")
    port: int = Field(9092, ge=0, le=65535, description="Kafka listener port (0 = any free port)")
    advertised_host: str = Field("127.0.0.1", description="Host clients are told to connect to")
    advertised_port: int = Field(0, ge=0, le=65535, description="Port advertised (0 = the bound port)")
    shared_port: int = Field(
        0,
        ge=0,
        le=65535,
        description=(
            "Also accept Kafka connections on this port, shared (SO_REUSEPORT) with the other"
            " workers of this host (floe agent --workers); 0: none"
        ),
    )
    agent_id: str = Field(
        default_factory=lambda: uuid.uuid4().hex,
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description=(
            "Unique id of this agent (default: random per start); its Kafka node id derives"
            " from it (a number in [1, 2^31) is used as is), never from the address"
        ),
    )
    peer_address: str = Field(
        "",
        description=(
            "Private address peers reach this agent's admin HTTP (block cache) on: host or"
            " host:port (port default: admin_port); empty = the bind host when it is a"
            " specific address, else discovered (the address of the default route)"
        ),
    )
    zone: str = Field("default", description="Availability zone of this agent")
    cluster_id: str = Field(
        "",
        description=(
            "Cluster id reported in Metadata, stored in the metastore by the first agent;"
            " required on a metastore that has none yet, must match the stored one"
            " (empty = the stored one); floe dev uses floe-dev-cluster"
        ),
    )

    metastore: str = Field("sqlite:///data/meta.db", description="Metastore URL")
    objects: str = Field("file://./data/objects", description="Object store URL")

    flush_bytes: int = Field(8 * MiB, gt=0, description="Close the open segment at this size")
    flush_interval_ms: int = Field(250, gt=0, description="Close the open segment after this long")
    flush_min_interval_ms: int = Field(
        125,
        ge=0,
        description=(
            "Adaptive sealing's lower bound: once this long has passed since the previous seal,"
            " the open segment is closed as soon as every connection waiting in it is blocked at its in-flight limit or no produce"
            " request arrives for a quarter of this; >= flush_interval_ms turns adaptive sealing off"
        ),
    )
    upload_concurrency: int = Field(4, gt=0, description="Concurrent segment PUTs")
    journal: str = Field(
        "",
        description=(
            "Journal tier (issue 40): comma-separated object store URLs, one per journal bucket"
            " (S3 Express One Zone directory buckets in three zones in production). Produce"
            " requests are then acknowledged once a small journal object is on journal_quorum of"
            " them and committed; consolidation rewrites the journal into the standard bucket."
            " Empty: no journal"
        ),
    )
    journal_quorum: int = Field(2, gt=0, description="Journal buckets that must hold an object before its produce requests are acknowledged")
    journal_seal_ms: int = Field(
        5, ge=0, description="With a journal: adaptive sealing's lower bound (replaces flush_min_interval_ms)"
    )
    journal_interval_ms: int = Field(
        20, gt=0, description="With a journal: a journal object is sealed at the latest this long after it opened"
    )
    consolidate_interval_ms: int = Field(
        2000, gt=0, description="With a journal: gather committed journal objects this long before rewriting them into one standard object"
    )
    consolidate_bytes: int = Field(
        8 * MiB, gt=0, description="With a journal: rewrite into a standard object once this much is gathered"
    )
    max_buffered_bytes: int = Field(
        256 * MiB,
        gt=0,
        description=(
            "Produce bytes admitted but not yet acknowledged, at most (a cap within"
            " memory_budget_bytes): above it a Produce waits produce_admission_wait_ms,"
            " then is refused with a retriable error"
        ),
    )
    memory_budget_bytes: int | None = Field(
        None,
        gt=0,
        description=(
            "One memory budget per agent process: the block cache (fetch_cache_bytes, at"
            " most half of it) plus produce data waiting to be acknowledged, unread"
            " responses, planned Fetch bytes and request frames being received (the rest);"
            " unset: fetch_cache_bytes plus the larger of max_buffered_bytes and"
            " queued_max_request_bytes"
        ),
    )
    produce_admission_wait_ms: int = Field(
        50,
        ge=0,
        description=(
            "How long a Produce over the memory budget may wait for room before it is refused"
            " with NOT_ENOUGH_REPLICAS (retriable, never appended: clients retry with the same"
            " epoch and sequence)"
        ),
    )
    produce_fail_fast_ms: int = Field(
        5000,
        ge=0,
        description=(
            "A Produce arriving while the oldest unacknowledged segment has waited longer than"
            " this for its upload and commit (a slow store) is refused at once with"
            " NOT_ENOUGH_REPLICAS; 0: never"
        ),
    )
    produce_abort_ms: int = Field(
        4000,
        ge=0,
        description=(
            "When the oldest sealed segment whose commit has not started has waited longer"
            " than this (a stalled PUT), it, every later uncommitted segment and the open one"
            " are aborted: never committed, their requests answered NOT_ENOUGH_REPLICAS"
            " (retriable, not persisted); keep it well under clients' request and message"
            " timeouts; 0: never"
        ),
    )
    produce_reject_throttle_ms: int = Field(
        100, ge=0, description="throttle_time_ms (a back-off hint) in a ProduceResponse refused for overload"
    )
    max_request_bytes: int = Field(
        100 * MiB, gt=0, description="Largest Kafka frame accepted (socket.request.max.bytes)"
    )
    max_inflight_requests: int = Field(
        4096,
        gt=0,
        description=(
            "Requests a connection may have queued before reading pauses. High on purpose:"
            " every produce waits ~flush_interval for its segment, and librdkafka pipelines"
            " a request per linger per partition; produce memory is bounded by"
            " max_buffered_bytes, not by this count"
        ),
    )

    auto_create_topics: bool = Field(
        False,
        description=(
            "Create unknown topics on Metadata/Produce (auto.create.topics.enable);"
            " off for floe agent, on for floe dev"
        ),
    )
    default_partitions: int = Field(1, gt=0, description="Partitions of auto-created topics")

    fetch_cache_bytes: int = Field(256 * MiB, gt=0, description="Block cache capacity")
    fetch_block_bytes: int = Field(4 * MiB, gt=0, description="Cache block size")
    fetch_cache_writes: bool = Field(
        True,
        description="Put the objects this agent writes in its block cache: reads at the tail of its writes make no GET",
    )
    readahead: bool = Field(
        True, description="Read ahead of sequential readers behind the tail into the block cache (AIMD window)"
    )
    readahead_max_bytes: int = Field(
        64 * MiB, gt=0, description="Read-ahead bytes loaded and not yet read, per agent (at most half the cache)"
    )
    readahead_concurrency: int = Field(8, gt=0, description="Read-ahead ranged GETs in flight at once, per agent")
    readahead_expiry_ms: int = Field(
        30_000, gt=0, description="A read-ahead block unread this long counts as waste (halves the window)"
    )
    metadata_cache_ms: int = Field(100, ge=0, description="Batch lookup cache lifetime")
    tail_index_ms: int = Field(
        2000,
        ge=0,
        description="Serve tail reads (wide Fetches, small topics) from this agent's own commits this long (0: off)",
    )
    fetch_session_cache_slots: int = Field(
        1000,
        ge=0,
        description="Fetch sessions (KIP-227) kept per agent; 0 answers every Fetch sessionless",
    )

    admin_port: int = Field(
        0,
        ge=0,
        le=65535,
        description=(
            "HTTP port for /metrics, /healthz, /readyz (open), the internal routes (peer"
            " /blocks, group relay /kafka: the peer credential required) and the planning API"
            " (Kafka credentials of the SASL listeners, checked against the ACLs)"
        ),
    )
    admin_host: str = Field("", description="Address the admin HTTP port binds to (empty = host)")
    internal_token: str = Field(
        "",
        repr=False,
        description=(
            "Legacy single secret: the peer and the metastore credential where peer_token /"
            " metastore_token are not set (setting those two separately is recommended);"
            " empty = the internal routes answer loopback callers only"
        ),
    )
    # -- scoped internal credentials (issue 42; metastore.internal_auth) ---------------
    peer_token: str = Field(
        "",
        repr=False,
        description=(
            "Peer credential (agent to agent: /blocks, /kafka relay), the same on every agent;"
            " sent and required as Authorization: Bearer; empty = internal_token"
        ),
    )
    metastore_token: str = Field(
        "",
        repr=False,
        description=(
            "Credential sent to floe metastore serve (--metastore http(s)://...); the service's"
            " FLOE_METASTORE_TOKEN; empty = internal_token"
        ),
    )
    metastore_admin_token: str = Field(
        "",
        repr=False,
        description=(
            "Admin credential of floe metastore serve, used only for CreateAcls, DeleteAcls and"
            " AlterUserScramCredentials requests this agent serves; empty = those requests fail"
            " on a served metastore (manage ACLs and users with floe acls / floe users instead)"
        ),
    )

    # -- limits no client can exceed (issue 15; Kafka's names) --------------------------
    fetch_max_bytes: int = Field(
        55 * MiB, gt=0, description="Largest Fetch response the broker builds (fetch.max.bytes)"
    )
    queued_max_request_bytes: int = Field(
        256 * MiB,
        gt=0,
        description=(
            "Response bytes the clients leave unread (TLS included) and request frames being"
            " received, all connections together: a Fetch is built to at most what is left"
            " (one batch at least); a frame over 64 KiB is reserved whole when its size is"
            " read, or its connection stops reading until the budget is no longer used up"
            " (frames up to 64 KiB wait only when it is twice over); a connection leaving"
            " its responses unread for request_timeout_ms while this is exceeded is closed"
        ),
    )
    max_connections: int = Field(10_000, gt=0, description="Open Kafka connections (max.connections)")
    max_connections_per_ip: int = Field(
        2_000, gt=0, description="Open Kafka connections from one address (max.connections.per.ip)"
    )
    connections_max_idle_ms: int = Field(
        600_000, gt=0, description="Close a connection idle this long (connections.max.idle.ms)"
    )
    request_timeout_ms: int = Field(
        30_000,
        gt=0,
        description="Close a connection that started a request and did not finish sending it within this",
    )
    ssl_handshake_timeout_ms: int = Field(
        10_000,
        gt=0,
        description=(
            "Close a connection of an SSL/SASL_SSL listener whose TLS handshake has not"
            " completed this long after its accept (counted against the connection caps meanwhile)"
        ),
    )
    max_pending_tls_handshakes: int = Field(
        1_000,
        gt=0,
        description=(
            "TLS handshakes under way at once (client sent its first byte, handshake not"
            " done; ~45 KiB each): past this the oldest is closed"
        ),
    )
    authentication_timeout_ms: int = Field(
        10_000,
        gt=0,
        description="Close a connection of a SASL listener not authenticated this long after its accept",
    )
    admin_idle_timeout_ms: int = Field(
        30_000,
        gt=0,
        description=(
            "Close an admin/peer HTTP connection that has not sent a complete request header"
            " this long after its accept or its last response (slow headers, idle keep-alive);"
            " above the 15 s for which the agents' HTTP clients keep idle connections"
        ),
    )
    max_pre_auth_frame_bytes: int = Field(
        64 * 1024,
        gt=0,
        description="Largest frame accepted before a SASL/TLS listener's client has authenticated",
    )

    group_initial_rebalance_delay_ms: int = Field(
        100, ge=0, description="Wait this long for more members when an empty group starts rebalancing"
    )
    group_min_session_timeout_ms: int = Field(6000, ge=1, description="Smallest session.timeout.ms accepted")
    group_max_session_timeout_ms: int = Field(1_800_000, ge=1, description="Largest session.timeout.ms accepted")
    consumer_group_session_timeout_ms: int = Field(
        45_000, ge=1, description="KIP-848 groups: a member not heard from this long is removed (group.consumer.session.timeout.ms)"
    )
    consumer_group_heartbeat_interval_ms: int = Field(
        5_000, ge=1, description="KIP-848 groups: heartbeat interval told to members (group.consumer.heartbeat.interval.ms)"
    )
    consumer_group_migration_policy: Literal["bidirectional", "upgrade", "downgrade", "disabled"] = Field(
        "bidirectional",
        description="Online migration between classic and consumer-protocol groups (group.consumer.migration.policy)",
    )
    offset_metadata_max_bytes: int = Field(4096, ge=0, description="Longest metadata string of a committed offset")

    transaction_max_timeout_ms: int = Field(
        900_000, gt=0, description="Largest transaction.timeout.ms accepted (transaction.max.timeout.ms)"
    )
    transaction_check_interval_ms: int = Field(
        1000, gt=0, description="How often the coordinator aborts timed-out transactions and finishes abandoned ones"
    )
    transaction_version: int = Field(
        2, ge=1, le=2,
        description="The transaction.version feature level advertised in ApiVersions: 2 lets clients use "
        "KIP-890 part 2 (epoch bump per transaction, partitions and groups added implicitly), 1 keeps them on v1",
    )  # fmt: skip
    transaction_recovery_ms: int = Field(
        5000, gt=0, description="A transaction left prepared this long (its coordinator died) is finished by the ring owner"
    )

    cluster_heartbeat_ms: int = Field(1000, gt=0, description="Agent registry heartbeat interval")
    cluster_dead_after_ms: int = Field(5000, gt=0, description="An agent without a heartbeat this long leaves the ring")
    peer_cache: bool = Field(True, description="Read blocks through the ring owner's cache (per zone)")
    virtual_brokers: int = Field(
        1, ge=1, le=64, description="Kafka node ids (brokers) each agent is listed as, all at its address: clients"
        " keep a connection and an in-flight limit per node id (ARCHITECTURE.md); equal on every agent",
    )  # fmt: skip
    # Slow-agent isolation (issue 43, agent.cluster.isolation): agents probe each other and
    # take a slow one out of leadership and coordinator placement for isolate_for_s.
    isolation: bool = Field(True, description="Probe peers and isolate slow agents (docs/operations.md)")
    isolate_slow_ms: int = Field(
        500, gt=0, description="A peer whose median probe latency exceeds this (and isolate_slow_factor x the"
        " fastest agent's) is slow; an error or timeout counts as isolate_probe_timeout_ms",
    )  # fmt: skip
    isolate_slow_factor: float = Field(3.0, ge=1.0, description="... and this multiple of the fastest agent's median")
    isolate_for_s: float = Field(60.0, gt=0, description="How long an isolation lasts (renewed while still slow)")
    isolate_max_fraction: float = Field(
        0.3, ge=0, le=1, description="At most max(1, floor(fraction x agents)) agents isolated at once (never all)"
    )
    isolate_probe_timeout_ms: int = Field(
        1000, gt=0, description="A peer probe not answered within this fails (and counts as this long)"
    )
    debug_faults: bool = Field(
        False, description="Serve POST /debug/delay?ms=N on the admin port (tests, benchmarks; agent.faults)"
    )
    ready_interval_ms: int = Field(1000, gt=0, description="How often /readyz probes the metastore and object store")
    ready_deadline_ms: int = Field(
        3000, gt=0, description="A readiness probe not answered within this long fails (agent not ready)"
    )
    ready_stall_ms: int = Field(
        30_000, gt=0, description="Not ready when a sealed segment waits longer than this for upload + commit"
    )
    shutdown_timeout_ms: int = Field(
        30_000,
        gt=0,
        description="SIGTERM/SIGINT: the process exits within this, drained or not (buffered produce"
        " data committed and in-flight requests answered first when they make it)",
    )

    authorizer: str = Field(
        "none",
        pattern=r"^(none|acl)$",
        description=(
            "none: every client may do everything (floe dev); acl: Kafka ACLs from the metastore"
            " are enforced in every handler (CreateAcls/DescribeAcls/DeleteAcls manage them)"
        ),
    )
    super_users: str = Field(
        "", description="Principals allowed everything with authorizer=acl (super.users), e.g. User:admin;User:floe"
    )
    allow_everyone_if_no_acl_found: bool = Field(
        False, description="With authorizer=acl, allow a resource that has no ACL at all (allow.everyone.if.no.acl.found)"
    )
    acl_refresh_ms: int = Field(
        500, gt=0, le=1000, description="How often an agent checks the metastore for ACL changes (<= 1 s)"
    )

    cloudwatch_emf_interval_s: float = Field(
        0,
        ge=0,
        description=(
            "Write CloudWatch Embedded Metric Format lines to stdout every this many seconds"
            " (ECS/awslogs turns them into metrics); 0: off"
        ),
    )
    cloudwatch_namespace: str = Field("Floe", min_length=1, description="CloudWatch namespace of those metrics")

    # -- security (issue 15; agent.security) -------------------------------------------
    listeners: str = Field(
        "",
        description=(
            "Kafka listeners, e.g. PLAINTEXT://0.0.0.0:9092,SASL_SSL://0.0.0.0:9093 (security"
            " protocols PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL; port 0 = any free port);"
            " empty = one PLAINTEXT listener on host:port"
        ),
    )
    advertised_listeners: str = Field(
        "",
        description=(
            "Endpoint clients are told per listener, same form (PLAINTEXT://broker1:9092,...);"
            " a listener not named here advertises advertised_host and its bound port"
        ),
    )
    ssl_certfile: str = Field("", description="PEM certificate (chain) of SSL/SASL_SSL listeners; reloaded when it changes")
    ssl_keyfile: str = Field("", description="PEM private key of ssl_certfile")
    ssl_cafile: str = Field("", description="PEM CA bundle that client certificates must chain to (mTLS)")
    ssl_client_auth: str = Field(
        "none",
        pattern=r"^(none|requested|required)$",
        description="Client certificates on SSL listeners (ssl.client.auth): none, requested or required",
    )
    sasl_mechanisms: str = Field(
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        description="SASL mechanisms enabled on SASL listeners (sasl.enabled.mechanisms)",
    )
    sasl_users: str = Field(
        "",
        repr=False,
        description=(
            "PLAIN users: name:password,name2:password2, a JSON object {name: password},"
            " or @/path/to/file holding either"
        ),
    )
    oauth_jwks: str = Field("", description="OAUTHBEARER: JWKS file path or https URL of the token signing keys")
    oauth_issuer: str = Field("", description="OAUTHBEARER: required iss claim (empty: not checked)")
    oauth_audience: str = Field("", description="OAUTHBEARER: required aud claim (empty: not checked)")
    oauth_principal_claim: str = Field("sub", min_length=1, description="OAUTHBEARER: claim naming the principal")
    connections_max_reauth_ms: int = Field(
        0, ge=0, description="KIP-368 session lifetime of a SASL authentication (0: sessions do not expire)"
    )
    failed_auth_delay_ms: int = Field(
        100, ge=0, description="Delay before answering a failed authentication (connection.failed.authentication.delay.ms)"
    )

    # -- TLS between agents and to the metastore service (issue 42; docs/operations.md) --
    metastore_ca: str = Field(
        "",
        description=(
            "PEM CA bundle an https:// metastore (floe metastore serve --tls-cert) is verified"
            " against, its name checked against the URL's host; empty = the system trust store"
        ),
    )
    admin_tls: bool = Field(
        False,
        description=(
            "Serve the admin/peer HTTP port (/metrics, /healthz, /readyz, /blocks, /kafka, the"
            " planning API) over HTTPS only, and reach peers' admin ports over HTTPS; every agent"
            " of a cluster must agree (load balancer health checks then need HTTPS too)"
        ),
    )
    admin_ssl_certfile: str = Field(
        "", description="PEM certificate (chain) of the HTTPS admin port; empty = ssl_certfile (reloaded when it changes)"
    )
    admin_ssl_keyfile: str = Field("", description="PEM private key of admin_ssl_certfile; empty = ssl_keyfile")
    peer_ssl_cafile: str = Field(
        "", description="PEM CA bundle peers' admin certificates are verified against (admin_tls); empty = the system trust store"
    )
    peer_ssl_server_name: str = Field(
        "",
        description=(
            "Name peers' admin certificates are checked against (admin_tls), e.g. one name every"
            " agent's certificate carries; empty = the peer's address (peer_address) itself"
        ),
    )

    @field_validator("objects")
    @classmethod
    def _objects_url(cls, v: str) -> str:
        if "://" not in v:
            raise ValueError(f"--objects must be a URL (file:///dir, s3://bucket, memory://), got {v!r}")
        return v

    def with_overrides(self, **kw: Any) -> AgentConfig:
        data = self.model_dump()
        data.update({k: v for k, v in kw.items() if v is not None})
        return AgentConfig(**data)
