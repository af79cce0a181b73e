"""Quality along the tokens axis: per-length paired statistics, the trend and its labels, the rows
that take part (one corpus per size), and "not run" without rows."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from deamoe.report import tokens_axis

GPU = {"device": "NVIDIA H200", "torch": "2.11.0+cu130", "git_sha": "0123456789ab",
       "date": "2026-12-03T18:00:00Z", "profile": "gpu"}
STEPS = (1000, 2000, 4000, 8000)
PARAMS = 7_000_000
CORPUS = 70_000_000
# DeaMoE minus baseline: 0.2 - 0.05 per doubling of length (exact in binary), seed noise +-1/64
GAP = {1000: 0.25, 2000: 0.1875, 4000: 0.125, 8000: 0.0625}
NOISE = (-1 / 64, 0.0, 1 / 64)


def axis_frame(size="small", operator="silu", sha="a1b2c3d4e5f60718", steps=STEPS) -> pd.DataFrame:
    rows = []
    for n in steps:
        folder_size = size
        for seed, noise in enumerate(NOISE):
            base = 5.0 - 0.25 * math.log2(n / 1000)
            for model, v in (("baseline", base), ("deamoe", base + GAP[n] + noise)):
                suffix = f"-{n}steps" if n != 1000 else ""  # 1000: the size's own length
                rows.append({"run": f"pretrain-{folder_size}-{model}-s{seed}{suffix}", "size": size,
                             "model": model, "seed": seed, "steps": n, "tokens": n * 32_768,
                             "params": PARAMS, "val_loss": v, "h": 256, "num_hidden_layers": 2,
                             "operator": operator if model == "deamoe" else None,
                             "trained_as": f"pretrain-{size}-{model}-s{seed}{suffix}",
                             "corpus_tokens": CORPUS, "epochs": n * 32_768 / CORPUS,
                             "data_sha256": sha, "val_split": "documents", **GPU})
    return pd.DataFrame(rows)


def commit(measured, frame: pd.DataFrame) -> None:
    for (size, n), g in frame.groupby(["size", "steps"]):  # a table per size and length
        folder = measured / "quality" / size / (f"{n}steps" if n != 1000 else "")
        folder.mkdir(parents=True, exist_ok=True)
        g.to_csv(folder / "runs.csv", index=False)


def test_each_length_gets_its_paired_difference_and_two_standard_errors(tmp_path):
    commit(tmp_path / "measured", axis_frame())
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "measured", "gpu")
    t = art.table.set_index("steps")
    assert list(t.index) == list(STEPS)
    for n in STEPS:
        assert t.loc[n, "diff DeaMoE - baseline"] == pytest.approx(GAP[n], abs=1e-12)
        assert t.loc[n, "diff std"] == pytest.approx(1 / 64, abs=1e-12)
        assert t.loc[n, "diff 2 se"] == pytest.approx(2 / 64 / math.sqrt(3), abs=1e-12)
        assert t.loc[n, "seeds"] == 3
        assert t.loc[n, "passes over corpus"] == pytest.approx(n * 32_768 / CORPUS)
    assert t.loc[8000, "verdict"].startswith("DeaMoE behind")
    assert t.loc[1000, "tokens per param"] == pytest.approx(32_768_000 / PARAMS)


def test_one_length_made_in_this_run_stands_beside_the_committed_others(tmp_path):
    # re-measuring one length (or taking a GPU call's rows into results/) keeps the committed rows
    # of every other length and size; only that length's table is this run's
    for size in ("small", "medium"):
        commit(tmp_path / "measured", axis_frame(size=size))
    fresh = axis_frame(steps=(8000,))
    fresh.loc[fresh["model"] == "deamoe", "val_loss"] += 0.5
    fresh = fresh.assign(git_sha="fedcba987654")
    (tmp_path / "results" / "quality" / "small" / "8000steps").mkdir(parents=True)
    fresh.to_csv(tmp_path / "results" / "quality" / "small" / "8000steps" / "runs.csv", index=False)
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "measured", "gpu")
    t = art.table.set_index(["size", "steps"])
    assert len(t) == 2 * len(STEPS)
    assert t.loc[("small", 8000), "diff DeaMoE - baseline"] == pytest.approx(GAP[8000] + 0.5, abs=1e-12)
    assert t.loc[("small", 4000), "diff DeaMoE - baseline"] == pytest.approx(GAP[4000], abs=1e-12)
    assert t.loc[("medium", 8000), "diff DeaMoE - baseline"] == pytest.approx(GAP[8000], abs=1e-12)
    assert {str(s.path.parent.name) for s in art.sources if "fedcba" in str(s.frame["git_sha"].iloc[0])} == {"8000steps"}


def test_the_trend_is_a_log_linear_fit_labelled_extrapolation_outside_the_lengths():
    table = tokens_axis.axis_table(axis_frame())
    # the gap falls by 1/16 per doubling: -(1/16) / log10(2) per decade
    t = tokens_axis.trend(table, at=20.0)
    assert t["slope_per_decade"] == pytest.approx(-(1 / 16) / math.log10(2), rel=1e-9)
    assert not t["extrapolated"]  # 4.7 .. 37 tokens per parameter
    x = math.log10(20.0 / (32_768_000 / PARAMS)) / math.log10(2)
    assert t["value"] == pytest.approx(0.25 - x / 16, abs=1e-9)
    far = tokens_axis.trend(table, at=1000.0)
    assert far["extrapolated"] and far["se"] > t["se"]
    assert tokens_axis.trend(table.head(2), at=20.0) == {}  # two lengths are no trend
    text = tokens_axis.verdict_text(table)
    assert "small (SiLU" in text and "interpolation" in text
    assert "the gap moves -0.188 (toward zero), beyond seed noise" in text


def test_a_size_sharing_its_baselines_counts_them_once_and_reads_one_corpus(tmp_path):
    silu = axis_frame()
    rms = axis_frame(size="smallrms", operator="rmsnorm")
    rms.loc[rms["model"] == "baseline", "trained_as"] = silu.loc[silu["model"] == "baseline", "trained_as"].values
    stale = axis_frame(sha="ffffffffffffffff", steps=(1000,))  # another corpus, same size
    stale["run"] = stale["run"] + "-16000steps"  # (the folder it is committed in below)
    commit(tmp_path / "measured", pd.concat([silu, rms]))
    # the stale rows as an extra length folder of the same size
    folder = tmp_path / "measured" / "quality" / "small" / "16000steps"
    folder.mkdir(parents=True)
    stale.assign(steps=16000).to_csv(folder / "runs.csv", index=False)
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "measured", "gpu")
    assert set(art.table["size"]) == {"small", "smallrms"}
    assert 16000 not in set(art.table["steps"])
    assert any("left out" in n and "small at 16000 steps" in n for n in art.notes)
    fig = tokens_axis.loss_figure(art)
    ax = fig.axes[0]
    assert len(ax.lines) >= 3 and sorted(t.get_text() for t in ax.get_legend().get_texts()) == \
        ["DeaMoE RMSNorm (Table 4's No.2)", "DeaMoE SiLU (the paper's choice)", "baseline"]
    gap = tokens_axis.gap_figure(art)
    labels = [t.get_text() for t in gap.axes[0].get_legend().get_texts()]
    assert "small, SiLU (the paper's choice)" in labels and "smallrms, RMSNorm (Table 4's No.2)" in labels


def test_rows_that_do_not_state_their_corpus_are_not_run(tmp_path):
    old = axis_frame().drop(columns=["corpus_tokens", "epochs", "data_sha256"])
    commit(tmp_path / "measured", old)
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "measured", "gpu")
    assert art.status != "ok" and "corpus" in art.reason
    assert tokens_axis.gap_figure(art) is not None
    empty = tokens_axis.tokens_axis(tmp_path / "none", tmp_path / "none", "gpu")
    assert empty.table["verdict"].iloc[0] == "not run"
    assert np.isfinite(tokens_axis.PAPER_TOKENS_PER_PARAM)


def test_the_headline_judges_each_line_at_the_papers_tokens_per_parameter(tmp_path):
    from deamoe.report import headline

    commit(tmp_path / "measured", axis_frame())
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "measured", "gpu")
    claim = headline.longer_training({"tokens_axis": art})
    # 4000 steps (19 tokens/param) is the length nearest the paper's 15; 8000 the longest
    assert ("small (silu) +0.125 +- 0.018 (2 se, 3 seeds) at 19 tokens/param, "
            "+0.062 +- 0.018 (2 se, 3 seeds) at 37 tokens/param" in claim.reproduced)
    assert claim.verdict == "not reproduced: DeaMoE behind"
    # closed only at the longest length: still behind where the paper makes its claim
    late = axis_frame()
    late.loc[(late["model"] == "deamoe") & (late["steps"] == 8000), "val_loss"] -= 0.0625
    commit(tmp_path / "late", late)
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "late", "gpu")
    assert headline.longer_training({"tokens_axis": art}).verdict == (
        "not reproduced: DeaMoE behind; within seed noise with longer training: small (silu) from 37 tokens/param")
    # closed from 4000 steps on: reproduced
    early = late.copy()
    early.loc[(early["model"] == "deamoe") & (early["steps"] == 4000), "val_loss"] -= 0.125
    commit(tmp_path / "early", early)
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "early", "gpu")
    assert headline.longer_training({"tokens_axis": art}).verdict == "reproduced (within seed noise or ahead)"
    # a line whose lengths all stay far below the paper's ratio is judged at its longest, and says so
    short = axis_frame(steps=(1000, 2000))
    commit(tmp_path / "short", short)
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "short", "gpu")
    assert headline.longer_training({"tokens_axis": art}).verdict.endswith(
        "judged at the longest length, short of 15 tokens/param: small (silu) at 9.4")
    empty = tokens_axis.tokens_axis(tmp_path / "none", tmp_path / "none", "gpu")
    assert headline.longer_training({"tokens_axis": empty}).reproduced == "not run"


def test_the_training_loss_gap_stands_beside_the_held_out_one(tmp_path):
    # past one pass the two can part: here the training-loss gap is half the held-out one
    frame = axis_frame()
    half = frame["model"].eq("deamoe") * frame["steps"].map(GAP) / 2
    frame["loss_last_n"] = frame["val_loss"] - half
    table = tokens_axis.axis_table(frame).set_index("steps")
    for n in STEPS:
        assert table.loc[n, "train diff DeaMoE - baseline"] == pytest.approx(GAP[n] / 2, abs=1e-12)
        assert table.loc[n, "train diff 2 se"] == pytest.approx(2 / 64 / math.sqrt(3), abs=1e-12)
    assert "training-loss gap there +0.031 +- 0.018" in tokens_axis.verdict_text(table.reset_index())
    # rows without the column give no training-loss figures rather than an error
    bare = tokens_axis.axis_table(axis_frame())
    assert bare["train diff DeaMoE - baseline"].isna().all()
    assert "training-loss gap" not in tokens_axis.verdict_text(bare)


def test_a_trend_carried_past_zero_says_it_does_not_predict_a_change_of_sign():
    # the gap closes at 8k steps (37 tokens per parameter); read far beyond, the line is negative
    table = tokens_axis.axis_table(axis_frame())
    far = tokens_axis.trend(table, at=1000.0)
    assert far["value"] < 0 < table["diff DeaMoE - baseline"].iloc[-1]
    x0 = 32_768_000 / PARAMS * 2 ** 4  # 0.25 - k/16 = 0 at k = 4 doublings from 1000 steps
    assert far["zero_at"] == pytest.approx(x0, rel=1e-9)
    text = tokens_axis.verdict_text(table.assign(**{"tokens per param": table["tokens per param"] / 100}))
    assert "extrapolation), past the point where the line reaches zero" in text
    assert "does not say the gap would change sign" in text
    # read inside the measured lengths: no such caveat
    assert "change sign" not in tokens_axis.verdict_text(table)


def test_a_longer_length_of_one_seed_is_shown_beside_the_line_not_judged(tmp_path):
    # the first seed of a new length: its difference has no spread, so neither the verdict's
    # "last length" nor the headline takes it as the line's judged end (it read "+- nan" and
    # counted as "behind")
    from deamoe.report import headline

    frame = axis_frame()
    first = frame[(frame["steps"] == 8000) & (frame["seed"] == 0)].assign(steps=16000, tokens=16000 * 32_768,
                                                                     epochs=16000 * 32_768 / CORPUS)
    first["run"] = first["run"].str.replace("8000steps", "16000steps")
    first.loc[first["model"] == "deamoe", "val_loss"] = first.loc[first["model"] == "baseline", "val_loss"].values - 0.5
    commit(tmp_path / "measured", pd.concat([frame, first]))
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "measured", "gpu")
    row = art.table.set_index("steps").loc[16000]
    assert row["seeds"] == 1 and row["diff DeaMoE - baseline"] == pytest.approx(-0.5)
    text = art.notes[0]
    assert "nan" not in text
    assert "-> +0.062 +- 0.018 (2 se, 3 seeds) at 37" in text
    assert "; at 75 tokens/param (7.5 passes) -0.500 (one seed): no spread to judge it against yet" in text
    claim = headline.longer_training({"tokens_axis": art})
    assert "nan" not in claim.reproduced
    assert "-0.500 (one seed) at 75 tokens/param (not judged)" in claim.reproduced
    assert claim.verdict == "not reproduced: DeaMoE behind"  # judged at 19 tokens/param, as before
    assert "524M tokens per run" in claim.scale  # the shown length's tokens: 16000 x 32768


def test_a_line_of_one_seed_at_every_length_is_not_judged(tmp_path):
    from deamoe.report import headline

    frame = axis_frame()
    commit(tmp_path / "measured", frame[frame["seed"] == 0])
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "measured", "gpu")
    claim = headline.longer_training({"tokens_axis": art})
    assert claim.verdict == "not judged: one seed at every length so far"  # not "reproduced"
    assert "nan" not in claim.reproduced and "(not judged)" in claim.reproduced


def test_a_length_with_some_seeds_so_far_is_read_beside_those_seeds_one_length_shorter(tmp_path):
    # seeds 1 and 2 of three at a new length: one length shorter, those two read GAP + 1/128 while
    # all three read GAP; a few seeds need not stand where all of them did
    frame = axis_frame()
    some = frame[(frame["steps"] == 8000) & (frame["seed"] > 0)].assign(
        steps=16000, tokens=16000 * 32_768, epochs=16000 * 32_768 / CORPUS)
    some["run"] = some["run"].str.replace("8000steps", "16000steps")
    commit(tmp_path / "measured", pd.concat([frame, some]))
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "measured", "gpu")
    t = art.table.set_index("steps")
    assert t.loc[16000, tokens_axis.SAME_SEEDS] == pytest.approx(GAP[8000] + 1 / 128, abs=1e-12)
    assert t[tokens_axis.SAME_SEEDS].drop(16000).isna().all()  # every seed there: nothing to add
    assert ("(the same 2 seeds one length shorter, at 37 tokens/param: +0.070; all 3 seeds there: +0.062)"
            in art.notes[0])
    # the seeds' set is read, not their count: the same seeds at both lengths add nothing
    assert "one length shorter" not in tokens_axis.verdict_text(tokens_axis.axis_table(frame))


def test_the_headline_names_the_lines_within_seed_noise_beside_those_behind(tmp_path):
    from deamoe.report import headline

    behind = axis_frame()
    level = axis_frame(size="medium")
    level.loc[level["model"] == "deamoe", "val_loss"] -= level["steps"].map(GAP)  # no gap at any length
    commit(tmp_path / "measured", pd.concat([behind, level]))
    art = tokens_axis.tokens_axis(tmp_path / "results", tmp_path / "measured", "gpu")
    assert headline.longer_training({"tokens_axis": art}).verdict == (
        "partly: behind at small (silu); within seed noise or ahead: medium (silu) at 19 tokens/param (3 seeds)")
