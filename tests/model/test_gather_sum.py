"""deamoe.model.gather_sum: the Triton kernel (under the interpreter on CPU) equals index_select +
sum, in float64 for every width and slot count, with duplicated and strided reads, with a wider
result dtype, inside a compiled graph; and it is a well-formed custom op."""

from __future__ import annotations

import pytest
import torch

from deamoe.model.gather_sum import gather_sum


def _reference(rows, idx, slots, dtype=None):
    return rows.index_select(0, idx).view(-1, slots, rows.shape[-1]).sum(1, dtype=dtype)


@pytest.mark.parametrize("slots,D", [(8, 48), (5, 130), (1, 7), (3, 1100)])
def test_gather_sum_kernel_equals_index_select_sum_in_float64(slots, D):
    torch.manual_seed(0)
    T = 6
    rows = torch.randn(T * slots + 3, D, dtype=torch.float64)  # 3 rows nobody reads
    idx = torch.randperm(T * slots + 3)[:T * slots]
    idx[::4] = 2  # some rows read by several slots (DeaMoE's padding pairs all read one row)
    got = gather_sum(rows, idx, slots, use_triton=True)
    assert got.shape == (T, D)
    assert torch.allclose(got, _reference(rows, idx, slots), rtol=1e-12, atol=1e-12)


def test_gather_sum_reads_strided_rows_and_writes_the_requested_dtype():
    """bf16 rows summed into float32 (the dispatch's backward sums in the input's dtype); rows
    with a row stride wider than their width (a column slice)."""
    torch.manual_seed(0)
    wide = torch.randn(40, 96).to(torch.bfloat16)
    rows = wide[:, 16:80]
    idx = torch.randperm(40)[:32]
    got = gather_sum(rows, idx, 4, dtype=torch.float32, use_triton=True)
    want = _reference(rows.float(), idx, 4)  # float32 sums of the bf16 values
    assert got.dtype == torch.float32
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)


def test_gather_sum_of_one_slot_is_a_gather_exactly():
    torch.manual_seed(0)
    rows = torch.randn(10, 33)
    idx = torch.tensor([3, 3, 9, 0])
    assert torch.equal(gather_sum(rows, idx, 1, use_triton=True), rows[idx])


def test_gather_sum_is_a_well_formed_custom_op_and_runs_in_a_compiled_graph():
    torch.manual_seed(0)
    rows = torch.randn(24, 40, dtype=torch.float64)
    idx = torch.randperm(24)
    torch.library.opcheck(torch.ops.deamoe.gather_sum.default, (rows, idx, 4, torch.float64))
    compiled = torch.compile(lambda r, i: gather_sum(r * 2.0, i, 4, use_triton=True),
                             backend="aot_eager", fullgraph=True)
    assert torch.allclose(compiled(rows, idx), _reference(rows * 2.0, idx, 4), rtol=1e-12, atol=1e-12)


def test_no_tokens_give_an_empty_result():
    rows = torch.randn(4, 8)
    assert gather_sum(rows, torch.empty(0, dtype=torch.int64), 2, use_triton=True).shape == (0, 8)
