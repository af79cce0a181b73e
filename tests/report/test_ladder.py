"""Quality at GPU scale: seed statistics, committed rows in the report, "not run" where missing."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from deamoe.report import ladder

GPU = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "git_sha": "0123456789ab",
       "date": "2026-12-01T18:00:00Z", "profile": "gpu"}
# held-out losses by (size, model, seed): differences deamoe - baseline are exact in binary
VAL = {("small", "baseline"): [4.0, 4.25, 4.5], ("small", "deamoe"): [4.125, 4.5, 4.625],
       ("large", "baseline"): [3.0, 3.5], ("large", "deamoe"): [3.0, 3.5]}
PARAMS = {"small": 7_000_000, "large": 170_000_000}
OPERATOR = {"small": "silu", "large": "rmsnorm"}  # DeaMoE's inter-stage operator per size


def synthetic_rows() -> pd.DataFrame:
    rows = []
    for (size, model), values in VAL.items():
        for seed, v in enumerate(values):
            rows.append({"run": f"pretrain-{size}-{model}-s{seed}", "size": size, "model": model,
                         "seed": seed, "params": PARAMS[size], "tokens": 32_768_000, "val_loss": v,
                         "final_loss": v - 0.5, "params_ratio": 1.001, "flops_ratio": 1.01,
                         "operator": OPERATOR[size] if model == "deamoe" else None,
                         "ppl_wikitext2": 100.0 + 10 * v, "acc_boolq": (50.0 + seed) if seed == 0 else None,
                         **GPU})
    return pd.DataFrame(rows)


def test_seed_spread_and_paired_difference_are_exact():
    rows = synthetic_rows()
    spread = ladder.seed_spread(rows, "val_loss").set_index(["size", "model"])
    assert spread.loc[("small", "baseline"), "mean"] == 4.25
    assert spread.loc[("small", "baseline"), "std"] == 0.25  # sample std of 4, 4.25, 4.5
    assert spread.loc[("large", "deamoe"), "n"] == 2
    diff = ladder.paired_difference(rows, "val_loss").set_index("size")
    # small: differences 0.125, 0.25, 0.125 -> mean 1/6, sample std sqrt(1/192)
    assert diff.loc["small", "n"] == 3
    assert diff.loc["small", "mean"] == pytest.approx(1 / 6, abs=1e-15)
    assert diff.loc["small", "std"] == pytest.approx(math.sqrt(1 / 192), abs=1e-15)
    assert diff.loc["small", "se"] == pytest.approx(math.sqrt(1 / 192) / math.sqrt(3), abs=1e-15)
    assert diff.loc["large", "mean"] == 0.0 and diff.loc["large", "std"] == 0.0
    # a seed with only one model of the pair is left out of the difference
    partial = rows[~((rows["size"] == "small") & (rows["model"] == "deamoe") & (rows["seed"] == 2))]
    assert ladder.paired_difference(partial, "val_loss").set_index("size").loc["small", "n"] == 2


def test_verdict_weighs_the_difference_against_seed_noise():
    assert ladder.verdict(0.1, 0.01, 3).startswith("DeaMoE behind")
    assert ladder.verdict(-0.1, 0.01, 3).startswith("DeaMoE ahead")
    assert ladder.verdict(0.015, 0.01, 3).startswith("within seed noise")
    assert ladder.verdict(0.1, math.nan, 1).startswith("one seed")
    assert ladder.verdict(math.nan, math.nan, 0) == "not run"


def _commit(measured, rows: pd.DataFrame) -> None:
    for size, frame in rows.groupby("size"):
        folder = measured / "quality" / size
        folder.mkdir(parents=True)
        frame.to_csv(folder / "runs.csv", index=False)
        curves = pd.DataFrame([{"run": r, "size": size, "model": m, "seed": s, "step": st, "tokens": st * 10,
                                "loss": 9.0 - st} for r, m, s in frame[["run", "model", "seed"]].values
                               for st in (1, 2, 3)])
        curves.to_csv(folder / "curves.csv", index=False)


def test_report_shows_committed_rows_and_not_run_for_missing_sizes(tmp_path):
    measured = tmp_path / "measured" / "h200"
    _commit(measured, synthetic_rows())
    results = tmp_path / "results"
    results.mkdir()
    art = ladder.pretrain_gpu(results, measured, None, ("small", "medium", "large"))
    assert art.status == "ok"
    t = art.table.set_index("size")
    assert list(t.index) == ["small", "medium", "large"]
    assert t.loc["medium", "verdict"] == "not run"
    assert t.loc["small", "diff DeaMoE - baseline"] == pytest.approx(1 / 6, abs=1e-15)
    assert t.loc["small", "baseline held-out"] == 4.25 and t.loc["small", "seeds"] == 3
    assert t.loc["small", "verdict"].startswith("DeaMoE behind")
    assert t.loc["large", "verdict"].startswith("within seed noise")
    text = art.notes[0]
    assert "small (silu, 7.0M params, 32.8M tokens, 3 seeds): DeaMoE - baseline held-out loss +0.1667" in text
    assert t.loc["large", "DeaMoE operator"] == "rmsnorm"
    # the verdicts are summed up per DeaMoE operator
    assert ("with DeaMoE's operator SiLU (the paper's choice), DeaMoE behind (higher loss) beyond seed "
            "noise: small; with DeaMoE's operator RMSNorm (Table 4's No.2), within seed noise") in text
    assert "Not run: medium." in text
    assert set(art.data["size"]) == {"small", "large"}  # loss curves of the committed pairs
    ppl = ladder.metric_table("table3_gpu", results, measured, None, ("small", "medium", "large")).table
    row = ppl[(ppl["size"] == "small") & (ppl["dataset"] == "wikitext2")].iloc[0]
    assert row["baseline"] == 142.5 and row["DeaMoE paper"] == 20.33
    assert ppl.loc[ppl["size"] == "medium", "dataset"].tolist() == ["not run"]
    acc = ladder.metric_table("table2_gpu", results, measured, None, ("small", "large")).table
    assert acc.loc[acc["size"] == "small", "seeds"].tolist() == [1]  # only seed 0 was evaluated


def test_each_size_names_the_training_path_its_rows_record(tmp_path):
    measured = tmp_path / "measured" / "h200"
    rows = synthetic_rows()
    small, large = rows["size"] == "small", rows["size"] == "large"
    rows.loc[small, "ffn_impl"], rows.loc[small, "compile"] = "fast", True
    rows.loc[large, "ffn_impl"], rows.loc[large, "compile"] = "torch", False
    _commit(measured, rows)
    t = ladder.pretrain_gpu(tmp_path / "results", measured, None, ("small", "large")).table.set_index("size")
    assert (t.loc["small", "training path"], t.loc["large", "training path"]) == ("fast+compile", "torch")
    _commit(tmp_path / "old" / "h200", synthetic_rows())  # rows from before the columns existed
    t = ladder.pretrain_gpu(tmp_path / "results", tmp_path / "old" / "h200", None, ("small",)).table
    assert t.set_index("size").loc["small", "training path"] == "not recorded"


def test_rows_of_this_run_on_a_cpu_do_not_replace_the_committed_gpu_rows(tmp_path):
    measured = tmp_path / "measured" / "h200"
    _commit(measured, synthetic_rows())
    cpu = synthetic_rows().assign(device="CPU (x86_64)", val_loss=9.0)
    (tmp_path / "results" / "quality" / "small").mkdir(parents=True)
    cpu[cpu["size"] == "small"].to_csv(tmp_path / "results" / "quality" / "small" / "runs.csv", index=False)
    t = ladder.pretrain_gpu(tmp_path / "results", measured, None, ("small",)).table.set_index("size")
    assert t.loc["small", "baseline held-out"] == 4.25


def test_nothing_anywhere_is_not_run_with_the_way_to_run_it(tmp_path):
    art = ladder.pretrain_gpu(tmp_path / "results", tmp_path / "measured" / "h200", None, ("small",))
    assert art.status == "not run" and "quality_<size>" in art.reason
    assert "not tested at GPU scale" in art.notes[0]
    t4 = ladder.table4_gpu(tmp_path / "results", tmp_path / "measured" / "h200", None)
    assert t4.status == "not run" and (t4.table["loss_last_n"] == "not run").all()


def test_table4_at_gpu_scale_averages_seeds_and_ranks_the_means(tmp_path):
    measured = tmp_path / "measured" / "h200"
    folder = measured / "quality" / "ablation"
    folder.mkdir(parents=True)
    rows = [{"run": f"ablation-no{i}-s{seed}", "variant": f"No.{i}", "seed": seed, "size": "medium",
             "loss_last_n": 3.0 + (7 - i) / 8 + seed / 4, "last_n": 100, "val_loss": 3.5 + seed / 2,
             "mean_distinct_departments": 4.0 + seed / 2 if i == 1 else 3.0, **GPU}
            for i in range(1, 7) for seed in (0, 1)]
    pd.DataFrame(rows).to_csv(folder / "summary.csv", index=False)
    art = ladder.table4_gpu(tmp_path / "results", measured, None)
    t = art.table.set_index("variant")
    assert art.status == "ok" and list(t.index) == [f"No.{i}" for i in range(1, 7)]
    assert t.loc["No.1", "loss last N"] == 3.0 + 6 / 8 + 1 / 8  # mean of 3.75 and 4.0
    assert t.loc["No.1", "loss std"] == pytest.approx(math.sqrt(2) / 8, abs=1e-15)
    assert t.loc["No.1", "seeds"] == 2 and t.loc["No.1", "mean distinct departments"] == 4.25
    assert t.loc["No.6", "rank"] == 1 and t.loc["No.1", "rank"] == 6 and t.loc["No.1", "paper rank"] == 1
    assert "reproduced at size medium: mean training loss over the last 100 steps" in art.notes[1]
    # paired by seed against No.1: here every seed moves all variants alike, so each difference
    # is exact (std 0) and beyond the noise; two seeds are said to be too few to settle a ranking
    assert t.loc["No.2", "vs No.1"] == pytest.approx(-1 / 8) and t.loc["No.2", "vs No.1 2se"] == 0
    assert "beyond it No.2 lower by 0.125 +- 0.000" in art.notes[-1] and "within it none" in art.notes[-1]
    assert "one degree of freedom" in art.notes[-1]


def test_table4_at_gpu_scale_draws_its_curves_and_each_variants_difference_to_no1(tmp_path):
    from deamoe.report import figures

    folder = tmp_path / "measured" / "h200" / "quality" / "ablation"
    folder.mkdir(parents=True)
    rows = [{"run": f"ablation-no{i}-s{seed}", "variant": f"No.{i}", "seed": seed, "size": "small",
             "loss_last_n": 3.0 + i / 8, "last_n": 200, "val_loss": 3.5, "mean_distinct_departments": 4.0,
             **GPU} for i in range(1, 7) for seed in (0, 1)]
    pd.DataFrame(rows).to_csv(folder / "summary.csv", index=False)
    # No.i's loss is No.1's + (i - 1) / 8 at every step and seed; the seeds differ by 0.25
    curves = [{"step": s, "tokens": 1000 * s, "loss": 5.0 - s / 1000 + (i - 1) / 8 + seed / 4,
               "run": f"ablation-no{i}-s{seed}", "variant": f"No.{i}", "seed": seed}
              for i in range(1, 7) for seed in (0, 1) for s in range(1, 1001, 10)]
    pd.DataFrame(curves).to_csv(folder / "curves.csv", index=False)
    art = ladder.table4_gpu(tmp_path / "results", tmp_path / "measured" / "h200", None)
    assert len(art.data) == len(curves) and len(art.rows) == 12
    fig = figures.ablation_curves(art, window=100)
    left, right = fig.axes[:2]
    assert right.get_visible() and len(right.get_legend().get_texts()) == 5  # No.2..No.6
    diffs = sorted({round(float(y), 9) for line in right.lines for y in line.get_ydata()} - {0.0})
    assert diffs == [i / 8 for i in range(1, 6)]  # each variant's constant lead over No.1


def test_table4_noise_note_names_variants_within_seed_noise():
    rows = pd.DataFrame([{"variant": v, "seed": s, "loss": loss} for v, s, loss in [
        ("No.1", 0, 3.0), ("No.1", 1, 3.1), ("No.1", 2, 3.2),
        ("No.2", 0, 2.9), ("No.2", 1, 3.0), ("No.2", 2, 3.1),      # 0.1 lower at every seed
        ("No.3", 0, 3.05), ("No.3", 1, 3.05), ("No.3", 2, 3.25)]])  # +0.05, -0.05, +0.05
    versus = ladder.variant_differences(rows, "loss").set_index("variant")
    assert versus.loc["No.3", "mean"] == pytest.approx(0.05 / 3)
    note = ladder.noise_note(versus)
    assert "beyond it No.2 lower by 0.100 +- 0.000; within it No.3" in note
    assert "degree" not in note  # three seeds: no small-sample warning
    assert "no variant can be told" in ladder.noise_note(versus.iloc[0:0])


def test_table3_note_puts_word_perplexity_beside_the_per_token_loss(tmp_path):
    measured = tmp_path / "measured" / "h200"
    rows = synthetic_rows()
    _commit(measured, rows)
    notes = ladder.metric_table("table3_gpu", tmp_path / "results", measured, None, ("small",)).notes
    assert "Per-token loss: not in these rows" in notes[-1] and "out of their domain" in notes[-1]
    # with the token counts the runner records: ln(token perplexity) against the held-out loss
    rows = rows.assign(token_ppl_wikitext2=[math.exp(5.0 + i / 8) for i in range(len(rows))],
                       tokens_per_word_wikitext2=1.5)
    _commit(tmp_path / "m2" / "h200", rows)
    note = ladder.metric_table("table3_gpu", tmp_path / "results", tmp_path / "m2" / "h200", None, ("small",)).notes[-1]
    # small rows are the first six: 5.0 .. 5.625 nats per token; their held-out losses 4.0 .. 4.625
    assert "small wikitext2: 1.50 tokens per word, 5.00-5.62 nats per token over 6 runs against " \
           "held-out Gutenberg 4.00-4.62" in note


def test_gap_figure_draws_each_pair_of_the_rows_and_says_not_run_without_rows(tmp_path):
    from deamoe.report import figures

    measured = tmp_path / "measured" / "h200"
    _commit(measured, synthetic_rows())
    fig = figures.quality_gap(ladder.pretrain_gpu(tmp_path / "results", measured, None, ("small", "large")))
    ax = fig.axes[0]
    points = sorted(tuple(p) for c in ax.collections for p in c.get_offsets() if len(c.get_offsets()) == 5)
    # one point per (size, seed) pair: small 0.125, 0.25, 0.125; large 0, 0
    assert points == sorted([(7e6, 0.125), (7e6, 0.25), (7e6, 0.125), (1.7e8, 0.0), (1.7e8, 0.0)])
    assert not any("not run" in t.get_text() for t in ax.texts)
    empty = figures.quality_gap(ladder.pretrain_gpu(tmp_path / "r", tmp_path / "none" / "h200", None, ("small",)))
    assert any("not run" in t.get_text() for t in empty.axes[0].texts)


def test_the_table_states_the_text_each_size_trained_on():
    from deamoe.report.ladder import text_of

    stated = pd.DataFrame({"corpus_tokens": [78_572_563, 78_572_563], "val_split": ["documents"] * 2})
    assert text_of(stated) == {"corpus tokens": 78_572_563, "held-out text": "whole books"}
    assert text_of(stated.assign(val_split="tail"))["held-out text"] == "each book's tail"
    old = text_of(pd.DataFrame({"val_loss": [4.0]}))  # rows made before they recorded it
    assert old["held-out text"] == "not recorded" and math.isnan(old["corpus tokens"])


@pytest.mark.parametrize("how, message", [
    ("twice", r"small/runs.csv:8: the row of size=small, model=baseline, seed=0 is given twice "
              r"\(also at .*small/runs.csv:2\)"),
    ("size", r"small/runs.csv:2: column size is large, not small \(the table's folder\)"),
    ("length", r"8000steps/runs.csv:3: column planned_steps is 4000, not 8000 \(the table's folder\)"),
    ("model", r"small/runs.csv:2: run pretrain-small-baseline-s0 is not this row's size small, model Baseline, "
              r"seed 0 and length"),
    ("copy", r"small/runs.csv:8: run pretrain-small-baseline-s0 is not this row's size small, model baseline, "
             r"seed 9 and length"),
])
def test_a_row_twice_or_of_another_size_or_length_is_named_with_its_line(tmp_path, how, message):
    """A seed's row given twice counted twice in its size's mean, a row of another size pasted
    into a size's table joined the other size's mean, a row planned for another length stood at
    the folder's, a misspelt model dropped its row, a copied row with another seed stood as a
    seed of its own: each silently moved the numbers."""
    from deamoe.errors import DataError
    from deamoe.report import tokens_axis

    measured = tmp_path / "measured" / "h200"
    rows = synthetic_rows()
    _commit(measured, rows)
    path = measured / "quality" / "small" / "runs.csv"
    small = rows[rows["size"] == "small"].reset_index(drop=True)
    if how == "twice":
        small = pd.concat([small, small.iloc[:1]], ignore_index=True)
    elif how == "size":
        small.loc[0, "size"] = "large"
    elif how == "model":  # misspelt: the row was left out of its size's mean unsaid
        small.loc[0, "model"] = "Baseline"
    elif how == "copy":  # a copied row, its seed edited: a seed of its own
        small = pd.concat([small, small.iloc[:1].assign(seed=9)], ignore_index=True)
    else:
        path = path.parent / "8000steps" / "runs.csv"
        path.parent.mkdir()
        small = small.assign(planned_steps=8000)
        small.loc[1, "planned_steps"] = 4000
    small.to_csv(path, index=False)
    with pytest.raises(DataError, match=message):
        tokens_axis.axis_rows(tmp_path / "results", measured, None)
    if how != "length":  # (the ladder reads each size's own length only)
        with pytest.raises(DataError, match=message):
            ladder.pretrain_gpu(tmp_path / "results", measured, None, ("small", "large"))


def test_an_ablation_row_twice_is_named_with_its_line(tmp_path):
    from deamoe.errors import DataError

    folder = tmp_path / "measured" / "h200" / "quality" / "ablation"
    folder.mkdir(parents=True)
    rows = [{"variant": v, "seed": s, "loss_last_n": 3.0 + s, **GPU} for v in ("No.1", "No.2") for s in (0, 1)]
    pd.DataFrame(rows + rows[:1]).to_csv(folder / "summary.csv", index=False)
    with pytest.raises(DataError, match=r"summary.csv:6: the row of variant=No.1, seed=0 is given twice"):
        ladder.table4_gpu(tmp_path / "results", tmp_path / "measured" / "h200", None)


@pytest.mark.parametrize("device", ["CPU (x86_64)", ""])
def test_a_committed_row_not_run_on_a_gpu_is_named_with_its_line(tmp_path, device):
    """One row of a CPU run (or without a device) in a committed GPU table made the report skip
    the whole table as a CPU run's: its size was shown as "not run", its GPU rows unsaid."""
    from deamoe.errors import DataError

    measured = tmp_path / "measured" / "h200"
    rows = synthetic_rows()
    rows.loc[1, "device"] = device or None  # small's second row: line 3 of its table
    _commit(measured, rows)
    with pytest.raises(DataError, match=r"quality/small/runs.csv:3: column device is "):
        ladder.pretrain_gpu(tmp_path / "results", measured, None, ("small", "large"))
