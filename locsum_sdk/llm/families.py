"""The LLM families a bundle can stand on: one class per architecture, registered by the names HF configs
(`model_type`) and GGUF files (`general.architecture`) give it, each mapping an HF-style config to the backbone's
`LlamaConfig` fields and refusing, by name and before any work, what its block does not have.

Every family here shares Llama's block (pre-RMSNorm, rotary positions, grouped-query attention, SwiGLU); what
differs between them is handled, not assumed: query/key/value biases (Qwen2), an LM head of its own, `head_dim`
other than d_model / heads, rotary scaling (linear and llama3), the RMS epsilon, the special ids. A sliding window
(Mistral, Qwen2) is exact for every sequence no longer than the window, so the model's context becomes the window.
Mixtures of experts, other activations or norms, and other rotary scalings are refused.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import BundleError


class ForeignModelError(BundleError):
    """A model outside the families read here, or one whose block differs from theirs."""


#: HF config keys -> LlamaConfig fields, shared by the family.
_SHAPE = {"vocab_size": "vocab_size", "hidden_size": "d_model", "num_hidden_layers": "layers",
          "num_attention_heads": "heads", "intermediate_size": "ffn_dim"}
_EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size")
ROPE_TYPES = ("default", "linear", "llama3")


class Llama:
    """`LlamaForCausalLM`: everything its config.json may set is mapped; `hidden_act` must be silu."""

    names: ClassVar[tuple[str, ...]] = ("llama",)

    def fields(self, hf: dict[str, Any], where: str) -> dict[str, Any]:
        """LlamaConfig fields of the HF-style config `hf` (ForeignModelError naming what differs)."""
        self.refuse(hf, where)
        fields = {ours: _number(hf, theirs, where) for theirs, ours in _SHAPE.items()}
        fields["kv_heads"] = _number(hf, "num_key_value_heads", where, fields["heads"])
        fields["rms_eps"] = float(_number(hf, "rms_norm_eps", where, 1e-6))
        fields["max_positions"] = _number(hf, "max_position_embeddings", where, 2048)
        head_dim = hf.get("head_dim")
        if head_dim is not None and head_dim != fields["d_model"] // fields["heads"]:
            fields["head_size"] = _number(hf, "head_dim", where)
        fields.update(self.biases(hf))
        fields["tie_embeddings"] = bool(hf.get("tie_word_embeddings", False))
        fields.update(_rope(hf, where))
        if hf.get("rope_divisors"):  # a GGUF's stored rotary factors (`gguf_model.hf_config`)
            fields["rope_divisors"] = list(hf["rope_divisors"])
        window = self.window(hf)
        if window is not None and window < fields["max_positions"]:
            fields["max_positions"] = int(window)  # every unit and its summary fit the window: attention is exact
        return fields

    def refuse(self, hf: dict[str, Any], where: str) -> None:
        act = hf.get("hidden_act", "silu")
        if act != "silu":
            raise ForeignModelError(f"{where}: hidden_act={act!r}; the Llama family's feed-forward is SwiGLU (silu)")
        experts = [key for key in _EXPERTS if hf.get(key)]
        if experts:
            raise ForeignModelError(f"{where} is a mixture of experts ({experts[0]}={hf[experts[0]]}); only dense "
                                    "Llama-family models are read")

    def biases(self, hf: dict[str, Any]) -> dict[str, bool]:
        bias = bool(hf.get("attention_bias", False))
        return {"attention_bias": bias, "output_bias": bias, "mlp_bias": bool(hf.get("mlp_bias", False))}

    def window(self, hf: dict[str, Any]) -> int | None:
        return None


class Mistral(Llama):
    """`MistralForCausalLM`: Llama's block with an optional sliding window and no biases."""

    names = ("mistral",)

    def biases(self, hf: dict[str, Any]) -> dict[str, bool]:
        return {"attention_bias": False, "output_bias": False, "mlp_bias": False}

    def window(self, hf: dict[str, Any]) -> int | None:
        return hf.get("sliding_window") or None


class Qwen2(Llama):
    """`Qwen2ForCausalLM`: biases on the query, key and value projections (none on the output), an optional sliding
    window on its upper layers."""

    names = ("qwen2",)

    def biases(self, hf: dict[str, Any]) -> dict[str, bool]:
        return {"attention_bias": True, "output_bias": False, "mlp_bias": False}

    def window(self, hf: dict[str, Any]) -> int | None:
        sliding = hf.get("use_sliding_window") or "sliding_attention" in (hf.get("layer_types") or ())
        return hf.get("sliding_window") if sliding else None


FAMILIES: dict[str, Llama] = {}


def register(family: Llama) -> Llama:
    for name in family.names:
        if name in FAMILIES:
            raise ValueError(f"LLM family {name!r} is registered twice")
        FAMILIES[name] = family
    return family


for _family in (Llama(), Mistral(), Qwen2()):
    register(_family)


def family(name: Any, where: str) -> Llama:
    """The family registered as `name` (an HF model_type or a GGUF architecture), or ForeignModelError."""
    if not isinstance(name, str) or name not in FAMILIES:
        raise ForeignModelError(f"{where} holds a {name!r} model; the LLMs read here are the Llama family "
                                f"({', '.join(sorted(FAMILIES))})")
    return FAMILIES[name]


def _number(hf: dict[str, Any], key: str, where: str, default: Any = None) -> Any:
    value = hf.get(key, default)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BundleError(f"{where}: config {key}={value!r} must be a number")
    return value


def _rope(hf: dict[str, Any], where: str) -> dict[str, Any]:
    """Rotary settings from `rope_theta` and `rope_scaling` (or transformers 5's `rope_parameters`)."""
    scaling = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if not isinstance(scaling, dict):
        raise BundleError(f"{where}: rope_scaling must be an object")
    base = scaling.get("rope_theta", hf.get("rope_theta", 10000.0))
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    fields: dict[str, Any] = {"rope_base": float(base)}
    if kind not in ROPE_TYPES:
        raise ForeignModelError(f"{where}: rotary scaling {kind!r} is not read here ({', '.join(ROPE_TYPES)} are)")
    if kind == "default":
        return fields
    fields.update(rope_type=kind, rope_factor=float(scaling["factor"]))
    if kind == "llama3":
        fields.update(rope_low_freq_factor=float(scaling["low_freq_factor"]),
                      rope_high_freq_factor=float(scaling["high_freq_factor"]),
                      rope_original_positions=int(scaling["original_max_position_embeddings"]))
    return fields
