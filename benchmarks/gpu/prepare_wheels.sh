#!/usr/bin/env bash
# The wheels benchmarks/gpu/run.sh installs on a GPU machine that has no
# package registry (a lent one), made here, where pip reaches PyPI:
#
#   bash benchmarks/gpu/prepare_wheels.sh [DIR]     # default DIR: wheelhouse/ (ignored by git)
#
# Carry DIR to the GPU machine with the checkout (run.sh reads wheelhouse/,
# or RCUDA_GPU_WHEELS).  Make it again after changing rcuda: its wheel is
# this checkout's code, and run.sh refuses a stale one.
#
# For the GPU machine's Python: CPython 3.12 (or 3.11) on x86_64 Linux,
# whose python3 already holds CuPy, NVIDIA's libraries, numpy, scipy,
# msgpack, prometheus_client, matplotlib, pandas, scikit-learn and pytest;
# those stay out of DIR (with them it would not fit the 64 MiB a lent
# machine's call carries).  Here only what it lacks is fetched.
#
#   RCUDA_WHEEL_PYTHON=PATH  a CPython of the GPU machine's version, which
#                            builds rcuda's wheel (its native library embeds
#                            that version); default: python3.12
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEST=${1:-$REPO/wheelhouse}
PY=${RCUDA_WHEEL_PYTHON:-python3.12}
VERSION=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# rcuda's requirements (setup.py) that the GPU image lacks, and theirs
# (mlxtend 0.23's own are loose: the image's scikit-learn, pandas... do).
MISSING=(cffi pycparser pyzmq pyelftools zstandard lz4 cxxfilt cryptography xxhash mlxtend==0.23.4)

rm -rf "$DEST"
mkdir -p "$DEST"
# rcuda's wheel, built from a copy of what a GPU call carries (tracked and
# unignored files): no stale build/ of this checkout gets into it.
SOURCE=$(mktemp -d)
trap 'rm -rf "$SOURCE"' EXIT
git -C "$REPO" ls-files -z --cached --others --exclude-standard |
    tar -C "$REPO" --null --ignore-failed-read -T - -cf - 2> /dev/null | tar -C "$SOURCE" -xf -
"$PY" -m pip wheel -q --no-deps -w "$DEST" "$SOURCE"
# Which code the wheel is (run.sh records it with the results).
git -C "$REPO" describe --always --dirty > "$DEST/COMMIT"
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$DEST" \
    --python-version "$VERSION" --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 \
    --platform manylinux1_x86_64 "${MISSING[@]}"
ls -1 "$DEST"
du -sh "$DEST"
