"""The pipeline config's `eval` section (lm-eval on Table 2's tasks and Table 3's corpora).

Defaults are the `tiny` profile: a few documents per task so both models finish in minutes on a
2-core CPU.  workflow/schemas/eval.schema.yaml describes the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from deamoe.errors import ConfigError
from deamoe.parse import from_dict

DOWNSTREAM_TASKS = ("boolq", "piqa", "social_iqa", "hellaswag", "winogrande", "race",
                    "anli_r1", "anli_r2", "anli_r3", "openbookqa")
PERPLEXITY_TASKS = ("ptb", "wikitext103", "wikitext2")
ALL_TASKS = DOWNSTREAM_TASKS + PERPLEXITY_TASKS


@dataclass(frozen=True)
class EvalSettings:
    online: bool = False  # true: the standard hub datasets instead of data_dir (needs internet)
    data_dir: str = "data/eval"  # the shipped evaluation data (relative to the working directory)
    hf_home: str = "results/.hf_home"  # HF_HOME for the harness's dataset cache
    tasks: tuple[str, ...] = ALL_TASKS
    limit: int = 8  # per task: evaluate the first N documents (0 = all)
    ppl_max_chars: int = 20000  # perplexity corpora: first N characters, cut at a line end (0 = all)
    num_fewshot: int = 0  # the paper's Table 2 is read as zero-shot; offline data has no train split
    batch_size: int = 8
    max_length: int = 0  # tokens per window / context (0 = the model's max_position_embeddings)
    device: str = "cpu"  # cpu | cuda | cuda:N | auto
    dtype: str = "float32"  # float32 | bfloat16 | float16
    seed: int = 1234
    seeds: tuple[int, ...] = ()  # pre-training seeds that get the downstream tasks (empty: all); others perplexity
    log_samples: bool = False  # keep per-document outputs in lm_eval.json (large)
    bootstrap_iters: int = 1000  # the harness's stderr bootstrap for perplexity-free metrics


def parse_eval(values: dict | None) -> EvalSettings:
    s = from_dict(EvalSettings, values, "eval")
    bad = [t for t in s.tasks if t not in ALL_TASKS]
    if bad or not s.tasks or len(set(s.tasks)) != len(s.tasks):
        raise ConfigError(f"eval.tasks must list distinct names among {', '.join(ALL_TASKS)}; got {list(s.tasks)}")
    for key in ("limit", "ppl_max_chars", "num_fewshot", "max_length", "bootstrap_iters"):
        if getattr(s, key) < 0:
            raise ConfigError(f"eval.{key} must be >= 0, got {getattr(s, key)}")
    if s.batch_size < 1:
        raise ConfigError(f"eval.batch_size must be >= 1, got {s.batch_size}")
    if not (s.device in ("cpu", "cuda", "auto") or s.device.startswith("cuda:")):
        raise ConfigError(f"eval.device must be cpu, cuda, cuda:N or auto, got {s.device!r}")
    if s.dtype not in ("float32", "bfloat16", "float16"):
        raise ConfigError(f"eval.dtype must be float32, bfloat16 or float16, got {s.dtype!r}")
    if s.num_fewshot and not s.online:
        raise ConfigError("eval.num_fewshot must be 0 offline (the shipped data has no training split)")
    return s
