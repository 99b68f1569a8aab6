#!/usr/bin/env bash
# Packs what an offline GPU machine lacks for benchmarks/gpu.sh into one tarball of about 17 MB:
# the extras' wheels for its Python, unpacked, with what the benchmarks never import left out
# (envpool's families other than Atari and classic control, their assets, OpenSpiel's C++
# headers). Such a machine (JAX with CUDA, flax, optax, chex, orbax and matplotlib already there)
# often takes at most 64 MiB per transfer; the full wheels are about 190 MB.
#
#   bash benchmarks/pack_site.sh [PYTHON_VERSION] [OUT]     # defaults: 3.12 .whl/site.tgz
#   SITE=.whl/site.tgz bash benchmarks/gpu.sh               # there: unpacked onto PYTHONPATH
set -euo pipefail
PYTHON_VERSION=${1:-3.12}
OUT=${2:-.whl/site.tgz}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
tag=${PYTHON_VERSION/./}
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" \
    --implementation cp --abi "cp$tag" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$WORK/wheels" \
    mctx==0.0.71 envpool==1.2.5 envpool-assets==0.3.0 open-spiel==2.0.2 pgx==2.6.0 \
    gymnax==1.0.1 tensorboardX==2.6.5 dm-env dm-tree gymnasium==1.3.0 farama-notifications \
    optree svgwrite ml-collections
mkdir -p "$WORK/site"
for wheel in "$WORK"/wheels/*.whl; do
    unzip -q -o "$wheel" -d "$WORK/site"
done
cd "$WORK/site"
rm -rf envpool/{mujoco,vizdoom,gfootball,box2d,procgen,jumanji,minigrid,pgx,highway,toy_text} \
    envpool_assets/{gfootball,mujoco,procgen,vizdoom} open_spiel/abseil-cpp open_spiel/json \
    tests mctx/_src/tests
find open_spiel \( -name '*.h' -o -name '*.cc' \) -delete
# envpool registers every family at import: only the ones kept.
cat >envpool/entry.py <<'EOF'
"""Entry point, trimmed to the families kept by Podracer's benchmarks/pack_site.sh."""

import envpool.atari.registration  # noqa: F401
import envpool.classic_control.registration  # noqa: F401
EOF
cd - >/dev/null
mkdir -p "$(dirname "$OUT")"
tar czf "$OUT" -C "$WORK/site" .
ls -la "$OUT"
