"""Metrics of a run: `metrics.jsonl`, TensorBoard scalars, a live progress line, stage timers and
learning-curve plots. Everything here may be called from several threads."""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from selfplay.files import WriteFailed, describe_write_error

__all__ = [
    "MetricsLogger",
    "StageTimer",
    "Throughput",
    "Timer",
    "WandbLog",
    "plot_learning_curves",
    "read_metrics",
]

METRICS_FILE = "metrics.jsonl"
# The values shown on the progress line when present, with their short labels.
DEFAULT_PROGRESS_KEYS = (
    ("status", ""),
    ("replay_fill", "replay"),
    ("learning_starts_in_s", "learning in (s)"),
    ("frames", "frames"),
    ("frames_per_s", "fps"),
    ("updates_per_s", "ups"),
    ("loss", "loss"),
    ("episode_return", "return"),
)


def _scalar(x: Any) -> Any:
    """A JSON-ready value: numpy/jax scalars and size-1 arrays become Python numbers."""
    if isinstance(x, bool | int | float | str) or x is None:
        return x
    arr = np.asarray(x)
    if arr.size != 1:
        raise ValueError(f"metric values must be scalars, got shape {arr.shape}")
    return arr.item()


class MetricsLogger:
    """Writes each `log(step, values)` to `<run_dir>/metrics.jsonl` (one JSON object per call,
    appended, so a resumed run continues the file), to TensorBoard under `<run_dir>/tensorboard`,
    and to a progress line: a tqdm bar when `stream` is a terminal, else a plain line at most
    every `print_every_s` seconds (for logs and CI)."""

    def __init__(
        self,
        run_dir: str | os.PathLike,
        *,
        tensorboard: bool = True,
        progress: bool = True,
        total_steps: int | None = None,
        print_every_s: float = 30.0,
        progress_keys: Sequence[tuple[str, str]] = DEFAULT_PROGRESS_KEYS,
        stream: TextIO | None = None,
        wandb_project: str | None = None,
        wandb_config: Mapping[str, Any] | None = None,
        seconds_before: float = 0.0,
    ) -> None:
        """
        Args:
          run_dir: the run directory (created if missing).
          tensorboard: also write TensorBoard event files.
          progress: show a progress line.
          total_steps: the step at which the run ends, for the bar's percentage; None if open.
          print_every_s: seconds between plain progress lines when not on a terminal.
          progress_keys: (metric key, label) pairs shown on the progress line when logged.
          stream: where the progress goes; default sys.stdout.
          wandb_project: also log to this Weights & Biases project (see `WandbLog`).
          wandb_config: the run's config, recorded with the W&B run.
          seconds_before: a resumed run's training time before this invocation: each record's
            `time` (and the progress line's clock) goes on from it.
        """
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self._lock = threading.Lock()
        self._start = time.monotonic() - seconds_before
        torn = False
        if self.path.exists() and self.path.stat().st_size > 0:
            with open(self.path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
        try:
            self._file = open(self.path, "a", encoding="utf-8")  # closed in close()
        except OSError as error:  # a read-only folder
            raise WriteFailed(f"cannot write {self.path}: {describe_write_error(error)}") from None
        if torn:
            # A crash cut the last line short: start ours on a fresh line.
            self._file.write("\n")
        self._writer = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._writer = SummaryWriter(logdir=str(self.run_dir / "tensorboard"))
        self._wandb = None
        if wandb_project is not None:
            self._wandb = WandbLog(self.run_dir, wandb_project, dict(wandb_config or {}))
        self._stream = stream if stream is not None else sys.stdout
        self._progress = progress
        self._progress_keys = tuple(progress_keys)
        self._print_every_s = print_every_s
        self._last_print = -math.inf
        self._latest: dict[str, Any] = {}  # the newest value of each progress key
        self._bar = None
        self._bar_step = 0
        if progress and self._stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, file=self._stream, unit="step", dynamic_ncols=True)
        self._total_steps = total_steps
        self._closed = False

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        """Records scalar `values` (numbers or strings; numpy/jax scalars accepted) at `step`.

        A value of None is not recorded; it takes its key off the progress line (a figure that
        no longer applies, such as the replay's fill once learning has started).
        """
        record = {
            "step": int(step),
            "time": time.monotonic() - self._start,
            "wall_time": time.time(),
        }
        cleared = [k for k, v in values.items() if v is None]
        record.update({k: _scalar(v) for k, v in values.items() if v is not None})
        line = json.dumps(record)
        with self._lock:
            if self._closed:
                raise RuntimeError("log() after close()")
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except OSError as error:
                detail = describe_write_error(error)
                raise WriteFailed(f"cannot write {self.path}: {detail}") from None
            if self._writer is not None:
                for key, value in record.items():
                    if key in ("step", "time", "wall_time") or isinstance(value, str | None):
                        continue
                    self._writer.add_scalar(key, value, int(step), walltime=record["wall_time"])
            if self._wandb is not None:
                self._wandb.log(record)
            if self._progress:
                for key in cleared:
                    self._latest.pop(key, None)
                self._show(int(step), record)

    def _show(self, step: int, record: Mapping[str, Any]) -> None:
        # A new status (compiling, filling the replay, learning) is printed at once.
        new_status = "status" in record and record["status"] != self._latest.get("status")
        for key, _ in self._progress_keys:
            if key in record and record[key] is not None:
                self._latest[key] = record[key]
        text = "  ".join(
            f"{label} {_fmt(self._latest[key])}".strip()
            for key, label in self._progress_keys
            if key in self._latest
        )
        if self._bar is not None:
            self._bar.update(max(0, step - self._bar_step))
            self._bar_step = max(self._bar_step, step)
            self._bar.set_postfix_str(text, refresh=False)
            return
        now = time.monotonic()
        if new_status or now - self._last_print >= self._print_every_s:
            self._last_print = now
            total = f"/{self._total_steps}" if self._total_steps else ""
            elapsed = time.strftime("%H:%M:%S", time.gmtime(now - self._start))
            print(f"[{elapsed}] step {step}{total}  {text}".rstrip(), file=self._stream, flush=True)

    def close(self) -> None:
        """Flushes and closes the files and the progress bar; later `log` calls raise."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            failed: OSError | None = None
            try:
                self._file.close()
            except OSError as error:  # what was still buffered: a line at most
                failed = error
            if self._writer is not None:
                self._writer.close()
            if self._wandb is not None:
                self._wandb.close()
            if self._bar is not None:
                self._bar.close()
            if failed is not None:
                raise WriteFailed(f"cannot write {self.path}: {describe_write_error(failed)}")

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class WandbLog:
    """A run's metrics in Weights & Biases (the optional `wandb` package).

    Online when W&B's servers answer and an API key is set (`WANDB_API_KEY` or `wandb login`),
    else offline: the run is written under `<run_dir>/wandb/` for a later `wandb sync`.
    `WANDB_MODE` overrides the choice. The W&B run id is kept in the run directory, so a resumed
    run continues the same W&B run. Charts use the learner's step (`step`) as their x-axis, so
    that figures logged late for an earlier step (an evaluation) land where they belong.
    """

    def __init__(self, run_dir: Path, project: str, config: dict[str, Any]):
        try:
            import wandb
        except ImportError:
            raise ImportError(
                "logging.wandb=true needs the wandb package: pip install 'podracer[wandb]'"
            ) from None
        id_file = run_dir / "wandb-run-id"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        self._run = wandb.init(
            project=project,
            name=run_dir.name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            config=config,
            mode=os.environ.get("WANDB_MODE") or _wandb_mode(),
        )
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")

    def log(self, record: Mapping[str, Any]) -> None:
        numbers = {
            k: v
            for k, v in record.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k not in ("time",)
        }
        self._run.log(numbers)

    def close(self) -> None:
        self._run.finish()


def _wandb_mode() -> str:
    """ "online" when W&B's API answers within a second and a key is set, else "offline"."""
    import socket

    if not os.environ.get("WANDB_API_KEY") and not (Path.home() / ".netrc").exists():
        return "offline"
    try:
        socket.create_connection(("api.wandb.ai", 443), timeout=1.0).close()
    except OSError:
        return "offline"
    return "online"


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10_000:
        return f"{x:,}"
    return str(x)


class Timer:
    """Wall time of a block: `with Timer() as t: ...; t.elapsed` (seconds)."""

    def __enter__(self) -> Timer:
        self.elapsed = 0.0
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.elapsed = time.perf_counter() - self._start


class StageTimer:
    """Accumulates the time spent in named stages (env, search, transfer, queue, update), from
    any number of threads, and reports totals and shares.

    With several threads the totals add up to more than the wall time: a share is a stage's part
    of all the time measured, which is what says where the run's threads spend their time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, float] = collections.defaultdict(float)
        self._counts: dict[str, int] = collections.defaultdict(int)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Times the block as part of stage `name`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        """Adds `seconds` measured elsewhere to stage `name`."""
        with self._lock:
            self._totals[name] += seconds
            self._counts[name] += 1

    def totals(self) -> dict[str, float]:
        """Seconds per stage since the last reset."""
        with self._lock:
            return dict(self._totals)

    def shares(self) -> dict[str, float]:
        """Each stage's fraction of all the time measured (they sum to 1)."""
        totals = self.totals()
        whole = sum(totals.values())
        return {k: (v / whole if whole > 0 else 0.0) for k, v in totals.items()}

    def summary(self, prefix: str = "time/", reset: bool = False) -> dict[str, float]:
        """`{prefix}{stage}_s`, `{prefix}{stage}_share` and `{prefix}{stage}_ms_per_call` for
        every stage, ready for `MetricsLogger.log`; `reset` starts a new period atomically."""
        with self._lock:
            totals, counts = dict(self._totals), dict(self._counts)
            if reset:
                self._totals.clear()
                self._counts.clear()
        whole = sum(totals.values())
        out = {}
        for k, v in sorted(totals.items()):
            out[f"{prefix}{k}_s"] = v
            out[f"{prefix}{k}_share"] = v / whole if whole > 0 else 0.0
            out[f"{prefix}{k}_ms_per_call"] = 1e3 * v / counts[k]
        return out

    def reset(self) -> None:
        with self._lock:
            self._totals.clear()
            self._counts.clear()


class Throughput:
    """Counts events (frames, updates) from any thread; `rate()` gives events per second since
    the previous `rate()` call (or creation)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._total = 0
        self._since = time.monotonic()

    def add(self, n: int = 1) -> None:
        with self._lock:
            self._count += n
            self._total += n

    @property
    def total(self) -> int:
        """Events counted since creation."""
        with self._lock:
            return self._total

    def rate(self) -> float:
        with self._lock:
            now = time.monotonic()
            elapsed, count = now - self._since, self._count
            self._since, self._count = now, 0
        return count / elapsed if elapsed > 0 else 0.0


def read_metrics(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of `<run_dir>/metrics.jsonl`, skipping a last line cut short by a crash."""
    records = []
    with open(Path(run_dir) / METRICS_FILE, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def _config_of(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The run's config.json as a dict; empty where there is none (a bare metrics folder)."""
    try:
        return json.loads((Path(run_dir) / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def curve_panels(two_player: bool) -> list[tuple[str, str, Callable[[str], bool]]]:
    """The panels of `learning_curves.png`: (name, axis label, which metrics it draws). A
    population member's explored values (`explore/<field>`, the schedule PBT gave it) are a
    panel of their own, never a loss or a return whatever the field's name."""

    def explored(key: str) -> bool:
        return key.startswith("explore/")

    return [
        (
            "score",
            "score against opponents",
            lambda k: k.startswith("eval/") and k.endswith("/score"),
        ),
        (
            "return",
            "return",
            lambda k: (
                "return" in k and not explored(k) and not (two_player and k == "episode_return")
            ),
        ),
        ("loss", "loss", lambda k: "loss" in k and "return" not in k and not explored(k)),
        ("explore", "explored value", explored),
    ]


def plot_learning_curves(
    run_dir: str | os.PathLike, out: str | os.PathLike | None = None
) -> Path | None:
    """Plots a run's curves from `metrics.jsonl`; returns the PNG's path, or None (and writes
    nothing) when nothing was logged to plot, as for a run stopped before its first update.

    Panels, each only when logged: the score against each fixed opponent (`eval/<player>/score`:
    1 a win, 0.5 a draw), every numeric key containing "return" (episode returns, but not the
    self-play return of a two-player game; the evaluator's greedy return), every key
    containing "loss", and a population member's explored values (`curve_panels`). The default
    output is `<run_dir>/learning_curves.png`.
    """
    # The object-oriented API with the Agg canvas: no pyplot global state, safe off the main thread.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    # In a two-player zero-sum game the self-play return (player 0's) is about 0 by construction:
    # strength shows against fixed opponents instead.
    two_player = _config_of(run_dir).get("loss", {}).get("two_player", False)
    panels = curve_panels(two_player)
    series: dict[str, tuple[list[float], list[float]]] = {}
    for r in read_metrics(run_dir):
        for key, value in r.items():
            if key in ("step", "time", "wall_time") or not isinstance(value, int | float):
                continue
            if any(wanted(key) for _, _, wanted in panels):
                xs, ys = series.setdefault(key, ([], []))
                xs.append(r["step"])
                ys.append(value)
    drawn = [(name, label, sorted(filter(wanted, series))) for name, label, wanted in panels]
    drawn = [panel for panel in drawn if panel[2]]
    if not drawn:
        return None
    # Fixed margins, in inches: matplotlib's constrained layout measured every tick label of every
    # panel again before drawing, more than half of a plot's time.
    height = 3.0 * len(drawn)
    fig = Figure(figsize=(8, height))
    fig.subplots_adjust(
        left=0.1, right=0.97, bottom=0.55 / height, top=1 - 0.45 / height, hspace=0.6 / 3.0
    )
    FigureCanvasAgg(fig)
    for i, (name, label, keys) in enumerate(drawn):
        ax = fig.add_subplot(len(drawn), 1, i + 1)
        for key in keys:
            ax.plot(*series[key], label=key, linewidth=1, marker="." if name == "score" else None)
        ax.legend(fontsize="small")
        if name == "score":
            ax.set_ylim(-0.05, 1.05)
        if name in ("loss", "explore") and all(v > 0 for k in keys for v in series[k][1]):
            ax.set_yscale("log")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.axes[-1].set_xlabel("step")
    fig.suptitle(Path(run_dir).absolute().name)
    path = Path(out) if out is not None else Path(run_dir) / "learning_curves.png"
    fig.savefig(path, dpi=100)
    return path
