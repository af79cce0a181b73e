"""`python -m deamoe bench ...` and `microbench` (deamoe.commands.bench) on bad input: every mistake a
user can make on the command line is one line naming it, before the CUDA check (so a CPU
machine names it too) and before any work; an output the project did not write is never
replaced; `python -m deamoe.commands.bench_only` answers like `python -m deamoe`."""

from __future__ import annotations

import hashlib
import runpy
import sys
from pathlib import Path

import pytest

from deamoe.cli import main

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = str(ROOT / "reports/measured/h200/microbench.csv")
COMMITTED_FP8 = str(ROOT / "reports/measured/h200/microbench_fp8.csv")
MINE = "the user's own file\n"


def _tree(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def _fails(argv, capsys, root: Path, *names) -> str:
    """The command fails with exit status 2 in one line naming `names`; `root` is unchanged."""
    before = _tree(root)
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    assert _tree(root) == before, "a failed command changed the tree"
    return lines[0]


@pytest.fixture
def files(tmp_path):
    """Damaged inputs: an empty table, one that is not UTF-8, one with a bad pick, a kernel file
    that is not Python."""
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00model")
    (tmp_path / "bad_pick.csv").write_text("model,batch,baseline_tile,deamoe_tile\n"
                                           "Baseline-7B,4,w13=n64-k64,failed\n")
    (tmp_path / "failed_pick.csv").write_text(
        "model,batch,baseline_tile,deamoe_tile\n"
        "Baseline-7B,4,w13=n64-k64-w4-s4;w2=n64-k64-w4-s4;block_m=16,failed\n")
    (tmp_path / "junk.py").write_text("this is not python\n")
    return tmp_path


@pytest.mark.parametrize("argv, names", [
    (["bench", "picks-check", "o", "--table", "nope.csv"], ["nope.csv"]),
    (["bench", "picks-check", "o", "--table", "empty.csv"], ["empty.csv", "empty"]),
    (["bench", "picks-check", "o", "--table", "bad_pick.csv"], ["bad_pick.csv:2", "baseline_tile"]),
    (["bench", "trace", "o", "--table", "binary.csv"], ["binary.csv", "not UTF-8"]),
    (["bench", "variants", "o", "x=1", "Baseline-7B:4", "--table", COMMITTED], ["variant 'x=1'"]),
    (["bench", "variants", "o", "a:w13=", "Baseline-7B:4", "--table", COMMITTED], ["variant 'a:w13='"]),
    (["bench", "variants", "o", "a:zz=1", "Baseline-7B:4", "--table", COMMITTED], ["'zz' is no knob"]),
    (["bench", "variants", "o", "a:split_launches=2", "--table", COMMITTED], ["no MODEL:BATCH point"]),
    (["bench", "variants", "o", "committed:split_launches=2", "Baseline-7B:4", "--table", COMMITTED],
     ["variant 'committed:split_launches=2'", "committed picks' row"]),
    (["bench", "variants", "o", "moe/committed again:block_m=32", "Baseline-7B:4", "--table", COMMITTED],
     ["'moe/committed again'", "committed picks' row"]),
    (["bench", "variants", "o", "a:split_launches=2", "a:split_launches=4", "Baseline-7B:4", "--table",
      COMMITTED], ["variant 'a:split_launches=4'", "given twice"]),
    (["bench", "variants", "o", "a:split_launches=2", "Baseline-7B:x", "--table", COMMITTED],
     ["point 'Baseline-7B:x'"]),
    (["bench", "variants", "o", "a:split_launches=2", "Baseline-7B:3", "--table", COMMITTED],
     ["no row for Baseline-7B batch 3"]),
    # a variant's value that makes no knob set of the committed picks: named before any GPU work,
    # not after the points timed before it
    (["bench", "variants", "o", "a:split_launches=nan", "Baseline-7B:4", "--table", COMMITTED],
     ["variant 'a' at Baseline-7B:4", "'nan'"]),
    (["bench", "variants", "o", "moe/b:w13=+tma", "Baseline-7B:4", "--table", COMMITTED],
     ["variant 'moe/b' at Baseline-7B:4", "-tma-nf-tma"]),
    # a point whose pick of either layer is 'failed': both layers' picks are timed there
    (["bench", "variants", "o", "moe/b:w13=+nf", "Baseline-7B:4", "--table", "failed_pick.csv"],
     ["failed_pick.csv: at Baseline-7B:4 the deamoe pick is 'failed'"]),
    # an A/B on FP8 picks names its precision: the FP8 table holds no bf16 row, and one at a time
    (["bench", "variants", "o", "a:split_launches=2", "DeepSeek-V3:4", "--table", COMMITTED_FP8],
     ["no row for DeepSeek-V3 batch 4"]),
    (["bench", "variants", "o", "a:split_launches=2", "DeepSeek-V3:4", "--table", COMMITTED_FP8,
      "--weight-dtype", "fp8,fp8-w8a8"], ["--weight-dtype takes one precision"]),
    (["bench", "trace", "o", "--table", COMMITTED, "--models", "Kimi-K2"], ["no row of --models Kimi-K2"]),
    (["bench", "trace", "o", "--table", COMMITTED, "--batches", "3,5"], ["at --batches 3,5"]),
    (["bench", "train", "o", "--config", "nope.yaml"], ["nope.yaml"]),
    # timing counts are bounded: a typo of a few zeros would hold the GPU for days
    (["bench", "variants", "o", "a:split_launches=2", "Baseline-7B:4", "--rounds", "100000"],
     ["--rounds", "<= 100"]),
    (["bench", "peer", "run", "o", "Baseline-7B:4", "--replays", "5000000"], ["--replays", "<= 10000"]),
    (["bench", "train", "o", "--steps", "0"], ["--steps", ">= 1"]),
    (["bench", "fp8-check", "o", "--kernel", "junk.py"], ["junk.py", "bench peer extract"]),
    # an empty --tiles is a mistake, not "the defaults"; a tile named twice is one line too
    (["bench", "smem-check", "o", "--tiles", ""], ["--tiles", "an empty value"]),
    (["bench", "smem-check", "o", "--gemms", "w13,,w2"], ["--gemms", "empty name"]),
    (["bench", "smem-check", "o", "--tiles", "a,a"], ["--tiles", "a twice"]),
    (["bench", "smem-check", "o", "--tiles", "bogus"], ["--tiles: tile config 'bogus'"]),
    (["bench", "smem-check", "o", "--tiles", "n64-k128-w4-s4-pq"], ["--tiles: n64-k128-w4-s4-pq", "--weight-dtype fp8-w8a8"]),
    (["bench", "peer", "run", "o", "GPT-9:4", "--table", COMMITTED], ["GPT-9"]),
    (["bench", "peer", "run", "o", "Baseline-7B:4", "--tiny", "--table", "empty.csv"], ["empty.csv"]),
    (["bench", "peer", "check", "--kernel", "junk.py"], ["junk.py", "bench peer extract"]),
    # a mistyped --kernel is no default left unextracted: named, not that part silently skipped
    (["bench", "fp8-check", "o", "--kernel", "nope.py"], ["nope.py", "no such file", "bench peer extract"]),
    (["bench", "peer", "run", "o", "Baseline-7B:4", "--table", COMMITTED, "--kernel", "nope.py"],
     ["nope.py", "no such file", "bench peer extract"]),
    (["bench", "peer", "run", "o", "Baseline-7B:4", "--table", COMMITTED],
     [".peer/vllm_fused_moe.py", "no such file", "bench peer extract"]),
    (["microbench", "--config", ROOT / "config.yaml", "--out", "mb", "--tiles-from", "binary.csv"],
     ["binary.csv", "not UTF-8"]),
    (["microbench", "--config", ROOT / "config.yaml", "--out", "mb", "--tiles-from", "bad_pick.csv"],
     ["bad_pick.csv:2"]),
])
def test_bad_input_is_named_before_the_cuda_check(files, monkeypatch, capsys, argv, names):
    monkeypatch.chdir(files)
    line = _fails(argv, capsys, files, *names)
    assert "CUDA" not in line


@pytest.mark.parametrize("argv, output", [
    (["bench", "picks-check", "o", "--table", COMMITTED], "picks_check.csv"),
    (["bench", "stream-check", "o"], "stream_check.csv"),
    (["bench", "fp8-check", "o"], "fp8_check.csv"),
    (["bench", "routing-check", "o"], "routing_time.csv"),
    (["bench", "smem-check", "o"], "smem_check.csv"),
    (["bench", "variants", "o", "a:split_launches=2", "Baseline-7B:4", "--table", COMMITTED], "variants.csv"),
    (["bench", "variants", "o", "qo:dept_up=n128-k128-w4-s6-tma-swap-pq-qo", "Qwen3-235B-A22B:4",
      "--table", COMMITTED_FP8, "--weight-dtype", "fp8-w8a8"], "variants.csv"),
    (["bench", "trace", "o", "--table", COMMITTED], "trace.csv"),
    (["bench", "read-sizes", "o"], "read_sizes.csv"),
    (["bench", "overread", "o"], "dense_overread.csv"),
    (["bench", "train", "o", "--config", ROOT / "config.yaml"], "train_throughput.csv"),
    (["bench", "train", "o", "--config", ROOT / "config.yaml", "--parts", "kernels"], "train_layer_kernels.csv"),
    (["bench", "peer", "run", "o", "Baseline-7B:4", "--tiny", "--table", COMMITTED], "vllm_peer.csv"),
    (["microbench", "--config", ROOT / "config.yaml", "--out", "o"], "microbench_points.csv"),
])
def test_a_users_file_where_a_tool_writes_is_named_before_any_work(tmp_path, monkeypatch, capsys, argv, output):
    from deamoe.bench import tools, vllm_peer_run

    for module, work in ((tools, "overread"), (vllm_peer_run, "run_peer")):  # the CPU-runnable ones
        monkeypatch.setattr(module, work, lambda *a, **k: pytest.fail("the work began"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / output).write_text(MINE)
    _fails(argv, capsys, tmp_path, f"o/{output}", "not written by deamoe")
    assert (tmp_path / "o" / output).read_text() == MINE


def test_fp8_check_without_kernel_and_none_extracted_runs_without_vllm(tmp_path, monkeypatch, capsys):
    """--kernel not given and no .peer/vllm_fused_moe.py: the check runs, its vLLM part not (and
    says so), where the same file given as --kernel is an error."""
    from deamoe.bench import checks
    from deamoe.commands import bench as cli

    given = []
    monkeypatch.setattr(cli, "_needs_cuda", lambda what: None)
    monkeypatch.setattr(checks, "fp8_check", lambda out, dtypes, models, kernel: given.append(kernel) or 0)
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "fp8-check", "o"]) == 0
    assert given == [cli.PEER_KERNEL] and not cli.PEER_KERNEL.exists()
    _fails(["bench", "fp8-check", "o", "--kernel", cli.PEER_KERNEL], capsys, tmp_path, cli.PEER_KERNEL, "no such file")
    assert given == [cli.PEER_KERNEL]  # the work did not begin


@pytest.mark.parametrize("argv", [
    ["bench", "overread", "mine.txt"],
    ["bench", "overread", "mine.txt/deeper"],
    ["bench", "trace", "mine.txt", "--table", COMMITTED],
    ["bench", "peer", "run", "mine.txt", "Baseline-7B:4", "--tiny", "--table", COMMITTED],
])
def test_an_output_folder_that_is_a_file_is_named_before_any_work(tmp_path, monkeypatch, capsys, argv):
    from deamoe.bench import tools, vllm_peer_run

    for module, work in ((tools, "overread"), (vllm_peer_run, "run_peer")):
        monkeypatch.setattr(module, work, lambda *a, **k: pytest.fail("the work began"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text(MINE)
    line = _fails(argv, capsys, tmp_path, "mine.txt", "a file is in the way")
    assert "CUDA" not in line and (tmp_path / "mine.txt").read_text() == MINE


def _bench_module(argv, monkeypatch) -> int:
    """`python -m deamoe.commands.bench_only ARGV` in this process: its exit status."""
    monkeypatch.setattr(sys, "argv", ["python -m deamoe.commands.bench_only", *map(str, argv)])
    sys.modules.pop("deamoe.bench.__main__", None)
    try:
        runpy.run_module("deamoe.commands.bench_only", run_name="__main__")
    except SystemExit as exc:
        return exc.code
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C went through `python -m deamoe.commands.bench_only` as a traceback")
    pytest.fail("`python -m deamoe.commands.bench_only` returned without an exit status")


def test_the_bench_module_answers_a_fault_in_one_line(tmp_path, monkeypatch, capsys):
    from deamoe.bench import tools

    def broken(out, draws):
        raise ValueError("boom")

    monkeypatch.setattr(tools, "overread", broken)
    assert _bench_module(["bench", "overread", tmp_path / "o"], monkeypatch) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "ValueError: boom" in err and "python -m deamoe.commands.bench_only --traceback" in err
    # bad input: exit status 2 and its one line, as `python -m deamoe` gives
    assert _bench_module(["bench", "picks-check", tmp_path, "--table", tmp_path / "no.csv"], monkeypatch) == 2
    assert "no.csv" in capsys.readouterr().err


def test_the_bench_module_takes_the_top_level_flags_of_python_m_deamoe(tmp_path, monkeypatch):
    from deamoe import cli
    from deamoe.bench import tools

    def flags(parser):
        return {a.dest: (a.option_strings, type(a), a.default, a.help) for a in parser._actions
                if a.option_strings}

    given = []
    monkeypatch.setattr(cli, "main", lambda parser: given.append(parser) or 0)
    assert _bench_module(["--help"], monkeypatch) == 0 and flags(given[0]) == flags(cli.build_parser())
    monkeypatch.undo()
    monkeypatch.setattr(tools, "overread", lambda out, draws: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # --traceback: the fault goes through as it is
        _bench_module(["bench", "overread", tmp_path / "o", "--traceback"], monkeypatch)


def test_the_bench_module_stops_on_ctrl_c_in_one_line(tmp_path, monkeypatch, capsys):
    from deamoe.bench import tools

    def interrupted(out, draws):
        raise KeyboardInterrupt

    monkeypatch.setattr(tools, "overread", interrupted)
    assert _bench_module(["bench", "overread", tmp_path / "o"], monkeypatch) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("interrupted: python -m deamoe.commands.bench_only"), err


@pytest.mark.gpu
def test_trace_keeps_a_users_file_named_like_its_scratch_trace(tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    (tmp_path / "tmp_trace.json").write_text(MINE)
    assert main(["bench", "trace", str(tmp_path), "--table", COMMITTED, "--models", "Baseline-7B",
                 "--batches", "4", "--copies", "1"]) == 0
    assert (tmp_path / "tmp_trace.json").read_text() == MINE
    assert sorted(p.name for p in tmp_path.iterdir()) == [".deamoe-output", "tmp_trace.json", "trace.csv"]
