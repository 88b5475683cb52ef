"""Use the planner from Python: rank placements and reduction programs for a
hybrid data + tensor parallel job on 4 nodes x 8 V100, then explain the winner.

    .venv/bin/python examples/synthesize.py
"""

from optimizer_service.catalog import load_topology
from optimizer_service.hardware.cost_model import Algorithm
from optimizer_service.p2.explain import explain_program
from optimizer_service.p2.planner import Planner

topology = load_topology("gcp-v100-4n")
# 8-way data parallel x 4-way tensor parallel; gradients are reduced over the data axis.
report = Planner().synthesize(topology, axes=(8, 4), reduce=(0,), nbytes=100 * 2**20, algorithm=Algorithm.RING)

for placement in report.placements:
    best = placement.best
    print(f"{str(placement.matrix):<16} AllReduce {placement.allreduce_seconds * 1e3:8.2f} ms   "
          f"best {best.predicted_seconds * 1e3:8.2f} ms ({placement.speedup:.2f}x)  {best.program}")

placement, program = report.best
print(f"\nbest placement {placement.matrix}: {program.program}")
explanation = explain_program(topology, (8, 4), (0,), program.program, report.nbytes, matrix=placement.matrix)[0]
for number, step in enumerate(explanation.steps, start=1):
    print(f"  {number}. {str(step.reduction):<40} {step.predicted_seconds * 1e3:8.3f} ms  "
          f"{len(step.lowered.groups)} groups of {len(step.lowered.groups[0])}")
