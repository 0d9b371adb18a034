"""The error-code table against Kafka's numbering and kafka-python's classes."""

from __future__ import annotations

import inspect
from typing import Any

import kafka.errors as kp_errors
import pytest

from kafka_protocol.errors import (
    ERROR_INFO,
    ErrorCode,
    KafkaError,
    error_code_for,
    error_info,
    is_retriable,
)
from kafka_protocol.exceptions import (
    CorruptRecordError,
    DecodeError,
    DecompressionError,
    UnsupportedMagic,
    UnsupportedVersion,
)

# kafka-python still uses a few pre-rename names; the table uses Kafka's current ones.
KAFKA_PYTHON_NAMES = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "UNKNOWN",
    ErrorCode.NONE: "NO_ERROR",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "NOT_LEADER_FOR_PARTITION",
    ErrorCode.MESSAGE_TOO_LARGE: "MESSAGE_SIZE_TOO_LARGE",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "INVALID_TOPIC",
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: "INVALID_REPLICATION_ASSIGNMENT",
}
# Java's CorruptRecordException extends RetriableException; kafka-python disagrees.
RETRIABLE_DEVIATIONS = {ErrorCode.CORRUPT_MESSAGE}


def _kafka_python_classes() -> dict[int, Any]:
    out: dict[int, Any] = {}
    for cls in vars(kp_errors).values():
        errno = getattr(cls, "errno", None)
        if (
            inspect.isclass(cls)
            and issubclass(cls, kp_errors.BrokerResponseError)
            and errno is not None
        ):
            out.setdefault(errno, cls)
    return out


def test_codes_are_unique_and_contiguous() -> None:
    values = [int(c) for c in ErrorCode]
    assert len(values) == len(set(values))
    assert sorted(values) == list(range(-1, 134))
    assert set(ERROR_INFO) == set(ErrorCode)
    for code, info in ERROR_INFO.items():
        assert info.code == int(code)
        assert info.name == code.name
        assert info.description


def test_matches_kafka_python() -> None:
    known = _kafka_python_classes()
    assert len(known) >= 128
    for errno, cls in known.items():
        code = ErrorCode(errno)
        assert KAFKA_PYTHON_NAMES.get(code, code.name) == cls.message, errno
        if code not in RETRIABLE_DEVIATIONS:
            assert ERROR_INFO[code].retriable == cls.retriable, code.name


@pytest.mark.parametrize(
    ("code", "retriable"),
    [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, True),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, True),
        (ErrorCode.CORRUPT_MESSAGE, True),
        (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, False),
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, False),
        (ErrorCode.SHARE_SESSION_LIMIT_REACHED, True),
        (ErrorCode.REBOOTSTRAP_REQUIRED, False),
    ],
)
def test_is_retriable(code: ErrorCode, retriable: bool) -> None:
    assert is_retriable(code) is retriable
    assert is_retriable(int(code)) is retriable


def test_unknown_codes() -> None:
    assert is_retriable(9999) is False
    info = error_info(9999)
    assert info.code == 9999 and not info.retriable


def test_kafka_error() -> None:
    err = KafkaError(ErrorCode.NOT_COORDINATOR)
    assert err.code is ErrorCode.NOT_COORDINATOR and err.retriable
    assert "NOT_COORDINATOR (16)" in str(err)
    custom = KafkaError(3, "no such topic: t")
    assert custom.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert str(custom).endswith("no such topic: t")
    with pytest.raises(ValueError):
        KafkaError(9999)


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (KafkaError(ErrorCode.POLICY_VIOLATION), ErrorCode.POLICY_VIOLATION),
        (UnsupportedMagic("v1"), ErrorCode.INVALID_RECORD),
        (CorruptRecordError("crc"), ErrorCode.CORRUPT_MESSAGE),
        (DecompressionError("bomb"), ErrorCode.CORRUPT_MESSAGE),
        (DecodeError("short"), ErrorCode.INVALID_REQUEST),
        (UnsupportedVersion("v99"), ErrorCode.UNSUPPORTED_VERSION),
        (RuntimeError("boom"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_error_code_for(exc: BaseException, code: ErrorCode) -> None:
    assert error_code_for(exc) is code
