"""The file reader as it was before the index (release 0.1.0): the baseline the read-back benchmarks compare against.

Kept verbatim but for its imports and the parts that build readers from URLs: it memory-maps the file
and scans it backwards for the bytes of an id, parsing the matching lines (every trace line for a
non-ASCII id). Not part of the package; never used by it.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from collections.abc import Iterator
from typing import Optional

from cw_middleware._kernel import names
from cw_middleware._kernel.contract import StageContextWindow
from cw_middleware._kernel.errors import BackendResponseError, BackendUnavailable
from cw_middleware._readback.fold import Horizon, RunFold, RunsFold, RunSummary, StageFold, StageSummary
from cw_middleware._readback.otlp_json import Span, iter_spans

# Ids made only of these characters are written byte-identically by every JSON encoder we know.
_PLAIN_ID = re.compile(r"^[A-Za-z0-9 ._@:#+=,;!~*()\[\]{}^$|?'-]+$")
_SPAN_LINE_PREFIXES = (b'{"resourceSpans"', b'{"resource_spans"', b'{"batches"')
# How any OTLP JSON line opens (traces, metrics, logs; camelCase or snake_case; API wrappers).
_OTLP_LINE = re.compile(
    rb'\s*\{\s*"(?:resource(?:Spans|Metrics|Logs)|resource_(?:spans|metrics|logs)|batches|result|trace|data)"'
)
_SHAPE_LINES = 5  # non-empty lines looked at: a line being written, or one damaged line, is not enough to refuse
_SHAPE_BYTES = 1 << 20


def _needle(value: str) -> Optional[bytes]:
    return json.dumps(value).encode("ascii") if _PLAIN_ID.match(value) else None


class OtlpFileReader:
    """`SnapshotReader` over one OTLP JSON lines file."""

    def __init__(self, path: str, horizon: Optional[Horizon] = None) -> None:
        self.path = path
        self.horizon = horizon or Horizon()

    # ------------------------------------------------------------ SnapshotReader

    def latest(self, run_id: str, stage_id: str) -> Optional[StageContextWindow]:
        fold = StageFold(run_id, stage_id, self.horizon)
        for span in self._spans_newest_first(run_id, stage_id):
            fold.add(span)
            if fold.done:
                break
        answer = fold.result()
        if answer is None:
            self._check_shape()
        return answer

    def stages(self, run_id: str) -> Optional[list[StageSummary]]:
        fold = RunFold(run_id, self.horizon)
        lines = list(self._lines_newest_first(_needle(run_id), None))
        for line in reversed(lines):
            for span in self._spans(line):
                fold.add(span)
        found = fold.result()
        if found is None:
            self._check_shape()
        return found

    def runs(self) -> list[RunSummary]:
        fold = RunsFold(self.horizon)
        lines = list(self._lines_newest_first(_needle(names.ATTR_RUN_ID), None))
        for line in reversed(lines):
            for span in self._spans(line):
                fold.add(span)
        found = fold.result()
        if not found:
            self._check_shape()
        return found

    def _check_shape(self) -> None:
        """BackendResponseError when the file has content but none of it is OTLP JSON lines."""
        try:
            with open(self.path, "rb") as f:
                head = f.read(_SHAPE_BYTES)
        except OSError:
            return  # missing or unreadable: the scan has already said what it found
        lines = [line for line in head.split(b"\n")[:-1] if line.strip()][:_SHAPE_LINES]
        if len(head) < _SHAPE_BYTES and head.strip() and not head.endswith(b"\n"):
            lines.append(head.rsplit(b"\n", 1)[-1])  # a last line without its newline yet
        if not lines and len(head) == _SHAPE_BYTES:
            lines = [head]  # one long first line: its opening decides
        if lines and not any(_OTLP_LINE.match(line) for line in lines):
            raise BackendResponseError(
                f"{self.path} is not an OTLP JSON file: none of its first lines is a "
                '{"resourceSpans": ...}, {"resourceMetrics": ...} or {"resourceLogs": ...} export batch'
            )

    def close(self) -> None:
        pass

    # ------------------------------------------------------------ scanning

    def _spans_newest_first(self, run_id: str, stage_id: str) -> Iterator[Span]:
        run_needle = _needle(run_id)
        for line in self._lines_newest_first(_needle(stage_id), run_needle):
            yield from reversed(self._spans(line))

    def _lines_newest_first(self, needle: Optional[bytes], also: Optional[bytes]) -> Iterator[bytes]:
        """Trace lines containing ``needle`` (and ``also``), last line first."""
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return
        except OSError as exc:
            raise BackendUnavailable(f"cannot read telemetry file {self.path}: {exc.strerror}") from None
        with f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                yield from _scan_backwards(mm, size, needle, also)

    def _spans(self, line: bytes) -> list[Span]:
        try:
            return list(iter_spans(json.loads(line)))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            # A line being written right now, or a damaged one: skip it, never fail the query.
            return []


def _scan_backwards(mm: mmap.mmap, size: int, needle: Optional[bytes], also: Optional[bytes]) -> Iterator[bytes]:
    end = size
    while end > 0:
        if needle is not None:
            hit = mm.rfind(needle, 0, end)
            if hit < 0:
                return
            start = mm.rfind(b"\n", 0, hit) + 1
            stop = mm.find(b"\n", hit)
            stop = size if stop < 0 else stop
        else:
            stop = end
            if stop > 0 and mm[stop - 1 : stop] == b"\n":
                stop -= 1
            start = mm.rfind(b"\n", 0, stop) + 1
        end = start - 1 if start > 0 else 0
        if stop <= start:
            if start == 0:
                return
            continue
        head = mm[start : start + 24]
        if not head.startswith(_SPAN_LINE_PREFIXES):
            if head.lstrip().startswith(b"{") and b'"resourceMetrics"' not in head and b'"resourceLogs"' not in head:
                pass  # an unusual but possibly trace-bearing line: let the decoder decide
            else:
                continue
        if also is not None and mm.find(also, start, stop) < 0:
            continue
        yield mm[start:stop]
        if start == 0:
            return
