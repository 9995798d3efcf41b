"""Test helpers for graph.pb bytes: re-seal an edited message with a valid checksum, so a
mutation gets past the checksum to the decoder and verify (what a careless or hostile writer
can produce). Written independently of sglc.ir.serialize: SHA-256 of the message's bytes, then
the `checksum` field (proto/graph.proto) appended."""
from __future__ import annotations

import hashlib

from sglc.wire.proto import graph_pb2 as pb


def seal(msg: pb.Graph) -> bytes:
    """The bytes of `msg` (its old checksum dropped) followed by their checksum field."""
    body_msg = pb.Graph()
    body_msg.CopyFrom(msg)
    body_msg.ClearField("checksum")
    body = body_msg.SerializeToString(deterministic=True)
    return body + pb.Graph(checksum=hashlib.sha256(body).digest()).SerializeToString()


def parse(data: bytes) -> pb.Graph:
    msg = pb.Graph()
    msg.ParseFromString(data)
    return msg


def reencode(data: bytes, edit) -> bytes:
    """Parse graph.pb bytes into the message, apply `edit`, re-seal with a valid checksum."""
    msg = parse(data)
    edit(msg)
    return seal(msg)
