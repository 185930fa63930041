"""Runs one anchor system inside the anchors environment and answers timing requests on stdin.

    serve.py --system optimum|ct2-float32|ct2-int8 --model-dir HF_DIR --work DIR --ids IDS.json

Each stdin line "BEAMS NEW_TOKENS" is answered by one stdout JSON line {"seconds", "token_ids"}: the wall time
of generating exactly NEW_TOKENS tokens (greedy or beam search) for the input ids. Conversion happens once.
"""

import argparse
import json
import sys
import time
from pathlib import Path


def optimum_runner(model_dir: Path, work: Path, threads: int):
    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    torch.set_num_threads(threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    exported = work / "optimum"
    if not (exported / "config.json").is_file():
        ORTModelForSeq2SeqLM.from_pretrained(model_dir, export=True).save_pretrained(exported)
    model = ORTModelForSeq2SeqLM.from_pretrained(exported, use_io_binding=True, session_options=options)

    def run(ids, beams, new):
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), num_beams=beams, max_length=new + 1, min_length=new + 1,
                                 do_sample=False)
        return out[0, 1:].tolist()

    return run


def ct2_runner(model_dir: Path, work: Path, threads: int, quantization: str):
    import ctranslate2

    converted = work / f"ct2-{quantization}"
    if not (converted / "model.bin").is_file():
        ctranslate2.converters.TransformersConverter(str(model_dir)).convert(str(converted), quantization=quantization)
    translator = ctranslate2.Translator(str(converted), device="cpu", compute_type=quantization, inter_threads=1,
                                        intra_threads=threads)
    vocab = json.loads((converted / "shared_vocabulary.json").read_text())
    index = {token: i for i, token in enumerate(vocab)}

    def run(ids, beams, new):
        result = translator.translate_batch([[vocab[i] for i in ids]], beam_size=beams, max_decoding_length=new,
                                            min_decoding_length=new, return_end_token=True)
        return [index[t] for t in result[0].hypotheses[0]]

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--system", required=True, choices=("optimum", "ct2-float32", "ct2-int8"))
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--ids", required=True)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    ids = json.loads(Path(args.ids).read_text())
    if args.system == "optimum":
        run = optimum_runner(Path(args.model_dir), work, args.threads)
    else:
        run = ct2_runner(Path(args.model_dir), work, args.threads, args.system.split("-")[1])
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        beams, new = map(int, line.split())
        start = time.perf_counter()
        token_ids = run(ids, beams, new)
        print(json.dumps({"seconds": time.perf_counter() - start, "token_ids": token_ids}), flush=True)


if __name__ == "__main__":
    main()
