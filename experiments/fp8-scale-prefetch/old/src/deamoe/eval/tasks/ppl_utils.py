"""Functions the perplexity task YAMLs call (`!function ppl_utils.<name>`).

WikiText-2 / WikiText-103 reuse the harness's own `wikitext` functions unchanged (detokenizer and
word / byte counts on the original page).  PTB gets the same treatment with PTB's conventions.
"""

import re

from lm_eval.tasks.wikitext.preprocess_wikitext import process_results as wikitext_process_results  # noqa: F401
from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer  # noqa: F401

# PTB splits clitics off their word ("did n't", "it 's"); rejoin them so a model trained on
# ordinary text sees ordinary text.  <unk> and N (numbers) stay as they are: they are the test set.
_PTB_CLITICS = re.compile(r" (n't|'s|'re|'ve|'m|'ll|'d)\b")


def ptb_detokenizer(doc):
    lines = [line.strip() for line in doc["page"].split("\n")]
    return "\n".join(_PTB_CLITICS.sub(r"\1", line) for line in lines if line)


def ptb_words(page: str) -> int:
    """Mikolov's count: the words of each sentence plus one <eos> per sentence (82,430 on test)."""
    lines = [line for line in page.split("\n") if line.strip()]
    return sum(len(line.split()) for line in lines) + len(lines)


def ptb_process_results(doc, results):
    (loglikelihood,) = results
    n_bytes = len(doc["page"].encode("utf-8"))
    return {
        "word_perplexity": (loglikelihood, ptb_words(doc["page"])),
        "byte_perplexity": (loglikelihood, n_bytes),
        "bits_per_byte": (loglikelihood, n_bytes),
    }


# task -> (the YAML's doc_to_target, its process_results)
TASK_FUNCTIONS = {
    "ptb": (ptb_detokenizer, ptb_process_results),
    "wikitext2": (wikitext_detokenizer, wikitext_process_results),
    "wikitext103": (wikitext_detokenizer, wikitext_process_results),
}


def scored_counts(task, doc, tokenizer):
    """Words and bytes the task divides by, and tokens the model scores, for one document.

    The harness scores every token of the detokenized text (loglikelihood_rolling, no special
    tokens; the end-of-text prefix is context only), so NLL / tokens is the per-token loss that
    the word perplexity's NLL / words comes from.
    """
    detokenize, process = TASK_FUNCTIONS[task]
    counted = process(doc, (0.0,))
    ids = tokenizer(detokenize(doc), add_special_tokens=False)["input_ids"]
    return {"words": counted["word_perplexity"][1], "bytes": counted["byte_perplexity"][1], "tokens": len(ids)}
