"""The wire format of the metastore served over HTTP (``metastore.service`` /
``metastore.remote``): JSON with type tags, generic over the protocol's types.

Any value the :class:`~metastore.protocol.Metastore` protocol takes or returns
round-trips without per-method code, so a method added to the protocol is
served at once:

* ``None``/bool/int/float/str and lists are JSON;
* enums ``{"$e": name, "v": value}``, UUIDs ``{"$u": hex}``, bytes ``{"$b": base64}``,
  tuples ``{"$t": [...]}``, sets ``{"$s": [...]}``;
* NamedTuples ``{"$n": name, "v": [...]}`` and dataclasses ``{"$d": name, "v": {...}}``
  of classes defined in ``metastore.types`` (only those: a name never imports
  anything else);
* a list of 8 or more NamedTuples of one class travels as columns
  ``{"$c": name, "v": [column, ...]}`` (a batch list of a commit is thousands of
  tuples): a column of plain JSON scalars as ``{"$p": [...]}``, of UUIDs as
  ``{"$U": [distinct hex], "i": [index per row]}``, of one enum as
  ``{"$E": name, "v": [values]}``, anything else element by element;
* dicts with string keys stay objects (keys starting with ``$`` are escaped
  as ``{"$m": [[k, v], ...]}``, as are dicts with other keys).

Exceptions travel as ``{"error": {"type": name, "message": ...}}`` and are
raised again on the client as the same ``MetastoreError`` subclass.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import uuid
from typing import Any

from metastore import types as T
from metastore.types import MetastoreError


def _type(name: str) -> Any:
    cls = getattr(T, name, None)
    if not isinstance(cls, type) or cls.__module__ != T.__name__:
        raise MetastoreError(f"unknown metastore type {name!r} on the wire")
    return cls


def encode(v: Any) -> Any:
    if v is None or isinstance(v, (str, float)):
        return v
    if isinstance(v, enum.Enum):
        return {"$e": type(v).__name__, "v": v.value}
    if isinstance(v, (bool, int)):
        return v
    if isinstance(v, uuid.UUID):
        return {"$u": v.hex}
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, list):
        if len(v) >= _COLUMNAR_MIN:
            cls = type(v[0])
            if hasattr(cls, "_fields") and all(type(x) is cls for x in v):
                return {"$c": cls.__name__, "v": [_encode_column(c) for c in zip(*v, strict=True)]}
        return [encode(x) for x in v]
    if isinstance(v, tuple):
        if hasattr(v, "_fields"):
            return {"$n": type(v).__name__, "v": [encode(x) for x in v]}
        return {"$t": [encode(x) for x in v]}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {
            "$d": type(v).__name__,
            "v": {f.name: encode(getattr(v, f.name)) for f in dataclasses.fields(v)},
        }
    if isinstance(v, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in v):
            return {k: encode(x) for k, x in v.items()}
        return {"$m": [[encode(k), encode(x)] for k, x in v.items()]}
    if isinstance(v, (set, frozenset)):
        return {"$s": [encode(x) for x in v]}
    raise TypeError(f"cannot send {type(v).__name__} over the metastore wire")


_COLUMNAR_MIN = 8
_SCALARS = frozenset((int, str, float, bool, type(None)))


def _encode_column(col: tuple[Any, ...]) -> Any:
    kinds = set(map(type, col))
    if kinds <= _SCALARS:
        return {"$p": list(col)}
    if kinds == {uuid.UUID}:
        index: dict[uuid.UUID, int] = {}
        rows = [index.setdefault(u, len(index)) for u in col]
        return {"$U": [u.hex for u in index], "i": rows}
    if len(kinds) == 1:
        (kind,) = kinds
        if issubclass(kind, enum.Enum):
            return {"$E": kind.__name__, "v": [x.value for x in col]}
    return [encode(x) for x in col]


def _decode_column(c: Any) -> Any:
    if isinstance(c, dict):
        if "$p" in c:
            return c["$p"]
        if "$U" in c:
            ids = [uuid.UUID(hex=h) for h in c["$U"]]
            return [ids[i] for i in c["i"]]
        if "$E" in c:
            return list(map(_type(c["$E"]), c["v"]))
    return decode(c)


def decode(v: Any) -> Any:
    if isinstance(v, list):
        return [decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) <= 2:
        if "$u" in v:
            return uuid.UUID(hex=v["$u"])
        if "$n" in v:
            return _type(v["$n"])(*(decode(x) for x in v["v"]))
        if "$c" in v:
            return list(map(_type(v["$c"])._make, zip(*map(_decode_column, v["v"]), strict=True)))
        if "$d" in v:
            return _type(v["$d"])(**{k: decode(x) for k, x in v["v"].items()})
        if "$e" in v:
            return _type(v["$e"])(v["v"])
        if "$b" in v:
            return base64.b64decode(v["$b"])
        if "$t" in v:
            return tuple(decode(x) for x in v["$t"])
        if "$s" in v:
            return {decode(x) for x in v["$s"]}
        if "$m" in v:
            return {_hashable(decode(k)): decode(x) for k, x in v["$m"]}
    return {k: decode(x) for k, x in v.items()}


def _hashable(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k


def encode_error(e: BaseException) -> dict[str, Any]:
    name = type(e).__name__ if isinstance(e, MetastoreError) else "MetastoreError"
    return {"error": {"type": name, "message": str(e) or type(e).__name__}}


def decode_error(err: dict[str, Any]) -> MetastoreError:
    cls = getattr(T, str(err.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, MetastoreError)):
        cls = MetastoreError
    return cls(err.get("message", "metastore service error"))


def protocol_methods() -> set[str]:
    """The method names a served metastore answers: the protocol's, minus close."""
    from metastore.protocol import Metastore

    return {
        n for n in dir(Metastore) if not n.startswith("_") and callable(getattr(Metastore, n))
    } - {"close"}
