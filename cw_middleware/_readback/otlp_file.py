"""Read snapshots back from an OTLP JSON lines file (ours or a Collector's ``file`` exporter).

Queries answer from a content-free index of the file (`file_index`), built on the
first query and then brought up to date with only the lines appended since:
``stages`` and ``runs`` read the index alone; ``latest`` reads, newest first, only
the lines that name the stage, decodes only the spans of that stage, and stops as
soon as older lines cannot change the answer (`StageFold.done`). Memory follows
the answer, not the file; any id (non-ASCII, escaped by another writer) takes the
same path, since the index holds decoded ids.

The file is never memory-mapped: rotation by ``copytruncate`` or replacement can
happen at any moment, and a query then starts again on what the file holds now
(or fails with a `BackendUnavailable` naming the file if it keeps changing).

A query that finds nothing checks that the file is OTLP JSON lines at all (one of
its first lines opens with a ``resourceSpans``/``resourceMetrics``/``resourceLogs``
key): pointing the reader at some other file is a `BackendResponseError` ("not an
OTLP JSON file"), not a run that was never recorded.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection
from enum import Enum
from typing import TYPE_CHECKING, Optional, TypeVar, Union

from .._kernel.contract import HistoryPoint, StageContextWindow
from .._kernel.errors import BackendResponseError, BackendUnavailable, ConfigError
from . import stop
from .file_index import RESTARTS, FileChanged, FileIndex
from .fold import (
    DEFAULT_HISTORY,
    MAX_HISTORY,
    ROUTING_KEYS,
    HistoryFold,
    Horizon,
    Missing,
    RunSummary,
    StageFold,
    StageSummary,
    snapshot_records,
    stage_pairs,
)
from .otlp_json import Span, decode_line

if TYPE_CHECKING:
    from .options import BackendURL, ReaderOptions

# How any OTLP JSON line opens (traces, metrics, logs; camelCase or snake_case; API wrappers).
_OTLP_LINE = re.compile(
    rb'\s*\{\s*"(?:resource(?:Spans|Metrics|Logs)|resource_(?:spans|metrics|logs)|batches|result|trace|data)"'
)
# A stage's latest answer and calls, as `run_calls` hands them out; what it returns (bytes) is kept as the stage's row.
StageCalls = Callable[[str, Optional[StageContextWindow], list[HistoryPoint]], Optional[bytes]]
T = TypeVar("T")
_SHAPE_LINES = 5  # non-empty lines looked at: a line being written, or one damaged line, is not enough to refuse
_SHAPE_BYTES = 1 << 20


class FileContents(Enum):
    MISSING = "missing"  # no file (yet)
    EMPTY = "empty"
    NO_SPANS = "no_spans"  # no line names a stage: metrics only, or another program's spans
    SPANS = "spans"


class OtlpFileReader:
    """`SnapshotReader` over one OTLP JSON lines file."""

    keeps_every_call = True  # every call is a span it holds

    CACHED_FOLDS = 256  # stages whose last answer is kept while no new line names them (polling readers)

    def __init__(self, path: str, horizon: Optional[Horizon] = None, index_dir: Optional[str] = None) -> None:
        self.path = path
        self.horizon = horizon or Horizon()
        self._index_dir = index_dir
        self._index: Optional[FileIndex] = None
        self._folds: OrderedDict[tuple[str, str], tuple[str, int, StageFold]] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------ SnapshotReader

    def latest(self, run_id: str, stage_id: str) -> Union[StageContextWindow, Missing]:
        def answer(index: FileIndex) -> Union[StageContextWindow, Missing]:
            fold = self._stage_fold(index, run_id, stage_id)
            found = fold.result() if fold is not None else None
            if found is not None:
                return found
            self._check_shape()
            return Missing.STAGE if index.holds_run(run_id) else Missing.RUN

        no_file: Union[StageContextWindow, Missing] = Missing.RUN
        return self._from_index(answer, no_file)

    def history(self, run_id: str, stage_id: str, limit: int = DEFAULT_HISTORY) -> Union[list[HistoryPoint], Missing]:
        """Every line that names the stage, newest first (a history needs each of its calls)."""

        def answer(index: FileIndex) -> Union[list[HistoryPoint], Missing]:
            fold = HistoryFold(run_id, stage_id, limit)
            wanted = (run_id, stage_id)
            for ref in index.lines_newest_first(run_id, stage_id):
                stop.check()
                try:
                    spans = decode_line(
                        index.read_line(ref), where=lambda span: wanted in stage_pairs(span), where_keys=ROUTING_KEYS
                    )
                except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                    continue  # a damaged line: skip it, never fail the query
                for span in spans:
                    fold.add(span)
            if fold.seen:
                return fold.result()
            self._check_shape()
            return Missing.STAGE if index.holds_run(run_id) else Missing.RUN

        no_file: Union[list[HistoryPoint], Missing] = Missing.RUN
        return self._from_index(answer, no_file)

    def stage_rows(self, run_id: str, key: str) -> Optional[dict[str, Optional[bytes]]]:
        """Each stage of the run with its summary row as kept under ``key`` (None: not kept, or a line named it since)."""
        found = self._from_index(lambda index: index.stage_lines(run_id, key), None)
        return {stage: row for stage, (_, _, row) in found.items()} if found is not None else None

    def run_calls(self, run_id: str, wanted: Collection[str], key: str, each: StageCalls) -> None:
        """The ``wanted`` stages of the run in one pass over its lines, newest first, each line read once: each
        stage's latest answer and its calls go to ``each(stage_id, answer, calls)`` as soon as the pass is past the
        stage's oldest line, and what ``each`` returns (bytes: the stage's summary row) is kept in the index under
        ``key`` as of the stage's newest line. So a run's stages one after another are held one at a time, and a
        summary of a run of many stages decodes each line once, not once per stage naming it."""

        def answer(index: FileIndex) -> None:
            lines = index.stage_lines(run_id, key)
            oldest = {stage: lines[stage][0] for stage in wanted if stage in lines}
            folds: dict[str, tuple[StageFold, HistoryFold]] = {}
            kept: list[tuple[str, int, bytes]] = []
            waiting = sorted(oldest.items(), key=lambda item: item[1])  # the next stage to finish: its oldest line last

            def finish(stage_id: str) -> None:
                latest, calls = folds.pop(stage_id, (None, None))
                row = each(stage_id, latest.result() if latest else None, calls.result() if calls else [])
                if row is not None:
                    kept.append((stage_id, lines[stage_id][1], row))
                if len(kept) >= 512:
                    index.keep_stage_rows(run_id, key, kept)
                    kept.clear()

            def of_run(span: Span) -> bool:
                return any(run == run_id for run, _ in stage_pairs(span))

            for ref in index.run_lines_newest_first(run_id):
                stop.check()
                while waiting and waiting[-1][1] > ref.n:  # no line older than this one names the stage
                    finish(waiting.pop()[0])
                try:
                    spans = decode_line(index.read_line(ref), where=of_run, where_keys=ROUTING_KEYS)
                except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                    continue  # a damaged line: skip it, never fail the query
                for span in reversed(spans):  # newest first, as a stage's own fold reads them
                    for run, stage_id in stage_pairs(span):
                        if run != run_id or stage_id not in oldest:
                            continue
                        pair = folds.get(stage_id)
                        if pair is None:
                            pair = folds[stage_id] = (
                                StageFold(run_id, stage_id, self.horizon),
                                HistoryFold(run_id, stage_id, MAX_HISTORY),
                            )
                        records = snapshot_records(span, run_id, stage_id)  # decoded once for both folds
                        pair[0].add(span, records)
                        pair[1].add(span, records)
            while waiting:
                finish(waiting.pop()[0])
            index.keep_stage_rows(run_id, key, kept)

        self._from_index(answer, None)

    def stages(self, run_id: str) -> Optional[list[StageSummary]]:
        found = self._from_index(lambda index: index.stages(run_id, self.horizon), None)
        if found is None:
            self._check_shape()
        return found

    def runs(self) -> list[RunSummary]:
        nothing: list[RunSummary] = []
        found = self._from_index(lambda index: index.runs(self.horizon), nothing)
        if not found:
            self._check_shape()
        return found

    def contents(self) -> FileContents:
        """What the file holds, for a hint after an empty answer: from the index the query just used, no new scan."""
        try:
            if os.path.getsize(self.path) == 0:
                return FileContents.EMPTY
        except OSError:
            return FileContents.MISSING
        holds = self._from_index(lambda index: index.holds_stages(), False)
        return FileContents.SPANS if holds else FileContents.NO_SPANS

    def _from_index(self, query: Callable[[FileIndex], T], no_file: T) -> T:
        """``query`` on the index brought up to date; ``no_file`` when there is no file. Started again when the
        file or the index changed under it (a line no longer matches, the index was made anew)."""
        for _ in range(RESTARTS):
            index = self._refreshed()
            if index is None:
                return no_file
            try:
                return query(index)
            except FileChanged:
                index.forget()  # rebuilt on the next refresh
        raise BackendUnavailable(
            f"the telemetry file {self.path} kept changing while it was read (truncated or replaced during the scan); try again"
        )

    def _refreshed(self) -> Optional[FileIndex]:
        """The index, up to date with the file; None when there is no file."""
        with self._lock:
            if self._index is None:
                if not os.path.exists(self.path):
                    return None  # no index is made for a file that does not exist (yet)
                self._index = FileIndex(self.path, self._index_dir)
            index = self._index
        return index if index.refresh() else None

    def _stage_fold(self, index: FileIndex, run_id: str, stage_id: str) -> Optional[StageFold]:
        newest = index.newest_line(run_id, stage_id)
        if newest is None:
            return None
        key = (run_id, stage_id)
        with self._lock:
            cached = self._folds.get(key)
            if cached is not None and cached[:2] == (index.generation, newest):
                self._folds.move_to_end(key)
                return cached[2]  # no line naming the stage since: the same fold (result() applies today's horizon)
        fold = StageFold(run_id, stage_id, self.horizon)
        wanted = (run_id, stage_id)

        def names_stage(span: Span) -> bool:
            return wanted in stage_pairs(span)

        for ref in index.lines_newest_first(run_id, stage_id):
            stop.check()
            line = index.read_line(ref)
            try:
                spans = decode_line(line, where=names_stage, where_keys=ROUTING_KEYS)
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                continue  # a damaged line: skip it, never fail the query
            for span in reversed(spans):
                fold.add(span)
            if fold.done:
                break
        with self._lock:
            self._folds[key] = (index.generation, newest, fold)
            self._folds.move_to_end(key)
            while len(self._folds) > self.CACHED_FOLDS:
                self._folds.popitem(last=False)
        return fold

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
        if self._index is not None:
            self._index.close()
            self._index = None


def open_reader(url: BackendURL, options: Optional[ReaderOptions] = None) -> OtlpFileReader:
    location = url.location
    if not location:
        raise ConfigError("the file backend needs a path: file:PATH")
    path = os.path.expanduser(location)
    if os.path.isdir(path):
        raise ConfigError(f"{path!r} is a directory; the file backend needs the telemetry file: file:PATH")
    if options is None:
        return OtlpFileReader(path)
    return OtlpFileReader(path, options.horizon, options.index_dir)
