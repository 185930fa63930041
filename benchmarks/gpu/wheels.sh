#!/usr/bin/env bash
# Fill benchmarks/gpu/wheels with the pure-Python test tools benchmarks/gpu/run.sh installs on a GPU machine that
# cannot reach a package registry (about 8 MB; the folder is ignored by git and carried with the working tree).
set -eu
cd "$(dirname "$0")/wheels" 2>/dev/null || { mkdir -p "$(dirname "$0")/wheels"; cd "$(dirname "$0")/wheels"; }
python -m pip download -q --no-deps --only-binary=:all: pytest pluggy iniconfig packaging "hypothesis==6.100.0" \
  attrs sortedcontainers safetensors tqdm pytest-benchmark py-cpuinfo nltk absl-py click joblib six
python -m pip wheel -q --no-deps "rouge-score==0.1.2"  # published as a source archive only
for version in 3.10 3.11 3.12 3.13; do  # regex (for rouge-score's nltk) is compiled: one per Python the machine may have
  python -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --platform manylinux2014_x86_64 regex
done
