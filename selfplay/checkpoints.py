"""Checkpoints of a run with orbax: atomic, the last K kept, the config recorded, never pickle.

A checkpoint directory (usually `<run_dir>/checkpoints`) holds one sub-directory per saved step,
each with three items: `state` (the training-state pytree; typed PRNG keys are stored as their
raw uint32 key data), `config` (the experiment's config dict as JSON) and `meta` (JSON: step, wall
time, and whatever the caller adds, such as parameter versions). Orbax writes each step into a
temporary directory and renames it when complete, so a crash leaves either a whole checkpoint or a
temporary directory that is never listed; nothing already saved is deleted except by `max_to_keep`
after a newer checkpoint is complete.

A checkpoint proves itself whole: `meta` holds SHA-256 digests (`sha256`) of each top-level
field of the state (every leaf's path, dtype, shape and bytes), of the config and of `meta`
itself, written at save and checked at every read. A damaged checkpoint (a file truncated,
emptied, missing or garbled; its metadata or config rewritten; its folder empty; its commit
marker gone) raises `DamagedCheckpoint`, one line, before a garbled byte is trained on or
played with. A resume (`newest_whole`) goes on from the newest whole checkpoint and moves each
damaged one aside (never deleted). A save that cannot be written (a full disk, a file-size
limit) raises `selfplay.files.WriteFailed`, one line naming the checkpoint and the error; the
checkpoints before it stay whole.

With `replay.checkpoint=true` each process also saves its replay beside each checkpoint
(`save_replay`: `<run_dir>/replay/process_<I>-step_<N>.npz`, plain arrays written to a temporary
file and renamed, the last two kept), and a resumed run reloads the one of its step
(`load_replay`). A run writes them through a `ReplayWriter`: the learner waits only for the
replay's copy, not for the file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp

from configs import UsageError
from selfplay.files import WriteFailed, describe_write_error, probe_writable, write_atomically

__all__ = [
    "Checkpointer",
    "DamagedCheckpoint",
    "Resumed",
    "ReplayWriter",
    "checkpoint_step",
    "config_differences",
    "flatten_dict",
    "load_replay",
    "restore_params",
    "save_replay",
]

REPLAYS_KEPT = 2  # the newest checkpoint may still be in orbax's hands when the replay is saved


def _replay_files(run_dir: Path, process: int) -> dict[int, Path]:
    """This process's saved replays by step."""
    pattern = re.compile(rf"process_{process}-step_(\d+)\.npz")
    found = {}
    for path in (run_dir / "replay").glob(f"process_{process}-step_*.npz"):
        match = pattern.fullmatch(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def save_replay(
    run_dir: str | os.PathLike, process: int, step: int, arrays: Mapping[str, Any]
) -> Path:
    """Writes a process's replay (`SequenceReplay.state`) for checkpoint `step` atomically and
    keeps the newest `REPLAYS_KEPT`; returns the file.

    Raises:
      WriteFailed: the file could not be written (named, with the system's error); the
        replays saved before stay whole and the partial file is removed.
    """
    folder = Path(run_dir) / "replay"
    path = folder / f"process_{process}-step_{step}.npz"
    tmp = path.with_name(path.name + ".tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # A writer killed mid-write left its temporary file: never read, it only takes space.
        for stale in folder.glob(f"process_{process}-step_*.npz.tmp"):
            stale.unlink(missing_ok=True)
    except OSError as error:
        raise WriteFailed(
            f"cannot write the replay {path}: {describe_write_error(error)}"
        ) from None
    write_atomically(path, tmp, lambda f: np.savez(f, **arrays), f"the replay {path}")
    saved = sorted(_replay_files(Path(run_dir), process).items())
    for _, old in saved[:-REPLAYS_KEPT]:
        old.unlink(missing_ok=True)
    return path


class ReplayWriter:
    """Writes a process's replays (`save_replay`) in a thread of its own, one at a time: a
    checkpoint holds the learner up only for the replay's copy (`SequenceReplay.state`, taken
    under its lock), not for the file's write and fsync, which for a replay of gigabytes take
    seconds. `save` first waits for the previous write (so at most one copy is in memory beside
    the replay), `wait` for the last (the run's end). A failed write raises from the next
    `save` or from `wait`. A process that dies mid-write leaves the previous file whole and no
    file for the step: its resume starts with an empty replay and says so (`load_replay` finds
    none).
    """

    def __init__(self, run_dir: str | os.PathLike, process: int) -> None:
        self.run_dir, self.process = run_dir, process
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def save(self, step: int, arrays: Mapping[str, Any]) -> None:
        """Starts writing `arrays` as this process's replay of checkpoint `step`."""
        self.wait()
        self._thread = threading.Thread(
            target=self._write, args=(step, arrays), name="replay-writer"
        )
        self._thread.start()

    def wait(self) -> None:
        """Blocks until the write under way (if any) is on disk; raises its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _write(self, step: int, arrays: Mapping[str, Any]) -> None:
        try:
            save_replay(self.run_dir, self.process, step, arrays)
        except BaseException as error:  # noqa: BLE001 - raised in the caller's thread
            self._error = error


def load_replay(run_dir: str | os.PathLike, process: int, step: int) -> dict[str, Any] | None:
    """The replay process `process` saved with checkpoint `step`, or None when there is none
    (a replay saved at another step is not used: its data would not match the parameters'
    history). A file that cannot be read is a UsageError naming it."""
    path = _replay_files(Path(run_dir), process).get(step)
    if path is None:
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read the saved replay {path}: {error}") from None


def _is_key(x: Any) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _raw_keys(tree: Any) -> Any:
    """Typed PRNG keys -> their uint32 key data, which orbax stores like any array."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _abstract(tree: Any) -> Any:
    """Shape/dtype structs of `tree` (arrays or structs already), with keys as raw key data."""
    return jax.eval_shape(_raw_keys, tree)


def flatten_dict(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as {"section.field": value}."""
    flat = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            flat.update(flatten_dict(v, key + "."))
        else:
            flat[key] = v
    return flat


# Keys under a must-match prefix that leave the saved state as it is: a run resumes with another
# value (bf16 or float32 compute on the same float32 parameters).
STATE_FREE_KEYS = frozenset({"network.compute_dtype"})


def config_differences(
    saved: Mapping[str, Any], current: Mapping[str, Any], must_match: Sequence[str]
) -> list[str]:
    """The dotted keys under the `must_match` prefixes whose values differ (or exist in one only),
    but for `STATE_FREE_KEYS`.

    `must_match=("env.name", "network")` compares `env.name` and every key under `network`.
    """
    flat_saved, flat_current = flatten_dict(saved), flatten_dict(current)

    def selected(key: str) -> bool:
        if key in STATE_FREE_KEYS:
            return False
        return any(key == p or key.startswith(p + ".") for p in must_match)

    keys = sorted(k for k in flat_saved.keys() | flat_current.keys() if selected(k))
    missing = object()
    return [k for k in keys if flat_saved.get(k, missing) != flat_current.get(k, missing)]


def _key_name(k: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _flatten_paths(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> dict[str, Any]:
    """Leaves by dotted path ("params.w", "opt_state.0.mu.b"): a NamedTuple's field, a dict's key
    and a sequence's index name a level alike, as in orbax's saved tree of dicts and lists
    (`is_leaf`: as `jax.tree_util`'s)."""
    return {
        ".".join(_key_name(k) for k in path): x
        for path, x in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)[0]
    }


def _is_empty(node: Any) -> bool:
    """None or a container with nothing in it: a node that holds no array, which orbax keeps in
    its saved tree (an optax `EmptyState` as None) and a tree's leaves do not show."""
    return node is None or (isinstance(node, (dict, list, tuple)) and not node)


def _tree_differences(saved: Any, target: Any) -> list[str]:
    """'path: saved dtype[shape] != expected dtype[shape]' for each leaf that differs, and for
    each node that holds no array on one side only ("empty" against "missing" or an array): a
    whole checkpoint of another state's structure is refused here in one line, where orbax's
    own refusal could not be told from a damaged file."""
    missing = object()
    saved_named, target_named = (_flatten_paths(tree, _is_empty) for tree in (saved, target))

    def describe(x: Any) -> str:
        return (
            "missing" if x is missing else "empty" if _is_empty(x) else f"{x.dtype}{list(x.shape)}"
        )

    diffs = []
    for key in sorted(saved_named.keys() | target_named.keys()):
        s, t = saved_named.get(key, missing), target_named.get(key, missing)
        if _is_empty(s) and _is_empty(t):
            continue  # None against an EmptyState: orbax restores one as the other
        if (
            s is missing
            or t is missing
            or _is_empty(s)
            or _is_empty(t)
            or tuple(s.shape) != tuple(t.shape)
            or s.dtype != t.dtype
        ):
            diffs.append(f"{key}: saved {describe(s)} != expected {describe(t)}")
    return diffs


DIGESTS = "sha256"  # the key in `meta` of the digests that prove a checkpoint whole
COMMIT_MARKER = "commit_success.txt"  # orbax writes it into a step's folder as the save ends
DAMAGED_FOLDER = "checkpoints-damaged"  # beside `checkpoints/`: where a resume sets damage aside


def _state_digests(tree: Any) -> dict[str, str]:
    """SHA-256 of each top-level field of a state (raw keys: as saved), over every leaf's path,
    dtype, shape and bytes, in the order of the paths. A state that is one array is field ""."""
    digests: dict[str, Any] = {}
    for path, leaf in sorted(_flatten_paths(_raw_keys(tree)).items()):
        field = path.split(".", 1)[0]
        value = np.ascontiguousarray(np.asarray(leaf))
        digest = digests.setdefault(field, hashlib.sha256())
        digest.update(f"{path}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return {field: digest.hexdigest() for field, digest in digests.items()}


def _json_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _sealed(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` with the digest of its own content added to its digests (`update_metadata` seals
    it again)."""
    digests = dict(meta.get(DIGESTS, {}))
    digests.pop("meta", None)
    unsealed = {**meta, DIGESTS: digests}
    return {**unsealed, DIGESTS: {**digests, "meta": _json_digest(unsealed)}}


class DamagedCheckpoint(UsageError):
    """A checkpoint that is not whole: `reason` says why in a few words (also the name of the
    folder a resume sets it aside in)."""

    def __init__(self, path: Path, step: int, reason: str, detail: str = "", others=()):
        self.path, self.step, self.reason, self.detail = path, step, reason, detail
        self.why = f"{reason}: {detail}" if detail else reason
        more = f"; other saved steps: {list(others)}" if others else ""
        super().__init__(f"checkpoint {path} is damaged ({self.why}){more}")


class Resumed(NamedTuple):
    """What `Checkpointer.newest_whole` found: the newest whole checkpoint and what it skipped."""

    step: int | None  # None: no checkpoint at all (a new run)
    state: Any  # the restored state (the target's structure); None with no checkpoint
    metadata: dict[str, Any]  # the checkpoint's metadata
    damaged: list[tuple[DamagedCheckpoint, Path | None]]  # newest first; where each was moved


def _first_line(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


class _QuietOrbax(logging.Filter):
    """Drops orbax's own log records below CRITICAL (its warnings about a missing metadata file,
    the traceback its background thread logs for a failed write): every failure of a save or a
    read reaches the caller as one line of ours instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.CRITICAL or f"{os.sep}orbax{os.sep}" not in record.pathname


def _quiet_orbax() -> None:
    absl = logging.getLogger("absl")
    if not any(isinstance(f, _QuietOrbax) for f in absl.filters):
        absl.addFilter(_QuietOrbax())


def _is_closed_loop_callback(error: BaseException | None) -> bool:
    return isinstance(error, RuntimeError) and str(error) == "Event loop is closed"


def _drop_closed_loop_callbacks() -> None:
    """After a failed read or write, TensorStore completes the operations still in flight and
    calls back into orbax's event loop, which orbax closed as the first error returned: Python
    reports each callback's `RuntimeError: Event loop is closed` (as an unraisable exception, or
    through `sys.excepthook` from TensorStore's thread), a traceback after the line that already
    said what was wrong. These hooks drop exactly those; every other exception goes to the hook
    before them."""
    if getattr(sys.unraisablehook, "drops_closed_loop_callbacks", False):
        return
    previous_unraisable, previous_except = sys.unraisablehook, sys.excepthook

    def unraisable_hook(unraisable: Any) -> None:
        if not _is_closed_loop_callback(unraisable.exc_value):
            previous_unraisable(unraisable)

    def except_hook(kind: Any, error: BaseException, traceback: Any) -> None:
        if not _is_closed_loop_callback(error):
            previous_except(kind, error, traceback)

    unraisable_hook.drops_closed_loop_callbacks = True  # type: ignore[attr-defined]
    sys.unraisablehook, sys.excepthook = unraisable_hook, except_hook


class Checkpointer:
    """Saves and restores the training state of one run.

    Usage:

        ckpt = Checkpointer(run_dir / "checkpoints", max_to_keep=3, must_match=("env", "network"))
        found = ckpt.newest_whole(initial_state, config_dict, set_aside_in=run_dir)  # resume
        state = found.state if found.step is not None else initial_state
        ...
        ckpt.save(step, state, config_dict)           # every N steps and at stop
        ckpt.close()                                  # waits for the last write

    `save` returns once the arrays are copied to host memory (and their digests taken); the
    files are written in a background thread (orbax's asynchronous checkpointing), so the
    learner is not held up.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        max_to_keep: int | None = 3,
        must_match: Sequence[str] = (),
        *,
        read_only: bool = False,
        complete_saved: Callable[[dict], dict] | None = None,
    ) -> None:
        """
        Args:
          directory: the checkpoint directory; created on the first save unless read_only.
          max_to_keep: how many of the newest checkpoints to keep; None keeps all.
          must_match: dotted config keys (or prefixes) that must equal the saved config's to
            restore: whatever changes the shapes in the state or the game played.
          read_only: only restore (the arena's use); a missing directory is then an error.
          complete_saved: fills in what a saved config lacks (fields added since it was saved)
            before it is compared (`configs.with_predated_fields`); None compares it as saved.
        """
        self.directory = Path(directory).absolute()
        self.must_match = tuple(must_match)
        self.complete_saved = complete_saved or (lambda config: config)
        if read_only and not self.directory.is_dir():
            raise UsageError(f"no checkpoint directory at {self.directory}")
        if max_to_keep is not None and max_to_keep < 1:
            raise UsageError(f"max_to_keep must be >= 1 or None, got {max_to_keep}")
        _quiet_orbax()
        _drop_closed_loop_callbacks()  # before any read or write can fail
        options = ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=not read_only, read_only=read_only
        )
        # Handlers named up front, so that a fresh process can read metadata before any restore.
        handlers = {
            "state": ocp.PyTreeCheckpointHandler(),
            "config": ocp.JsonCheckpointHandler(),
            "meta": ocp.JsonCheckpointHandler(),
        }
        try:
            self._manager = ocp.CheckpointManager(
                self.directory, options=options, item_handlers=handlers
            )
        except OSError as error:
            raise WriteFailed(
                f"cannot create the checkpoint directory {self.directory}: "
                f"{describe_write_error(error)}"
            ) from None
        self._writing: int | None = None  # the step whose files may still be in flight

    def all_steps(self) -> list[int]:
        """The steps of the complete checkpoints, oldest first."""
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        """The newest complete checkpoint's step, or None when there is none."""
        steps = self.all_steps()
        return steps[-1] if steps else None

    def save(
        self,
        step: int,
        state: Any,
        config: Mapping[str, Any],
        metadata: Mapping[str, Any] | None = None,
    ) -> bool:
        """Saves `state` (a pytree of arrays) with the config dict and metadata as `step`.

        Returns False without writing when `step` is already saved (a resumed run that saves
        the step it restored). `metadata` must be JSON-serialisable (e.g. parameter versions).

        Raises:
          WriteFailed: the previous save, or this one, could not be written (its files are
            left in orbax's temporary folder, never listed as a checkpoint).
        """
        step = int(step)
        if step in self._manager.all_steps():
            return False
        config = dict(config)
        digests = {"state": _state_digests(state), "config": _json_digest(config)}
        meta = _sealed({"step": step, "time": time.time(), **(metadata or {}), DIGESTS: digests})
        args = ocp.args.Composite(
            state=ocp.args.PyTreeSave(_raw_keys(state)),
            config=ocp.args.JsonSave(config),
            meta=ocp.args.JsonSave(meta),
        )
        self.wait()  # the previous save's error names the previous step
        self._writing = step
        # A folder that cannot be written (read-only, not ours) is refused before orbax starts:
        # its save fails at its first step then, and the threads it had started for the items
        # wait for that step's signal until its timeout, holding the process open at exit.
        try:
            probe_writable(self.directory)
        except OSError as error:
            raise WriteFailed(
                f"cannot write checkpoint {self.directory / str(step)}: "
                f"{describe_write_error(error)}"
            ) from None
        with self._writes():
            return bool(self._manager.save(step, args=args, force=True))

    def update_metadata(self, step: int, metadata: Mapping[str, Any]) -> None:
        """Adds `metadata` to the metadata of the saved `step`, atomically (a temporary file
        renamed over the item's JSON, its digest sealed again): a run that stops at a step it had
        already saved records its final counts there. The save of `step` must be finished
        (`wait`); over several processes one of them calls this (it reads and writes the file
        alone: no collective)."""
        step = int(step)
        path = self.directory / str(step) / "meta" / "metadata"
        try:  # read as a file, not through orbax, whose reads are collectives over processes
            saved = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise self._damaged(step, "unreadable metadata", _first_line(error)) from None
        meta = _sealed({**self._checked_meta(step, saved), **metadata})
        write_atomically(
            path,
            path.with_name(f".metadata.tmp-{os.getpid()}"),
            lambda f: f.write(json.dumps(meta).encode()),
            f"checkpoint {path.parent.parent}'s metadata",
        )

    def wait(self) -> None:
        """Blocks until every started save is on disk (and raises a save's error as
        WriteFailed)."""
        with self._writes():
            self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves and releases the manager (a save's error: WriteFailed)."""
        with self._writes():
            self._manager.close()

    @contextlib.contextmanager
    def _writes(self) -> Iterator[None]:
        """Around orbax's calls that finish a save: its error, however orbax words it, becomes
        one line naming the checkpoint and the system's error."""
        try:
            yield
        except (UsageError, WriteFailed):
            raise
        except Exception as error:
            where = self.directory / str(self._writing) if self._writing is not None else None
            raise WriteFailed(
                f"cannot write checkpoint {where or self.directory}: {describe_write_error(error)}"
            ) from None

    def _step_or_latest(self, step: int | None) -> int:
        """The newest complete step, or `step` checked to be saved: the one rule every restore
        and `checkpoint_step` resolve a step by. UsageError, one line, when there is none."""
        steps = self.all_steps()
        if step is None:
            if not steps:
                raise UsageError(f"no complete checkpoint in {self.directory}")
            return steps[-1]
        if step not in steps:
            raise UsageError(
                f"no checkpoint for step {step} in {self.directory}; saved steps: {steps}"
            )
        return int(step)

    def _damaged(self, step: int, reason: str, detail: str = "") -> DamagedCheckpoint:
        others = [s for s in self.all_steps() if s != step]
        return DamagedCheckpoint(self.directory / str(step), step, reason, detail, others)

    def _restore_items(self, step: int, what: str = "state", **items: Any) -> Any:
        try:
            return self._manager.restore(step, args=ocp.args.Composite(**items))
        except UsageError:
            raise
        except Exception as e:
            _drop_closed_loop_callbacks()
            raise self._damaged(step, f"unreadable {what}", _first_line(e)) from None

    def _verified_meta(self, step: int) -> dict[str, Any]:
        """The metadata of the saved `step`, its folder and digest checked: DamagedCheckpoint
        for an empty folder, a missing commit marker, or metadata unreadable or rewritten."""
        folder = self.directory / str(step)
        if not folder.is_dir() or not any(folder.iterdir()):
            raise self._damaged(step, "empty folder")
        if not (folder / COMMIT_MARKER).is_file():
            raise self._damaged(step, "no commit marker", f"{COMMIT_MARKER} is missing")
        meta = self._restore_items(step, "metadata", meta=ocp.args.JsonRestore()).meta
        return self._checked_meta(step, meta)

    def _checked_meta(self, step: int, meta: Any) -> dict[str, Any]:
        """`meta`, read from the saved `step`, if its digest holds: else DamagedCheckpoint."""
        if not isinstance(meta, dict):
            raise self._damaged(step, "unreadable metadata", "not a JSON object")
        digests = meta.get(DIGESTS)
        if digests is None:  # saved before checkpoints carried digests: nothing to check
            return meta
        if not isinstance(digests, dict) or _sealed(meta)[DIGESTS].get("meta") != digests.get(
            "meta"
        ):
            raise self._damaged(step, "metadata rewritten", "its digest differs")
        return meta

    def _check_state(self, step: int, meta: Mapping[str, Any], tree: Any, fields: Any) -> None:
        """DamagedCheckpoint unless the restored `tree` (raw keys) has the digests saved for
        `fields` (None: all of them)."""
        saved = meta.get(DIGESTS, {}).get("state")
        if saved is None:
            return
        got = _state_digests(tree)
        for field in sorted(saved) if fields is None else fields:
            if got.get(field) != saved.get(field):
                raise self._damaged(
                    step, "state garbled", f"the digest of {field or 'the state'} differs"
                )

    def _saved_tree(self, step: int) -> Any:
        """The saved state's structure with each leaf's shape and dtype, read from metadata."""
        try:
            saved = self._manager.item_metadata(step).state
        except Exception as e:
            raise self._damaged(step, "unreadable metadata", _first_line(e)) from None
        if saved is None:
            raise self._damaged(step, "no saved state")
        return getattr(saved, "tree", saved)

    def restore_config(self, step: int | None = None) -> dict[str, Any]:
        """The config dict saved with `step` (default: the newest), checked against its
        digest."""
        step = self._step_or_latest(step)
        meta = self._verified_meta(step)
        config = self._restore_items(step, "config", config=ocp.args.JsonRestore()).config
        saved = meta.get(DIGESTS, {}).get("config")
        if saved is not None and _json_digest(config) != saved:
            raise self._damaged(step, "config rewritten", "its digest differs")
        return config

    def restore_metadata(self, step: int | None = None) -> dict[str, Any]:
        """The metadata saved with `step` (default: the newest): step, time, and the caller's
        (the digests, `sha256`, checked and left out)."""
        meta = self._verified_meta(self._step_or_latest(step))
        return {k: v for k, v in meta.items() if k != DIGESTS}

    def check_config(self, config: Mapping[str, Any], step: int | None = None) -> None:
        """Raises UsageError naming the `must_match` keys where `config` differs from the saved."""
        step = self._step_or_latest(step)
        saved = self.complete_saved(self.restore_config(step))
        diffs = config_differences(saved, config, self.must_match)
        if diffs:
            raise UsageError(
                f"checkpoint {self.directory / str(step)} was saved with a different config: "
                f"{', '.join(diffs)} differ; start a new run directory or restore those values"
            )

    def restore(
        self,
        step: int | None = None,
        target: Any = None,
        config: Mapping[str, Any] | None = None,
    ) -> Any:
        """The state saved at `step` (default: the newest complete checkpoint), checked whole.

        Args:
          step: which checkpoint; None for the newest.
          target: the state's structure (concrete arrays or `jax.ShapeDtypeStruct`s, e.g. from
            `jax.eval_shape(init, key)`): the result has its structure, dtypes and typed PRNG
            keys. None returns the saved tree as nested dicts and lists of arrays, keys raw.
          config: when given, first checked against the saved config on `must_match`.

        Raises:
          DamagedCheckpoint: the checkpoint is not whole (a UsageError: one line).
          UsageError: no such checkpoint, a config that differs on `must_match`, or a state
            whose shapes differ from `target` (the leaves are named).
        """
        step = self._step_or_latest(step)
        meta = self._verified_meta(step)
        if config is not None:
            self.check_config(config, step)
        if target is None:
            raw = self._restore_items(step, state=ocp.args.PyTreeRestore()).state
            self._check_state(step, meta, raw, None)
            return raw
        abstract = _abstract(target)
        saved_tree = self._saved_tree(step)
        diffs = _tree_differences(saved_tree, abstract)
        if diffs:
            raise UsageError(
                f"checkpoint {self.directory / str(step)} does not match the expected state: "
                + "; ".join(diffs[:10])
                + (f" (and {len(diffs) - 10} more)" if len(diffs) > 10 else "")
            )
        restore_args = ocp.checkpoint_utils.construct_restore_args(abstract)
        raw = self._restore_items(step, state=ocp.args.PyTreeRestore(abstract, restore_args)).state
        self._check_state(step, meta, raw, None)
        return jax.tree.map(
            lambda t, x: (
                # device_put, not jnp.asarray: that compiles a program for each shape of leaf.
                jax.random.wrap_key_data(x, dtype=t.dtype) if _is_key(t) else jax.device_put(x)
            ),
            target,
            raw,
        )

    def restore_subtree(self, field: str, step: int | None = None) -> Any:
        """Only the top-level `field` of the saved state (e.g. "params"), as nested dicts of
        numpy arrays, without reading the rest (optimizer state, keys) from disk; checked
        against its digest."""
        step = self._step_or_latest(step)
        meta = self._verified_meta(step)
        saved_tree = self._saved_tree(step)
        if not isinstance(saved_tree, Mapping) or field not in saved_tree:
            raise UsageError(f"checkpoint {self.directory / str(step)} has no top-level {field!r}")
        item = {
            field: jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), saved_tree[field])
        }
        args = ocp.args.PyTreeRestore(
            item, ocp.checkpoint_utils.construct_restore_args(item), partial_restore=True
        )
        restored = self._restore_items(step, state=args).state
        self._check_state(step, meta, restored, [field])
        return restored[field]

    def newest_whole(
        self,
        target: Any,
        config: Mapping[str, Any] | None = None,
        set_aside_in: str | os.PathLike | None = None,
    ) -> Resumed:
        """The newest whole checkpoint, restored as `restore(step, target, config)` restores it:
        each newer one found damaged is skipped and, with `set_aside_in` (a run directory), moved
        to `<set_aside_in>/checkpoints-damaged/<step>-<reason>` (never deleted; over several
        processes, one of them moves them).

        Raises:
          UsageError: checkpoints were saved and none is whole (one line: how many were damaged
            and where they are); or `restore`'s refusal of a whole one (a config that differs on
            `must_match`, another state's shapes).
        """
        damaged: list[tuple[DamagedCheckpoint, Path | None]] = []
        for step in reversed(self.all_steps()):
            try:
                metadata = self.restore_metadata(step)
                state = self.restore(step, target=target, config=config)
            except DamagedCheckpoint as error:
                moved = self._set_aside(error, Path(set_aside_in)) if set_aside_in else None
                damaged.append((error, moved))
                continue
            return Resumed(step, state, metadata, damaged)
        if damaged:
            newest, moved = damaged[0]
            where = f", set aside in {moved.parent}" if moved is not None else ""
            raise UsageError(
                f"no whole checkpoint left in {self.directory}: {len(damaged)} damaged{where} "
                f"(the newest, {newest.step}: {newest.why}); start a new --run-dir"
            )
        return Resumed(None, None, {}, [])

    def _set_aside(self, error: DamagedCheckpoint, run_dir: Path) -> Path | None:
        """Moves a damaged checkpoint's folder out of the directory orbax lists."""
        folder = run_dir / DAMAGED_FOLDER
        reason = re.sub(r"[^a-z0-9]+", "-", error.reason.lower()).strip("-")
        destination = folder / f"{error.step}-{reason}"
        n = 1
        while destination.exists():  # set aside before: keep both
            n += 1
            destination = folder / f"{error.step}-{reason}-{n}"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.move(str(error.path), str(destination))
        except FileNotFoundError:  # another process of the job moved it first
            destination = None  # type: ignore[assignment]
        except OSError as move_error:
            raise WriteFailed(
                f"cannot set the damaged checkpoint {error.path} aside in {folder}: "
                f"{describe_write_error(move_error)}"
            ) from None
        self._manager.reload()
        return destination


def checkpoint_step(run_dir: str | os.PathLike, step: int | None = None) -> int:
    """The step of a run's newest complete checkpoint, or `step` checked to be one of its saved.

    `run_dir` is a run directory holding `checkpoints/`. Resolving the step before restoring
    names the checkpoint read even while training saves newer ones.

    Raises:
      UsageError: one line, for no `checkpoints/` folder, no complete checkpoint in it, or no
        checkpoint for `step` (the saved steps listed).
    """
    run_dir = Path(run_dir)
    directory = run_dir / "checkpoints"
    if not directory.is_dir():
        raise UsageError(
            f"{run_dir} has no checkpoints/ folder: it is not a trained run "
            "(or training has not saved a checkpoint yet)"
        )
    ckpt = Checkpointer(directory, max_to_keep=None, read_only=True)
    try:
        return ckpt._step_or_latest(step)
    finally:
        ckpt.close()


def restore_params(
    run_dir: str | os.PathLike, step: int | None = None, target: Any = None, field: str = "params"
) -> Any:
    """The `params` of a run's newest (or given) checkpoint, for the arena and evaluation.

    `run_dir` is a run directory holding `checkpoints/`, or a checkpoint directory itself. With
    `target` (the params' structure) the result has its structure and dtypes; otherwise nested
    dicts of arrays. The state saved must have a top-level `params` field (or key). The step is
    resolved as `checkpoint_step` resolves it, with the same errors.
    """
    run_dir = Path(run_dir)
    directory = run_dir / "checkpoints" if (run_dir / "checkpoints").is_dir() else run_dir
    ckpt = Checkpointer(directory, max_to_keep=None, read_only=True)
    try:
        step = ckpt._step_or_latest(step)
        ckpt.restore_config(step)  # a rewritten config is damage too, though the params are read
        params = ckpt.restore_subtree(field, step)
    finally:
        ckpt.close()
    if target is None:
        return params
    diffs = _tree_differences(params, _abstract(target))
    if diffs:
        raise UsageError(
            f"the params in {directory} do not match the network: " + "; ".join(diffs[:10])
        )
    flat = _flatten_paths(params)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(target)
    return jax.tree_util.tree_unflatten(
        treedef,
        # device_put, not jnp.asarray: that compiles a program for each shape of leaf.
        [
            jax.device_put(np.asarray(flat[".".join(_key_name(k) for k in path)], t.dtype))
            for path, t in leaves
        ],
    )
