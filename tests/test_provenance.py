"""The code fingerprint that keys cached results (`logra.provenance`)."""

from __future__ import annotations

import pytest

from logra import provenance
from logra.experiments import training_quality as tq
from logra.rl import config as cfg

MODULE = '''"""A module."""

def scale(x):
    """Twice x."""
    return 2 * x  # doubled
'''


def test_the_tree_ignores_docstrings_comments_and_layout_not_code() -> None:
    edited = MODULE.replace("Twice x.", "x, twice.").replace("# doubled", "# times two")
    reflowed = MODULE.replace("return 2 * x", "return (2 *\n            x)")
    changed = MODULE.replace("2 * x", "3 * x")
    assert provenance.code_tree(edited) == provenance.code_tree(MODULE)
    assert provenance.code_tree(reflowed) == provenance.code_tree(MODULE)
    assert provenance.code_tree(changed) != provenance.code_tree(MODULE)
    only_docstring = '"""Only a docstring."""\n'
    assert provenance.code_tree(only_docstring) == provenance.code_tree("")


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package laid out like `logra`'s training code, with one module of an experiment."""
    for part in provenance.TRAINING_CODE:
        if part.endswith(".py"):
            (tmp_path / part).write_text("LR = 1e-3\n")
        else:
            (tmp_path / part).mkdir()
            (tmp_path / part / "step.py").write_text("def step():\n    return 1\n")
    (tmp_path / "experiment.py").write_text(MODULE)
    monkeypatch.setattr(provenance, "PACKAGE_ROOT", tmp_path)
    monkeypatch.setattr(provenance, "_LOADED", {})
    monkeypatch.setattr(provenance, "_FINGERPRINTS", {})
    yield tmp_path


def _new_process() -> None:
    provenance._LOADED.clear()
    provenance._FINGERPRINTS.clear()


def test_the_fingerprint_follows_the_code_it_covers(package, monkeypatch) -> None:
    base, with_experiment = provenance.fingerprint(), provenance.fingerprint("experiment.py")
    assert base != with_experiment and len(base) == 16
    (package / "experiment.py").write_text(MODULE.replace("Twice x.", "Double."))
    _new_process()
    assert provenance.fingerprint("experiment.py") == with_experiment  # a docstring only
    (package / "rl" / "step.py").write_text("def step():\n    return 2\n")
    _new_process()
    assert provenance.fingerprint() != base  # the training code changed
    changed = provenance.fingerprint()
    monkeypatch.setattr(provenance, "_version", lambda name: "9.9" if name == "torch" else "1")
    _new_process()
    assert provenance.fingerprint() != changed  # another torch
    with pytest.raises(FileNotFoundError, match=r"'missing\.py'"):
        provenance.fingerprint("missing.py")


def test_a_process_whose_code_changes_on_disk_is_stopped(package) -> None:
    """The fingerprint is the code as the process loaded it: touching a file or editing a
    docstring keeps it; a change to code raises, naming the file, until a new process."""
    first = provenance.fingerprint("experiment.py")
    (package / "experiment.py").write_text(MODULE.replace("Twice x.", "x, doubled, returned."))
    assert provenance.fingerprint("experiment.py") == first
    (package / "optim" / "step.py").write_text("def step():\n    return 10\n")
    with pytest.raises(provenance.CodeChanged, match=r"optim/step\.py.*restart the kernel"):
        provenance.fingerprint("experiment.py")
    with pytest.raises(provenance.CodeChanged):
        provenance.fingerprint()  # a key first asked for now: still the code as loaded
    _new_process()  # a new process
    assert provenance.fingerprint("experiment.py") != first


def test_the_real_package_fingerprints() -> None:
    assert provenance.fingerprint(*tq.CODE) != provenance.fingerprint()


def test_cached_runs_are_keyed_by_the_code(tmp_path, monkeypatch) -> None:
    """A change to the code moves every cache key: the training-quality runs' files and the
    GRPO runs' directories (and with them their evaluations and held-out accuracies)."""
    quality = tq.config("smoke", results_dir=str(tmp_path))
    run = tq.Run("adamw", 1e-3, 0, 4, "sweep")
    before = tq.run_path(quality, run)
    grpo_run = cfg.resolve("grpo", "smoke", optimizer="logra", lr=1e-3)
    hash_before = cfg.config_hash(grpo_run)
    monkeypatch.setattr(tq, "fingerprint", lambda *parts: "another")
    monkeypatch.setattr(cfg, "fingerprint", lambda *parts: "another")
    assert tq.run_path(quality, run) != before
    assert tq.settings(quality, run)["code"] == "another"
    assert cfg.config_hash(grpo_run) != hash_before


def test_the_fingerprint_follows_the_floating_point_path(package, monkeypatch) -> None:
    """A pinned and an unpinned run compute other numbers from one config and code, so they are
    cached under other keys: MKL's path, ATen's instruction set and the CPU's vendor are part of
    the fingerprint (no memo outlives a change of them). MKL's path is the one the process
    started with: setting MKL_CBWR later changes neither MKL's path nor the key."""
    import torch

    from logra.models import determinism

    monkeypatch.setattr(determinism, "_MKL_CBWR_AT_START", None)
    unpinned = provenance.fingerprint()
    monkeypatch.setenv("MKL_CBWR", "AVX2,STRICT")
    assert provenance.fingerprint() == unpinned  # too late: MKL read it when it started
    with monkeypatch.context() as pin:
        pin.setattr(determinism, "_MKL_CBWR_AT_START", "AVX2,STRICT")
        pinned = provenance.fingerprint()
        assert pinned != unpinned and "mkl_cbwr=AVX2,STRICT," in determinism.floating_point_path()
        other = "DEFAULT" if torch.backends.cpu.get_cpu_capability() != "DEFAULT" else "AVX2"
        pin.setattr(torch.backends.cpu, "get_cpu_capability", lambda: other)
        assert provenance.fingerprint() != pinned  # another instruction set, same MKL path
    with monkeypatch.context() as vendor:
        vendor.setattr(determinism, "_VENDOR", "AnotherVendor")
        assert provenance.fingerprint() != unpinned
    assert provenance.fingerprint() == unpinned  # a path is a key, not a history
