"""Evaluation stage: Tables 2 and 3 with lm-evaluation-harness 0.4.13 (Python API).

- data.py      shipped downstream data (data/eval/*.gz): validation (errors name file:line) and
               conversion into the hub field names the harness's built-in tasks read
- corpus.py    PTB / WikiText test sets as documents for the perplexity tasks
- tasks/       task YAMLs: the built-in downstream tasks re-pointed at local JSONL
               (deamoe_downstream.yaml) and the project's ptb / wikitext103 / wikitext2 tasks
- settings.py  the config's `eval` section
- runner.py    `python -m deamoe eval`: one checkpoint -> results/eval/<model>/lm_eval.json
- tables.py    `python -m deamoe eval-tables`: downstream.csv, perplexity.csv (paper values
               beside, from deamoe.paper: Tables 2 and 3 and how the harness's metrics are read)
"""
