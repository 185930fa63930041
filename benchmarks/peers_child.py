"""One system of `test_peers.py` in a fresh process, on a prompt written by the parent: the default bundle (locsum),
llama.cpp (`llama-cpp-python`) or ONNX Runtime GenAI on the same GGUF, greedy, exactly `new` new tokens, 2 threads.

    python -m benchmarks.peers_child SYSTEM SPEC.json

SPEC holds `text` and `options` (locsum's input and options), `prompt_ids` (the same pages as one prompt, for the
peers), `new`, `threads`, `gguf` / `genai` (the peers' model files) and `bundle` (locsum's, where not the default).
Prints one JSON line: load, prefill and decoding seconds, decoding ms a token, the whole job (prefill and decoding),
peak RSS in MiB and the tokens written (locsum: as many as its length limits let it, at most `new`; a short input caps
a summary's length)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from locsum_sdk.profiling import counted_steps, peak_rss_mb


def run_locsum(spec: dict, bundle: str | None = None) -> dict:
    from locsum_sdk import Summarizer

    started = time.perf_counter()
    summarizer = Summarizer.from_pretrained(bundle or spec.get("bundle"), threads=spec["threads"])
    loaded = time.perf_counter() - started
    with counted_steps(summarizer) as steps:  # known_words may cut an unfinished last word from the tokens kept
        summary = summarizer.summarize(spec["text"], **spec["options"])
    timings = summary.timings
    prefill = timings["paging"] + timings["select"] + timings["encode"]
    return {"load_s": loaded, "prefill_s": prefill, "decode_s": timings["decode"],
            "decode_tokens": steps[0], "tokens": list(summary.token_ids)}


def run_llama_cpp(spec: dict) -> dict:
    import numpy as np
    from llama_cpp import Llama

    ids, new = spec["prompt_ids"], spec["new"]
    started = time.perf_counter()
    llm = Llama(model_path=spec["gguf"], n_ctx=len(ids) + new + 8, n_batch=512, n_threads=spec["threads"],
                n_threads_batch=spec["threads"], verbose=False)
    loaded = time.perf_counter() - started
    started = time.perf_counter()
    llm.eval(ids)
    prefill = time.perf_counter() - started
    tokens = []
    started = time.perf_counter()
    vocab = llm.n_vocab()
    for _ in range(new):  # greedy on the last position's logits, the only ones llama.cpp keeps here
        token = int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))))
        tokens.append(token)
        if len(tokens) < new:
            llm.eval([token])
    decoded = time.perf_counter() - started
    return {"load_s": loaded, "prefill_s": prefill, "decode_s": decoded, "decode_tokens": new - 1, "tokens": tokens}


def run_genai(spec: dict) -> dict:
    import onnxruntime_genai as og

    ids, new = spec["prompt_ids"], spec["new"]
    started = time.perf_counter()
    model = og.Model(spec["genai"])
    loaded = time.perf_counter() - started
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + new, min_length=len(ids) + new)
    generator = og.Generator(model, params)
    started = time.perf_counter()
    generator.append_tokens(ids)
    generator.generate_next_token()  # the prompt's logits, and the first new token from them
    tokens = [int(generator.get_next_tokens()[0])]
    prefill = time.perf_counter() - started
    started = time.perf_counter()
    while len(tokens) < new:
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    decoded = time.perf_counter() - started
    return {"load_s": loaded, "prefill_s": prefill, "decode_s": decoded, "decode_tokens": new - 1, "tokens": tokens}


def run_locsum_other(spec: dict) -> dict:
    """The default in the weight form it does not ship in (`benchmarks.default_forms`)."""
    return run_locsum(spec, spec["other_bundle"])


def run_locsum_step(spec: dict) -> dict:
    """The default with the step form it does not ship (`benchmarks.default_forms.other_step`)."""
    return run_locsum(spec, spec["step_bundle"])


SYSTEMS = {"locsum": run_locsum, "locsum-fused": run_locsum_other, "locsum-int8": run_locsum_other,
           "locsum-rows8": run_locsum_step, "locsum-slots": run_locsum_step,
           "llama.cpp": run_llama_cpp, "ort-genai": run_genai}


def main() -> None:
    system, spec = sys.argv[1], json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))
    result = SYSTEMS[system](spec)
    result["ms_per_token"] = 1000 * result["decode_s"] / result["decode_tokens"]
    result["job_s"] = result["prefill_s"] + result["decode_s"]
    result["peak_rss_mib"] = peak_rss_mb()  # VmHWM: getrusage's peak would count the parent's size at the fork
    print(json.dumps(result))


if __name__ == "__main__":
    main()
