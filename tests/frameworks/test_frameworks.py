"""Ray Train and PyTorch Lightning, from PyPI and unchanged, train on asyncoll as on gloo.

Each framework's own example (ray_train.py, lightning_train.py start them)
runs twice, on backend "gloo" and on "asyncoll", each in processes of its
own (Ray's two runs on one local Ray cluster); the losses (and Lightning's
trained parameters) must be identical.
They must be bit for bit: with two ranks every sum asyncoll and gloo make
is a + b, the same in either order, and both start from the same seed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
RUN_LIMIT_S = 300


def trained(script: str, backend: str, tmp_path: Path) -> object:
    """What ``script`` printed last on ``backend`` (JSON; ``backend`` may be several
    names, space-separated, for a script that takes them)."""
    finished = subprocess.run([sys.executable, str(HERE / script), *backend.split()],
                              cwd=tmp_path, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    assert finished.returncode == 0, (f"{script} on {backend} exited {finished.returncode}:\n"
                                      f"{finished.stdout[-4000:]}\n{finished.stderr[-8000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(2 * RUN_LIMIT_S + 60)
def test_ray_train_torch_trainer_trains_its_example_to_gloos_losses(tmp_path):
    pytest.importorskip("ray.train.torch")
    losses = trained("ray_train.py", "gloo asyncoll", tmp_path)
    assert isinstance(losses, dict)
    ours, theirs = losses["asyncoll"], losses["gloo"]
    assert isinstance(ours, list) and len(ours) == 3
    assert ours == theirs


@pytest.mark.timeout(2 * RUN_LIMIT_S + 60)
def test_lightning_ddp_strategy_trains_boring_model_to_gloos_losses_and_parameters(tmp_path):
    pytest.importorskip("lightning.pytorch")
    theirs = trained("lightning_train.py", "gloo", tmp_path)
    ours = trained("lightning_train.py", "asyncoll", tmp_path)
    assert isinstance(ours, dict) and len(ours["losses"]) == 64
    assert ours == theirs
