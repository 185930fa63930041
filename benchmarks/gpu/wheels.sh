#!/usr/bin/env bash
# Fill benchmarks/gpu/wheels with the pure-Python test tools benchmarks/gpu/run.sh installs on a GPU machine that
# cannot reach a package registry (about 3 MB; the folder is ignored by git and carried with the working tree).
set -eu
cd "$(dirname "$0")/wheels" 2>/dev/null || { mkdir -p "$(dirname "$0")/wheels"; cd "$(dirname "$0")/wheels"; }
python -m pip download -q --no-deps --only-binary=:all: pytest pluggy iniconfig packaging "hypothesis==6.100.0" \
  attrs sortedcontainers safetensors tqdm pytest-benchmark py-cpuinfo
