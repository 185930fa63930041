"""`locsum serve` under refused requests: the idle resident set after each of 8 passes in which 4 clients send 13
inputs that are refused after paging: over max_tokens (0.2 to 1.4 million words), over the request's memory_limit
(12,000 to 30,000 words) or over the server's budget (50,000 to 160,000 words). The server pages one request at a
time and gives what paging freed back to the system, so the idle resident set stays where the first pass left it.

Target: after 8 passes at most 1.25x the idle resident set after the first. Settings: the shipped PageSum bundle
(`--bundle pagesum`: it reads every page, where the default bundle keeps 4 of an input over its limit and refuses
nothing for length), --memory-budget 2GB, 2 threads. Results in benchmarks/results/serve_memory.{json,png}.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from benchmarks.common import RESULTS, line_plot, write_result

ROOT = Path(__file__).resolve().parents[1]
PASSES, CLIENTS = 8, 4


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def refused_bodies() -> list[dict]:
    words = (ROOT / "examples" / "meeting.txt").read_text(encoding="utf-8").split()
    rng = random.Random(0)
    bodies = []
    for i in range(13):  # over max_tokens: 0.2 to 1.4 million words; the others within its 262,144 tokens
        kind = ("input_too_long", "memory_limit", "over_budget")[i % 3]
        count = {"input_too_long": 200_000 + 100_000 * i, "memory_limit": 10_000 + 2_000 * i,
                 "over_budget": 40_000 + 10_000 * i}[kind]
        options = {"input_too_long": {}, "memory_limit": {"memory_limit": "20MB"},
                   "over_budget": {"num_beams": 64, "max_length": 512}}[kind]
        bodies.append({"text": " ".join(rng.choice(words) for _ in range(count)), "options": options})
    return bodies


def test_idle_memory_stays_put_under_refused_requests():
    port = 8700 + random.Random().randrange(200)
    server = subprocess.Popen([sys.executable, "-m", "locsum_sdk.cli", "serve", "--bundle", "pagesum",
                               "--port", str(port), "--memory-budget", "2GB", "--threads", "2", "--quiet"], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        bodies, codes, idle = refused_bodies(), {}, [resident_mb(server.pid)]

        def client(k: int) -> None:
            with httpx.Client(base_url=base, timeout=600) as session:
                for body in bodies[k::CLIENTS] + bodies:
                    answer = session.post("/v1/summarize", json=body)
                    code = (answer.status_code, answer.json().get("error", {}).get("code"))
                    codes[code] = codes.get(code, 0) + 1

        for number in range(PASSES):
            threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            time.sleep(2)
            idle.append(resident_mb(server.pid))
            print(f"pass {number + 1}: idle resident set {idle[-1]:.0f} MB", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=60)
    ratio = idle[-1] / idle[1]
    print(f"idle resident set: {idle[0]:.0f} MB loaded, {idle[1]:.0f} after the first pass, {idle[-1]:.0f} after "
          f"{PASSES} ({ratio:.2f}x); answers {codes}")
    write_result("serve_memory", {"idle_mb": idle, "ratio_last_to_first_pass": ratio,
                                  "answers": {f"{s} {c}": n for (s, c), n in codes.items()}})
    line_plot({"locsum serve": list(enumerate(idle))}, RESULTS / "serve_memory.png", "pass (0: loaded)",
              "idle resident set (MB)", "Idle memory of `locsum serve` under refused requests")
    assert all(status == 413 for status, _ in codes)
    assert ratio <= 1.25
