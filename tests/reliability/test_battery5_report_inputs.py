"""The report fed hand-edited results: a row given twice in a table the report picks rows from, or
a row of a model or variant no stage writes, is one line naming the file, the line and the row,
nothing written."""

from __future__ import annotations

import pytest

PROV = "git_sha,date\n"
TWICE = {
    # Table 1 and the pre-training table showed the row twice
    "analysis/table1.csv": ("model,flops_ratio,params_ratio\nDeepSeek-V3,0.99,0.99\nDeepSeek-V3,0.99,0.99\n",
                            ":3", "model=DeepSeek-V3"),
    "pretrain/summary.csv": ("run,size,model,seed,val_loss\npretrain-tiny-baseline-s0,tiny,baseline,0,5.3\n"
                             "pretrain-tiny-deamoe-s0,tiny,deamoe,0,5.4\npretrain-tiny-baseline-s0,tiny,baseline,0,5.3\n",
                             ":4", "run=pretrain-tiny-baseline-s0, size=tiny, model=baseline, seed=0"),
    # Tables 2 and 3 took the first of the two without a word
    "eval/downstream.csv": ("run,model,task,metric,value\nr0,baseline,boolq,acc,25\nr0,baseline,boolq,acc,90\n",
                            ":3", "run=r0, model=baseline, task=boolq, metric=acc"),
    "eval/perplexity.csv": ("run,model,dataset,word_perplexity\nr0,deamoe,ptb,100\nr0,deamoe,ptb,10\n",
                            ":3", "run=r0, model=deamoe, dataset=ptb"),
    # Figure 3 averaged the two
    "serve/tpot.csv": ("model,concurrency,tpot_mean_ms\nbaseline,1,2.0\ndeamoe,1,1.0\nbaseline,1,99\n",
                       ":4", "model=baseline, concurrency=1"),
    "serve/slo.csv": ("tpot_budget_ms,slo_metric,throughput_gain\n4.0,tpot_mean_ms,1.5\n4.0,tpot_mean_ms,1.9\n",
                      ":3", "tpot_budget_ms=4.0, slo_metric=tpot_mean_ms"),
}


def _report_refuses(work, failing, where, text, *names):
    """The report on a results folder holding `text` at `where` fails in one line naming `names`."""
    (work / "c.yaml").write_text("report: {dpi: 60}\n")
    (work / "meas" / "h200").mkdir(parents=True)
    (work / "res" / where).parent.mkdir(parents=True)
    (work / "res" / where).write_text(text)
    failing(["report", "--config", "c.yaml", "--results", "res", "--measured", "meas", "--out", "rep"], *names)


@pytest.mark.parametrize("where", list(TWICE))
def test_a_row_given_twice_in_a_result_table_is_named(work, failing, where):
    text, line, point = TWICE[where]
    _report_refuses(work, failing, where, text, f"res/{where}{line}", f"the row of {point} is given twice")


OTHER = {
    # shown as a row of Table 1, a curve of Figure 2, a variant of Table 4, a pre-training model
    "analysis/table1.csv": ("model,flops_ratio,params_ratio\nDeepSeek-V3,0.99,0.99\nFoo-1T,0.9,0.9\n",
                            ":3", "column model is 'Foo-1T'"),
    "analysis/loading.csv": ("model,tokens,ratio\nDeepSeek-V3,4,0.6\nDeepSeek-V4,4,0.6\n",
                             ":3", "column model is 'DeepSeek-V4'"),
    "ablation/summary.csv": ("variant,seed,loss_last_n\nNo.1,0,5.5\nNo.9,0,5.5\n", ":3", "column variant is 'No.9'"),
    "pretrain/summary.csv": ("run,size,model,seed,val_loss\npretrain-tiny-baseline-s0,tiny,baseline,0,5.3\n"
                             "pretrain-tiny-gpt2-s0,tiny,gpt2,0,5.4\n", ":3", "column model is 'gpt2'"),
}


@pytest.mark.parametrize("where", list(OTHER))
def test_a_row_of_a_model_no_stage_writes_is_named(work, failing, where):
    text, line, what = OTHER[where]
    _report_refuses(work, failing, where, text, f"res/{where}{line}", what, "not one this pipeline writes")


CUT = {
    # the report read the search's other columns once searched_n_expert was there, Figure 2's FP8
    # bytes once ratio_fp8 was, Table 3 a `perplexity` column without word_perplexity: each an
    # "unexpected error" (exit 1) naming no file
    "analysis/table1.csv": ("model,flops_ratio,params_ratio,searched_n_expert,searched_n_dept\n"
                            "DeepSeek-V3,0.99,0.99,8,856\n", "searched_k_dept"),
    "analysis/loading.csv": ("model,tokens,ratio,ratio_fp8\nDeepSeek-V3,4,0.6,0.6\n", "baseline_bytes_fp8"),
    "eval/perplexity.csv": ("run,model,dataset,byte_perplexity\nr0,deamoe,ptb,10\n", "word_perplexity"),
}


@pytest.mark.parametrize("where", list(CUT))
def test_a_column_cut_from_a_group_the_report_reads_is_named(work, failing, where):
    text, column = CUT[where]
    _report_refuses(work, failing, where, text, f"res/{where}", f"missing column(s) {column}")


def test_a_row_without_its_model_is_named_as_empty(work, failing):
    _report_refuses(work, failing, "analysis/table1.csv", "model,flops_ratio,params_ratio\n,0.99,0.99\n",
                    "res/analysis/table1.csv:2", "column model is empty, not one this pipeline writes")
