"""What every command shares: the store options, opening the store, errors (output is
``rocketstore.cli.output``'s; what stops a command from outside is ``rocketstore.cli.stops``).

Every command takes ``STORE``, ``--config broker.conf``, repeated ``--set key=value`` (``--set``
wins over ``--config``) and ``--json``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, Any

import click

from rocketstore.cli.output import print_json_error, say, warn
from rocketstore.codec.topic import validate_topic
from rocketstore.config import StoreConfig
from rocketstore.errors import ConfigError, CorruptStoreError, InvalidTopicError, StoreNotFoundError
from rocketstore.export import QueuedUnit
from rocketstore.files.file_queue import segment_offsets
from rocketstore.log.recovery import ConfirmCut
from rocketstore.meta.root import holds_store, is_inside, require_store_or_new_folder
from rocketstore.queues.consume_queues import queues_reach
from rocketstore.store import MessageStore
from rocketstore.verify.layout import check_sizes
from rocketstore.verify.next_steps import no_room
from rocketstore.verify.recovery_plan import RecoveryPlan, lossy_cut_guard, plan_recovery, quiet_store_logs


class CommandError(click.ClickException):
    """Bad input a command found itself: ``error: ...`` on stderr and exit status 2, as for the
    store's typed errors."""

    exit_code = 2

    def show(self, file: IO[Any] | None = None) -> None:
        echo_error(self, f"error: {self.format_message()}")


def echo_error(exc: BaseException, line: str | None = None) -> None:
    """``line`` (``error: <exc>`` by default) on stderr, then ``error: <note>`` for each note added
    to the error: a store's shutdown that failed after it (``MessageStore.__exit__``)."""
    click.echo(f"error: {exc}" if line is None else line, err=True)
    for note in getattr(exc, "__notes__", ()):
        click.echo(f"error: {note}", err=True)


def with_notes(error: BaseException, cause: BaseException) -> BaseException:
    """``error`` (raised in place of ``cause``) with ``cause``'s notes, which ``echo_error`` shows."""
    for note in getattr(cause, "__notes__", ()):
        error.add_note(note)
    return error


class ProblemsFound(CommandError):
    """A command did its work but found problems it has reported (damaged records it skipped):
    ``error: ...`` on stderr and exit status 1, as ``verify`` for the problems it finds; ``details``
    go into the --json error object."""

    exit_code = 1

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details


_PROBLEMS = "rocketstore.problems"  # ctx.meta: the command found problems its status 1 reports


def found_problems() -> None:
    """Say that the running command found problems its exit status 1 reports (verify's findings, a
    message it could not read), before it writes its output: a stdout closed early (``| head``)
    then ends it with status 1, not the 0 of a quiet end (``set -o pipefail`` sees them)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta[_PROBLEMS] = True  # meta is shared by the whole context chain: the group sees it


def problems_found(ctx: click.Context) -> bool:
    """True when the command running in ``ctx`` has said it found problems (``found_problems``)."""
    return bool(ctx.meta.get(_PROBLEMS))


WARNED_UNITS = 20  # unreadable units named one by one; the rest are counted


class UnreadableUnits:
    """Consume-queue units whose message cannot be read, met by a command that reads messages
    (``export``, ``consume``): each is warned about on stderr as it is met (the first WARNED_UNITS
    one by one, with where it is and why) and counted; ``close`` says how many more there were."""

    def __init__(self, left: str) -> None:
        self.left = left  # what became of them ("not exported")
        self.count = 0

    def add(self, unit: QueuedUnit) -> None:
        self.count += 1
        found_problems()
        if self.count <= WARNED_UNITS:
            warn(
                f"WARNING: {unit.topic}/{unit.queue_id} queue offset {unit.queue_offset} (commit-log offset "
                f"{unit.commit_log_offset}, {unit.size} bytes) cannot be read, {self.left}: {unit.reason}"
            )

    def close(self) -> None:
        if self.count > WARNED_UNITS:
            warn(f"WARNING: ... and {self.count - WARNED_UNITS} more unreadable message(s), {self.left}")


@dataclass
class Common:
    """The options every command takes, resolved."""

    store: str
    config: StoreConfig
    as_json: bool
    external_commit_log: bool = False  # --external-commit-log (commands that write)

    @property
    def root(self) -> str:
        return os.path.abspath(self.store)

    @property
    def rooted_config(self) -> StoreConfig:
        """The config with ``storePathRootDir`` set to STORE, as ``MessageStore.open`` sets it."""
        return self.config.copy(storePathRootDir=self.root)

    @property
    def commit_log_paths(self) -> list[str]:
        """The commit-log folders of STORE as the config places them (``storePathCommitLog`` may move
        them; ``readOnlyCommitLogStorePaths`` adds folders that are read but get no new segment)."""
        return self.rooted_config.commit_log_folders

    @property
    def commit_logs_outside(self) -> list[str]:
        """The commit-log folders that lie outside STORE (links resolved)."""
        return [p for p in self.commit_log_paths if not is_inside(p, self.root)]


def build_config(config_file: str | None, settings: Iterable[tuple[str, str]]) -> StoreConfig:
    """``--config`` (a broker.conf) first, then every ``--set`` over it; ConfigError on an unknown key
    (in the file: one close to a store key; others are named in a warning on stderr), a bad value
    or a config file that cannot be read."""
    if not config_file:
        config = StoreConfig()
        for key, value in settings:
            config.set(key, value)
        config.validate()
        return config
    try:  # a key --set gives is not read from the file: its value there may be one refused
        return StoreConfig.from_properties(config_file, warn=lambda text: warn(f"warning: {text}"), overrides=settings)
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"--config {config_file}: cannot read it: {exc}") from None


def _parse_settings(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not KEY=VALUE (a MessageStoreConfig key by its RocketMQ name)")
        out.append((key.strip(), value.strip()))
    return out


EXTERNAL_HELP = (
    "Act on a commit log outside STORE (storePathCommitLog in --config or --set). Without it a command "
    "that writes refuses one: a broker.conf of a live broker would point it at that broker's commit log."
)


max_problems_option = click.option(
    "--max-problems",
    type=click.IntRange(min=0),
    default=100,
    show_default=True,
    help="List at most N problems (and N notes); all are counted.",
)  # verify and spark verify


class _StorePath(click.Path):
    """STORE: a folder path, never "" (an unset shell variable, quoted), which is not the current folder."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "":
            self.fail("is empty (give '.' for the current folder)", param, ctx)
        return super().convert(value, param, ctx)


def store_options(
    *, must_exist: bool = True, writes: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add STORE, --config, --set and --json (and --external-commit-log to a command that ``writes``)
    to a command; it receives a :class:`Common` first."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        if writes:
            func = click.option("--external-commit-log", is_flag=True, help=EXTERNAL_HELP)(func)

        @click.argument("store", type=_StorePath(file_okay=False, exists=must_exist))
        @click.option(
            "--config",
            "config_file",
            type=click.Path(dir_okay=False, exists=True),
            help="A broker.conf (Java properties) with MessageStoreConfig keys.",
        )
        @click.option(
            "--set",
            "settings",
            multiple=True,
            metavar="KEY=VALUE",
            callback=_parse_settings,
            help="Any MessageStoreConfig key by its RocketMQ (or snake_case) name, e.g. mappedFileSizeCommitLog=65536, "
            "and the broker keys the store uses: brokerIP1 and listenPort (the store host of records), "
            "brokerClusterName, brokerName, brokerId and flushConsumerOffsetInterval (repeatable).",
        )
        @click.option("--json", "as_json", is_flag=True, help="Machine-readable output (JSON).")
        @functools.wraps(func)
        def wrapper(
            store: str, config_file: str | None, settings: list[tuple[str, str]], as_json: bool, **kwargs: Any
        ) -> Any:
            external = bool(kwargs.pop("external_commit_log", False))
            try:
                opts = Common(store, build_config(config_file, settings), as_json, external)
                given = opts.config.store_path_root_dir
                if "storePathRootDir" in opts.config.changed() and os.path.realpath(given) != os.path.realpath(store):
                    warn(f"warning: storePathRootDir {given} is ignored: STORE ({opts.root}) is the store's folder")
                return func(opts, **kwargs)
            except BaseException as exc:
                if as_json:
                    print_json_error(exc)
                raise

        return wrapper

    return decorate


# -- opening the store ---------------------------------------------------------------------------
def check_output_file(option: str, path: str) -> None:
    """Refuse an output file (``--output``) whose folder does not exist or is not a folder, before
    any work is done (the file is written in that folder first, hidden, then renamed)."""
    if not path:
        raise CommandError(f"{option} is empty: give a file name")
    folder = os.path.dirname(path)
    if not folder or os.path.isdir(folder):
        return
    if os.path.exists(folder):
        raise CommandError(f"{option} {path}: {folder} is not a folder")
    raise CommandError(f"{option} {path}: folder {folder} does not exist")


def say_settings(opts: Common) -> None:
    """After the next steps a command printed: when it was given settings (--config, --set), that
    the commands in them need the same (a store of other file sizes is refused without them)."""
    if any(key != "storePathRootDir" for key in opts.config.changed()):
        say("next steps: give each command the same --config and --set as this one")


def check_commit_log(opts: Common, *, writes: bool) -> None:
    """Warn on stderr about a commit log outside STORE, and refuse one to a command that ``writes``
    unless --external-commit-log was given."""
    outside = opts.commit_logs_outside
    if not outside:
        return
    where = ", ".join(outside)
    keys = "storePathCommitLog"
    if set(outside) - set(opts.rooted_config.commit_log_paths):
        keys += ", readOnlyCommitLogStorePaths"
    if writes and not opts.external_commit_log:
        raise click.UsageError(
            f"the commit log is {where} ({keys}), outside {opts.root}: refusing to write to it "
            "(it may be a live broker's); give --external-commit-log if it is the one to act on"
        )
    warn(f"WARNING: the commit log is {where} ({keys}), outside {opts.root}: this command acts on it")


def log_holds_data(paths: list[str]) -> bool:
    """True when a commit-log folder holds a segment whose first record is not zeros."""
    for folder in paths:
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            try:
                with open(os.path.join(folder, name), "rb") as f:
                    head = f.read(8)
            except (IsADirectoryError, FileNotFoundError):
                continue
            if head.strip(b"\0"):
                return True
    return False


def queues_hold_data(root: str) -> bool:
    """True when ``consumequeue/`` under ``root`` holds a non-empty file."""
    for _folder, _dirs, files in os.walk(os.path.join(root, "consumequeue")):
        for name in files:
            if os.path.getsize(os.path.join(_folder, name)) > 0:
                return True
    return False


def lost_log(opts: Common) -> str | None:
    """Why opening STORE for writing would drop its queues: consume queues hold units while the
    commit log they point into is missing or empty; None when it is not so."""
    paths = opts.commit_log_paths
    if log_holds_data(paths) or not queues_hold_data(opts.root):
        return None
    missing = not any(os.path.isdir(p) for p in paths)
    return (
        f"the commit log {', '.join(paths)} is {'missing' if missing else 'empty'} but the consume queues of "
        f"{opts.root} hold units"
    )


def missing_tail(opts: Common) -> str | None:
    """Why a commit log of several folders lacks its end: consume queues reach past the end of its
    last segment while a folder is missing or holds no segment (not mounted); None when not so, or
    when the log holds no segment (``lost_log``). Recovery would drop the units and index entries
    past the log's end, as RocketMQ's does. With every folder holding segments, units past the end
    are damage (or stale), which recovery drops as RocketMQ's does. Not asked of a commit log in
    one folder (gone whole: ``lost_log``): the queues' files are read, about 60 us a queue."""
    folders = opts.commit_log_paths
    if len(folders) < 2:
        return None
    held = {folder: segment_offsets([folder]) for folder in folders}
    offsets = [offset for found in held.values() for offset in found]
    empty = [folder for folder, found in held.items() if not found]
    if not offsets or not empty:
        return None
    end = max(offsets) + opts.config.mapped_file_size_commit_log
    reach = queues_reach(opts.root)
    if reach <= end:
        return None
    return (
        f"the consume queues of {opts.root} reach commit-log offset {reach}, past the end of the commit log's last "
        f"segment ({end}), and {', '.join(empty)} holds no segment (not mounted?): a segment is missing, unless "
        "those units are stale ones a RocketMQ recovery cut left"
    )


RECOVER_FORCE = "if that is what you want, run 'rocketstore recover --force' first (copy the store before)"


def open_store(
    opts: Common,
    *,
    read_only: bool = False,
    create: bool = True,
    allow_lost_log: bool = False,
    lost_log_advice: str = RECOVER_FORCE,
    checked: bool = False,
    closed_pipe_interrupts: bool = True,
    planned: bool = False,
) -> MessageStore:
    """``MessageStore.open`` for a command, after ``check_store`` (unless the command ran it:
    ``checked``) and, for a command that creates a store, refusing a folder that is not a store but
    holds one (a broker home given for its store). Opened for writing, a closed stdout then
    interrupts the command (exit status 141) unless not ``closed_pipe_interrupts``, and a recovery
    that would drop intact records is refused as ``recover`` refuses it (``refuse_lossy_cut``)
    unless the command ``planned`` recovery itself (``recover``)."""
    writes = not read_only
    if not checked:
        check_store(opts, writes=writes, allow_lost_log=allow_lost_log, lost_log_advice=lost_log_advice)
    if writes and create and os.path.isdir(opts.root) and not holds_store(opts.root, opts.commit_log_paths):
        inside = sorted(
            e.path
            for e in os.scandir(opts.root)
            if e.is_dir() and holds_store(e.path, [os.path.join(e.path, "commitlog")])
        )
        if inside:
            raise StoreNotFoundError(
                f"{opts.root} is not a store but holds {', '.join(inside)}: did you mean {inside[0]}? "
                "(refusing to create a new store beside it)"
            )
        check_new_store_folder(opts)
    confirm_cut = None if read_only or planned else refuse_lossy_cut(opts)
    if writes and closed_pipe_interrupts:
        from rocketstore.cli.stops import mark_storing  # (stops imports this module's errors)

        mark_storing()
    return MessageStore.open(opts.root, opts.config, read_only=read_only, create=create, confirm_cut=confirm_cut)


def open_store_checked(opts: Common, check: Callable[[MessageStore], object], **kwargs: Any) -> MessageStore:
    """``open_store`` (``kwargs``) once ``check`` (what refuses a command's bad input: a topic the
    store lacks) passed on a read-only open, when the command opens STORE for writing: a refused
    command leaves the store as it was (a writable open recovers a crashed store, rewrites files).
    The checks of an open for writing (``check_store``) come first, said once: a commit log outside
    STORE is refused, not first warned about as the read-only open acting on it."""
    if not kwargs.get("read_only"):
        advice = kwargs.get("lost_log_advice", RECOVER_FORCE)
        check_store(opts, writes=True, allow_lost_log=kwargs.get("allow_lost_log", False), lost_log_advice=advice)
        with quiet_store_logs(), open_store(opts, read_only=True, create=False, checked=True) as store:
            check(store)  # the writable open tells what recovery does
        kwargs["checked"] = True
    return open_store(opts, **kwargs)


def refuse_lossy_cut(opts: Common) -> ConfirmCut | None:
    """What a command that opens STORE for writing (but ``recover``) gives ``MessageStore.open`` so
    that its recovery refuses a cut that drops intact records, as ``recover`` refuses it without
    --force (``ProblemsFound``, exit status 1, nothing changed): ``lossy_cut_guard``, planning with
    this module's ``plan_recovery``."""
    return lossy_cut_guard(opts.root, opts.config, functools.partial(_lossy_refusal, opts), plan=plan_recovery)


def _lossy_refusal(opts: Common, plan: RecoveryPlan) -> ProblemsFound:
    """The refusal of a recovery that drops intact records, naming the running command."""
    ctx = click.get_current_context(silent=True)
    command = ctx.info_name if ctx is not None and ctx.info_name else "this command"
    return ProblemsFound(refusal(opts, plan, command=command), plan=plan.to_dict())


def refusal(
    opts: Common, plan: RecoveryPlan, *, dry_run: bool = False, command: str = "recover", why: str | None = None
) -> str:
    """Why ``command`` refuses a recovery that cuts the log where intact records follow (``recover``
    itself, or a command whose open for writing recovers the store first; ``why`` says it for
    another), and the ways on (the copy to make names every commit-log folder outside STORE too)."""
    assert plan.bad is not None
    how = (
        "--force"
        if command == "recover"
        else f"rocketstore recover --force {opts.root} (with the same --config and --set)"
    )
    lines = [
        f"recovery would cut the commit log at offset {plan.end} and drop the {plan.intact_records} intact "
        f"record(s) ({plan.intact_bytes} bytes) after it" + ("" if dry_run else "; nothing was changed"),
        *(
            []
            if command == "recover"
            else [
                f"{why or f'{command} opens the store for writing, which recovers it first,'} and refuses this cut "
                f"as recover does: rocketstore recover --dry-run {opts.root} shows it"
            ]
        ),
        f"the cause: {plan.bad.describe()}",
        *(
            [
                f"{plan.maybe_stale} of them were stored before the newest record kept: maybe left on disk by "
                "an earlier cut (RocketMQ's cut leaves records past it), maybe messages of a run whose clock was "
                "behind; look at them first (rocketstore query --offset)"
            ]
            if plan.maybe_stale
            else []
        ),
        "options:",
        f"  {no_room(opts.root)}"
        if plan.recovery.no_room_for_blank
        else f"  {how}: cut the log there, as RocketMQ's recovery does (those records are lost)",
    ]
    if plan.crc_keeps_all:
        lines.append(
            "  --set checkCRCOnRecover=false: keep that record and every one after it (only its body CRC fails; "
            "the body stays as stored): every later open checks it again while it is in the last 3 segments or "
            "after a crash, and cuts the log there unless it is given the setting too (a broker: in broker.conf)"
        )
    outside = [p for p in opts.commit_logs_outside if os.path.exists(p)]
    copies = "; ".join(f"cp -a {p} {p}.bak" for p in (opts.root, *outside))
    also = f", its commit-log folder(s) outside {opts.root} too" if outside else ""
    if not plan.recovery.no_room_for_blank:  # the copy to make is the way on
        lines.append(f"  either way, copy the store first{also} ({copies})")
    return "\n".join(lines)


def check_store(
    opts: Common,
    *,
    writes: bool,
    allow_lost_log: bool = False,
    lost_log_advice: str = RECOVER_FORCE,
    as_writer: bool = False,
) -> None:
    """The checks an operator expects before a store is opened: a commit log outside STORE (warned
    about; refused for writing without --external-commit-log), a ``commitlog`` that is not a
    folder, files that are all one size other than the configured one (every setting to give named
    at once, as ``verify`` names them), and a commit log gone while the queues remain, or in
    several folders its end (recovery would drop the units: warned about when reading, refused
    when writing unless ``allow_lost_log``). ``as_writer``: a commit log outside STORE is refused as for writing (what
    ``recover --dry-run`` says recover would do)."""
    check_commit_log(opts, writes=writes or as_writer)
    for path in opts.commit_log_paths:
        if os.path.exists(path) and not os.path.isdir(path):
            raise CorruptStoreError("the commit log is not a folder", path)
    check_sizes(opts.root, opts.rooted_config)
    if not allow_lost_log:
        guard_lost_log(
            opts,
            writes=writes,
            advice=lost_log_advice,
            why="recovering it (as any open for writing does) would delete every consume queue and index "
            f"entry; {lost_log_advice}",
        )


def guard_lost_log(opts: Common, *, writes: bool, why: str, advice: str = RECOVER_FORCE) -> None:
    """A commit log gone while the queues hold units (``lost_log``), or its end gone while they
    reach past it (``missing_tail``): refused for a command that writes (CorruptStoreError
    ``<lost>: <why>``; for the end, the units lost and ``advice``), warned about for one that reads."""
    lost = lost_log(opts)
    if lost and writes:
        raise CorruptStoreError(f"{lost}: {why}")
    if lost:
        warn(f"WARNING: {lost}: every message is gone")
    tail = missing_tail(opts)
    if tail and writes:
        raise CorruptStoreError(
            f"{tail}: opening it for writing recovers it, which drops every consume-queue unit and index entry "
            f"past that end (a rebuild too); put the segment back, or, with every folder mounted, {advice}"
        )
    if tail:
        warn(f"WARNING: {tail}: the messages past its end are not read")


def check_new_store_folder(opts: Common) -> None:
    """Refuse (StoreNotFoundError) to create a store in a folder that holds files but no store (a
    typo'd path, a home folder): a missing or empty folder becomes a new store. The rule is
    ``meta.root.require_store_or_new_folder``, the Spark sink's too; only the wording, which lists
    what the folder holds, is the command line's."""
    root = opts.root
    try:
        require_store_or_new_folder(root, opts.config)
    except StoreNotFoundError:
        if not os.path.isdir(root):  # a file: worded as require_store words it
            raise
        shown = sorted(os.listdir(root))
        listed = ", ".join(shown[:5]) + (f", ... ({len(shown)} in all)" if len(shown) > 5 else "")
        raise StoreNotFoundError(
            f"{root} holds files but no store ({listed}): refusing to create a store in it; give a new or "
            "empty folder, or the store's own folder"
        ) from None


def topic_names(
    _ctx: click.Context, _param: click.Parameter, value: str | tuple[str, ...] | None
) -> str | tuple[str, ...] | None:
    """A --topic option's value(s) (one, a tuple of them or None), each a name RocketMQ accepts:
    an invalid one is a usage error (status 2), the same for every command."""
    for name in (value,) if isinstance(value, str) else value or ():
        try:
            validate_topic(name)
        except InvalidTopicError as exc:
            raise click.BadParameter(str(exc)) from None
    return value


def queue_topics(root: str) -> list[str]:
    """The topics STORE has consume queues for, as its ``consumequeue/`` folder lists them."""
    queues = os.path.join(root, "consumequeue")
    return sorted(os.listdir(queues)) if os.path.isdir(queues) else []


def known_topics(store: MessageStore) -> set[str]:
    """The topics of a store a command's --topic may name: those with consume queues and those
    topics.json lists (a topic made with no message yet)."""
    return {*store.queue_ids(), *store.topics.topics()}


def require_topics(
    root: str, present: Iterable[str], matches: Callable[[str], bool], given: str, names: Iterable[str] = ()
) -> None:
    """Refuse (CommandError, exit status 2) a topic selection ``given`` (e.g. ``--topic X``) that
    ``matches`` no topic of the store (``present``): it would read nothing. Of a selection that
    matches, warn about each topic ``names`` names that the store lacks."""
    present = sorted(present)
    if any(matches(t) for t in present):
        for name in dict.fromkeys(names):
            if name not in present:
                warn(f"WARNING: {root} has no topic {name!r}: nothing is exported for it")
        return
    shown = ", ".join(present[:_TOPICS_SHOWN]) or "none"
    if len(present) > _TOPICS_SHOWN:
        shown += f", ... ({len(present)} in all)"
    raise CommandError(f"no topic of {root} matches {given} (it has: {shown})")


_TOPICS_SHOWN = 30


# -- JSON shapes ---------------------------------------------------------------------------------
def recovery_info(store: MessageStore) -> dict[str, Any] | None:
    """The store's recovery report (None when it was opened without recovery)."""
    report = store.recovery
    return None if report is None else report.to_dict()


def file_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None
