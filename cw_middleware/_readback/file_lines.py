"""An OTLP JSON lines file read a block at a time and split into lines here: never memory-mapped.

The file may shrink or be replaced at any moment (rotation), so it is read with plain
reads: a truncation cannot raise SIGBUS, it shows as a short read. A line that
straddles two blocks is the only copy made; a line longer than `MAX_LINE` is skipped
without being held in memory (a damaged file, not an export batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any, Optional

BLOCK_BYTES = 4 << 20  # read a block at a time, split into lines here
MAX_LINE = 256 << 20  # a longer line is skipped, never held in memory (a damaged file, not an export batch)
_SPAN_LINE_PREFIXES = (b'{"resourceSpans"', b'{"resource_spans"', b'{"batches"')


def lines(f: IO[bytes], start: int, stop: int) -> Iterator[tuple[int, Optional[memoryview], int, bool]]:
    """The lines that start in [start, stop), read a block at a time (never memory-mapped).

    Each is (its offset; its bytes less the line end, or None when longer than `MAX_LINE`,
    which is skipped, never held; its length in the file; whether it ended with a newline).
    The last one, at the end of the file, may be unended or empty.
    """
    f.seek(start)
    buf, i, offset = b"", 0, start  # buf[i] is the byte at `offset`
    while offset < stop:
        nl = buf.find(b"\n", i)
        if nl >= 0:
            yield offset, _body(buf, i, nl), nl + 1 - i, True
            offset += nl + 1 - i
            i = nl + 1
            continue
        parts, pending, ended = [buf[i:]], len(buf) - i, False
        while not ended and pending <= MAX_LINE:
            # Past `stop` only the line that straddles it is read on, in small blocks.
            more = f.read(BLOCK_BYTES if offset + pending < stop else 1 << 20)
            if not more:
                break
            parts.append(more)
            pending += len(more)
            ended = b"\n" in more
        if ended:  # copy only the line that straddles the blocks; the rest of the last block stays as read
            buf = parts.pop()
            i = 0
            if len(parts) > 1 or parts[0]:
                nl = buf.find(b"\n")
                line = b"".join([*parts, buf[: nl + 1]])
                yield offset, _body(line, 0, len(line) - 1), len(line), True
                offset += len(line)
                i = nl + 1
            continue
        if pending <= MAX_LINE:  # the end of the file: an unended last line
            buf = b"".join(parts)
            yield offset, _body(buf, 0, len(buf)), len(buf), False
            return
        del parts  # an overlong line: read on to its end without keeping it
        while True:
            more = f.read(1 << 20)
            nl = more.find(b"\n")
            pending += nl + 1 if nl >= 0 else len(more)
            if nl >= 0 or not more:
                break
        yield offset, None, pending, nl >= 0
        if nl < 0:
            return
        offset += pending
        buf, i = more[nl + 1 :], 0


def _body(buf: bytes, start: int, end: int) -> memoryview:
    while end > start and buf[end - 1] == 13:  # a CRLF line end
        end -= 1
    return memoryview(buf)[start:end]


def looks_like_spans(head: Any) -> bool:
    """Whether a line may hold spans, from its first 24 bytes: metrics and logs lines are never decoded."""
    head = bytes(head)
    if head.startswith(_SPAN_LINE_PREFIXES):
        return True
    # An unusual but possibly trace-bearing line (a wrapper, whitespace): let the decoder decide.
    return head.lstrip().startswith(b"{") and b'"resourceMetrics"' not in head and b'"resourceLogs"' not in head
