"""The pre-training ladder and the ablation seeds as data: run names, sizes, budget matching."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from deamoe.analysis.budget import ffn_flops, ffn_params
from deamoe.errors import ConfigError
from deamoe.train import runs
from deamoe.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]


def _merge(base: dict, over: dict) -> dict:
    """Key-by-key merge, as Snakemake merges --configfile files over config.yaml."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def profile_doc(name: str | None) -> dict:
    doc = yaml.safe_load((ROOT / "config.yaml").read_text())
    if name:
        for part in ("pipeline.yaml", "train-sections.yaml"):
            doc = _merge(doc, yaml.safe_load((ROOT / "workflow" / "profiles" / name / part).read_text()))
    return doc


def test_tiny_default_is_one_size_one_seed():
    s = load_settings(doc=profile_doc(None))
    assert runs.pretrain_run_names(s) == ["pretrain-tiny-baseline-s0", "pretrain-tiny-deamoe-s0"]
    assert runs.ablation_run_names(s) == [f"ablation-no{i}-s0" for i in range(1, 7)]
    z = runs.size(s, "tiny")
    assert z.decoder == {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                         "num_key_value_heads": 2}
    assert (z.baseline.h_ffn, z.baseline.n_expert, z.baseline.k_expert) == (24, 32, 8)  # 64 * 384 / 1024


# exact FFN budgets per layer (deamoe.analysis.budget's formulas, by hand): baseline
# params 32 * 3 h f + 32 h, flops 2 (8 * 3 h f + 32 h); DeaMoE (8 depts, 64 experts, k_dept 5,
# k_expert 8) params 8 * 3 h f + 64 * 3 f^2 + 64 h, flops 2 (5 * 3 h f + 8 * 3 f^2 + 64 h)
GPU_SIZES = {
    # name: (h, layers, heads, kv heads, h_ffn, baseline params, DeaMoE params, baseline flops, DeaMoE flops)
    "small": (256, 2, 4, 2, 96, 2_367_488, 2_375_680, 1_196_032, 1_212_416),
    "medium": (512, 4, 8, 2, 192, 9_453_568, 9_469_952, 4_751_360, 4_784_128),
    "large": (1024, 4, 16, 4, 384, 37_781_504, 37_814_272, 18_939_904, 19_005_440),
}


@pytest.mark.parametrize("name", list(GPU_SIZES))
def test_gpu_profile_sizes_are_budget_matched_within_2_percent(name):
    s = load_settings(doc=profile_doc("gpu"))
    h, layers, heads, kv, f, bp, dp, bf, df = GPU_SIZES[name]
    z = runs.size(s, name)
    assert z.decoder == {"hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads,
                         "num_key_value_heads": kv}
    assert (z.baseline.h_ffn, z.baseline.n_expert, z.baseline.k_expert) == (f, 32, 8)
    assert (z.deamoe.h_ffn, z.deamoe.n_dept, z.deamoe.n_expert, z.deamoe.k_dept, z.deamoe.k_expert) == (f, 8, 64, 5, 8)
    assert (ffn_params(z.baseline), ffn_params(z.deamoe), ffn_flops(z.baseline), ffn_flops(z.deamoe)) == (bp, dp, bf, df)
    assert abs(dp / bp - 1) <= 0.02 and abs(df / bf - 1) <= 0.02
    assert z.budget["params_ratio"] == dp / bp and z.budget["flops_ratio"] == df / bf


def test_gpu_profile_ladder_spans_20x_with_the_planned_seeds():
    s = load_settings(doc=profile_doc("gpu"))
    names = runs.pretrain_run_names(s)
    # small, medium, large; then their RMSNorm-operator pairs smallrms, mediumrms, largerms
    assert len(names) == 2 * (3 + 2 + 2) + 2 * (3 + 2 + 2)
    assert "pretrain-large-deamoe-s1" in names and "pretrain-large-deamoe-s2" not in names
    # total parameters: embeddings (tied, vocab 8192) + attention + FFN per layer + norms
    def total(name):
        h, layers, heads, kv, _, bp, *_ = GPU_SIZES[name]
        kv_dim = kv * h // heads
        return 8192 * h + layers * (2 * h * h + 2 * h * kv_dim + 2 * h + bp) + h
    assert total("large") >= 170_000_000 and total("large") / total("small") >= 20
    assert runs.ablation_run_names(s)[:2] == ["ablation-no1-s0", "ablation-no1-s1"]
    assert len(runs.ablation_run_names(s)) == 12
    spec = runs.run_spec(s, "ablation-no2-s1")
    assert spec.size == "small" and spec.seed == 1 and spec.decoder["hidden_size"] == 256
    assert spec.ffn["operator"] == "rmsnorm" and spec.ffn["h_ffn"] == 96 and spec.ffn["k_dept"] == 5
    assert spec.steps == 8000


def test_gpu_profile_tokens_axis():
    """small: 1k (its own steps) to 12k steps, 3 seeds (27 at 8k); medium: 1k to 16k, 2 seeds;
    each with its RMSNorm pair, whose baselines are the SiLU size's runs."""
    s = load_settings(doc=profile_doc("gpu"))
    assert runs.size(s, "small").lengths == runs.size(s, "smallrms").lengths == (1000, 2000, 4000, 8000, 12000)
    assert runs.size(s, "medium").lengths == runs.size(s, "mediumrms").lengths == (1000, 4000, 8000, 16000)
    assert runs.size(s, "large").lengths == (700,)
    assert runs.axis_lengths(s, "small") == (2000, 4000, 8000, 12000)
    names = runs.pretrain_run_names(s, ["smallrms"], 8000)
    # three seeds and twenty-four extra at 8k (extra_seeds), of two models
    assert len(names) == 54 and names[0] == "pretrain-smallrms-baseline-s0-8000steps"
    assert names[-1] == "pretrain-smallrms-deamoe-s26-8000steps"
    assert runs.trained_as(s, names[0]) == "pretrain-small-baseline-s0-8000steps"
    assert runs.trained_as(s, names[1]) == names[1]  # its DeaMoE has another operator
    assert runs.run_spec(s, names[0]).steps == 8000
    # Table 4 at 8k steps: No.1 is the small pair's 8k-step DeaMoE run
    assert runs.trained_as(s, "ablation-no1-s1") == "pretrain-small-deamoe-s1-8000steps"
    assert runs.trained_as(s, "ablation-no2-s1") == "ablation-no2-s1"


def test_run_spec_carries_seed_size_and_lr():
    s = load_settings(doc=profile_doc("gpu"))
    spec = runs.run_spec(s, "pretrain-small-deamoe-s2")
    assert (spec.size, spec.seed, spec.lr, spec.steps, spec.ffn_type) == ("small", 2, 2.0e-3, 1000, "deamoe")
    assert runs.parse_run("pretrain-small-deamoe-s2") == {"kind": "pretrain", "size": "small",
                                                          "model": "deamoe", "seed": 2, "steps": 0}
    assert runs.parse_run("pretrain-small-deamoe-s2-4000steps")["steps"] == 4000
    assert runs.run_spec(s, "pretrain-small-deamoe-s2-4000steps").steps == 4000


def test_lengths_name_their_runs_and_refuse_lengths_off_the_axis():
    s = load_settings(doc=_tiny(sizes={"a": {"steps": 50, "lengths": [200, 100, 50]}}, seeds=[0]))
    assert runs.size(s, "a").lengths == (50, 100, 200)  # its own steps joins the axis once
    assert runs.pretrain_run_names(s, ["a"]) == ["pretrain-a-baseline-s0", "pretrain-a-deamoe-s0"]
    assert runs.pretrain_run_names(s, ["a"], 200) == ["pretrain-a-baseline-s0-200steps",
                                                      "pretrain-a-deamoe-s0-200steps"]
    with pytest.raises(ConfigError, match=r"size a has no length of 300 steps \(its lengths: 50, 100, 200\)"):
        runs.pretrain_run_names(s, ["a"], 300)
    for bad in ("pretrain-a-deamoe-s0-300steps", "pretrain-a-deamoe-s0-50steps"):
        with pytest.raises(ConfigError, match=r"size a has no further length of \d+ steps"):
            runs.run_spec(s, bad)
    # every length runs past the warm-up (tiny default: 30 steps)
    with pytest.raises(ConfigError, match=r"train.warmup_steps=30 must be less than the steps of every run "
                                          r"\(size c has a run of 20"):
        load_settings(doc=_tiny(sizes={"c": {"lengths": [20]}}))
    with pytest.raises(ConfigError, match=r"pretrain.sizes.b.lengths.0: 0 is less than the minimum of 1"):
        runs.size(load_settings(doc=_tiny(sizes={"b": {"lengths": [0]}})), "b")
    with pytest.raises(ConfigError, match=r"pretrain.sizes.b.lengths must be distinct values"):
        runs.size(load_settings(doc=_tiny(sizes={"b": {"lengths": [100, 100]}})), "b")


def test_a_run_equal_to_an_earlier_sizes_run_is_trained_as_that_run():
    """A size that differs only in DeaMoE's operator shares its baselines with the earlier size;
    anything that changes the recipe (lr, seed set, a model field) keeps them apart."""
    sizes = {"a": {"lengths": [40]}, "arms": {"lengths": [40], "deamoe": {"operator": "rmsnorm"}},
             "alr": {"lr": 1e-3}}
    s = load_settings(doc=_tiny(sizes=sizes, seeds=[0, 1]))
    assert runs.trained_as(s, "pretrain-arms-baseline-s1") == "pretrain-a-baseline-s1"
    assert runs.trained_as(s, "pretrain-arms-baseline-s1-40steps") == "pretrain-a-baseline-s1-40steps"
    assert runs.trained_as(s, "pretrain-arms-deamoe-s1") == "pretrain-arms-deamoe-s1"
    assert runs.trained_as(s, "pretrain-alr-baseline-s0") == "pretrain-alr-baseline-s0"
    assert runs.trained_as(s, "pretrain-a-baseline-s0") == "pretrain-a-baseline-s0"


def _tiny(**pretrain) -> dict:
    doc = profile_doc(None)
    doc["pretrain"] = {**doc["pretrain"], **pretrain}
    return doc


@pytest.mark.parametrize("pretrain, message", [
    ({"sizes": {"Big-1": {}}}, "pretrain.sizes: bad size name 'Big-1'"),
    ({"sizes": {}}, "pretrain.sizes must map at least one size"),
    ({"sizes": {"a": {"hidden": 3}}}, "unknown key pretrain.sizes.a.hidden"),
    ({"sizes": {"a": {"deamoe": {"h_ffn": 24, "n_dept": 8}}}}, "pretrain.sizes.a.deamoe: missing key n_expert"),
    ({"sizes": {"a": {"deamoe": {"h_ffn": 24, "n_dept": 8, "n_expert": 48, "k_dept": 4, "k_expert": 8}}}},
     "pretrain.sizes.a.deamoe is not budget-matched to its baseline: params_ratio="),
    ({"sizes": {"a": {"baseline": {"n_experts": 4}}}}, "unknown key pretrain.sizes.a.baseline.n_experts"),
    ({"sizes": {"a": {"hidden_size": 60, "num_attention_heads": 8}}}, "pretrain.sizes.a: hidden_size 60"),
    ({"sizes": {"a": {"seeds": [1, 1]}}}, "pretrain.sizes.a.seeds must be distinct"),
    ({"seeds": [0, 0]}, "pretrain.seeds must be distinct integers"),
])
def test_bad_ladder_is_one_line_naming_the_key(pretrain, message):
    with pytest.raises(ConfigError) as err:
        s = load_settings(doc=_tiny(**pretrain))
        for name in s.pretrain.sizes:
            runs.size(s, name)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_ablation_size_must_be_a_ladder_size():
    doc = _tiny()
    doc["ablation"]["size"] = "huge"
    with pytest.raises(ConfigError, match=r"ablation.size 'huge' is not in pretrain.sizes \(tiny\)"):
        load_settings(doc=doc)


def test_unknown_run_names_are_refused():
    s = load_settings(doc=profile_doc(None))
    with pytest.raises(ConfigError, match="bad run name 'pretrain-deamoe'"):
        runs.run_spec(s, "pretrain-deamoe")
    with pytest.raises(ConfigError, match="unknown size 'big'"):
        runs.run_spec(s, "pretrain-big-deamoe-s0")
    with pytest.raises(ConfigError, match="seed 3 is not among the seeds of size tiny"):
        runs.run_spec(s, "pretrain-tiny-deamoe-s3")
    with pytest.raises(ConfigError, match=r"seed 3 is not among the ablation's seeds \(0: ablation.seeds"):
        runs.run_spec(s, "ablation-no1-s3")
    # a seed too large for torch's generator: the same line, not an overflow inside the trainer
    with pytest.raises(ConfigError, match="run ablation-no1-s99999999999999999999: seed 9+ is not among"):
        runs.run_spec(s, "ablation-no1-s99999999999999999999")


def test_a_size_may_change_other_model_fields_for_a_sweep():
    from deamoe.train.runs import model_config

    s = load_settings(doc=_tiny(sizes={"a": {}, "b": {"model": {"aux_loss_coef": 0.05}, "lr": 1e-2}}))
    a, b = (model_config(s, runs.run_spec(s, f"pretrain-{z}-deamoe-s0"), 300) for z in "ab")
    assert (a.aux_loss_coef, b.aux_loss_coef) == (0.01, 0.05)
    assert runs.run_spec(s, "pretrain-b-baseline-s0").lr == 1e-2
    with pytest.raises(ConfigError, match=r"unknown key model.colour"):
        runs.size(load_settings(doc=_tiny(sizes={"a": {"model": {"colour": 1}}})), "a")
    with pytest.raises(ConfigError, match=r"pretrain.sizes.a.model.hidden_size: set it as pretrain.sizes.a.hidden_size"):
        runs.size(load_settings(doc=_tiny(sizes={"a": {"model": {"hidden_size": 8}}})), "a")


def test_a_size_sets_the_expert_init_scale_of_both_models():
    from deamoe.train.runs import model_config

    s = load_settings(doc=_tiny(sizes={"a": {}, "b": {"model": {"expert_init_scale": 0.5}}}))
    for m in runs.MODELS:
        a, b = (model_config(s, runs.run_spec(s, f"pretrain-{z}-{m}-s0"), 300) for z in "ab")
        assert (a.expert_init_scale, b.expert_init_scale) == (1.0, 0.5)
    with pytest.raises(ConfigError, match=r"model.expert_init_scale must be > 0"):
        runs.size(load_settings(doc=_tiny(sizes={"a": {"model": {"expert_init_scale": 0}}})), "a")


def test_the_gpu_ladders_rmsnorm_pairs_differ_from_their_size_in_the_operator_only():
    """The gpu profile's smallrms / mediumrms / largerms pairs: their size's decoder, baseline,
    DeaMoE shape (the search's pick), steps, lr and model settings, seeds among the size's; only
    DeaMoE's inter-stage operator is RMSNorm instead of SiLU."""
    from deamoe.train.runs import model_config

    s = load_settings(doc=profile_doc("gpu"))
    for base in ("small", "medium", "large"):
        z, rms = runs.size(s, base), runs.size(s, base + "rms")
        assert (rms.decoder, rms.baseline, rms.steps, rms.lr) == (z.decoder, z.baseline, z.steps, z.lr), base
        assert set(rms.seeds) <= set(z.seeds) and len(rms.seeds) >= 2
        assert (z.deamoe.operator, rms.deamoe.operator) == ("silu", "rmsnorm")
        assert replace(rms.deamoe, operator="silu") == z.deamoe, base
        for m in runs.MODELS:
            a, b = (model_config(s, runs.run_spec(s, f"pretrain-{name}-{m}-s0"), 8192) for name in (base, base + "rms"))
            assert replace(b, operator=a.operator) == a, (base, m)


def test_an_ablation_variant_identical_to_a_pretrain_run_is_trained_once():
    # tiny default: No.1 at seed 0 is the tiny DeaMoE run (same model, seed, lr and 300 steps)
    s = load_settings(doc=profile_doc(None))
    assert [runs.trained_as(s, n) for n in runs.ablation_run_names(s)] == \
        ["pretrain-tiny-deamoe-s0"] + [f"ablation-no{i}-s0" for i in range(2, 7)]
    # gpu profile: Table 4 runs 8000 steps at the small size, one of the small pair's lengths
    gpu = profile_doc("gpu")
    s = load_settings(doc=gpu)
    assert {n: runs.trained_as(s, n) for n in runs.ablation_run_names(s) if runs.trained_as(s, n) != n} == \
        {"ablation-no1-s0": "pretrain-small-deamoe-s0-8000steps", "ablation-no1-s1": "pretrain-small-deamoe-s1-8000steps"}
    # off the pair's lengths, another cosine schedule: No.1 is trained on its own
    gpu["ablation"]["steps"] = 600
    s = load_settings(doc=gpu)
    assert all(runs.trained_as(s, n) == n for n in runs.ablation_run_names(s))
    # on the pair's own 1000 steps No.1 is the small DeaMoE run; a seed outside the size's is its own
    gpu["ablation"]["steps"] = 1000
    gpu["pretrain"]["sizes"]["small"]["seeds"] = [1]
    s = load_settings(doc=gpu)
    assert runs.trained_as(s, "ablation-no1-s1") == "pretrain-small-deamoe-s1"
    assert runs.trained_as(s, "ablation-no1-s0") == "ablation-no1-s0"


def test_deamoe_variant_fields_alone_keep_the_search_shape():
    """`deamoe: {operator: ...}` without the five shape keys is the budget search's pick with that
    operator; two of the five keys are refused, naming the first missing one."""
    s = load_settings(doc=_tiny(sizes={"a": {}, "b": {"deamoe": {"operator": "rmsnorm"}}}))
    a, b = runs.size(s, "a"), runs.size(s, "b")
    assert b.deamoe == replace(a.deamoe, operator="rmsnorm") and a.deamoe.operator == "silu"
    with pytest.raises(ConfigError, match=r"pretrain.sizes.c.deamoe: missing key n_expert"):
        load_settings(doc=_tiny(sizes={"c": {"deamoe": {"h_ffn": 96, "n_dept": 8}}}))
