#!/usr/bin/env bash
# Fill benchmarks/gpu/wheels with the test tools and the service's packages benchmarks/gpu/run.sh installs on a GPU
# machine that cannot reach a package registry (about 8 MB; the folder is ignored by git and carried with the working
# tree). Compiled ones are fetched for the GPU machine's Python (PYTHON_VERSION, 3.12 as its doctor.json found it).
set -eu
cd "$(dirname "$0")/wheels" 2>/dev/null || { mkdir -p "$(dirname "$0")/wheels"; cd "$(dirname "$0")/wheels"; }
python -m pip download -q --no-deps --only-binary=:all: pytest pluggy iniconfig packaging "hypothesis==6.100.0" \
  attrs sortedcontainers safetensors tqdm pytest-benchmark py-cpuinfo nltk absl-py click joblib six
python -m pip download -q --no-deps --only-binary=:all: fastapi starlette uvicorn pydantic annotated-types \
  typing-inspection annotated-doc opentelemetry-api h11 anyio httpx httpcore certifi idna
python -m pip wheel -q --no-deps "rouge-score==0.1.2"  # published as a source archive only
# compiled: regex (for rouge-score's nltk) and pydantic-core, for the GPU machine's Python
python -m pip download -q --no-deps --only-binary=:all: --python-version "${PYTHON_VERSION:-3.12}" \
  --platform manylinux2014_x86_64 regex pydantic-core
