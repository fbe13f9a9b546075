"""The verdict of ``rocketstore verify``: problems and notes (listed up to a limit, all counted)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rocketstore.meta.lockfile import describe_holder


@dataclass
class VerifyReport:
    """What ``verify_store`` checked and found. ``problems``/``notes`` list at most ``max_listed``
    each; ``problem_count``/``note_count`` count them all."""

    store: str
    abort_file: bool = False
    lock_held_by: int | None = None  # the pid of a process that has the store open (-1: not known)
    commit_log_files: int = 0
    records: int = 0
    log_min_offset: int = -1
    log_end: int = 0
    log_end_reason: str = ""
    queues: int = 0
    units: int = 0
    index_files: int = 0
    index_entries: int = 0
    keys: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem_count: int = 0
    note_count: int = 0
    max_listed: int | None = None
    units_past_cut: int = 0  # queue units and index entries at or past where recovery cuts the log
    entries_past_cut: int = 0
    units_record_elsewhere: int = 0  # units whose record says another queue, queue offset or transaction type
    multi_dispatch_units: int = 0  # units that are copies of records of other queues (INNER_MULTI_DISPATCH)
    blanks_inside: int = 0  # BLANK markers inside a segment with records after them (not the last file)
    next_steps: list[str] = field(default_factory=list)  # what to do about each kind of problem

    @property
    def ok(self) -> bool:
        """True when nothing is wrong (notes allowed)."""
        return self.problem_count == 0

    def _room(self, listed: list[str]) -> int:
        return 1 << 62 if self.max_listed is None else max(0, self.max_listed - len(listed))

    def problem(self, text: str) -> None:
        self.add_problems(1, (text,))

    def note(self, text: str) -> None:
        self.add_notes(1, (text,))

    def add_problems(self, count: int, texts: Iterable[str]) -> None:
        """Count ``count`` problems; list as many of ``texts`` (made lazily) as there is room for."""
        self.problems.extend(itertools.islice(texts, min(count, self._room(self.problems))))
        self.problem_count += count

    def add_notes(self, count: int, texts: Iterable[str]) -> None:
        self.notes.extend(itertools.islice(texts, min(count, self._room(self.notes))))
        self.note_count += count

    def damage(self, text: str) -> None:
        """Damage recovery repairs after a crash: a note with the abort file, a problem without."""
        (self.note if self.abort_file else self.problem)(text)

    def add_damage(self, count: int, texts: Iterable[str]) -> None:
        (self.add_notes if self.abort_file else self.add_problems)(count, texts)

    def summary_rows(self) -> list[tuple[str, Any]]:
        return [
            ("last exit", self._last_exit()),
            ("commit-log files", self.commit_log_files),
            ("records", self.records),
            ("log", self._log_range()),
            ("consume queues", self.queues),
            ("units", self.units),
            ("index files", self.index_files),
            ("index entries", self.index_entries),
            ("keys looked up", self.keys),
            ("notes", self.note_count),
            ("problems", self.problem_count),
        ]

    def _last_exit(self) -> str:
        if self.lock_held_by is not None:
            return f"in use: {describe_holder(self.lock_held_by)} has it open (abort is there until it shuts down)"
        return "abnormal (abort file present)" if self.abort_file else "normal (no abort file)"

    def _log_range(self) -> str:
        """``min .. end (why it ends)``, or why the commit log was not scanned."""
        if self.log_min_offset < 0:
            return "not scanned (the store could not be loaded)"
        reason = f" ({self.log_end_reason})" if self.log_end_reason else ""
        return f"{self.log_min_offset} .. {self.log_end}{reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "ok": self.ok,
            "abortFile": self.abort_file,
            "lockHeldBy": self.lock_held_by,
            "counts": {
                "commitLogFiles": self.commit_log_files,
                "records": self.records,
                "queues": self.queues,
                "units": self.units,
                "indexFiles": self.index_files,
                "indexEntries": self.index_entries,
                "keys": self.keys,
            },
            "logMinOffset": self.log_min_offset,
            "logEnd": self.log_end,
            "logEndReason": self.log_end_reason,
            "problemCount": self.problem_count,
            "noteCount": self.note_count,
            "problems": list(self.problems),
            "notes": list(self.notes),
            "nextSteps": list(self.next_steps),
        }


def problems_at(report: VerifyReport, rows: np.ndarray, text: Callable[[int], str]) -> None:
    """A problem for each row (a bool mask or indices), its text made only if it is listed."""
    at = np.flatnonzero(rows) if rows.dtype == bool else rows
    report.add_problems(len(at), (text(int(i)) for i in at))


def damage_at(report: VerifyReport, rows: np.ndarray, text: Callable[[int], str]) -> None:
    at = np.flatnonzero(rows) if rows.dtype == bool else rows
    report.add_damage(len(at), (text(int(i)) for i in at))


def past_log_end(
    report: VerifyReport, where: str, kind: str, rows: np.ndarray, numbers: np.ndarray, phy: np.ndarray, end: int
) -> None:
    """Units or entries (``kind``) of one file pointing at or past the log end: one line for them
    all (they are its tail, in log order: a crash's lost tail, or a live writer's), counted once."""
    at = np.flatnonzero(rows)
    if not len(at):
        return
    first, last = int(at[0]), int(at[-1])
    if len(at) == 1:
        text = f"{where} {kind} {numbers[first]} -> {phy[first]}: at or past the log end {end}"
    else:
        kinds = kind[:-1] + "ies" if kind.endswith("y") else kind + "s"
        span = f"{kinds} {numbers[first]}..{numbers[last]} ({len(at)}) -> {phy[first]}..{phy[last]}"
        text = f"{where} {span}: at or past the log end {end}"
    report.add_damage(1, [text])


def iter_problem_lines(report: VerifyReport) -> Iterator[str]:
    """The report as text lines: notes, then problems, the verdict, and the next step for each kind
    of problem."""
    for note in report.notes:
        yield f"note: {note}"
    if report.note_count > len(report.notes):
        yield f"note: ... and {report.note_count - len(report.notes)} more"
    for problem in report.problems:
        yield f"problem: {problem}"
    if report.problem_count > len(report.problems):
        yield f"problem: ... and {report.problem_count - len(report.problems)} more"
    yield f"{report.problem_count} problem(s)" if report.problem_count else "clean"
    for step in report.next_steps:
        yield f"next step: {step}"
