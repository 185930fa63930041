"""`locsum serve` under load: a bounded load generator on loopback (N concurrent clients, a fixed number of
requests, short Multi-News and long QMSum test inputs mixed), against `summarize_batch` on the same inputs in a fresh
process of the same threads, in one run (each warmed by one request first). Reports throughput (and its ratio to
`summarize_batch`), p50/p95/p99 latency at 1, 2, 4 and 8 clients, the server's peak resident memory (total and above
the loaded model) against its budget, and requests lost (no 200: must be 0); then 1 and 2 Ray Serve replicas of 1
thread at 8 clients. Settings: the shipped default bundle, greedy, at most 64 tokens (its defaults go on to 256
tokens, several times slower; the ratios are what this measures; QMSum meetings keep its 4 pages). Results in
benchmarks/results/serve_load.{json,png}.

`test_serve_concurrency` runs the server one batch at a time (the default), two at once on every thread, and two at
once on one thread each, in turns, at 8 clients (benchmarks/results/serve_concurrency.json).

Targets: at 8 clients 0 lost, peak memory above the loaded model within the budget, throughput at least 0.9x
`summarize_batch`; 2 Ray replicas at least 1.6x one replica.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.common import RESULTS, line_plot, write_result

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
OPTIONS = {"num_beams": 1, "max_length": 64}
BUDGET = "1.5GB"
MAX_BATCH = 8
BASELINE = """
import json, sys, time
from locsum_sdk import Summarizer
inputs, options, batch = json.loads(open(sys.argv[1]).read()), json.loads(sys.argv[2]), int(sys.argv[3])
summarizer = Summarizer.from_pretrained(**json.loads(sys.argv[4]))
summarizer.summarize_batch(inputs[:1], **options)  # warm, as the served model is before its first request
started = time.perf_counter()
texts = []
for first in range(0, len(inputs), batch):
    texts += [s.text for s in summarizer.summarize_batch(inputs[first:first + batch], **options)]
print(json.dumps({"seconds": time.perf_counter() - started, "summaries": texts}))
"""


def requests(count: int) -> list[str]:
    """`count` inputs: Multi-News test articles, with every fifth a QMSum test meeting (long)."""
    short = [json.loads(line)["documents"] for line in (DATA / "multinews" / "test.jsonl").open()][:count]
    long = [json.loads(line)["documents"] for line in (DATA / "qmsum" / "test.jsonl").open()]
    texts = []
    for index in range(count):
        documents = long[index // 5 % len(long)] if index % 5 == 4 else short[index]
        texts.append("\n".join(documents) if isinstance(documents, list) else documents)
    return texts


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def replica_pids() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "ServeReplica:locsum"], capture_output=True, text=True).stdout
    return [int(pid) for pid in found.split()]


class Server:
    """`locsum serve` in a process of its own, on a free port (later flags override the defaults here)."""

    def __init__(self, *flags: str, max_batch: int = MAX_BATCH):
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "locsum_sdk.cli", "serve", "--port", str(self.port), "--memory-budget", BUDGET,
             "--max-batch", str(max_batch), "--max-queue", "256", "--timeout", "900", *flags],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
            env={**os.environ, "RAY_ADDRESS": ""})
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait_ready()
        self.loaded = sum(status_kb(pid, "VmRSS") for pid in self.pids())

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.time() + 300
        while time.time() < deadline:
            assert self.process.poll() is None, "the server exited"
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError("the server did not become ready")

    def warm(self, text: str, options: dict) -> None:
        """One request before the measured ones, as `baseline` summarizes one before its clock starts."""
        import httpx

        assert httpx.post(f"{self.url}/v1/summarize", json={"text": text, "options": options},
                          timeout=900).status_code == 200

    def pids(self) -> list[int]:
        return replica_pids() or [self.process.pid]

    def peak(self) -> int:
        return sum(status_kb(pid, "VmHWM") for pid in self.pids())

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)


async def load(url: str, texts: list[str], clients: int, options: dict = OPTIONS) -> dict:
    """`clients` concurrent clients sending every text once; latencies of the 200s and the count of the others."""
    import httpx

    pending = list(enumerate(texts))
    latencies, lost = [], []

    async def client(http: httpx.AsyncClient) -> None:
        while pending:
            index, text = pending.pop(0)
            started = time.perf_counter()
            try:
                answer = await http.post("/v1/summarize", json={"text": text, "options": options})
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            (latencies if ok else lost).append(time.perf_counter() - started if ok else index)

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=900) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    seconds = time.perf_counter() - started
    p50, p95, p99 = (float(np.percentile(latencies, q)) for q in (50, 95, 99)) if latencies else (0.0,) * 3
    return {"clients": clients, "requests": len(texts), "lost": len(lost), "seconds": seconds,
            "requests_per_second": len(texts) / seconds, "p50": p50, "p95": p95, "p99": p99}


def baseline(texts: list[str], tmp_path: Path, options: dict = OPTIONS, max_batch: int = MAX_BATCH,
             loader: dict | None = None) -> dict:
    """`summarize_batch` over `texts` in batches of `max_batch`, in a fresh process; `loader`: the keywords of
    `Summarizer.from_pretrained` (None: the shipped default bundle)."""
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps(texts))
    done = subprocess.run([sys.executable, "-c", BASELINE, str(inputs), json.dumps(options), str(max_batch),
                           json.dumps(loader or {})],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=3600)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"seconds": result["seconds"], "requests_per_second": len(texts) / result["seconds"]}


def test_serve_under_load(tmp_path, quick):
    pytest.importorskip("fastapi", reason="pip install 'locsum[serve]'")
    if not (DATA / "qmsum" / "test.jsonl").is_file():
        pytest.skip(f"{DATA} is not here (../shared/data)")
    texts = requests(24 if quick else 60)
    base = baseline(texts, tmp_path)
    runs, memory = [], {}
    server = Server()
    try:
        server.warm(texts[0], OPTIONS)
        for clients in (1, 2, 4, 8):
            runs.append(load_and_print(server.url, texts, clients, base))
        memory["local"] = {"loaded": server.loaded, "peak": server.peak()}
    finally:
        server.stop()
    ray_runs = {}
    if _ray_serve():
        for replicas in (1, 2):
            server = Server("--engine", "ray", "--replicas", str(replicas), "--threads", "1")
            try:
                server.warm(texts[0], OPTIONS)
                ray_runs[replicas] = load_and_print(server.url, texts, 8, base)
                memory[f"ray x{replicas}"] = {"loaded": server.loaded, "peak": server.peak()}
            finally:
                server.stop()
    budget = 1.5e9
    for name, found in memory.items():
        print(f"{name}: peak resident {found['peak'] / 1e6:.0f} MB, {(found['peak'] - found['loaded']) / 1e6:.0f} MB "
              f"above the loaded model, budget {budget / 1e6:.0f} MB per process")
    ray_speedup = ray_runs[2]["requests_per_second"] / ray_runs[1]["requests_per_second"] if ray_runs else None
    if ray_speedup:
        print(f"Ray Serve: 2 replicas {ray_speedup:.2f}x one replica (1 thread each, 8 clients)")
    write_result("serve_load", {"options": OPTIONS, "budget": BUDGET, "max_batch": MAX_BATCH, "requests": len(texts),
                                "summarize_batch": base, "local": runs, "ray": ray_runs, "memory": memory,
                                "ray_speedup": ray_speedup})
    line_plot({name: [(run["clients"], run[name]) for run in runs] for name in ("p50", "p95", "p99")},
              RESULTS / "serve_load.png", "concurrent clients", "latency (s)",
              f"locsum serve, default bundle, greedy 64 tokens, {len(texts)} requests", log_x=True)
    eight = runs[-1]
    assert all(run["lost"] == 0 for run in [*runs, *ray_runs.values()])
    assert all(found["peak"] - found["loaded"] <= budget for found in memory.values())
    assert eight["requests_per_second"] >= 0.9 * base["requests_per_second"], eight
    if ray_speedup is not None:
        assert ray_speedup >= 1.6


#: `locsum serve` settings for batches at once on this machine's cores: (name, flags); the first is the default.
CONCURRENCY = [("1 batch at a time, 2 threads", ["--threads", "2"]),
               ("2 batches at once, 2 threads each", ["--threads", "2", "--concurrency", "2"]),
               ("2 batches at once, 1 thread each", ["--threads", "1", "--concurrency", "2"])]


def test_serve_concurrency(tmp_path, quick):
    """`--concurrency` against the default of one batch at a time, on the same requests at 8 clients, each server in
    turn, two rounds: throughput (as a ratio to the default's, the median of the rounds) and latency, 0 lost."""
    pytest.importorskip("fastapi", reason="pip install 'locsum[serve]'")
    if not (DATA / "qmsum" / "test.jsonl").is_file():
        pytest.skip(f"{DATA} is not here (../shared/data)")
    texts = requests(16 if quick else 40)
    runs: dict[str, list[dict]] = {name: [] for name, _ in CONCURRENCY}
    for _ in range(2):
        for name, flags in CONCURRENCY:
            server = Server(*flags)
            try:
                server.warm(texts[0], OPTIONS)
                runs[name].append(asyncio.run(load(server.url, texts, 8)))
            finally:
                server.stop()
    first = float(np.median([run["requests_per_second"] for run in runs[CONCURRENCY[0][0]]]))
    summary = {}
    for name, found in runs.items():
        speed = float(np.median([run["requests_per_second"] for run in found]))
        summary[name] = {"requests_per_second": speed, "vs_default": speed / first,
                         "p50": float(np.median([run["p50"] for run in found])),
                         "p95": float(np.median([run["p95"] for run in found]))}
        rounds = ", ".join(f"{run['requests_per_second']:.2f}" for run in found)
        print(f"\n{name}: {speed:.2f} requests/s ({speed / first:.2f}x the default's; rounds {rounds}), latency p50 "
              f"{summary[name]['p50']:.2f} s, p95 {summary[name]['p95']:.2f} s")
    write_result("serve_concurrency", {"options": OPTIONS, "requests": len(texts), "clients": 8, "runs": runs,
                                       "summary": summary})
    assert all(run["lost"] == 0 for found in runs.values() for run in found)


def load_and_print(url: str, texts: list[str], clients: int, base: dict, options: dict = OPTIONS) -> dict:
    run = asyncio.run(load(url, texts, clients, options))
    run["vs_summarize_batch"] = run["requests_per_second"] / base["requests_per_second"]
    print(f"\n{clients} clients: {run['requests_per_second']:.2f} requests/s ({run['vs_summarize_batch']:.2f}x "
          f"summarize_batch's {base['requests_per_second']:.2f}), latency p50 {run['p50']:.2f} s, p95 "
          f"{run['p95']:.2f} s, p99 {run['p99']:.2f} s, lost {run['lost']}")
    return run


def _ray_serve() -> bool:
    try:
        import ray.serve  # noqa: F401
    except ImportError:
        return False
    return True
