"""`locsum serve --engine ray`: two Ray Serve replicas on a local cluster answer what the local engine answers,
stream the same, and a replica whose process is killed is restarted while its request fails cleanly instead of
hanging. Runs the command in a process of its own, as a user would."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import SLOW_OPTIONS, document, free_port

from locsum_sdk import Summarizer

pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install 'ray[serve]')")

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = {"max_length": 10, "num_beams": 2, "page_tokens": 32}


def replica_pids() -> list[int]:
    found = subprocess.run(["pgrep", "-f", "ServeReplica:locsum"], capture_output=True, text=True).stdout
    return [int(pid) for pid in found.split()]


@pytest.fixture(scope="module")
def cluster(bundle_dir):
    port = free_port()
    env = {**os.environ, "RAY_ADDRESS": ""}
    server = subprocess.Popen([sys.executable, "-m", "locsum_sdk.cli", "serve", "--engine", "ray", "--replicas", "2",
                               "--bundle", str(bundle_dir), "--port", str(port), "--memory-budget", "1GB"],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        assert server.stdout.readline().startswith("serving on"), "Ray Serve did not start"
        yield base, server
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)


def test_two_replicas_answer_what_the_local_engine_answers(cluster, bundle_dir):
    base, _ = cluster
    local = Summarizer.from_pretrained(bundle_dir, threads=1)
    rng = random.Random(11)
    texts = [document(rng, rng.randint(3, 15)) for _ in range(6)]
    with httpx.Client(base_url=base, timeout=120) as client:
        assert client.get("/readyz").json()["status"] == "ready"
        for text in texts:
            answer = client.post("/v1/summarize", json={"text": text, "options": OPTIONS})
            assert answer.status_code == 200 and answer.json()["summary"] == local.summarize(text, **OPTIONS).text
        streamed = client.post("/v1/summarize", json={"text": texts[0], "options": OPTIONS, "stream": True})
        last = streamed.text.strip().split("\n\n")[-1].splitlines()
        assert last[0] == "event: summary" and json.loads(last[1].removeprefix("data: "))["summary"] == \
            local.summarize(texts[0], **OPTIONS).text
        bad = client.post("/v1/summarize", json={"text": " "})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "empty_input"
    assert len(replica_pids()) == 2


def test_a_killed_replica_is_restarted_and_its_request_does_not_hang(cluster):
    base, server = cluster
    slow = {"text": document(random.Random(9), 300), "options": SLOW_OPTIONS}
    with httpx.Client(base_url=base, timeout=120) as client:
        before = replica_pids()
        started = time.monotonic()
        with client.stream("POST", "/v1/summarize", json={**slow, "stream": True}) as answer:
            lines = answer.iter_lines()
            assert next(lines) == "event: partial"
            for pid in before:  # the replica streaming is one of them: kill both
                os.kill(pid, signal.SIGKILL)
            try:
                rest = list(lines)  # the stream ends with an error event ...
            except httpx.RemoteProtocolError:
                rest = []  # ... or is cut by the proxy, instead of hanging
        assert time.monotonic() - started < 60 and not any(line == "event: summary" for line in rest)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                answer = client.post("/v1/summarize", json={"text": "The board met on Monday.", "options": OPTIONS})
                if answer.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        assert answer.status_code == 200  # served again by restarted replicas
    assert server.poll() is None and set(replica_pids()).isdisjoint(before)


def test_sigterm_stops_the_replicas_and_exits_0(cluster):
    _, server = cluster
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=60) == 0
    deadline = time.monotonic() + 30
    while replica_pids() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert replica_pids() == []
