"""Splitting a byte stream into messages: one JSON message per ``\\n``-ended line.

A line longer than the limit is never held in memory: the decoder reports it once
(:data:`OVERSIZED`) when it crosses the limit, then drops its bytes up to the next newline.
"""

from __future__ import annotations

from typing import Final


class _Oversized:
    __slots__ = ()

    def __repr__(self) -> str:
        return "OVERSIZED"


OVERSIZED: Final = _Oversized()
Frame = bytes | _Oversized


class FrameDecoder:
    """Feed bytes in, get complete frames out (blank lines are skipped)."""

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be positive")
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._discarding = False

    @property
    def pending_bytes(self) -> int:
        """Bytes of an incomplete frame held (0 while an oversized frame is being dropped)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Frame]:
        """The frames ``data`` completes, in order; the rest is kept for the next call."""
        frames: list[Frame] = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            if newline < 0:
                break
            if self._discarding:
                self._discarding = False
            elif len(self._buffer) + newline - start > self.max_frame_bytes:
                frames.append(OVERSIZED)
                self._buffer.clear()
            else:
                if self._buffer:
                    self._buffer += data[start:newline]
                    frame = bytes(self._buffer)
                    self._buffer.clear()
                else:
                    frame = data[start:newline]
                if frame.strip():
                    frames.append(frame)
            start = newline + 1
        rest = len(data) - start
        if rest and not self._discarding:
            if len(self._buffer) + rest > self.max_frame_bytes:
                frames.append(OVERSIZED)
                self._buffer.clear()
                self._discarding = True
            else:
                self._buffer += data[start:]
        return frames
