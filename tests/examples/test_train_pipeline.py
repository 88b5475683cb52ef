"""Multiproc (loopback): ``examples/train_pipeline.py`` trains a pipeline-parallel
MLP with the enforcer's runtime (:mod:`enforcer.pipeline.runtime`) on local ranks it
starts itself.

All four schedules train side by side (interleaved, each its own model copy):
their per-step losses must be bit-identical to each other and equal, within
float32 rounding, to one process training the whole model on the whole batch
with the same SGD; the JSON says what ran.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from enforcer.pipeline.records import IterationRecord
from optimizer_service.plan.pipeline import PipelineSchedule

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_pipeline.py"
TIMEOUT = 240.0
SIZES = {"stages": 2, "microbatches": 4, "steps": 3, "hidden": 8, "layers": 2, "batch": 20, "lr": 0.05}
SCHEDULES = "1f1b,eager-1f1b,gpipe,eager-1f1b-wd"

pytestmark = [pytest.mark.multiproc, pytest.mark.slow]


def example_module():
    spec = importlib.util.spec_from_file_location("train_pipeline_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def reference_losses(example) -> list[float]:
    """The whole model on the whole batch in one process, SGD after each step."""
    model = nn.Sequential(*example.build_stages(SIZES["stages"], SIZES["hidden"], SIZES["layers"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=SIZES["lr"])
    losses = []
    for step in range(SIZES["steps"]):
        x, y = example.make_batch(step, SIZES["batch"], SIZES["hidden"])
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).sum() / SIZES["batch"]
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def test_every_schedule_trains_like_one_process(tmp_path):
    out = tmp_path / "pipeline.json"
    flags = [f"--{k}={v}" for k, v in SIZES.items()]
    done = subprocess.run([sys.executable, str(SCRIPT), *flags, "--per-node", "2", "--schedule", SCHEDULES,
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=False,
                          env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"})
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["interleaved"] and [r["schedule"] for r in doc["runs"]] == SCHEDULES.split(",")
    first = doc["runs"][0]
    for run in doc["runs"]:
        assert run["losses"] == first["losses"], run["schedule"]
        assert run["world_size"] == 4 and run["meshes"] == [[0, 1], [2, 3]]
        assert len(run["step_seconds"]) == SIZES["steps"] and run["median_seconds"] > 0
        assert PipelineSchedule.parse(run["schedule_text"]).name == run["schedule"]
        records = [IterationRecord.parse(text) for text in run["records"]]
        assert [r.stage for r in records] == [0, 0, 1, 1]
        assert all(len(r.actions) == len(PipelineSchedule.parse(run["schedule_text"]).stages[r.stage])
                   for r in records)
        assert run["simulated_seconds"] > 0 and run["nic_floor_seconds"] > 0
        assert run["activation_bytes"] == SIZES["batch"] // SIZES["microbatches"] * SIZES["hidden"] * 4
    assert doc["median_ratio_to_first"]["1f1b"] == 1.0
    assert first["losses"] == pytest.approx(reference_losses(example_module()), rel=1e-5)


def test_bad_flags_exit_with_code_2():
    done = subprocess.run([sys.executable, str(SCRIPT), "--schedule", "1f1b,zigzag"], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 2 and "give distinct names out of" in done.stderr
    done = subprocess.run([sys.executable, str(SCRIPT), "--batch", "10", "--microbatches", "4"], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert done.returncode == 2 and "not a multiple of --microbatches" in done.stderr
