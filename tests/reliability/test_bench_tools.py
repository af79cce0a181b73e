"""The bench tools on bad input: a device run's table that `bench import` would file under
reports/measured/ is checked row by row (a line cut short or with more fields than the header,
a model, batch, time or knob set that names no point of Table 1) before anything is written;
its destination is never a folder of the user's files; a point or a sha given wrongly is one
line before any GPU work.
"""

from __future__ import annotations

import pandas as pd
import pytest

from cli_battery import REPO, run_cli, tree, write_config

MEASURED = REPO / "reports" / "measured" / "h200"
IMPORT = ["bench", "import", "run", "--sha", "abc1234", "--dest", "dest"]


def _run_table(work, name="microbench.csv", text=None, **change):
    """run/NAME: the committed table's first three rows (`change` applied to the second), or
    `text`."""
    (work / "run").mkdir()
    if text is None:
        df = pd.read_csv(MEASURED / name, dtype={"git_sha": str}).head(3)
        for column, value in change.items():
            df[column] = df[column].astype(object)
            df.loc[1, column] = value
        text = df.to_csv(index=False)
    (work / "run" / name).write_text(text)


def _committed_dest(work):
    """dest/microbench.csv: a copy of the committed table, to be left byte-identical."""
    (work / "dest").mkdir()
    (work / "dest" / "microbench.csv").write_text((MEASURED / "microbench.csv").read_text())


def _lines(name="microbench.csv", n=4):
    return (MEASURED / name).read_text().splitlines(keepends=True)[:n]


@pytest.mark.parametrize("text, names", [
    ("".join(_lines())[:-120], ["run/microbench.csv:4", "fields where the header has", "truncated"]),
    (_lines()[0] + _lines()[1].rstrip("\n") + ",extra,more\n",
     ["run/microbench.csv:2", "fields where the header has", "more than its columns"]),
])
def test_import_refuses_a_row_cut_short_or_with_extra_fields(work, failing, text, names):
    _committed_dest(work)
    _run_table(work, text=text)
    failing(IMPORT, *names)


@pytest.mark.parametrize("change, names", [
    ({"model": "Nope"}, ["run/microbench.csv:3", "unknown model 'Nope'"]),
    ({"batch": 0}, ["run/microbench.csv:3", "batch", "> 0"]),
    ({"batch": 4.5}, ["run/microbench.csv:3", "batch", "whole number"]),
    ({"deamoe_us": -3.0}, ["run/microbench.csv:3", "deamoe_us", "> 0"]),
    ({"deamoe_tile": "garbage"}, ["run/microbench.csv:3", "deamoe_tile", "'garbage'"]),
])
def test_import_refuses_a_row_that_names_no_point(work, failing, change, names):
    _committed_dest(work)
    _run_table(work, **change)
    failing(IMPORT, *names)


def test_import_refuses_an_unknown_model_in_a_decode_table(work, failing):
    text = "".join(_lines("decode_tpot.csv")).replace("Baseline-7B", "Nope", 1)
    _run_table(work, "decode_tpot.csv", text=text)
    failing(IMPORT, "run/decode_tpot.csv:2", "unknown model 'Nope'")


def test_import_refuses_an_fp8_table_of_an_unknown_precision(work, failing):
    text = "".join(_lines("microbench_fp8.csv")).replace("fp8-w8a8", "fp9", 1)
    _run_table(work, "microbench_fp8.csv", text=text)
    failing(IMPORT, "run/microbench_fp8.csv:2", "weight_dtype", "'fp9'")


@pytest.mark.parametrize("dest", ["mine", "link", "."])
def test_import_never_writes_into_a_folder_of_user_files(work, failing, dest):
    _run_table(work)
    (work / "mine").mkdir()
    (work / "mine" / "notes.txt").write_text("mine")
    (work / "link").symlink_to(work / "mine")
    failing(["bench", "import", "run", "--sha", "abc1234", "--dest", dest], dest)


@pytest.mark.parametrize("given, why", [("nope", "no such folder"), ("file", "not a folder")])
def test_import_names_a_run_folder_that_is_none(work, failing, given, why):
    _run_table(work)
    (work / "file").write_text("x")
    failing(["bench", "import", "run", given, "--sha", "abc1234", "--dest", "dest"],
            f"{given}: {why}")


@pytest.mark.parametrize("sha", ["", "not a sha", "abc,123\n", "zz12345"])
def test_import_refuses_a_sha_that_is_no_commit(work, failing, sha):
    _run_table(work, git_sha="unknown")
    failing(["bench", "import", "run", "--sha", sha, "--dest", "dest"], "--sha",
            "an empty value" if not sha else "hex digits")


def test_import_files_shared_and_plain_layers_of_one_run_apart(work, capsys):
    df = pd.read_csv(MEASURED / "microbench.csv", dtype={"git_sha": str}).head(2)
    (work / "run").mkdir()
    pd.concat([df, df.assign(model="DeepSeek-V3+shared")]).to_csv(work / "run" / "microbench.csv", index=False)
    status, err = run_cli(IMPORT, capsys)
    assert status == 0, err
    plain, shared = (pd.read_csv(work / "dest" / n) for n in ("microbench.csv", "microbench_shared.csv"))
    assert list(plain.model) == ["Baseline-7B"] * 2 and list(shared.model) == ["DeepSeek-V3+shared"] * 2
    before = tree(work)  # a second import of the same run replaces only its own tables
    assert run_cli(IMPORT, capsys)[0] == 0 and tree(work) == before


TABLE = str(MEASURED / "microbench.csv")


@pytest.mark.parametrize("argv", [
    ["bench", "variants", "o", "x:split_launches=2", "Baseline-7B:4", "Baseline-7B:4", "--table", TABLE],
    ["bench", "peer", "run", "o", "Baseline-7B:4", "Baseline-7B:4", "--table", TABLE],
])
def test_a_point_given_twice_is_refused_before_any_work(work, failing, argv):
    failing(argv, "'Baseline-7B:4' is given twice")


def test_a_point_the_table_has_only_in_another_precision_says_so(work, failing):
    # microbench_fp8.csv has DeepSeek-V3 at 16 tokens in fp8-w8a8 only: "no row" alone sent
    # the user looking for a missing batch
    failing(["bench", "variants", "o", "x:split_launches=2", "DeepSeek-V3:16", "--weight-dtype",
             "fp8", "--table", str(MEASURED / "microbench_fp8.csv")],
            "no row for DeepSeek-V3 batch 16 of weight_dtype fp8", "it has fp8-w8a8")


@pytest.mark.parametrize("argv, names", [
    (["bench", "trace", "o", "--table", TABLE, "--copies", "1000000000"], ["--copies", "<= 64"]),
    (["bench", "train", "o", "--tokens", str(10 ** 15)], ["--tokens", "<= 1048576"]),
])
def test_a_huge_count_is_refused(work, failing, argv, names):
    failing(argv, *names)


@pytest.mark.parametrize("variant, names", [
    ("x:split_launches=99999999999999999999", ["'x'", "split_launches", "1..64"]),
    ("x:split_launches=abc", ["'x'", "split_launches is 'abc'", "whole number"]),
    ("x:dept_block_m=24", ["'x'", "dept_block_m is 24"]),
    ("x:dense_parts=9", ["'x'", "dense_parts is 9"]),
    ("moe/x:block_m=0", ["'moe/x'", "block_m is 0"]),
    # a switch is 0 or 1 (7 was taken as on); a knob given twice kept its last value unsaid
    ("x:pair_dept_down=7", ["'x'", "pair_dept_down is 7", "not 0 or 1"]),
    ("moe/x:out_bf16=2", ["'moe/x'", "out_bf16 is 2", "not 0 or 1"]),
    ("x:split_launches=2,split_launches=4", ["'x:split_launches=2,split_launches=4'",
                                             "'split_launches' is given twice"]),
])
def test_a_variant_no_launch_can_take_is_refused_before_any_work(work, failing, variant, names):
    failing(["bench", "variants", "o", variant, "Baseline-7B:4", "--table", TABLE], *names)


@pytest.mark.parametrize("into, names", [("link.csv", ["link.csv", "is a link"]),
                                         ("mine.txt/decode_tpot.csv", ["mine.txt", "a file is in the way"])])
def test_a_table_to_merge_into_that_cannot_be_written_is_named_before_any_work(work, failing, into, names):
    write_config(work / "c.yaml")
    (work / "mine.txt").write_text("mine")
    (work / "link.csv").symlink_to(work / "mine.txt")
    failing(["microbench", "--config", "c.yaml", "--out", "o", "--merge-decode-into", into], *names)


FP8_TABLE = str(MEASURED / "microbench_fp8.csv")


def test_fp8_variants_on_bf16_picks_say_which_tiles_run_before_any_gpu_work(work, capsys, monkeypatch):
    # the committed bf16 picks of DeepSeek-V3 at 4 tokens stream w2 and expert_down on K steps of
    # 256, across two 128-column scale blocks: every launch of them on FP8 weights was refused
    # on the GPU, each knob set a NaN row; they run fitted as the decode path runs them, said first
    import torch

    from deamoe.bench import tools
    from deamoe.cli import main

    timed = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tools, "variants", lambda *a, **k: timed.append(a) or 0)
    assert main(["bench", "variants", "o", "x:split_launches=1", "DeepSeek-V3:4", "--weight-dtype",
                 "fp8", "--table", TABLE]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "holds bf16 picks" in out[0] and "fitted to the 128x128 scale blocks" in out[0]
    assert out[1:] == ["  DeepSeek-V3:4 moe: w2 n64-k256-w4-s3-tma -> n64-k128-w4-s3-tma",
                       "  DeepSeek-V3:4 deamoe: expert_down n64-k256-w4-s3-tma -> n64-k128-w4-s3-tma"]
    assert len(timed) == 1 and timed[0][-1] == "fp8"


@pytest.mark.parametrize("variant, point, precision, table, names", [
    ("moe/x:w2=n64-k256-w4-s3", "DeepSeek-V3:4", "fp8", TABLE,
     ["variant 'moe/x' at DeepSeek-V3:4", "w2 tile n64-k256-w4-s3", "BLOCK_K 256", "divide 128"]),
    ("moe/x:w2=n64-k64-w4-s3", "DeepSeek-V3:4", "fp8-w8a8", FP8_TABLE,
     ["variant 'moe/x' at DeepSeek-V3:4", "w2 tile n64-k64-w4-s3", "BLOCK_K 64", "it must be 128"]),
    ("x:expert_up=n64-k16-w4-s4-pq", "DeepSeek-V3:4", "fp8-w8a8", FP8_TABLE,
     ["variant 'x' at DeepSeek-V3:4", "expert_up tile n64-k16-w4-s4-pq", "BLOCK_K 16", ">= 32"]),
    ("qo:dept_up=n256-k128-w4-s6-tma-swap-pq-qo", "Qwen3-235B-A22B:4", "fp8-w8a8", FP8_TABLE,
     ["variant 'qo' at Qwen3-235B-A22B:4", "dept_up tile n256-k128-w4-s6-tma-swap-pq-qo",
      "BLOCK_N 256"]),
    ("moe/x:w13=n64-k128-w4-s4-qo,w2=n64-k64-w4-s4", "DeepSeek-V3:4", "fp8", TABLE,
     ["variant 'moe/x'", "w13 tile n64-k128-w4-s4-qo", "fp8-w8a8 weights only"]),
])
def test_a_variant_fp8_weights_cannot_take_is_refused_before_any_work(work, failing, variant, point,
                                                                      precision, table, names):
    failing(["bench", "variants", "o", variant, point, "--weight-dtype", precision, "--table", table],
            *names)


@pytest.mark.parametrize("variant, names", [
    ("x:dept_down=n24-k128-w4-s4", ["variant 'x' at Qwen3-235B-A22B:4", "tile n24-k128-w4-s4",
                                    "block_n 24 must be a power of two"]),
    ("x:expert_up=+s0", ["variant 'x' at Qwen3-235B-A22B:4", "num_stages 0 must be >= 1"])])
def test_a_variant_tile_no_launch_can_take_is_refused_before_any_work(work, failing, variant,
                                                                       names):
    # (before: it passed every check and each of its runs came back a NaN row from the GPU)
    failing(["bench", "variants", "o", variant, "Qwen3-235B-A22B:4", "--table", TABLE], *names)


def test_an_fp8_pick_off_the_scale_blocks_is_named_before_any_work(work, failing):
    df = pd.read_csv(FP8_TABLE, dtype={"git_sha": str})
    df.loc[0, "baseline_tile"] = df.loc[0, "baseline_tile"].replace("w2=n128-k128", "w2=n128-k256")
    df.to_csv(work / "fp8.csv", index=False)
    failing(["bench", "variants", "o", "x:split_launches=1", "DeepSeek-V3:4", "--weight-dtype",
             "fp8-w8a8", "--table", "fp8.csv"], "fp8.csv: the moe pick at DeepSeek-V3:4",
            "w2 tile n128-k256", "BLOCK_K 256")


def _peer(out, *extra):
    return ["bench", "peer", "run", out, "DeepSeek-V3:4", "--table", TABLE, "--replays", "1",
            "--rounds", "1", *extra]


def test_a_tiny_peer_run_leaves_a_roofline_json_it_does_not_write(work, capsys, failing):
    # --tiny measures no roofline, so the user's roofline.json in its folder (one copied from a
    # device run, say) is neither refused nor touched; a run that measures one still refuses it
    pytest.importorskip("vllm")
    from deamoe.bench import vllm_peer

    vllm_peer.extract(work / "k.py")
    tiny = _peer("o", "--tiny", "--kernel", "k.py")
    assert run_cli(tiny, capsys)[0] == 0  # OUT: a folder deamoe writes into
    (work / "o" / "roofline.json").write_text('{"peak_read_tbps": 4.65}\n')
    status, err = run_cli(tiny, capsys)
    assert status == 0, err
    assert (work / "o" / "roofline.json").read_text() == '{"peak_read_tbps": 4.65}\n'
    failing(_peer("o", "--kernel", "k.py"), "o/roofline.json", "not written by deamoe")


def test_a_tiny_peer_run_names_a_folder_of_the_users_files(work, failing):
    # a folder deamoe never wrote into holds the user's files: refused as a whole (not as "remove
    # roofline.json yourself", which the tiny run never needed)
    (work / "o").mkdir()
    (work / "o" / "roofline.json").write_text("{}\n")
    failing(_peer("o", "--tiny"), "o holds files deamoe did not write", "o/roofline.json",
            "give a new folder")


@pytest.mark.parametrize("argv", [["bench", "fp8-check", "o", "--kernel", "k.py"],
                                  ["bench", "peer", "check", "--kernel", "k.py"]], ids=lambda a: a[1])
def test_a_kernel_file_that_exits_as_it_is_imported_is_named(work, failing, argv):
    """A file raising SystemExit (a stub for a machine without vLLM) ended the command with its
    status (3), saying nothing."""
    (work / "k.py").write_text("raise SystemExit(3)\n")
    failing(argv, "k.py: not a kernel file of `bench peer extract`", "SystemExit: 3")
