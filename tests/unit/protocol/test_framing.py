"""Size-prefixed framing (odradek.protocol.framing.FrameDecoder)."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.framing import MIN_REQUEST_SIZE, FrameDecoder, FrameError, frame

payloads = st.lists(st.binary(min_size=MIN_REQUEST_SIZE, max_size=300), min_size=1, max_size=8)


def test_frame_prefix() -> None:
    assert frame(b"12345678") == b"\x00\x00\x00\x0812345678"
    assert frame(bytearray(b"x" * 300)) == struct.pack(">i", 300) + b"x" * 300


def test_every_split_point_of_one_frame() -> None:
    payload = bytes(range(40))
    stream = frame(payload)
    for cut in range(len(stream) + 1):
        dec = FrameDecoder(1000)
        first = dec.feed(stream[:cut])
        second = dec.feed(stream[cut:])
        assert first + second == [payload], cut
        assert first == ([payload] if cut == len(stream) else [])
        assert dec.buffered == 0


def test_every_two_split_points_of_two_frames() -> None:
    frames = [b"A" * 9, b"B" * 12]
    stream = b"".join(frame(f) for f in frames)
    for i in range(len(stream) + 1):
        for j in range(i, len(stream) + 1):
            dec = FrameDecoder(100)
            got = dec.feed(stream[:i]) + dec.feed(stream[i:j]) + dec.feed(stream[j:])
            assert got == frames, (i, j)


@settings(max_examples=150, deadline=None)
@given(frames=payloads, data=st.data())
def test_random_chunking_reassembles(frames: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frame(f) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20), label="cuts"))
    bounds = [0, *cuts, len(stream)]
    dec = FrameDecoder(300)
    got: list[bytes] = []
    for a, b in itertools.pairwise(bounds):
        chunk = stream[a:b]
        kind = data.draw(st.sampled_from([bytes, bytearray, memoryview]), label="type")
        got += dec.feed(kind(chunk))
    assert got == frames
    assert all(type(f) is bytes for f in got)
    assert dec.buffered == 0


def test_byte_at_a_time() -> None:
    frames = [b"x" * 8, b"y" * 50, b"z" * 8]
    stream = b"".join(frame(f) for f in frames)
    dec = FrameDecoder(64)
    got: list[bytes] = []
    for i in range(len(stream)):
        got += dec.feed(stream[i:i + 1])
    assert got == frames


def test_many_frames_in_one_chunk_and_partial_tail() -> None:
    frames = [struct.pack(">q", i) + bytes(i % 5) for i in range(500)]
    stream = b"".join(frame(f) for f in frames)
    tail = frame(b"T" * 20)
    dec = FrameDecoder(1 << 20)
    assert dec.feed(stream + tail[:10]) == frames
    assert dec.feed(tail[10:]) == [b"T" * 20]
    assert dec.buffered == 0


def test_size_equal_to_max_is_accepted() -> None:
    dec = FrameDecoder(16)
    assert dec.feed(frame(b"m" * 16)) == [b"m" * 16]


@pytest.mark.parametrize("size", [17, 1000, 2**31 - 1])
def test_oversized_frame_rejected_from_prefix_alone(size: int) -> None:
    dec = FrameDecoder(16)
    with pytest.raises(FrameError, match="larger than"):
        dec.feed(struct.pack(">i", size))  # no body bytes at all


def test_oversized_frame_after_good_frames_in_same_chunk() -> None:
    dec = FrameDecoder(16)
    with pytest.raises(FrameError):
        dec.feed(frame(b"g" * 8) + struct.pack(">i", 17))


def test_oversized_prefix_split_across_feeds() -> None:
    dec = FrameDecoder(16)
    assert dec.feed(b"\x00\x00") == []
    with pytest.raises(FrameError):
        dec.feed(b"\x01\x00")


@pytest.mark.parametrize("size", [-1, -(2**31), 0, 1, MIN_REQUEST_SIZE - 1])
def test_negative_and_tiny_sizes_rejected(size: int) -> None:
    dec = FrameDecoder(1000)
    with pytest.raises(FrameError, match="invalid frame size"):
        dec.feed(struct.pack(">i", size) + b"\x00" * 16)


def test_minimum_size_accepted() -> None:
    dec = FrameDecoder(1000)
    assert dec.feed(frame(b"\x01" * MIN_REQUEST_SIZE)) == [b"\x01" * MIN_REQUEST_SIZE]
