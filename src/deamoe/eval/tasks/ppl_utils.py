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
