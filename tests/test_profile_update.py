"""``scripts/profile_update.py``: the breakdown of one training update that the docs quote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
from profile_update import POINTWISE, kind_of  # noqa: E402


def test_operators_are_sorted_into_the_kinds_the_docs_name() -> None:
    assert kind_of("aten::addmm") == "matrix products"
    assert kind_of("aten::bmm") == "matrix products"
    assert kind_of("aten::_fused_adam_") == "optimizer kernels"
    assert kind_of("aten::_log_softmax_backward_data") == "softmax and loss"
    assert kind_of("aten::cat") == "copies and reshapes"
    assert kind_of("aten::addmm_") == "matrix products"  # in place: the kind of addmm
    assert kind_of("aten::tanh_backward") == POINTWISE  # not "t" (transpose), which it starts with
    assert kind_of("aten::_log_softmax") == "softmax and loss"
    assert kind_of("aten::bernoulli_") == POINTWISE


@pytest.mark.slow
def test_the_profile_of_a_real_update_accounts_for_its_time(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "profile_update.py"), "--experiment", "smoke", "--updates", "2",
         "--warmup", "1", "--threads", "1", "--overrides", f"data.cache_dir={tmp_path}"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    phases, kinds = report["phases_ms"], report["kinds_ms"]
    assert set(phases) == {"forward", "backward", "optimizer"} and all(ms > 0 for ms in phases.values())
    # the kinds split the three phases' time: together they are that time, no more, no less
    assert abs(sum(kinds.values()) - sum(phases.values())) <= 0.01 * sum(phases.values())
    assert kinds["matrix products"] > 0 and kinds["optimizer kernels"] > 0
    assert report["top_ops"] and report["top_ops"][0]["self_ms"] >= report["top_ops"][-1]["self_ms"]
