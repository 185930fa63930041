#!/usr/bin/env bash
# The prepared GPU run, for whoever is lent a GPU machine: its facts, `locsum doctor` on every shipped bundle,
# `pytest tests/gpu` and `benchmarks/test_gpu.py` (the decoding step: Triton against torch ops, CUDA graphs against eager; the memory sweeps;
# then, as stage `llama`, the default's shape against HF's LlamaForCausalLM.generate, not yet run on a device),
# each stage under its own time limit, 10 minutes at most (60 + 150 + 240 + 150 s; on an H200 tests/gpu took 68 s alone,
# the step benchmarks with HF's generate 191 s before the kernel profile joined them; a stage stopped by its limit
# keeps what it printed). Installs nothing beyond the machine's torch, Triton
# and transformers except the pure-Python test tools in benchmarks/gpu/wheels (`bash benchmarks/gpu/wheels.sh`
# fills it here; the folder travels with the working tree). Small results go to $OUT (the device's folder that
# comes back), else benchmarks/results/gpu-run.
#
#   bash benchmarks/gpu/run.sh                 # every stage
#   STAGES="tests bench" BENCH_K=hiersumm BENCH_LIMIT=240 bash benchmarks/gpu/run.sh
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-benchmarks/results/gpu-run}
mkdir -p "$out"
stages=${STAGES:-"facts doctor tests bench llama"}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
unset TRITON_INTERPRET
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" | tee -a "$out/run.log"; }

if [ -d benchmarks/gpu/wheels ] && ls benchmarks/gpu/wheels/*.whl >/dev/null 2>&1; then
  missing=$(python - <<'PY'
import importlib.util
need = {"pytest": "pytest", "pluggy": "pluggy", "iniconfig": "iniconfig", "packaging": "packaging",
        "hypothesis": "hypothesis", "attrs": "attrs", "sortedcontainers": "sortedcontainers",
        "safetensors": "safetensors", "tqdm": "tqdm", "pytest_benchmark": "pytest-benchmark", "cpuinfo": "py-cpuinfo",
        "rouge_score": "rouge-score", "nltk": "nltk", "absl": "absl-py", "click": "click", "joblib": "joblib",
        "six": "six", "regex": "regex", "fastapi": "fastapi", "starlette": "starlette", "uvicorn": "uvicorn",
        "pydantic": "pydantic", "pydantic_core": "pydantic-core", "annotated_types": "annotated-types",
        "typing_inspection": "typing-inspection", "annotated_doc": "annotated-doc", "opentelemetry": "opentelemetry-api",
        "h11": "h11", "anyio": "anyio", "httpx": "httpx", "httpcore": "httpcore", "certifi": "certifi", "idna": "idna"}
print(" ".join(dist for module, dist in need.items() if importlib.util.find_spec(module) is None))
PY
)
  if [ -n "$missing" ]; then
    log "installing from benchmarks/gpu/wheels: $missing"
    python -m pip install -q --no-index --no-deps --find-links benchmarks/gpu/wheels $missing >> "$out/install.log" 2>&1 \
      || log "some wheels did not install (see install.log)"
  fi
fi

for stage in $stages; do
  case $stage in
    facts)
      log "facts"
      { nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>&1
        python -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, torch.cuda.get_device_name(0))" 2>&1
        python -c "import transformers; print('transformers', transformers.__version__)" 2>&1
      } > "$out/facts.txt"
      cat "$out/facts.txt" ;;
    doctor)
      log "locsum doctor"
      timeout 60 python -m locsum_sdk.cli doctor --json "$out/doctor.json" \
        --bundle engines/default --bundle engines/dyle --bundle engines/hierencdec --bundle engines/hiersumm \
        > "$out/doctor.txt" 2>&1
      log "doctor exit $? (a stage that needs what this machine lacks fails by name)"; tail -30 "$out/doctor.txt" ;;
    tests)
      log "pytest tests/gpu"
      timeout 150 python -m pytest -q -p no:cacheprovider tests/gpu > "$out/tests_gpu.txt" 2>&1
      log "tests/gpu exit $?"; tail -15 "$out/tests_gpu.txt" ;;
    bench)
      log "benchmarks/test_gpu.py"
      timeout "${BENCH_LIMIT:-240}" python -m pytest -q -s -p no:cacheprovider benchmarks/test_gpu.py \
        -k "${BENCH_K:-step or hiersumm or dyle}" > "$out/bench_gpu.txt" 2>&1
      log "benchmarks exit $?"; grep -E "ms|MiB|passed|failed|error" "$out/bench_gpu.txt" | tail -20
      cp benchmarks/results/gpu_*.json benchmarks/results/gpu_*.png "$out/" 2>/dev/null ;;
    llama)
      log "benchmarks/test_gpu.py: the default's shape against HF's LlamaForCausalLM.generate"
      timeout "${LLAMA_LIMIT:-150}" python -m pytest -q -s -p no:cacheprovider benchmarks/test_gpu.py \
        -k "hf_llama" > "$out/bench_llama.txt" 2>&1
      log "llama exit $?"; grep -E "ms|passed|failed|error" "$out/bench_llama.txt" | tail -20
      cp benchmarks/results/gpu_default_vs_hf_*.json "$out/" 2>/dev/null ;;
    *) log "unknown stage $stage (facts, doctor, tests, bench, llama)" ;;
  esac
done
log "done"
