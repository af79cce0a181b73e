"""The paper's Tables 2 and 3 (arXiv 2608.14385v1), checked against the extracted paper text
(seeds/000_104e20784e71d0e0.txt, the lines after "Table 2." and "Table 3.").

Table 2 gives one accuracy (%) per task without naming the metric.  Where the harness reports
both acc and acc_norm, the values fit acc_norm for HellaSwag (57 at this scale; acc would be
~43) and OpenBookQA (35-38; acc would be ~25), and the usual practice for PIQA is acc_norm too:
TABLE_METRIC records that reading; downstream.csv keeps both metrics either way.
Table 3 is read as word perplexity (the harness's wikitext headline metric).
"""

from deamoe import paper

# paper model name -> the pipeline's model name (results/eval/<model>/)
MODELS = {"deamoe": "DeaMoE-7B", "baseline": "Baseline-7B"}

# harness task -> (Table 2 column, metric compared, task name in deamoe.paper.TABLE2)
_TABLE2_READING = {
    "boolq": ("BoolQ", "acc", "boolq"),
    "piqa": ("PIQA", "acc_norm", "piqa"),
    "social_iqa": ("SIQA", "acc", "siqa"),
    "hellaswag": ("HSwag", "acc_norm", "hellaswag"),
    "winogrande": ("WinoG", "acc", "winogrande"),
    "race": ("RaceH", "acc", "race_high"),
    "anli_r1": ("AnliR1", "acc", "anli_r1"),
    "anli_r2": ("AnliR2", "acc", "anli_r2"),
    "anli_r3": ("AnliR3", "acc", "anli_r3"),
    "openbookqa": ("OBQA", "acc_norm", "openbookqa"),
}
# harness task -> (Table 2 column, metric compared, {model: accuracy %}); values: deamoe.paper
TABLE2 = {
    task: (column, metric, {m: paper.TABLE2[m][name] for m in MODELS})
    for task, (column, metric, name) in _TABLE2_READING.items()
}

# perplexity task -> (Table 3 column, {model: perplexity})
_TABLE3_COLUMNS = {"ptb": "PTB", "wikitext103": "WikiText-103", "wikitext2": "WikiText-2"}
TABLE3 = {
    task: (column, {m: paper.TABLE3[m][task] for m in MODELS}) for task, column in _TABLE3_COLUMNS.items()
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
