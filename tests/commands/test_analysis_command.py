import json
import subprocess
import sys

import pandas as pd


def run(*args):
    return subprocess.run([sys.executable, "-m", "deamoe", *args], capture_output=True, text=True)


def test_table1_command_writes_contract_columns(tmp_path):
    out = tmp_path / "t1.csv"
    r = run("table1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out)
    for col in ["model", "h", "h_ffn", "n_expert", "k_expert", "n_dept", "dea_n_expert", "k_dept",
                "dea_k_expert", "flops_ratio", "params_ratio", "paper_flops_ratio",
                "paper_params_ratio", "searched_n_expert"]:
        assert col in df.columns
    assert list(df.model) == ["DeepSeek-V3", "DeepSeek-V2", "Qwen3-235B-A22B", "Kimi-K2", "Baseline-7B",
                              "DeepSeek-V3+shared", "DeepSeek-V2+shared", "Kimi-K2+shared"]
    assert list(df.n_shared) == [0, 0, 0, 0, 0, 1, 2, 1]


def test_table1_command_takes_the_configs_models(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("analysis:\n  models: [Kimi-K2+shared, Baseline-7B]\n")
    out = tmp_path / "t1.csv"
    r = run("table1", "--config", str(cfg), "--out", str(out))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out)
    assert list(df.model) == ["Kimi-K2+shared", "Baseline-7B"] and list(df.n_shared) == [1, 0]
    # --models still wins over the config
    r = run("table1", "--config", str(cfg), "--models", "DeepSeek-V3", "--out", str(tmp_path / "t.csv"))
    assert r.returncode == 0 and list(pd.read_csv(tmp_path / "t.csv").model) == ["DeepSeek-V3"]


def test_an_empty_config_path_is_refused_not_taken_for_no_config(tmp_path):
    """`--config "$CFG"` with CFG unset: one line, no output, never the defaults silently."""
    for command in ("table1", "loading"):
        out = tmp_path / f"{command}.csv"
        r = run(command, "--config", "", "--out", str(out))
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip() == (f"python -m deamoe {command}: error: argument --config: an empty "
                                    f"value '' (an unset variable?) (see python -m deamoe {command} --help)")
        assert not out.exists()


def test_budget_command_prints_json():
    r = run("budget", "--h", "7168", "--h-ffn", "2048", "--n-expert", "256", "--k-expert", "8",
            "--n-dept", "8", "--dea-n-expert", "864", "--k-dept", "5", "--dea-k-expert", "10")
    data = json.loads(r.stdout)
    assert round(data["flops_ratio"], 3) == 0.995 and round(data["params_ratio"], 3) == 0.996


def test_bad_budget_input_is_one_line_error():
    r = run("budget", "--h", "8", "--h-ffn", "4", "--n-expert", "8", "--k-expert", "2",
            "--n-dept", "4", "--dea-n-expert", "10", "--k-dept", "2", "--dea-k-expert", "2")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--dea-n-expert" in r.stderr


def test_loading_command(tmp_path):
    out = tmp_path / "l.csv"
    r = run("loading", "--models", "Baseline-7B", "--tokens", "4,8", "--trials", "4", "--out", str(out))
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out)
    assert {"model", "tokens", "ratio", "baseline_bytes", "deamoe_bytes"} <= set(df.columns)
    assert len(df) == 2


def test_unknown_config_key_names_it(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("analysis:\n  loading_trails: 3\n")
    r = run("loading", "--config", str(cfg), "--out", str(tmp_path / "x.csv"))
    assert r.returncode == 2 and "analysis.loading_trails" in r.stderr
    assert not (tmp_path / "x.csv").exists()
