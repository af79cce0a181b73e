"""Provenance: the git sha a number records says whether the tree was that commit's."""

from __future__ import annotations

import subprocess

import pytest

from deamoe import provenance


def _git(where, *args):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=where, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.delenv("DEAMOE_GIT_SHA", raising=False)
    provenance.git_sha.cache_clear()
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-qm", "first")
    yield tmp_path
    provenance.git_sha.cache_clear()


def _head(where) -> str:
    return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=where, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_a_clean_tree_records_its_commit(repo):
    (repo / "untracked.csv").write_text("results are not the code\n")
    assert provenance.git_sha(repo) == _head(repo)


def test_an_edited_tree_does_not_pass_for_its_commit(repo):
    (repo / "a.txt").write_text("two\n")
    assert provenance.git_sha(repo) == _head(repo) + provenance.UNCOMMITTED


def test_the_callers_sha_stands_for_a_copy_without_git(tmp_path, monkeypatch):
    provenance.git_sha.cache_clear()
    monkeypatch.setenv("DEAMOE_GIT_SHA", "0123456789abcdef")
    assert provenance.git_sha(tmp_path) == "0123456789ab"
    monkeypatch.delenv("DEAMOE_GIT_SHA")
    provenance.git_sha.cache_clear()
    assert provenance.git_sha(tmp_path) == "unknown"  # no repository there
    provenance.git_sha.cache_clear()


def test_a_short_sha_a_gpu_call_recorded_reads_in_the_12_digit_form(repo):
    """A GPU call's tree has no .git and its rows record DEAMOE_GIT_SHA as given: joined here,
    7-digit and 12-digit rows of the same commit mixed in one table."""
    head = _head(repo)
    full = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert provenance.row_sha(head[:7], repo) == head
    assert provenance.row_sha(full, repo) == head
    # what it cannot place stays as it was
    for given in ("0123456789abcdef", head + provenance.UNCOMMITTED, "unknown", None, "HEAD"):
        assert provenance.row_sha(given, repo) == given
