"""Environment variables the commands read, as users set them: HF_ENDPOINT without its scheme
(`hf-mirror.com`, as mirrors' pages write it) is one line naming it, not a connection to 'None'."""

from __future__ import annotations

import pytest

from cli_battery import write_config

EVAL = ["eval", "--config", "c.yaml", "--checkpoint", "ck", "--model", "deamoe", "--out", "e"]


@pytest.mark.parametrize("endpoint", ["hf-mirror.com", "http://", "hf-mirror.com/path"])
def test_an_hf_endpoint_naming_no_host_is_one_line_naming_it(work, failing, monkeypatch, endpoint):
    write_config(work / "c.yaml", eval={"online": True})
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    failing(EVAL, "HF_ENDPOINT", repr(endpoint), "names no host")


def test_an_empty_hf_endpoint_is_the_hubs_default(monkeypatch):
    """huggingface_hub reads an empty HF_ENDPOINT as its default; so does the online check."""
    import socket

    from deamoe.eval import runner

    dialled = []
    monkeypatch.setenv("HF_ENDPOINT", "")
    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: dialled.append(address) or socket.socket())
    runner.check_online()
    assert dialled == [("huggingface.co", 443)]
