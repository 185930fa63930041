"""The artifact contract: file, tensor and axis names shared by the exporters and the backends."""

FORMAT_VERSION = 5  # bumped whenever the bundle layout, the manifest schema or a graph signature changes

MANIFEST_FILE = "manifest.json"
CHECKPOINT_CONFIG_FILE = "config.json"  # what marks a checkpoint directory (ours or HF)
ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder.onnx"
TOKENIZER_FILE = "tokenizer.json"
WORDS_FILE = "words.txt"  # known words beside the input's (`locsum_sdk.words`); optional
COMMON_WORDS_FILE = "common_words.txt"  # words most training inputs hold: never keywords (`locsum_sdk.keywords`)
WEIGHTS_FILE = "weights.bin"  # initializers two graphs share, stored once (ONNX external data); optional

# encoder.onnx
INPUT_IDS = "input_ids"  # (N, L) int64 unit tokens; in decoder.onnx: (B, K) last token of each beam
ATTENTION_MASK = "attention_mask"  # (N, L) int64, 1 for real tokens
ENCODER_HIDDEN = "encoder_hidden"  # (N, L, D)

# decoder.onnx
UNIT_MASK = "unit_mask"  # (B, U) bool, True for real units
ENCODER_ATTENTION_MASK = "encoder_attention_mask"  # (N, L) int64, N = B * U
ENCODER_INPUT_IDS = "encoder_input_ids"  # (N, L) int64 unit tokens on the grid (pad in padding units); copy models
POSITION = "position"  # (1,) int64, the position being decoded: where every beam's key/value is written
CACHE_SLOTS = "cache_slots"  # (B, K, C) int64, the slot holding each position of each beam's history; -1: none
LOG_PROBS = "log_probs"  # (B, K, V)
UNIT_WEIGHTS = "unit_weights"  # (B, U, K)
# decoder graphs prepared for TensorRT add each beam's best tokens, so a step copies only those to the host
TOP_LOG_PROBS = "top_log_probs"  # (B, K, T) float32, best first
TOP_TOKENS = "top_tokens"  # (B, K, T) int32

CACHE_CHUNK = 32  # positions a slot cache grows by when full (the runtime and the memory estimate)

def cross_key(layer: int) -> str:
    return f"cross_key.{layer}"  # (N, H, d, L): stored transposed, ready for Q @ K


def cross_value(layer: int) -> str:
    return f"cross_value.{layer}"  # (N, H, L, d)


def unit_key(layer: int) -> str:
    # (N, H, C, d): a unit row (`modeling.fused_unit_rows`): the unit's keys, then the summary's; the encoder writes
    # the unit's (N, H, L, d)
    return f"unit_key.{layer}"


def unit_value(layer: int) -> str:
    return f"unit_value.{layer}"  # as unit_key


def present_unit_key(layer: int) -> str:
    return f"present_unit_key.{layer}"  # unit_key with the new token's key written: bound to its buffer


def present_unit_value(layer: int) -> str:
    return f"present_unit_value.{layer}"  # as present_unit_key


def past_key(layer: int) -> str:
    # (N, H, K, C, d): K beam slots of C positions; layer 0: (B, H, K, C, d), shared by the units of an item
    return f"past_key.{layer}"


def past_value(layer: int) -> str:
    return f"past_value.{layer}"  # as past_key


def present_key(layer: int) -> str:
    return f"present_key.{layer}"  # past_key written at `position`: bound to the past's buffer, written in place


def present_value(layer: int) -> str:
    return f"present_value.{layer}"  # as present_key
