"""The CPU-runnable bench tools: the dense over-read analysis and the table import."""

from __future__ import annotations

import pandas as pd
import pytest

from deamoe.cli import main


@pytest.mark.slow
def test_overread_counts_unchosen_departments_only_at_few_tokens(tmp_path):
    # at 16 tokens every one of the 8 departments is chosen in every draw (no over-read); at 4
    # tokens some go unchosen, and the dense GEMM's extra bytes are exactly their gate/up
    assert main(["bench", "overread", str(tmp_path), "--draws", "20"]) == 0
    df = pd.read_csv(tmp_path / "dense_overread.csv").set_index(["model", "batch"])
    assert (df.xs(16, level="batch")[["distinct_depts", "dense_overread_bytes"]].values
            == [[8.0, 0.0]] * 3).all()
    at4 = df.xs(4, level="batch")
    assert ((at4.distinct_depts < 8) & (at4.dense_overread_bytes > 0)).all()
    # Qwen3-235B-A22B: a department's gate and up are two h_ffn x h = 1536 x 4096 bf16 matrices
    q = at4.loc["Qwen3-235B-A22B"]
    assert q.dense_overread_bytes == pytest.approx((8 - q.distinct_depts) * 2 * 4096 * 1536 * 2)


# what each row of an imported table must hold beside its model and batch
LAYER = {"baseline_us": 10.0, "deamoe_us": 8.0, "date": "2026-12-01"}
STEP = {"baseline_tpot_ms": 5.0, "deamoe_tpot_ms": 4.0, "date": "2026-12-01"}


def test_import_concatenates_the_calls_and_fills_in_the_sha(tmp_path):
    a, b, dest = tmp_path / "a", tmp_path / "b", tmp_path / "dest"
    a.mkdir(), b.mkdir()
    pd.DataFrame({"model": ["DeepSeek-V3"], "batch": [4], "git_sha": ["unknown"], **LAYER}).to_csv(
        a / "microbench.csv", index=False)
    pd.DataFrame({"model": ["Qwen3-235B-A22B", "Qwen3-235B-A22B"], "batch": [4, 16],
                  "git_sha": ["abc", "491c0ce08053+uncommitted"], **LAYER}).to_csv(b / "microbench.csv", index=False)
    pd.DataFrame({"model": ["Baseline-7B"], "batch": [8], "git_sha": ["unknown"], **STEP}).to_csv(
        b / "decode_tpot.csv", index=False)
    assert main(["bench", "import", str(a), str(b), "--sha", "541eb69", "--dest", str(dest)]) == 0
    mb = pd.read_csv(dest / "microbench.csv")
    assert list(mb.model) == ["DeepSeek-V3", "Qwen3-235B-A22B", "Qwen3-235B-A22B"]
    # a device copy without .git, or with an older one than its files: the commit that was sent
    assert list(mb.git_sha) == ["541eb69", "abc", "541eb69"]
    assert list(pd.read_csv(dest / "decode_tpot.csv").git_sha) == ["541eb69"]


def test_import_puts_the_shared_expert_layers_beside_the_main_table(tmp_path):
    # the committed folder (a folder of another's files elsewhere is refused)
    run, dest = tmp_path / "run", tmp_path / "reports" / "measured" / "h200"
    run.mkdir(), dest.mkdir(parents=True)
    pd.DataFrame({"model": ["Baseline-7B"], "batch": [4]}).to_csv(dest / "microbench.csv",
                                                                  index=False)
    pd.DataFrame({"model": ["DeepSeek-V3+shared", "Kimi-K2+shared"], "batch": [4, 8],
                  "git_sha": ["unknown", "unknown"], **LAYER}).to_csv(run / "microbench.csv", index=False)
    assert main(["bench", "import", str(run), "--sha", "541eb69", "--dest", str(dest)]) == 0
    assert list(pd.read_csv(dest / "microbench.csv").model) == ["Baseline-7B"]  # untouched
    shared = pd.read_csv(dest / "microbench_shared.csv")
    assert list(shared.model) == ["DeepSeek-V3+shared", "Kimi-K2+shared"]
    assert list(shared.git_sha) == ["541eb69", "541eb69"]


def test_import_of_an_empty_folder_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "run").mkdir()  # (--dest beside it: an output inside the run folder is refused)
    assert main(["bench", "import", str(tmp_path / "run"), "--dest", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "no microbench.csv, microbench_fp8.csv or decode_tpot.csv" in err and str(tmp_path / "run") in err


def test_gpu_tools_say_they_need_cuda(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: the tools would run")
    assert main(["bench", "picks-check", str(tmp_path)]) == 2
    assert "bench picks-check: needs a CUDA GPU" in capsys.readouterr().err
    assert main(["bench", "smem-check", str(tmp_path)]) == 2
    assert "bench smem-check: needs a CUDA GPU" in capsys.readouterr().err
    assert main(["bench", "fp8-check", str(tmp_path)]) == 2
    assert "bench fp8-check: needs a CUDA GPU" in capsys.readouterr().err
    # a bad argument is named first, on any machine
    assert main(["bench", "fp8-check", str(tmp_path), "--weight-dtype", "bf16"]) == 2
    assert "--weight-dtype: bf16 is checked by the battery" in capsys.readouterr().err


def test_smem_check_names_a_bad_gemm_or_tile_before_the_gpu_check(tmp_path, capsys):
    assert main(["bench", "smem-check", str(tmp_path), "--gemms", "w13,w99"]) == 2
    assert "--gemms: w99 not among w13, w2, dept_up" in capsys.readouterr().err
    assert main(["bench", "smem-check", str(tmp_path), "--tiles", "n64-k64"]) == 2
    assert "--tiles: tile config 'n64-k64'" in capsys.readouterr().err  # the flag, not its key


def test_import_files_an_fp8_table_beside_the_main_one(tmp_path):
    import pandas as pd

    run = tmp_path / "run"
    run.mkdir()
    row = {"model": "DeepSeek-V3", "batch": 4, "baseline_us": 10.0, "deamoe_us": 6.0,
           "date": "2026-12-05", "git_sha": "unknown"}
    pd.DataFrame([{**row, "weight_dtype": "fp8"}]).to_csv(run / "microbench_fp8.csv", index=False)
    assert main(["bench", "import", str(run), "--dest", str(tmp_path / "d"), "--sha", "abc1234"]) == 0
    got = pd.read_csv(tmp_path / "d" / "microbench_fp8.csv")
    assert got["git_sha"].tolist() == ["abc1234"] and got["weight_dtype"].tolist() == ["fp8"]
    assert not (tmp_path / "d" / "microbench.csv").exists()


def test_import_publishes_its_tables_together(tmp_path, csv_write_fails):
    # a write that fails on the second table leaves the first one as it was, not new beside an
    # old second one
    a, dest = tmp_path / "a", tmp_path / "dest"
    a.mkdir()
    pd.DataFrame({"model": ["DeepSeek-V3"], "batch": [4], "git_sha": ["unknown"], **LAYER}).to_csv(
        a / "microbench.csv", index=False)
    pd.DataFrame({"model": ["Baseline-7B"], "batch": [8], "git_sha": ["unknown"], **STEP}).to_csv(
        a / "decode_tpot.csv", index=False)
    assert main(["bench", "import", str(a), "--sha", "541eb69", "--dest", str(dest)]) == 0
    before = {p.name: p.read_text() for p in dest.glob("*.csv")}
    pd.DataFrame({"model": ["Qwen3-235B-A22B"], "batch": [16], "git_sha": ["unknown"], **LAYER}).to_csv(
        a / "microbench.csv", index=False)
    csv_write_fails(2)
    assert main(["bench", "import", str(a), "--sha", "541eb69", "--dest", str(dest)]) != 0
    assert {p.name: p.read_text() for p in dest.glob("*.csv")} == before
