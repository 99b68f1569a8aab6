"""Metrics: the jsonl records, TensorBoard events, the progress line, timers and the plot."""

import io
import json
import threading

import numpy as np
import pytest

from selfplay.metrics import (
    MetricsLogger,
    StageTimer,
    Throughput,
    Timer,
    curve_panels,
    plot_learning_curves,
    read_metrics,
)


def test_log_writes_one_json_object_per_call_and_tensorboard_events(tmp_path):
    out = io.StringIO()
    with MetricsLogger(tmp_path, stream=out, total_steps=10) as logger:
        logger.log(1, {"loss": np.float32(0.5), "episode_return": 3, "game": "pong"})
        logger.log(2, {"loss": 0.25, "updates_per_s": np.array(12.0)})
        with pytest.raises(ValueError, match="scalars"):
            logger.log(3, {"loss": np.zeros(2)})
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["step"] == 1 and first["loss"] == 0.5 and first["episode_return"] == 3
    assert first["game"] == "pong"
    assert first["time"] >= 0 and first["wall_time"] > 1e9
    assert second["updates_per_s"] == 12.0 and second["time"] >= first["time"]
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    # Not a terminal: plain lines, the first one at once, showing the newest values.
    assert "step 1/10" in out.getvalue() and "loss 0.5" in out.getvalue()
    with pytest.raises(RuntimeError, match="close"):
        logger.log(4, {"loss": 1.0})


def test_a_resumed_run_appends_and_a_torn_last_line_is_skipped(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False, progress=False) as logger:
        logger.log(1, {"loss": 1.0})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "lo')  # a crash in the middle of a write
    with MetricsLogger(tmp_path, tensorboard=False, progress=False) as logger:
        logger.log(3, {"loss": 0.5})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 3]


def test_logging_from_several_threads_keeps_every_line_whole(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False, progress=False) as logger:

        def work(i):
            for step in range(50):
                logger.log(step, {f"thread_{i}": float(step)})

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10.0)
    assert len(read_metrics(tmp_path)) == 200


def test_stage_timer_accumulates_from_threads_and_reports_shares():
    timer = StageTimer()
    timer.add("env", 3.0)
    timer.add("update", 1.0)

    def work():
        for _ in range(100):
            timer.add("env", 0.01)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10.0)
    with timer.stage("search"):
        pass
    totals = timer.totals()
    assert totals["env"] == pytest.approx(5.0)
    shares = timer.shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["env"] == pytest.approx(5.0 / (6.0 + totals["search"]))
    summary = timer.summary(reset=True)
    assert summary["time/env_s"] == pytest.approx(5.0)
    assert summary["time/update_ms_per_call"] == pytest.approx(1000.0)
    assert timer.totals() == {}
    with Timer() as t:
        pass
    assert t.elapsed >= 0.0


def test_throughput_counts_and_resets_its_rate():
    meter = Throughput()
    meter.add(100)
    assert meter.rate() > 0
    assert meter.total == 100
    assert meter.rate() == 0.0


def test_plot_learning_curves_writes_a_png(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False, progress=False) as logger:
        for step in range(20):
            logger.log(step, {"episode_return": float(step), "loss": 1.0 / (step + 1)})
            logger.log(step, {"value_loss": 0.5})
    path = plot_learning_curves(tmp_path)
    assert path == tmp_path / "learning_curves.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "empty"
    with MetricsLogger(empty, tensorboard=False, progress=False) as logger:
        logger.log(0, {"frames_per_s": 1.0})
    # Nothing to plot (a run stopped before its first update): no empty picture.
    assert plot_learning_curves(empty, out=tmp_path / "e.png") is None
    assert not (tmp_path / "e.png").exists()


def test_a_members_explored_values_are_a_panel_of_their_own():
    explored = ["explore/loss.entropy_cost", "explore/optimizer.learning_rate"]
    keys = ["episode_return", "loss", *explored]
    drawn = {name: [k for k in keys if wanted(k)] for name, _, wanted in curve_panels(False)}
    assert drawn["loss"] == ["loss"] and drawn["return"] == ["episode_return"]
    assert drawn["explore"] == explored


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_the_progress_is_a_bar(tmp_path):
    out = _Terminal()
    with MetricsLogger(tmp_path, tensorboard=False, stream=out, total_steps=100) as logger:
        logger.log(40, {"frames_per_s": 1234.5, "episode_return": 7.0})
    text = out.getvalue()
    assert "40/100" in text and "fps 1234" in text and "return 7" in text


def test_wandb_offline_writes_its_run_files(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with MetricsLogger(
        tmp_path,
        tensorboard=False,
        progress=False,
        wandb_project="podracer-test",
        wandb_config={"seed": 3},
    ) as logger:
        for step in range(3):
            logger.log(step, {"loss": 1.0 / (step + 1), "status": "learning"})
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((tmp_path / "wandb").iterdir())
    run_id = (tmp_path / "wandb-run-id").read_text()
    assert runs[0].name.endswith(run_id)
    assert list(runs[0].glob("*.wandb"))  # the run's records, for `wandb sync`
