"""The paper's Tables 2 and 3 (arXiv 2608.14385v1), checked against the extracted paper text
(seeds/000_104e20784e71d0e0.txt, the lines after "Table 2." and "Table 3.").

Table 2 gives one accuracy (%) per task without naming the metric.  Where the harness reports
both acc and acc_norm, the values fit acc_norm for HellaSwag (57 at this scale; acc would be
~43) and OpenBookQA (35-38; acc would be ~25), and the usual practice for PIQA is acc_norm too:
TABLE_METRIC records that reading; downstream.csv keeps both metrics either way.
Table 3 is read as word perplexity (the harness's wikitext headline metric).
"""

# paper model name -> the pipeline's model name (results/eval/<model>/)
MODELS = {"deamoe": "DeaMoE-7B", "baseline": "Baseline-7B"}

# harness task -> (Table 2 column, metric compared, {model: accuracy %})
TABLE2 = {
    "boolq": ("BoolQ", "acc", {"deamoe": 62.39, "baseline": 61.47}),
    "piqa": ("PIQA", "acc_norm", {"deamoe": 73.39, "baseline": 74.43}),
    "social_iqa": ("SIQA", "acc", {"deamoe": 42.07, "baseline": 41.97}),
    "hellaswag": ("HSwag", "acc_norm", {"deamoe": 57.04, "baseline": 57.54}),
    "winogrande": ("WinoG", "acc", {"deamoe": 58.01, "baseline": 55.25}),
    "race": ("RaceH", "acc", {"deamoe": 39.62, "baseline": 39.71}),
    "anli_r1": ("AnliR1", "acc", {"deamoe": 32.80, "baseline": 32.0}),
    "anli_r2": ("AnliR2", "acc", {"deamoe": 34.3, "baseline": 31.9}),
    "anli_r3": ("AnliR3", "acc", {"deamoe": 35.25, "baseline": 34.17}),
    "openbookqa": ("OBQA", "acc_norm", {"deamoe": 34.8, "baseline": 37.6}),
}

# perplexity task -> (Table 3 column, {model: perplexity})
TABLE3 = {
    "ptb": ("PTB", {"deamoe": 61.91, "baseline": 64.33}),
    "wikitext103": ("WikiText-103", {"deamoe": 20.31, "baseline": 20.18}),
    "wikitext2": ("WikiText-2", {"deamoe": 20.33, "baseline": 20.43}),
}


def table2_value(task: str, model: str, metric: str) -> float | None:
    """The paper's accuracy for (task, model) if `metric` is the one Table 2 is read as, else None."""
    entry = TABLE2.get(task)
    if entry is None or entry[1] != metric:
        return None
    return entry[2].get(model)


def table3_value(task: str, model: str) -> float | None:
    entry = TABLE3.get(task)
    return None if entry is None else entry[1].get(model)
