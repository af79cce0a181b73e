"""Every malformed input file is one line naming the file and where (line or byte offset)."""

from __future__ import annotations

import gzip

import pytest

from deamoe.errors import ConfigError, DataError
from deamoe.readers import load_yaml, read_json, read_token_shards

from cli_battery import REPO, write_config

EVAL_FILES = ["boolq.jsonl.gz", "hellaswag_val_first1000_llamacpp_format.txt.gz", "ptb_test.txt.gz",
              "wikitext-2-raw_test.txt.gz"]


def _damage(kind: str, good: bytes) -> bytes:
    text = gzip.decompress(good)
    if kind == "not gzip":
        return text[:2000]
    if kind == "truncated gzip":
        return good[: len(good) // 2]
    if kind == "corrupt gzip":
        middle = len(good) // 2
        return good[:middle] + bytes(b ^ 0xFF for b in good[middle:middle + 64]) + good[middle + 64:]
    if kind == "not UTF-8":
        lines = text.split(b"\n")
        lines[2] = b"\xff\xfe" + lines[2]
        return gzip.compress(b"\n".join(lines))
    if kind == "empty":
        return gzip.compress(b"")
    raise AssertionError(kind)


WHERE = {"not gzip": ["not a gzip file"], "truncated gzip": ["truncated gzip file", "byte"],
         "corrupt gzip": ["corrupt gzip data"], "not UTF-8": [":3: not UTF-8 text", "offset"],
         "empty": []}


@pytest.mark.parametrize("kind", list(WHERE))
@pytest.mark.parametrize("name", EVAL_FILES)
def test_damaged_eval_data_is_named_with_its_place(work, failing, name, kind):
    data = work / "eval-data"
    data.mkdir()
    for src in (REPO / "data" / "eval").iterdir():
        if src.name != name:
            (data / src.name).symlink_to(src)
    (data / name).write_bytes(_damage(kind, (REPO / "data" / "eval" / name).read_bytes()))
    write_config(work / "c.yaml", eval={"data_dir": str(data)})
    failing(["eval-data", "--config", "c.yaml"], f"{data / name}", *WHERE[kind])


@pytest.mark.parametrize("line, where", [
    (b"{not json}\n", ":1: not valid JSON"),
    (b"[1, 2]\n", ":1: a row must be a JSON object"),
    (b"\n", ":1: empty line"),
])
def test_malformed_jsonl_row_is_named_by_line(work, failing, line, where):
    data = work / "eval-data"
    data.mkdir()
    for src in (REPO / "data" / "eval").iterdir():
        if src.name != "piqa.jsonl.gz":
            (data / src.name).symlink_to(src)
    good = gzip.decompress((REPO / "data" / "eval" / "piqa.jsonl.gz").read_bytes()).split(b"\n")
    (data / "piqa.jsonl.gz").write_bytes(gzip.compress(line + b"\n".join(good[1:])))
    write_config(work / "c.yaml", eval={"data_dir": str(data)})
    failing(["eval-data", "--config", "c.yaml"], "piqa.jsonl.gz" + where)


@pytest.mark.parametrize("kind", ["not gzip", "truncated gzip", "corrupt gzip", "not UTF-8"])
def test_damaged_training_corpus_is_named_with_its_place(work, failing, kind):
    corpus = work / "corpus"
    corpus.mkdir()
    text = gzip.decompress((REPO / "data" / "corpus" / "gutenberg-slice.txt.gz").read_bytes())
    (corpus / "book.txt.gz").write_bytes(_damage(kind, gzip.compress(text[:200000])))
    write_config(work / "c.yaml", data={"source": "files", "files": [str(corpus / "*.txt.gz")]})
    failing(["data", "--config", "c.yaml", "--out", "d"], "book.txt.gz", *WHERE[kind])


def test_a_sha_of_digits_only_stays_text(tmp_path):
    from deamoe.readers import TableSpec, read_table

    (tmp_path / "t.csv").write_text("model,git_sha,date\nBaseline-7B,506644310216,2026-12-05\n")
    frame = read_table(tmp_path / "t.csv", TableSpec(provenance=("git_sha", "date")))
    assert frame["git_sha"].tolist() == ["506644310216"]


@pytest.mark.parametrize("date, ok", [("2026-12-05", True), ("2026-12-05T09:30:00Z", True),
                                      ("2026-12-05 09:30:00+00:00", True), ("yesterday", False),
                                      ("2026-13-05", False), ("05/12/2026", False)])
def test_a_date_is_a_date(tmp_path, date, ok):
    from deamoe.errors import DataError
    from deamoe.readers import TableSpec, read_table

    (tmp_path / "t.csv").write_text(f"model,git_sha,date\nBaseline-7B,5066443,2026-12-04\nDeepSeek-V3,5066443,{date}\n")
    spec = TableSpec(provenance=("git_sha", "date"))
    if ok:
        assert len(read_table(tmp_path / "t.csv", spec)) == 2
    else:
        with pytest.raises(DataError, match=r"t\.csv:3: column date is .*not an ISO 8601 date"):
            read_table(tmp_path / "t.csv", spec)


def test_a_column_given_twice_in_a_header_is_named(tmp_path):
    """pandas would read the first and rename the second `x.1`: a table would carry both, one
    of them silently ignored (and `bench import` would copy the renamed one into reports/)."""
    from deamoe.errors import DataError
    from deamoe.readers import read_table

    (tmp_path / "t.csv").write_text("model,batch,us,us\nBaseline-7B,4,1.0,2.0\n")
    with pytest.raises(DataError, match=r"t\.csv:1: column 'us' is given twice in the header"):
        read_table(tmp_path / "t.csv")


def test_an_integer_too_large_for_a_number_is_named(work, failing):
    """A JSON integer beyond any float: one line naming the file and key, not an OverflowError."""
    for model in ("baseline", "deamoe"):
        (work / "sv" / model).mkdir(parents=True)
        (work / "sv" / model / "c1.json").write_text('{"model": "%s", "concurrency": 1%s}' % (model, "0" * 400))
    write_config(work / "c.yaml")
    failing(["serve-tables", "--config", "c.yaml", "--in", "sv", "--out", "o"],
            "c1.json: key 'concurrency' is a 401-digit integer, too large")


@pytest.mark.parametrize("argv, what", [
    (["report", "--config", "c.yaml", "--results", "{}", "--out", "rep"], "--results"),
    (["pretrain", "--config", "c.yaml", "--runs", "{}", "--size", "tiny", "--out", "t.csv"], "--runs"),
    (["serve-tables", "--config", "c.yaml", "--in", "{}", "--out", "o"], "serving results' folder"),
])
def test_a_file_or_nothing_where_a_folder_is_read_is_named_as_such(work, failing, argv, what):
    """A results folder mistyped as a file, or missing: which of the two, with the option."""
    write_config(work / "c.yaml")
    (work / "mine.csv").write_text("a,b\n1,2\n")
    for given, says in (("mine.csv", "mine.csv: a file, not a folder"), ("nowhere", "nowhere: no such folder")):
        failing([a.format(given) for a in argv], says, what)


def test_a_folder_where_a_file_is_read_is_named_as_such(tmp_path):
    from deamoe.errors import DataError
    from deamoe.readers import read_json

    with pytest.raises(DataError, match=r": a folder, not a file \(run summary\)"):
        read_json(tmp_path, "run summary")


def test_a_json_integer_of_thousands_of_digits_is_named(tmp_path):
    """Python refuses to read an integer of over 4300 digits (a ValueError): a hand-edited or
    foreign file must still be one line naming it, not "failed unexpectedly"."""
    path = tmp_path / "c1.json"
    path.write_text('{"concurrency": ' + "9" * 5000 + "}")
    with pytest.raises(DataError, match=r"c1.json: a JSON integer of 4300\+ digits; not a serving result"):
        read_json(path, "serving result")


def test_a_file_given_for_the_token_shards_folder_is_named_as_a_file(tmp_path):
    """`--data results/data/meta.json`: "missing meta.json" sent the user looking for a file that
    is right there."""
    (tmp_path / "meta.json").write_text("{}")
    with pytest.raises(DataError, match=r"no token shards in .*meta.json \(a file; give the folder "):
        read_token_shards(tmp_path / "meta.json")
    with pytest.raises(DataError, match=r"no token shards in .*nowhere \(missing meta.json; run "):
        read_token_shards(tmp_path / "nowhere")


def test_a_yaml_merge_key_is_read_as_yaml_reads_it():
    """`<<: *small` (a ladder size sharing another's settings): the loader that refuses a key given
    twice stopped on the merge key itself ("could not determine a constructor for the tag")."""
    text = "sizes:\n  small: &s {hidden_size: 256, lr: 0.004}\n  smallrms:\n    <<: *s\n    lr: 0.002\n"
    assert load_yaml(text, "c.yaml")["sizes"]["smallrms"] == {"hidden_size": 256, "lr": 0.002}
    with pytest.raises(ConfigError, match=r"c.yaml:6: key 'lr' is given twice \(also on line 5\)"):
        load_yaml(text + "    lr: 0.001\n", "c.yaml")


@pytest.mark.timeout(60)  # a read of a pipe would wait for a writer
@pytest.mark.parametrize("argv", [
    ["pretrain", "--config", "c.yaml", "--runs", "runs", "--size", "tiny", "--out", "t.csv", "--keep", "{}"],
    ["microbench", "--config", "c.yaml", "--out", "mb", "--tiles-from", "{}"],
    ["bench", "peer", "run", "o", "DeepSeek-V3:16", "--table", "{}"],
    ["eval-data", "--config", "e.yaml"],
    ["data", "--config", "d.yaml", "--out", "d"],
    ["microbench", "--config", "m.yaml", "--out", "mb"],
    # (a pipe: the report waited for a writer for ever)
    ["report", "--config", "c.yaml", "--results", "runs", "--measured", "runs", "--out", "rep", "--description", "{}"],
])
def test_a_pipe_or_a_dangling_link_where_a_file_is_read_is_named_as_such(work, capsys, argv):
    """Both exist as names: "no such file" / "not found" / "only a folder" sent the user looking
    for a typo.  (Not `failing`: its tree of the folder would read the pipe.)"""
    import os
    import shutil

    from cli_battery import assert_one_line_error, run_cli

    (work / "runs").mkdir()
    shutil.copytree(REPO / "data" / "eval", work / "ev")
    for name, says in (("p.csv", "not a regular file (a device, pipe or socket)"),
                       ("l.csv", "which does not exist")):
        os.mkfifo(work / name) if name == "p.csv" else (work / name).symlink_to("moved.csv")
        (work / "ev" / "ptb_test.txt.gz").unlink()
        (work / "ev" / "ptb_test.txt.gz").symlink_to(f"../{name}")
        write_config(work / "c.yaml")
        write_config(work / "e.yaml", eval={"data_dir": "ev", "tasks": ["ptb"]})
        write_config(work / "d.yaml", data={"source": "files", "files": [name]})
        write_config(work / "m.yaml", microbench={"prior_picks": name})
        status, err = run_cli([a.format(name) for a in argv], capsys)
        assert_one_line_error(status, err, "ptb_test.txt.gz" if argv[0] == "eval-data" else name, says)
        (work / name).unlink()


def test_a_nul_byte_in_a_table_is_named_with_its_line(tmp_path):
    """A NUL byte in a CSV table (a damaged copy) ended a header cell there: the report showed
    figure4_5 without its vLLM columns, unsaid."""
    from deamoe.readers import read_table

    path = tmp_path / "microbench.csv"
    path.write_bytes(b"model,batch,baseline_us,deamoe_us\nA,4,1.0,2.0\nB,8,1.0\x00,2.0\n")
    with pytest.raises(DataError, match=r"microbench.csv:3: a NUL byte \(character 53\)"):
        read_table(path)
