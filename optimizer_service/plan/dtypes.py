"""The element types a comm-op carries, by the name a trace gives them (pure).

A trace names an op's dtype as torch prints it without the ``torch.`` prefix
(``float32``, ``bfloat16``); a plan's op key may name it (:class:`OpKey
<optimizer_service.plan.op_plan.OpKey>` ``dtype``) and its motifs count
elements of that size (:class:`Motif <optimizer_service.plan.motif.Motif>`
``element_bytes``). These are every dtype c10d collectives take.
"""

from __future__ import annotations

#: Bytes per element of each dtype a trace or a plan names.
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
               "int8": 1, "uint8": 1, "bool": 1}

#: The dtypes a plan takes: every one a plan names but int16, for which gloo (and NCCL) have no
#: collective at all (a plan would turn the inner backend's refusal into a result); the enforcer's
#: rule (enforcer/runtime/buffers.py) and the planner's passthrough reasons read this one set.
PLANNED_DTYPES = frozenset(DTYPE_BYTES) - {"int16"}

#: The element size the planner assumes where nothing names one (fp32).
DEFAULT_ELEMENT_BYTES = 4

#: The dtypes whose sums are exact (integers, bool): a plan's result equals the inner backend's bit for bit.
EXACT_DTYPES = frozenset({"int64", "int32", "int16", "int8", "uint8", "bool"})


def element_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` (:data:`DEFAULT_ELEMENT_BYTES` for "" or a name not in :data:`DTYPE_BYTES`)."""
    return DTYPE_BYTES.get(dtype, DEFAULT_ELEMENT_BYTES)
