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
