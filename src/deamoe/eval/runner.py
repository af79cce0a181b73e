"""Evaluate one checkpoint with lm-evaluation-harness (Python API) on Table 2's and Table 3's tasks.

Offline (the default): the shipped files in eval.data_dir are validated and converted into
WORK/data/*.jsonl; the task YAMLs of deamoe/eval/tasks/ are copied to WORK/tasks/ pointing at
them (WORK: a staging folder beside <out>, removed when the command ends, however it ends); the
harness's built-in downstream tasks run re-pointed at that data (their prompts and metrics
unchanged) beside the project's perplexity tasks.  Online (eval.online: true): the
built-in tasks read their standard hub datasets and the perplexity tasks are built from the hub's
PTB / WikiText test sets.  <out>/lm_eval.json is the harness's whole output plus a `deamoe` key
with provenance.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import time
from pathlib import Path

import yaml

from deamoe.argtypes import checkpoint_dir
from deamoe.errors import ConfigError, DataError, DeaMoEError
from deamoe.eval import corpus, data
from deamoe.eval.settings import DOWNSTREAM_TASKS, PERPLEXITY_TASKS, EvalSettings

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
GROUP = "deamoe_downstream"


def set_hf_environment(s: EvalSettings) -> None:
    """HF_HOME inside the work directory; offline unless eval.online (read at `datasets` import)."""
    os.environ["HF_HOME"] = str(Path(s.hf_home).resolve())
    flag = "0" if s.online else "1"
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[var] = flag
    try:  # `datasets` may already be imported (tests): make its cached flag agree
        import datasets.config

        datasets.config.HF_DATASETS_OFFLINE = datasets.config.HF_HUB_OFFLINE = not s.online
    except (ImportError, AttributeError):
        pass


def check_online(host: str | None = None, timeout: float = 5.0) -> None:
    from urllib.parse import urlparse

    endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"  # empty: the hub's default too
    host = host or urlparse(endpoint).hostname
    if host is None:  # `HF_ENDPOINT=hf-mirror.com` (no scheme): the check would dial "None"
        raise DeaMoEError(f"HF_ENDPOINT {endpoint!r} names no host; give a URL such as "
                          "https://huggingface.co (with its scheme), or unset it")
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as exc:
        raise DeaMoEError(
            f"eval.online is true but {host} cannot be reached ({exc.__class__.__name__}); "
            "set eval.online: false to use the shipped data in eval.data_dir"
        ) from None


def hub_docs(task: str, max_chars: int) -> list[dict]:
    try:
        return corpus.hub_docs(task, max_chars)
    except Exception as exc:  # noqa: BLE001 -- any hub/network failure becomes one line
        name = "/".join(corpus.HUB_SOURCES[task][:2])
        raise DataError(f"eval.online: cannot load {name} for {task} "
                        f"({exc.__class__.__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})") from None


def prepare_data(s: EvalSettings, out: Path) -> dict[str, dict]:
    """Write <out>/data/<task>.jsonl for the configured tasks; returns per-task source info."""
    data_dir = Path(s.data_dir)
    info = {}
    for task in s.tasks:
        if task in DOWNSTREAM_TASKS:
            if s.online:
                info[task] = {"source": "hub (the harness's built-in dataset)"}
                continue
            docs = data.task_docs(task, data_dir)
            src = data_dir / data.DOWNSTREAM[task].file
        else:
            docs = hub_docs(task, s.ppl_max_chars) if s.online else \
                corpus.shipped_docs(task, data_dir, s.ppl_max_chars)
            src = "/".join(corpus.HUB_SOURCES[task][:2]) if s.online else data_dir / corpus.PERPLEXITY_FILES[task]
        data.write_jsonl(out / "data" / f"{task}.jsonl", docs)
        entry = {"source": str(src), "documents": len(docs)}
        if isinstance(src, Path):  # of the uncompressed text, as listed in data/eval/SOURCES.md
            with data.open_text(src) as f:
                entry["sha256"] = hashlib.sha256(f.read().encode("utf-8")).hexdigest()
        info[task] = entry
    return info


def shared_text_tasks(s: EvalSettings) -> dict[str, str]:
    """Perplexity tasks whose offline text is another selected task's file: {task: evaluated task}.

    Offline, WikiText-103's raw test set is the WikiText-2 raw test file (same bytes), so it is
    scored once and its result reported under both names; online they are different datasets.
    """
    if s.online:
        return {}
    first_by_file, same = {}, {}
    for task in (t for t in s.tasks if t in PERPLEXITY_TASKS):
        file = corpus.PERPLEXITY_FILES[task]
        if file in first_by_file:
            same[task] = first_by_file[file]
        else:
            first_by_file[file] = task
    return same


def write_tasks(s: EvalSettings, out: Path) -> list[str]:
    """Copy the task YAMLs for this run into <out>/tasks/ and return the names to evaluate."""
    tasks_dir = out / "tasks"
    tasks_dir.mkdir(parents=True, exist_ok=True)
    data_dir = str((out / "data").resolve())
    shutil.copy(TASKS_DIR / "ppl_utils.py", tasks_dir / "ppl_utils.py")
    names = []
    downstream = [t for t in s.tasks if t in DOWNSTREAM_TASKS]
    if downstream and s.online:
        names += downstream  # the built-in tasks as they are
    elif downstream:
        group = yaml.safe_load((TASKS_DIR / f"{GROUP}.yaml").read_text())
        group["task"] = [e for e in group["task"] if e["task"] in downstream]
        for entry in group["task"]:
            files = entry["dataset_kwargs"]["data_files"]
            for split in files:
                files[split] = files[split].replace("@DATA_DIR@", data_dir)
        (tasks_dir / f"{GROUP}.yaml").write_text(yaml.safe_dump(group, sort_keys=False))
        names.append(GROUP)
    for task in (t for t in s.tasks if t in PERPLEXITY_TASKS):
        text = (TASKS_DIR / f"{task}.yaml").read_text().replace("@DATA_DIR@", data_dir)
        (tasks_dir / f"{task}.yaml").write_text(text)
        names.append(task)
    return names


def corpus_counts(s: EvalSettings, work: Path, tok) -> dict[str, dict]:
    """Per perplexity task: documents, words, bytes and scored tokens of what the harness evaluated
    (the first eval.limit documents), so that the per-token loss can stand beside word perplexity."""
    from deamoe.eval.tasks.ppl_utils import scored_counts

    out = {}
    for task in (t for t in s.tasks if t in PERPLEXITY_TASKS):
        docs = [row for row, _ in data.jsonl_rows(work / "data" / f"{task}.jsonl")]
        docs = docs[: s.limit] if s.limit else docs
        total = {"documents": len(docs), "words": 0, "bytes": 0, "tokens": 0}
        for doc in docs:
            for key, n in scored_counts(task, doc, tok).items():
                total[key] += n
        out[task] = total
    return out


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"eval.device is {device!r} but no CUDA GPU is visible; set eval.device: cpu")
    return device


def load_checkpoint(checkpoint: str | Path, device: str, dtype: str):
    """Model and tokenizer from a Hugging Face checkpoint directory (DeaMoE or any causal LM)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import deamoe.model  # noqa: F401  (registers DeaMoE with the Auto classes)

    path = checkpoint_dir(checkpoint)
    _check_stored_dtypes(path)
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # its load report and warnings: the one line below says it
    try:
        tok = AutoTokenizer.from_pretrained(str(path))
        model, info = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype),
                                                           output_loading_info=True, ignore_mismatched_sizes=True)
    except Exception as exc:  # noqa: BLE001 -- a damaged file of any kind (JSON, safetensors, shapes)
        first = str(exc).splitlines()[0][:200] if str(exc).strip() else ""
        raise DataError(f"{path}: cannot load model/tokenizer ({type(exc).__name__}: {first})") from None
    finally:
        hf_logging.set_verbosity(level)
    _check_weights(path, info)
    if tok.eos_token_id is None:
        raise DataError(f"{path}: the tokenizer has no eos token (the harness needs one as prefix)")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = model.to(device).eval()
    # a weight of NaN or infinity evaluates without a word to results the tables refuse
    bad = next((name for name, p in model.named_parameters() if not torch.isfinite(p).all()), None)
    if bad is not None:
        raise DataError(f"{path}: weight {bad} holds NaN or infinite values; not a trained model")
    return model, tok


_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}


def _check_stored_dtypes(path: Path) -> None:
    """A DataError naming the first weight a safetensors file stores as integers or booleans:
    transformers casts them to the float dtype without a word (integer weights evaluate as a model,
    most often of zeros).  Reads the files' headers only."""
    from safetensors import safe_open

    for file in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(file), "pt") as fh:
                stored = {name: fh.get_slice(name).get_dtype() for name in fh.keys()}
        except Exception:  # noqa: BLE001 -- a damaged file: the loader below names it
            continue
        name = next((n for n, dtype in stored.items() if dtype not in _FLOAT_DTYPES), None)
        if name is not None:
            raise DataError(f"{path}: weight {name} is stored as {stored[name]} in {file.name}, not floating "
                            "point; not a trained model's weights")


def _check_weights(path: Path, info: dict) -> None:
    """A DataError naming the first weight the checkpoint lacks (it would start from random
    values: evaluated as if trained), holds in another shape than its config.json gives, or holds
    beyond the model of its config.json (a config.json of fewer layers: a smaller model evaluated)."""
    absent = sorted(info.get("missing_keys") or [])
    if absent:
        raise DataError(f"{path}: the checkpoint lacks {len(absent)} of the model's weights (first: {absent[0]}); "
                        "not a whole trained model")
    shapes = sorted(info.get("mismatched_keys") or [], key=str)
    if shapes:
        key, held, wanted = (tuple(shapes[0]) + (None, None))[:3] if isinstance(shapes[0], tuple) else (shapes[0], None, None)
        how = f" ({list(held)}, where config.json gives {list(wanted)})" if held is not None and wanted is not None else ""
        raise DataError(f"{path}: the checkpoint holds {len(shapes)} weight(s) in another shape than its config.json "
                        f"gives (first: {key}{how}); the weights and config.json are of different models")
    extra = sorted(info.get("unexpected_keys") or [])
    if extra:
        raise DataError(f"{path}: the checkpoint holds {len(extra)} weight(s) the model of its config.json has no "
                        f"place for (first: {extra[0]}); the weights and config.json are of different models")


def run_eval(s: EvalSettings, checkpoint: str | Path, model_name: str, out: str | Path,
             profile: str = "") -> dict:
    """Evaluate `checkpoint`; write <out>/lm_eval.json and return the harness's result dict."""
    out = Path(out)
    set_hf_environment(s)
    if s.online:
        check_online()
    started = time.time()
    device = resolve_device(s.device)
    checkpoint_dir(checkpoint)  # no checkpoint there: named first
    import json

    from lm_eval.utils import handle_non_serializable

    from deamoe.io import staging_dir, write_text

    with staging_dir(out) as work:
        # every data file read and checked (seconds) before the model loads (minutes, when large)
        sources = prepare_data(s, work)
        model, tok = load_checkpoint(checkpoint, device, s.dtype)
        context = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        if s.max_length and context and s.max_length > context:
            # a longer window would score tokens at positions the model never saw (RoPE extrapolation)
            raise ConfigError(f"eval.max_length={s.max_length} is longer than the context of {checkpoint} "
                              f"(max_position_embeddings={context}); set it <= {context}, or 0 for the "
                              "model's own")
        results = _evaluate(s, checkpoint, model_name, work, model, tok, device, started, profile, sources)
        write_text(out / "lm_eval.json",
                   json.dumps(results, indent=2, default=handle_non_serializable, ensure_ascii=False) + "\n")
        return results


def _evaluate(s, checkpoint, model_name, work, model, tok, device, started, profile, sources) -> dict:
    same = shared_text_tasks(s)
    names = [n for n in write_tasks(s, work) if n not in same]  # same text: score it once

    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from deamoe.provenance import provenance, version

    max_length = s.max_length or int(getattr(model.config, "max_position_embeddings", 2048))
    # log-softmax in float32 even for bf16/fp16 weights: perplexities sum ~1e5 token log-probs
    lm = HFLM(pretrained=model, tokenizer=tok, backend="causal", batch_size=s.batch_size,
              max_length=max_length, softmax_dtype="float32")
    try:
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=names,
            num_fewshot=s.num_fewshot,
            limit=s.limit or None,
            task_manager=TaskManager(include_path=str(work / "tasks")),
            log_samples=s.log_samples,
            bootstrap_iters=s.bootstrap_iters,
            random_seed=s.seed,
            numpy_random_seed=s.seed,
            torch_random_seed=s.seed,
            fewshot_random_seed=s.seed,
        )
    except AssertionError as exc:  # the harness asserts that every answer fits in max_length
        raise DeaMoEError(
            f"lm-eval failed on {checkpoint} ({exc!r}); usually an answer longer than the "
            f"{max_length}-token context: raise eval.max_length"
        ) from None
    if results is None:
        raise DeaMoEError("lm-eval returned no results (non-zero rank?)")
    for task, scored in same.items():  # same text: report the one evaluation under both names
        for key in ("results", "n-samples"):
            if scored in results.get(key, {}):
                results[key][task] = {**results[key][scored], "alias": task}
    corpora = corpus_counts(s, work, tok)
    results["deamoe"] = {
        "model": model_name,
        "checkpoint": str(checkpoint),
        "online": s.online,
        "limit_per_task": s.limit or None,
        "ppl_max_chars": s.ppl_max_chars or None,
        "max_length": max_length,
        "batch_size": s.batch_size,
        "dtype": s.dtype,
        "data": sources,
        "scored_once_same_text": same,
        "corpora": corpora,
        "wall_seconds": round(time.time() - started, 1),
        **provenance(device, profile=profile, lm_eval=version("lm-eval"),
                     transformers=version("transformers")),
    }
    return results
