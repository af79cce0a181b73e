"""The loss curves and the model size beside Table 4 and the pre-training table are those of the
runs the table holds: a run folder left under results/train by an earlier config (a seed or a
variant since dropped) or a run stopped half-way is neither drawn nor counted."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from deamoe.report import tables
from deamoe.report.sources import read_csv


def _stray_run(results, name: str, params: int) -> None:
    """A run folder the current tables do not hold: its own log and summary."""
    run = results / "train" / name
    run.mkdir(parents=True)
    pd.DataFrame({"step": [1, 2], "tokens": [2048, 4096], "loss": [9.0, 8.5]}).to_csv(run / "log.csv", index=False)
    (run / "summary.json").write_text(json.dumps({"run": name, "params": params, "tokens": 4096}))


def test_the_figures_draw_the_tables_runs_not_every_folder(results):
    _stray_run(results, "ablation-no2-s7", 99_000_000)
    _stray_run(results, "pretrain-tiny-deamoe-s7", 99_000_000)
    table4 = tables.table4(results, "tiny")
    assert sorted(table4.data["run"].unique()) == [f"ablation-no{i}-s0" for i in range(1, 7)]
    pretrain = tables.pretrain(results, "tiny", tables.pretrain_summaries(results))
    assert sorted(pretrain.data["run"].unique()) == ["pretrain-tiny-baseline-s0", "pretrain-tiny-deamoe-s0"]


def test_the_scale_counts_the_runs_the_summary_names(results):
    # a summary that names its runs (as the stages write it): No.1 trained as the DeaMoE run
    summary = pd.read_csv(results / "ablation" / "summary.csv")
    summary["run"] = [f"ablation-no{i}-s0" for i in range(1, 7)]
    summary["trained_as"] = ["pretrain-tiny-deamoe-s0"] + list(summary["run"][1:])
    summary.to_csv(results / "ablation" / "summary.csv", index=False)
    _stray_run(results, "ablation-no2-s7", 99_000_000)
    assert tables.table4(results, "tiny").sources[0].prov.model_size == "1.5M params"
    assert tables._runs(results, "ablation")[0] == "pretrain-tiny-deamoe-s0"


def test_a_build_reads_the_pretraining_summary_twice_its_names_and_its_table(results, tmp_path, monkeypatch):
    # the five artifacts the pre-training runs stand behind read it once for all (it was read six
    # times, and every run's summary.json five)
    seen = []

    def counted(path, *args, **kwargs):
        seen.append(Path(path).relative_to(results).as_posix())
        return read_csv(path, *args, **kwargs)

    monkeypatch.setattr(tables, "read_csv", counted)
    arts = {a.key: a for a in tables.build_all(results, tmp_path / "measured", "tiny")}
    assert seen.count("pretrain/summary.csv") == 2
    for key in ("table2", "table3", "pretrain", "figure3", "figure3_slo"):
        assert arts[key].sources[0].prov.model_size == arts["pretrain"].sources[0].prov.model_size, key


def test_no_curves_are_drawn_beside_a_table_that_is_not_there(results):
    # (--delete-all-output before the curves were outputs left curves.csv behind)
    (results / "ablation" / "summary.csv").unlink()
    table4 = tables.table4(results, "tiny")
    assert table4.status == "not run" and table4.data is None
