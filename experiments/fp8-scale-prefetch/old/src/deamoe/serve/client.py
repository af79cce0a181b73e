"""Serving benchmark clients: vLLM's own (`vllm.benchmarks.serve`) and a documented fallback.

Both send `n` requests of exactly `input_len` random prompt tokens and `output_len` generated
tokens (EOS ignored, greedy), keeping `concurrency` requests in flight at all times (a continuous
stream: a new request starts as soon as one finishes; request rate unlimited).  Both report the
same metrics, with vLLM's definitions (vllm/benchmarks/serve.py, calculate_metrics):
  TTFT   time from sending a request to its first streamed token
  TPOT   per request: (latency - TTFT) / (output tokens - 1); mean / median / p99 over requests
  ITL    gaps between streamed chunks
  output throughput  total output tokens / wall time of the level
The builtin client (used when vLLM's cannot run, or by `serve.client: builtin`) streams from
/v1/completions with prompt token ids (vLLM accepts a list of ints as the prompt) and takes the
output token count from the final usage chunk.

Client-side timings include the HTTP front end and the client's own scheduling; on a small
shared CPU a starved client reads a whole stream in one burst (TPOT near 0).  `server_stats`
therefore also reads vLLM's own per-request histograms from /metrics (engine-core timestamps:
vllm:request_time_per_output_token_seconds, vllm:time_to_first_token_seconds) before and after
a level; their difference gives the server-side mean TPOT / TTFT of exactly that level.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass
class RequestRecord:
    ok: bool
    ttft: float = 0.0  # s
    latency: float = 0.0  # s
    output_tokens: int = 0
    itl: list[float] = field(default_factory=list)
    error: str = ""


def summarize(records: list[RequestRecord], duration_s: float) -> dict:
    """vLLM's metrics (milliseconds) from per-request records of one level."""
    ok = [r for r in records if r.ok]
    tpots = [(r.latency - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    ttfts = [r.ttft for r in ok]
    itls = [x for r in ok for x in r.itl]
    out_tokens = sum(r.output_tokens for r in ok)
    res = {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "duration": duration_s,
        "total_output_tokens": out_tokens,
        "output_throughput": out_tokens / duration_s if duration_s > 0 else 0.0,
        "request_throughput": len(ok) / duration_s if duration_s > 0 else 0.0,
    }
    for name, values in (("tpot", tpots), ("ttft", ttfts), ("itl", itls)):
        arr = np.asarray(values or [0.0]) * 1000.0
        res[f"mean_{name}_ms"] = float(arr.mean())
        res[f"median_{name}_ms"] = float(np.median(arr))
        for p in PERCENTILES:
            res[f"p{p}_{name}_ms"] = float(np.percentile(arr, p))
    res["errors"] = [r.error for r in records if not r.ok][:10]
    return res


async def _one_request(session, url, model, prompt, output_len) -> RequestRecord:
    body = {
        "model": model, "prompt": prompt, "max_tokens": output_len, "min_tokens": output_len,
        "temperature": 0.0, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    rec = RequestRecord(ok=False)
    last = None
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                rec.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return rec
            async for raw in resp.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                now = time.perf_counter()
                if chunk.get("choices") and chunk["choices"][0].get("text") is not None:
                    if last is None:
                        rec.ttft = now - t0
                    else:
                        rec.itl.append(now - last)
                    last = now
                if chunk.get("usage"):
                    rec.output_tokens = chunk["usage"]["completion_tokens"]
        rec.latency = (last or time.perf_counter()) - t0
        rec.ok = rec.output_tokens > 0
        if not rec.ok:
            rec.error = "no tokens received"
    except Exception as exc:  # noqa: BLE001 - a failed request is data, reported per level
        rec.error = f"{type(exc).__name__}: {exc}"
    return rec


async def _run_builtin(base_url, model, prompts, output_len, concurrency):
    import aiohttp

    url = base_url + "/v1/completions"
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        queue = list(prompts)
        records: list[RequestRecord] = []

        async def worker():
            while queue:
                records.append(await _one_request(session, url, model, queue.pop(0), output_len))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(prompts)))))
        return records, time.perf_counter() - t0


SERVER_METRICS = {
    "tpot": "vllm:request_time_per_output_token_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
}


def server_stats(base_url: str) -> dict[str, float]:
    """Cumulative sum/count of vLLM's TPOT and TTFT histograms (all engines summed)."""
    import urllib.request

    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {f"{k}_{part}": 0.0 for k in SERVER_METRICS for part in ("sum", "count")}
    for line in text.splitlines():
        for key, name in SERVER_METRICS.items():
            for part in ("sum", "count"):
                if line.startswith(f"{name}_{part}"):
                    out[f"{key}_{part}"] += float(line.rsplit(" ", 1)[1])
    return out


def server_means(before: dict, after: dict) -> dict[str, float]:
    """Server-side mean TPOT / TTFT (ms) of the requests finished between two scrapes."""
    res = {}
    for key in SERVER_METRICS:
        n = after[f"{key}_count"] - before[f"{key}_count"]
        total = after[f"{key}_sum"] - before[f"{key}_sum"]
        res[f"server_mean_{key}_ms"] = total / n * 1000.0 if n > 0 else float("nan")
        res[f"server_{key}_requests"] = n
    return res


def warm_up(base_url, model, n, input_len, output_len, vocab_size, seed) -> None:
    """n sequential requests before a level (not measured; same for both clients)."""
    import aiohttp

    async def go():
        async with aiohttp.ClientSession() as session:
            for p in random_prompts(n, input_len, vocab_size, seed + 10_000):
                await _one_request(session, base_url + "/v1/completions", model, p, output_len)

    if n:
        asyncio.run(go())


def random_prompts(n: int, input_len: int, vocab_size: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    # Avoid the lowest ids (special tokens in the project's tokenizers).
    return [[rng.randrange(8, vocab_size) for _ in range(input_len)] for _ in range(n)]


def builtin_benchmark(base_url, model, *, n, input_len, output_len, concurrency, vocab_size,
                      seed, timeout_s) -> dict:
    prompts = random_prompts(n, input_len, vocab_size, seed)
    records, duration = asyncio.run(asyncio.wait_for(
        _run_builtin(base_url, model, prompts, output_len, concurrency), timeout_s))
    res = summarize(records, duration)
    res.update(num_prompts=n, max_concurrency=concurrency, client="deamoe.serve.client (builtin)")
    return res


def vllm_benchmark(base_url, model, tokenizer, *, n, input_len, output_len, concurrency,
                   seed, timeout_s) -> dict:
    """vLLM's own client (`vllm bench serve`), called in-process: random dataset, EOS ignored."""
    from vllm.benchmarks.serve import add_cli_args, main_async
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from deamoe.serve.plugin import register_config

    register_config()  # its tokenizer loader parses the checkpoint's config (model_type deamoe)

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    args = parser.parse_args([
        "--backend", "vllm", "--base-url", base_url, "--model", model,
        "--tokenizer", str(tokenizer), "--dataset-name", "random",
        "--random-input-len", str(input_len), "--random-output-len", str(output_len),
        "--random-range-ratio", "0", "--num-prompts", str(n),
        "--max-concurrency", str(concurrency), "--request-rate", "inf",
        "--ignore-eos", "--temperature", "0", "--seed", str(seed),
        "--num-warmups", "0", "--ready-check-timeout-sec", "0", "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", ",".join(str(p) for p in PERCENTILES),
    ])
    res = asyncio.run(asyncio.wait_for(main_async(args), timeout_s))
    res = {k: v for k, v in res.items() if k not in ("generated_texts", "itls", "start_times")}
    res["errors"] = [e for e in res.get("errors", []) if e][:10]
    res["client"] = "vllm.benchmarks.serve (vllm bench serve)"
    return res
