"""The Kafka error-code table: every code from -1 to 133 (Kafka 4.1), with flags.

Where it sits: handlers put ``ErrorCode`` values into responses; business
outcomes travel as values (an ``ErrorCode`` in a result), failures as
exceptions, and :func:`error_code_for` translates an exception into the code to
send at the boundary (``raise KafkaError(...) from e`` on the way in).

Names are Kafka's ``org.apache.kafka.common.protocol.Errors`` names. The
``retriable`` flag follows the Java exception hierarchy (a subclass of
``RetriableException``), which matches kafka-python except for
``CORRUPT_MESSAGE``: Java's ``CorruptRecordException`` is retriable (the
producer resends, corruption may have happened in transit); kafka-python says
no. Codes unknown to this table are treated as non-retriable, as clients do.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from .exceptions import (
    CorruptRecordError,
    DecodeError,
    FrameTooLarge,
    UnsupportedMagic,
    UnsupportedVersion,
)

__all__ = [
    "ERROR_INFO",
    "ErrorCode",
    "ErrorInfo",
    "KafkaError",
    "error_code_for",
    "error_info",
    "is_retriable",
]


class ErrorCode(IntEnum):
    """A Kafka protocol error code (int16 on the wire)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129
    STREAMS_INVALID_TOPOLOGY = 130
    STREAMS_INVALID_TOPOLOGY_EPOCH = 131
    STREAMS_TOPOLOGY_FENCED = 132
    SHARE_SESSION_LIMIT_REACHED = 133


class ErrorInfo(NamedTuple):
    name: str
    code: int
    retriable: bool
    description: str


R, N = True, False  # retriable, not retriable

# code -> (retriable, description). Kept next to the enum so a new code cannot
# be added without its flag (checked at import time below).
_TABLE: dict[ErrorCode, tuple[bool, str]] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: (
        N,
        "The server experienced an unexpected error when processing the request.",
    ),
    ErrorCode.NONE: (N, "No error."),
    ErrorCode.OFFSET_OUT_OF_RANGE: (
        N,
        "The requested offset is outside the range of offsets maintained by the server for the given topic/partition.",
    ),
    ErrorCode.CORRUPT_MESSAGE: (
        R,
        "This message has failed its CRC checksum, exceeds the valid size, or is otherwise corrupt.",
    ),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: (
        R,
        "This request is for a topic or partition that does not exist on this broker.",
    ),
    ErrorCode.INVALID_FETCH_SIZE: (N, "The message has a negative size."),
    ErrorCode.LEADER_NOT_AVAILABLE: (
        R,
        "This error is thrown if we are in the middle of a leadership election and there is currently no leader for this partition and hence it is unavailable for writes.",
    ),
    ErrorCode.NOT_LEADER_OR_FOLLOWER: (
        R,
        "This error is thrown if the client attempts to send messages to a replica that is not the leader for some partition.",
    ),
    ErrorCode.REQUEST_TIMED_OUT: (
        R,
        "This error is thrown if the request exceeds the user-specified time limit in the request.",
    ),
    ErrorCode.BROKER_NOT_AVAILABLE: (
        N,
        "This is not a client facing error and is used mostly by tools when a broker is not alive.",
    ),
    ErrorCode.REPLICA_NOT_AVAILABLE: (
        R,
        "If replica is expected on a broker, but is not (this can be safely ignored).",
    ),
    ErrorCode.MESSAGE_TOO_LARGE: (
        N,
        "The server has a configurable maximum message size to avoid unbounded memory allocation.",
    ),
    ErrorCode.STALE_CONTROLLER_EPOCH: (
        N,
        "Internal error code for broker-to-broker communication.",
    ),
    ErrorCode.OFFSET_METADATA_TOO_LARGE: (
        N,
        "If you specify a string larger than configured maximum for offset metadata.",
    ),
    ErrorCode.NETWORK_EXCEPTION: (R, "The server disconnected before a response was received."),
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: (
        R,
        "The broker returns this error code for txn or group requests, when the coordinator is loading and hence cant process requests.",
    ),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: (
        R,
        "The broker returns this error code for consumer and transaction requests if the offsets topic has not yet been created, or if the group/txn coordinator is not active.",
    ),
    ErrorCode.NOT_COORDINATOR: (
        R,
        "The broker returns this error code if it is not the correct coordinator for the specified consumer or transaction group.",
    ),
    ErrorCode.INVALID_TOPIC_EXCEPTION: (
        N,
        "The request attempted to perform an operation on an invalid topic.",
    ),
    ErrorCode.RECORD_LIST_TOO_LARGE: (
        N,
        "If a message batch in a produce request exceeds the maximum configured segment size.",
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS: (
        R,
        "Returned from a produce request when the number of in-sync replicas is lower than the configured minimum and requiredAcks is -1.",
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (
        R,
        "Returned from a produce request when the message was written to the log, but with fewer in-sync replicas than required.",
    ),
    ErrorCode.INVALID_REQUIRED_ACKS: (
        N,
        "Returned from a produce request if the requested requiredAcks is invalid (anything other than -1, 1, or 0).",
    ),
    ErrorCode.ILLEGAL_GENERATION: (
        N,
        "Returned from group membership requests (such as heartbeats) when the generation id provided in the request is not the current generation.",
    ),
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: (
        N,
        "Returned in join group when the member provides a protocol type or set of protocols which is not compatible with the current group.",
    ),
    ErrorCode.INVALID_GROUP_ID: (N, "Returned in join group when the groupId is empty or null."),
    ErrorCode.UNKNOWN_MEMBER_ID: (
        N,
        "Returned from group requests (offset commits/fetches, heartbeats, etc) when the memberId is not in the current generation.",
    ),
    ErrorCode.INVALID_SESSION_TIMEOUT: (
        N,
        "Return in join group when the requested session timeout is outside of the allowed range on the broker.",
    ),
    ErrorCode.REBALANCE_IN_PROGRESS: (
        N,
        "Returned in heartbeat requests when the coordinator has begun rebalancing the group.",
    ),
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE: (
        N,
        "This error indicates that an offset commit was rejected because of oversize metadata.",
    ),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (
        N,
        "Returned by the broker when the client is not authorized to access the requested topic.",
    ),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: (
        N,
        "Returned by the broker when the client is not authorized to access a particular groupId.",
    ),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: (
        N,
        "Returned by the broker when the client is not authorized to use an inter-broker or administrative API.",
    ),
    ErrorCode.INVALID_TIMESTAMP: (N, "The timestamp of the message is out of acceptable range."),
    ErrorCode.UNSUPPORTED_SASL_MECHANISM: (
        N,
        "The broker does not support the requested SASL mechanism.",
    ),
    ErrorCode.ILLEGAL_SASL_STATE: (N, "Request is not valid given the current SASL state."),
    ErrorCode.UNSUPPORTED_VERSION: (N, "The version of API is not supported."),
    ErrorCode.TOPIC_ALREADY_EXISTS: (N, "Topic with this name already exists."),
    ErrorCode.INVALID_PARTITIONS: (N, "Number of partitions is invalid."),
    ErrorCode.INVALID_REPLICATION_FACTOR: (N, "Replication-factor is invalid."),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: (N, "Replication assignment is invalid."),
    ErrorCode.INVALID_CONFIG: (N, "Configuration is invalid."),
    ErrorCode.NOT_CONTROLLER: (R, "This is not the correct controller for this cluster."),
    ErrorCode.INVALID_REQUEST: (
        N,
        "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker.",
    ),
    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT: (
        N,
        "The message format version on the broker does not support this request.",
    ),
    ErrorCode.POLICY_VIOLATION: (N, "Request parameters do not satisfy the configured policy."),
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: (
        N,
        "The broker received an out of order sequence number.",
    ),
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: (N, "The broker received a duplicate sequence number."),
    ErrorCode.INVALID_PRODUCER_EPOCH: (N, "Producer attempted to produce with an old epoch."),
    ErrorCode.INVALID_TXN_STATE: (
        N,
        "The producer attempted a transactional operation in an invalid state.",
    ),
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: (
        N,
        "The producer attempted to use a producer id which is not currently assigned to its transactional id.",
    ),
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: (
        N,
        "The transaction timeout is larger than the maximum value allowed by the broker (as configured by transaction.max.timeout.ms).",
    ),
    ErrorCode.CONCURRENT_TRANSACTIONS: (
        R,
        "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing.",
    ),
    ErrorCode.TRANSACTION_COORDINATOR_FENCED: (
        N,
        "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator for a given producer.",
    ),
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (N, "Transactional Id authorization failed."),
    ErrorCode.SECURITY_DISABLED: (N, "Security features are disabled."),
    ErrorCode.OPERATION_NOT_ATTEMPTED: (N, "The broker did not attempt to execute this operation."),
    ErrorCode.KAFKA_STORAGE_ERROR: (R, "Disk error when trying to access log file on the disk."),
    ErrorCode.LOG_DIR_NOT_FOUND: (
        N,
        "The user-specified log directory is not found in the broker config.",
    ),
    ErrorCode.SASL_AUTHENTICATION_FAILED: (N, "SASL Authentication failed."),
    ErrorCode.UNKNOWN_PRODUCER_ID: (
        N,
        "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question.",
    ),
    ErrorCode.REASSIGNMENT_IN_PROGRESS: (N, "A partition reassignment is in progress."),
    ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: (N, "Delegation Token feature is not enabled."),
    ErrorCode.DELEGATION_TOKEN_NOT_FOUND: (N, "Delegation Token is not found on server."),
    ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH: (
        N,
        "Specified Principal is not valid Owner/Renewer.",
    ),
    ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: (
        N,
        "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token authenticated channels.",
    ),
    ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: (N, "Delegation Token authorization failed."),
    ErrorCode.DELEGATION_TOKEN_EXPIRED: (N, "Delegation Token is expired."),
    ErrorCode.INVALID_PRINCIPAL_TYPE: (N, "Supplied principalType is not supported."),
    ErrorCode.NON_EMPTY_GROUP: (N, "The group is not empty."),
    ErrorCode.GROUP_ID_NOT_FOUND: (N, "The group id does not exist."),
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND: (R, "The fetch session ID was not found."),
    ErrorCode.INVALID_FETCH_SESSION_EPOCH: (R, "The fetch session epoch is invalid."),
    ErrorCode.LISTENER_NOT_FOUND: (
        R,
        "There is no listener on the leader broker that matches the listener on which metadata request was processed.",
    ),
    ErrorCode.TOPIC_DELETION_DISABLED: (N, "Topic deletion is disabled."),
    ErrorCode.FENCED_LEADER_EPOCH: (
        R,
        "The leader epoch in the request is older than the epoch on the broker.",
    ),
    ErrorCode.UNKNOWN_LEADER_EPOCH: (
        R,
        "The leader epoch in the request is newer than the epoch on the broker.",
    ),
    ErrorCode.UNSUPPORTED_COMPRESSION_TYPE: (
        N,
        "The requesting client does not support the compression type of given partition.",
    ),
    ErrorCode.STALE_BROKER_EPOCH: (N, "Broker epoch has changed."),
    ErrorCode.OFFSET_NOT_AVAILABLE: (
        R,
        "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing.",
    ),
    ErrorCode.MEMBER_ID_REQUIRED: (
        N,
        "The group member needs to have a valid member id before actually entering a consumer group.",
    ),
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: (R, "The preferred leader was not available."),
    ErrorCode.GROUP_MAX_SIZE_REACHED: (N, "The consumer group has reached its max size."),
    ErrorCode.FENCED_INSTANCE_ID: (
        N,
        "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id.",
    ),
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: (
        R,
        "Eligible topic partition leaders are not available.",
    ),
    ErrorCode.ELECTION_NOT_NEEDED: (R, "Leader election not needed for topic partition."),
    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS: (N, "No partition reassignment is in progress."),
    ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC: (
        N,
        "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it.",
    ),
    ErrorCode.INVALID_RECORD: (
        N,
        "This record has failed the validation on broker and hence will be rejected.",
    ),
    ErrorCode.UNSTABLE_OFFSET_COMMIT: (R, "There are unstable offsets that need to be cleared."),
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: (R, "The throttling quota has been exceeded."),
    ErrorCode.PRODUCER_FENCED: (
        N,
        "There is a newer producer with the same transactionalId which fences the current one.",
    ),
    ErrorCode.RESOURCE_NOT_FOUND: (
        N,
        "A request illegally referred to a resource that does not exist.",
    ),
    ErrorCode.DUPLICATE_RESOURCE: (N, "A request illegally referred to the same resource twice."),
    ErrorCode.UNACCEPTABLE_CREDENTIAL: (
        N,
        "Requested credential would not meet criteria for acceptability.",
    ),
    ErrorCode.INCONSISTENT_VOTER_SET: (
        N,
        "Indicates that the either the sender or recipient of a voter-only request is not one of the expected voters.",
    ),
    ErrorCode.INVALID_UPDATE_VERSION: (N, "The given update version was invalid."),
    ErrorCode.FEATURE_UPDATE_FAILED: (
        N,
        "Unable to update finalized features due to an unexpected server error.",
    ),
    ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE: (
        N,
        "Request principal deserialization failed during forwarding.",
    ),
    ErrorCode.SNAPSHOT_NOT_FOUND: (N, "Requested snapshot was not found."),
    ErrorCode.POSITION_OUT_OF_RANGE: (
        N,
        "Requested position is not greater than or equal to zero, and less than the size of the snapshot.",
    ),
    ErrorCode.UNKNOWN_TOPIC_ID: (R, "This server does not host this topic ID."),
    ErrorCode.DUPLICATE_BROKER_REGISTRATION: (N, "This broker ID is already in use."),
    ErrorCode.BROKER_ID_NOT_REGISTERED: (N, "The given broker ID was not registered."),
    ErrorCode.INCONSISTENT_TOPIC_ID: (
        R,
        "The log's topic ID did not match the topic ID in the request.",
    ),
    ErrorCode.INCONSISTENT_CLUSTER_ID: (
        N,
        "The clusterId in the request does not match that found on the server.",
    ),
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: (N, "The transactionalId could not be found."),
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR: (
        R,
        "The fetch session encountered inconsistent topic ID usage.",
    ),
    ErrorCode.INELIGIBLE_REPLICA: (N, "The new ISR contains at least one ineligible replica."),
    ErrorCode.NEW_LEADER_ELECTED: (
        N,
        "The AlterPartition request successfully updated the partition state but the leader has changed.",
    ),
    ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE: (
        N,
        "The requested offset is moved to tiered storage.",
    ),
    ErrorCode.FENCED_MEMBER_EPOCH: (N, "The member epoch is fenced by the group coordinator."),
    ErrorCode.UNRELEASED_INSTANCE_ID: (
        N,
        "The instance ID is still used by another member in the consumer group.",
    ),
    ErrorCode.UNSUPPORTED_ASSIGNOR: (
        N,
        "The assignor or its version range is not supported by the consumer group.",
    ),
    ErrorCode.STALE_MEMBER_EPOCH: (N, "The member epoch is stale."),
    ErrorCode.MISMATCHED_ENDPOINT_TYPE: (
        N,
        "The request was sent to an endpoint of the wrong type.",
    ),
    ErrorCode.UNSUPPORTED_ENDPOINT_TYPE: (N, "This endpoint type is not supported yet."),
    ErrorCode.UNKNOWN_CONTROLLER_ID: (N, "This controller ID is not known."),
    ErrorCode.UNKNOWN_SUBSCRIPTION_ID: (
        N,
        "Client sent a push telemetry request with an invalid or outdated subscription ID.",
    ),
    ErrorCode.TELEMETRY_TOO_LARGE: (
        N,
        "Client sent a push telemetry request larger than the maximum size the broker will accept.",
    ),
    ErrorCode.INVALID_REGISTRATION: (
        N,
        "The controller has considered the broker registration to be invalid.",
    ),
    ErrorCode.TRANSACTION_ABORTABLE: (N, "The server encountered an error with the transaction."),
    ErrorCode.INVALID_RECORD_STATE: (N, "The record state is invalid."),
    ErrorCode.SHARE_SESSION_NOT_FOUND: (R, "The share session was not found."),
    ErrorCode.INVALID_SHARE_SESSION_EPOCH: (R, "The share session epoch is invalid."),
    ErrorCode.FENCED_STATE_EPOCH: (
        N,
        "The share coordinator rejected the request because the share-group state epoch did not match.",
    ),
    ErrorCode.INVALID_VOTER_KEY: (N, "The voter key doesn't match the receiving replica's key."),
    ErrorCode.DUPLICATE_VOTER: (N, "The voter is already part of the set of voters."),
    ErrorCode.VOTER_NOT_FOUND: (N, "The voter is not part of the set of voters."),
    ErrorCode.INVALID_REGULAR_EXPRESSION: (N, "The regular expression is not valid."),
    ErrorCode.REBOOTSTRAP_REQUIRED: (
        N,
        "Client metadata is stale; the client should rebootstrap to obtain new metadata.",
    ),
    ErrorCode.STREAMS_INVALID_TOPOLOGY: (N, "The supplied topology is invalid."),
    ErrorCode.STREAMS_INVALID_TOPOLOGY_EPOCH: (N, "The supplied topology epoch is invalid."),
    ErrorCode.STREAMS_TOPOLOGY_FENCED: (N, "The supplied topology epoch is outdated."),
    ErrorCode.SHARE_SESSION_LIMIT_REACHED: (R, "The limit of share sessions has been reached."),
}

ERROR_INFO: dict[ErrorCode, ErrorInfo] = {
    code: ErrorInfo(code.name, int(code), retriable, description)
    for code, (retriable, description) in _TABLE.items()
}
if set(ERROR_INFO) != set(ErrorCode):  # pragma: no cover - guards edits to this file
    raise ImportError("errors.py: ErrorCode and _TABLE are out of sync")
del R, N


def error_info(code: int) -> ErrorInfo:
    """Info for a code; unknown codes get a synthetic non-retriable entry."""
    try:
        return ERROR_INFO[ErrorCode(code)]
    except ValueError:
        return ErrorInfo(f"UNKNOWN_CODE_{code}", code, False, f"Unknown error code {code}.")


def is_retriable(code: int) -> bool:
    """Whether a client may retry the request that got ``code``."""
    try:
        return ERROR_INFO[ErrorCode(code)].retriable
    except ValueError:
        return False


class KafkaError(Exception):
    """An exception carrying a Kafka error code, for translating at boundaries."""

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        self.code = ErrorCode(code)
        self.message = message if message is not None else ERROR_INFO[self.code].description
        super().__init__(f"{self.code.name} ({int(self.code)}): {self.message}")

    @property
    def retriable(self) -> bool:
        return ERROR_INFO[self.code].retriable

    @property
    def info(self) -> ErrorInfo:
        return ERROR_INFO[self.code]


def error_code_for(exc: BaseException) -> ErrorCode:
    """The code to answer with for an exception raised while handling a request.

    Record-level problems map to what Kafka's broker returns for them: a batch
    with magic 0/1 inside a v3+ produce request is ``INVALID_RECORD``, a bad CRC
    or undecodable batch ``CORRUPT_MESSAGE``.
    """
    if isinstance(exc, KafkaError):
        return exc.code
    if isinstance(exc, UnsupportedMagic):
        return ErrorCode.INVALID_RECORD
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.CORRUPT_MESSAGE
    if isinstance(exc, FrameTooLarge):
        return ErrorCode.MESSAGE_TOO_LARGE
    if isinstance(exc, DecodeError):
        return ErrorCode.INVALID_REQUEST
    if isinstance(exc, UnsupportedVersion):
        return ErrorCode.UNSUPPORTED_VERSION
    return ErrorCode.UNKNOWN_SERVER_ERROR
