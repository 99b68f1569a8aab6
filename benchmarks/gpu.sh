#!/usr/bin/env bash
# The GPU checklist's throughput figures in one call, each step under its own time limit and all
# of them under one budget, so a broken step costs its own time only and the rest still run.
#
#   OUT=/tmp/gpu BUDGET=480 bash benchmarks/gpu.sh [step ...]   # steps: below; none: all, in order
#
# Offline machines: `SITE=path/to/site.tgz` is unpacked to /tmp/site and put on PYTHONPATH first
# (the project's extras, trimmed to what these steps import; docs/getting-started.md, "Offline").
# Every step's output goes to $OUT/gpu.log, its JSON lines also to $OUT/results.jsonl (one file
# each: the device tool brings back at most 8 files).
set -u
OUT=${OUT:-runs/gpu}
mkdir -p "$OUT"
LOG="$OUT/gpu.log"
RESULTS="$OUT/results.jsonl"
export PY=${PY:-python3}
DEADLINE=$((SECONDS + ${BUDGET:-480}))
export PYTHONUNBUFFERED=1
if [ -n "${SITE:-}" ] && [ -f "$SITE" ]; then
    mkdir -p /tmp/site && tar xzf "$SITE" -C /tmp/site
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi

# step NAME LIMIT_S COMMAND...: runs COMMAND for at most LIMIT_S (less if the budget runs out).
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - SECONDS))
    if [ "$left" -lt 20 ]; then
        echo "== $name: skipped, the budget is spent" | tee -a "$LOG"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$LOG"
    local start=$SECONDS
    timeout -k 5 "$limit" "$@" >"$OUT/step.log" 2>&1
    local rc=$?
    cat "$OUT/step.log" >>"$LOG"
    grep '^{' "$OUT/step.log" | sed "s/^{/{\"step\": \"$name\", /" | tee -a "$RESULTS"
    echo "== $name: rc $rc after $((SECONDS - start)) s" | tee -a "$LOG"
    [ "$rc" = 0 ] || grep -v '^{' "$OUT/step.log" | tail -8
    rm -f "$OUT/step.log"
}

env_check() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
    "$PY" - <<'EOF'
import importlib, json, os, platform
import jax
names = ["jax", "jaxlib", "flax", "optax", "chex", "orbax.checkpoint", "numpy", "mctx", "pgx",
         "gymnax", "envpool", "pyspiel", "tensorboardX"]
versions = {}
for name in names:
    try:
        module = importlib.import_module(name)
        versions[name] = getattr(module, "__version__", "?")
    except Exception as error:  # noqa: BLE001 - report every missing part at once
        versions[name] = f"FAILED: {type(error).__name__}: {error}"
for name in ["search", "muzero", "configs", "selfplay.train", "arena"]:
    importlib.import_module(name)
print(json.dumps({"python": platform.python_version(), "devices": [str(d) for d in jax.devices()],
                  "device_kind": jax.devices()[0].device_kind, "cpus": os.cpu_count(), **versions}))
EOF
}
export -f env_check

# The Pong learning checks (at least 10 minutes of training) outlast one device call (600 s with
# the start), so each spans two calls on the same warm machine: `learn_start learn_wait` (V-trace)
# or `learn_start_muzero learn_wait` in the first (it trains in a session of its own, which
# outlives the call, and the call waits until its budget is spent), then at once (the machine
# goes back after 30 s idle) `learn_collect` in the second, which waits for the run's end and
# brings back its metrics, curves and log (named after the run).
LEARN_ROOT=${LEARN_ROOT:-/tmp/podracer-learn}
# MuZero on Pong for issue 53's check (greedy >= +15 within 10 minutes at >= 6,200 frames/s):
# pong_muzero_small's network at the batch and envs that made 8,442 frames/s on the H200
# (`muzero_batch`), 16-simulation Gumbel MuZero, and what MinAtar taught: value targets from a
# target network, the consistency loss, prioritised windows without weights. Not yet run.
MUZERO_PONG="actors.envs_per_thread=64 learner.batch_size=256 search.num_simulations=16"
MUZERO_PONG="$MUZERO_PONG learner.target_update_every=200 reanalyse.value=target_network"
MUZERO_PONG="$MUZERO_PONG loss.consistency_weight=2 replay.priority_alpha=0.8"
MUZERO_PONG="$MUZERO_PONG replay.priority_beta=0 replay.capacity=200000"
learn_start() {  # NAME PRESET OVERRIDES...: trains in a session of its own, in $LEARN_ROOT/NAME
    local run="$LEARN_ROOT/$1" preset=$2
    shift 2
    mkdir -p "$run"
    # The learning run and the steps that follow it in this call share the GPU: each process
    # takes a fixed part of its memory (JAX's default preallocates 75% for the first alone).
    export XLA_PYTHON_CLIENT_MEM_FRACTION=0.5
    XLA_PYTHON_CLIENT_MEM_FRACTION=0.4 setsid nohup "$PY" -m podracer train --config "$preset" \
        --run-dir "$run" --quiet "$@" "learner.max_seconds=${LEARN_SECONDS:-630}" \
        >"$run.log" 2>&1 </dev/null &
    echo "== learn_start: $preset on Pong for ${LEARN_SECONDS:-630} s in $run (steps after" \
        "this one in the call run beside it: their rates are lower bounds)" | tee -a "$LOG"
}
learn_wait() {
    sleep "$1"
    tail -n 3 "$LEARN_ROOT"/*.log
}
learn_collect() {
    for log in "$LEARN_ROOT"/*.log; do
        local run=${log%.log} name
        name=$(basename "$run")
        while pgrep -f -- "--run-dir $run" >/dev/null; do sleep 5; done
        cp "$run/metrics.jsonl" "$OUT/${name}_metrics.jsonl"
        cp "$run/learning_curves.png" "$OUT/${name}_learning_curves.png"
        cp "$log" "$OUT/$name.log"
        tail -n 4 "$log"
    done
}
export -f learn_wait learn_collect
export LEARN_ROOT OUT

C4="--only az_connect_four_2x64 --set actors.threads_per_device=1 actors.envs_per_thread=1024"
# XLA's command buffers (CUDA graphs) for loops too: its defaults and WHILE, CONDITIONAL, the
# setting of benchmarks/search.py's --graphs (GRAPH_COMPILER_OPTIONS) for a whole process.
GRAPHS="--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL --xla_gpu_graph_min_graph_size=1"
# Go 9x9 through the same AlphaZero configuration (2 x 32 channels, 32 simulations, 1,024 games):
# pgx's example's own game and batch beside its loop.
GO9="$C4 env.name=pgx:go_9x9"
# In the order of ../shared/GPU.md; a session that goes on from an earlier one names the steps
# still open. The H200 of 2026-11-28 ran `env bars_c4 search_engines search_profile` (309 s with
# the start) and `bars_go9 learner` (395 s): next, what those figures asked for,
# `env search_checks search_graphs bars_c4_b4096 bars_c4_graphs` (about 9 minutes), then
# `search_profile learner atari`.
ALL="env search_fixed search_checks search_graphs bars_c4_b4096 bars_c4_graphs search_profile learner atari"
ALL="$ALL bars_c4 bars_go9 search_engines search selfplay anakin"
ALL="$ALL atari_muzero vtrace_threads vtrace_async muzero_batch prefetch go9 go9_anakin atari100k"
ALL="$ALL population search_sampled"
for name in ${@:-$ALL}; do
    case $name in
    env) step env 90 bash -c env_check ;;
    learner)
        step learner 260 "$PY" benchmarks/learner.py --network atari --batch-size 256 \
            --steps 10 --tflops --compute-dtype both ;;
    search)
        step search 90 "$PY" benchmarks/search.py --algorithm muzero --batch-size 1024 \
            --simulations 32 --rounds 3 --min-seconds 0.5 --clock wall --reuse-games 0 ;;
    search_engines)
        # Issue 54's bar: search.engine against raw mctx (same network, keys, process; rounds
        # alternated), MuZero and Gumbel at batch 1,024, 32 then 50 simulations. About 4 minutes
        # on the CPU side for compiling four pairs; each pair's timing is seconds on the card.
        step search_engines_32 150 "$PY" benchmarks/search.py --algorithm muzero gumbel_muzero \
            --engine podracer --batch-size 1024 --simulations 32 --rounds 5 --min-seconds 0.5 \
            --clock wall --reuse-games 0
        step search_engines_50 150 "$PY" benchmarks/search.py --algorithm muzero gumbel_muzero \
            --engine podracer --batch-size 1024 --simulations 50 --rounds 5 --min-seconds 0.5 \
            --clock wall --reuse-games 0 ;;
    search_checks)
        # The H200 (2026-11-28): the search's card busy 0.31 of the span, each level of the
        # descent a wait on the host. SearchConfig.descent_levels_per_check 1, 2 and 4 against
        # raw mctx, MuZero and Gumbel at 1,024 x 32 (a line each, about 15 s each).
        step search_checks 150 "$PY" benchmarks/search.py --algorithm muzero gumbel_muzero \
            --batch-size 1024 --simulations 32 --rounds 5 --min-seconds 0.5 --clock wall \
            --reuse-games 0 --levels-per-check 1 2 4 ;;
    search_graphs)
        # Both searches compiled with XLA's command buffers for loops (CUDA graphs with
        # conditional nodes: no host between levels), 1 and 2 levels per check.
        step search_graphs 150 "$PY" benchmarks/search.py --algorithm muzero gumbel_muzero \
            --batch-size 1024 --simulations 32 --rounds 5 --min-seconds 0.5 --clock wall \
            --reuse-games 0 --graphs on --levels-per-check 1 2 ;;
    search_fixed)
        # Issue 83: the descent and backup with known trip counts (levels_per_check 0: no host
        # wait at all), against the engine as it is (1), with and without XLA's command buffers
        # for loops; both searches (and raw mctx) at max_depth 12, 32 and 50 simulations.
        step search_fixed 300 "$PY" benchmarks/search.py --algorithm muzero gumbel_muzero \
            --batch-size 1024 --simulations 32 --rounds 5 --min-seconds 0.5 --clock wall \
            --reuse-games 0 --levels-per-check 1 0 --max-depth 12 --graphs both ;;
    search_sampled)
        # Issue 82: Sampled MuZero's search against MuZero's with the same network at K = A.
        step search_sampled 120 "$PY" benchmarks/search.py --algorithm sampled_muzero \
            --batch-size 1024 --simulations 32 --rounds 3 --min-seconds 0.5 --clock wall \
            --reuse-games 0 ;;
    bars_c4_b4096)
        # The runtimes at pgx's loop's batch (4,096; the configuration's is 256): the same
        # positions learned from, in 16 times fewer updates, as the loop does.
        # shellcheck disable=SC2086
        step bars_c4_b4096 240 "$PY" benchmarks/selfplay.py $C4 learner.batch_size=4096 \
            --runtimes sebulba anakin --pgx-loop --reference --seconds 15 --warmup 5 \
            --max-seconds 120 --compile-cache '' ;;
    bars_c4_graphs)
        # bars_c4 with every program (ours, the loop's, the ceiling's) compiled with command
        # buffers for loops.
        # shellcheck disable=SC2086
        step bars_c4_graphs 240 env XLA_FLAGS="$GRAPHS" "$PY" benchmarks/selfplay.py $C4 \
            --runtimes sebulba anakin --pgx-loop --reference --seconds 15 --warmup 5 \
            --max-seconds 120 --compile-cache '' ;;
    search_profile)
        # One traced search per engine and raw mctx (MuZero and Gumbel, 1,024 x 32): kernels per
        # simulation and the share of the span the card is busy, read from the traces (left in
        # /tmp/search_traces, not $OUT: six traces would pass the 8 files that come back).
        # With 1 and 2 levels of the descent per check: the card's busy share says how much of
        # the span the host's waits take.
        step search_profile 150 "$PY" benchmarks/search.py --algorithm muzero gumbel_muzero \
            --batch-size 1024 --simulations 32 --reuse-games 0 --profile /tmp/search_traces \
            --levels-per-check 1 2 ;;
    selfplay)
        # shellcheck disable=SC2086
        step selfplay 150 "$PY" benchmarks/selfplay.py $C4 --pgx-loop --seconds 20 --warmup 5 \
            --max-seconds 120 --compile-cache '' ;;
    anakin)
        # shellcheck disable=SC2086
        step anakin 120 "$PY" benchmarks/selfplay.py $C4 runtime=anakin --seconds 20 --warmup 5 \
            --max-seconds 100 --compile-cache '' ;;
    bars_c4)
        # Issue 53's bars on connect four (1,024 games, 32 simulations): Sebulba (a segment per
        # device call, the replay on the device: both "auto" on a GPU) and Anakin against pgx's
        # loop, and each against the act-only ceiling (--reference: the same search and rules in
        # one scan, no learning); both ceilings measured once, after the Sebulba run.
        # shellcheck disable=SC2086
        step bars_c4 270 "$PY" benchmarks/selfplay.py $C4 --runtimes sebulba anakin --pgx-loop \
            --reference --seconds 15 --warmup 5 --max-seconds 120 --compile-cache '' ;;
    bars_go9)
        # The same on go 9x9 (the go9 step, Sebulba and pgx's loop, took 175 s on the H100).
        # shellcheck disable=SC2086
        step bars_go9 330 "$PY" benchmarks/selfplay.py $GO9 --runtimes sebulba anakin --pgx-loop \
            --reference --seconds 15 --warmup 5 --max-seconds 150 --compile-cache '' ;;
    go9)
        # 175 s on the H100 (2026-11-27): 150 s ran out during pgx's loop.
        # shellcheck disable=SC2086
        step go9 210 "$PY" benchmarks/selfplay.py $GO9 --pgx-loop --seconds 15 --warmup 5 \
            --max-seconds 150 --compile-cache '' ;;
    go9_anakin)
        # shellcheck disable=SC2086
        step go9_anakin 110 "$PY" benchmarks/selfplay.py $GO9 runtime=anakin --seconds 15 \
            --warmup 5 --max-seconds 90 --compile-cache '' ;;
    atari)
        # V-trace at 2 x 32 envs; MuZero's small network (pong_muzero_small) at 50 simulations.
        step atari 240 "$PY" benchmarks/atari.py --modes ceiling,vtrace,muzero --seconds 40 \
            --warmup 30 --override actors.envs_per_thread=32 \
            --override search.algorithm=muzero --override search.num_simulations=50 ;;
    vtrace_threads)
        # What bounded V-trace on the H100 (2026-11-26: 0.41 of the ceiling): two actor threads.
        # Each update learns from two threads' segments; the learner's input pipeline alternates
        # off (0) and on (2) (the checklist's item 3).
        step vtrace_threads 200 "$PY" benchmarks/atari.py --modes ceiling,vtrace --seconds 25 \
            --warmup 20 --override actors.threads_per_device=8 --override actors.envs_per_thread=16 \
            --override learner.batch_size=2 --prefetch 0 2 ;;
    vtrace_async)
        # The same two threads in envpool's async mode: each acts on the first half of its envs
        # to finish while the other half steps.
        step vtrace_async 200 "$PY" benchmarks/atari.py --modes vtrace --seconds 30 --warmup 20 \
            --override actors.envs_per_thread=64 --override actors.envs_per_step=32 ;;
    muzero_batch)
        # What bounded MuZero's small network there: 40 updates/s of 32 at the replay ratio.
        # The input pipeline alternates off and on here too.
        step muzero_batch 220 "$PY" benchmarks/atari.py --modes muzero --seconds 30 --warmup 30 \
            --override actors.envs_per_thread=64 --override search.algorithm=muzero \
            --override search.num_simulations=50 --override learner.batch_size=256 --prefetch 0 2 ;;
    atari_muzero)
        # 150 s (and 140 s) ran out before its first line on the H100; with 330 s beside the
        # learning check the first update (batch 1,024, compiled and autotuned) had not ended
        # 285 s after the replay's first segments. Run it alone; --progress shows where it stands.
        # 50-step segments, not the preset's 200: the first windows reach the replay after 12,800
        # agent steps instead of 51,200 (a minute of acting there), the rest of the run alike.
        # Alone (2026-11-27) its first update ended 91 s into the run, so a 60 s warmup measured
        # only the 10 s after it: 100 s of warmup and 60 measured.
        step atari_muzero 330 "$PY" benchmarks/atari.py --modes muzero --muzero-preset atari_muzero \
            --seconds 60 --warmup 100 --override replay.min_size=5000 \
            --override actors.unroll_length=50 --progress ;;
    atari100k)
        # Issue 37's protocol (120k updates of 256, 99% reanalysed) is hours long, past any one
        # session's device time: this measures its updates/s and frames/s, so its wall time
        # on this card can be projected.
        step atari100k 330 "$PY" benchmarks/atari.py --modes muzero \
            --muzero-preset atari100k_efficientzero --seconds 60 --warmup 90 --progress ;;
    population)
        # Issue 81: populations of 1, 8 and 32 MinAtar V-trace members in one program on one
        # card (vmapped there), frames/s from launch (compiles included) at 200k frames each.
        step population 300 "$PY" benchmarks/population_speed.py --program-only \
            --populations 1 8 32 --frames 200000 --rounds 1 --set devices.cpu_devices=0 ;;
    learn_start) learn_start pong_vtrace atari_vtrace actors.envs_per_thread=32 ;;
    learn_start_muzero)
        # shellcheck disable=SC2086
        learn_start pong_muzero pong_muzero_small $MUZERO_PONG ;;
    learn_wait) step learn_wait 600 bash -c "learn_wait $((DEADLINE - SECONDS - 15))" ;;
    learn_collect) step learn_collect 600 bash -c learn_collect ;;
    prefetch)
        step prefetch 200 "$PY" benchmarks/atari.py --modes vtrace --seconds 30 --warmup 20 \
            --override actors.envs_per_thread=32 --prefetch 0 2 --rounds 2 ;;
    *) echo "unknown step $name; steps: $ALL learn_start learn_start_muzero learn_wait learn_collect" && exit 2 ;;
    esac
done
echo "== done after $SECONDS s" | tee -a "$LOG"
