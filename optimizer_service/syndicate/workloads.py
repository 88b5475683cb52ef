"""Built-in training workloads for the joint optimizer (Syndicate §6.2, Figure 13).

Each builder returns one iteration of a training DAG (:mod:`optimizer_service.syndicate.dag`)
over every device of a topology, in program order (the order the framework
submits its ops). Sizes and compute times come from the documented parameters
of each :class:`Workload` through simple, stated formulas; they are chosen to
look like the paper's models, not to reproduce its absolute numbers:

* compute takes ``flops / FLOPS`` (:data:`FLOPS`: 60 TFLOP/s, a V100's FP16
  tensor cores at half their peak) or, for embedding lookups, ``bytes / HBM``
  (:data:`HBM`: 450 GB/s, half of the V100's HBM2);
* a backward pass costs twice its forward pass;
* payloads are fp32 elements (the motif cost model's 4 bytes); an all-to-all's
  size is per destination block.

``dlrm-a1``/``a2``/``a3`` — hybrid-parallel DLRM (Figure 13): data-parallel
bottom and top MLPs (all-reduced gradients: the bottom MLP is the wide one,
"O(100s of MB) vs. top MLPs O(MB)", §6.6), model-parallel embedding tables
(all-to-all of the lookup indices — data prep —, of the pooled embeddings
forward and of their gradients backward). From A1 to A3 the embedding tables
grow wider and more numerous, so all-to-all takes a growing share (Table 2).
The next batch's data-prep all-to-all needs nothing of the current iteration;
the training loop only submits it once the iteration's last backward compute
is done (``issued_after_previous``), which Syndicate may ignore (prefetch).

``fsdp`` — fully sharded data parallel: per layer an all-gather of its
parameters before forward and again before backward, and a reduce-scatter of
its gradients after backward. ``transformer-dp-tp`` — tensor parallel inside
a node (two all-reduces of activations per layer, forward and backward) and
data parallel across nodes (a gradient all-reduce per layer). ``cnn-dp`` —
data-parallel CNN whose gradient all-reduces form one serial chain (each
bucket's all-reduce feeds the next bucket's update) and whose next forward
needs them all: there is nothing to reorder (Syndicate finds no gain for A6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from optimizer_service.errors import InvalidInputError
from optimizer_service.hardware.topology import Topology
from optimizer_service.plan.collective import Collective
from optimizer_service.plan.dtypes import DEFAULT_ELEMENT_BYTES
from optimizer_service.syndicate.dag import Node, TrainingDAG, comm, compute

FLOPS = 60e12
HBM = 450e9


@dataclass(frozen=True)
class DLRM:
    """Parameters of a DLRM-like model (per rank unless stated)."""

    batch: int                  # samples per rank
    tables: int                 # embedding tables in the whole model
    dim: int                    # embedding dimension
    pooling: int                # lookups per table per sample
    bottom_params: int          # bottom MLP parameters (all-reduced)
    top_params: int             # top MLP parameters (all-reduced)
    mlp_flops: int              # forward FLOPs per sample of both MLPs and the interaction
    top_share: float = 0.3      # the top MLP + interaction's share of mlp_flops
    buckets: int = 4            # gradient buckets of the bottom MLP (DDP all-reduces each)


#: Batch, embedding dimension, pooling and MFLOPs per sample follow Table 2
#: (A1–A3); MLP parameters follow its layer counts and sizes (bottom wider than
#: top, §6.6); table counts are scaled to 32 ranks and grow from A1 to A3.
DLRM_MODELS = {
    "dlrm-a1": DLRM(batch=512, tables=128, dim=64, pooling=27, bottom_params=20_000_000,
                    top_params=2_000_000, mlp_flops=89_000_000),
    "dlrm-a2": DLRM(batch=1024, tables=256, dim=96, pooling=15, bottom_params=200_000_000,
                    top_params=8_000_000, mlp_flops=638_000_000),
    "dlrm-a3": DLRM(batch=512, tables=256, dim=224, pooling=17, bottom_params=240_000_000,
                    top_params=8_000_000, mlp_flops=784_000_000),
}


def dlrm(name: str, model: DLRM, ranks: int) -> TrainingDAG:
    """Figure 13's DAG; the bottom MLP is ``buckets`` layers' worth of gradient
    buckets: backward produces bucket ``B-1`` first, each bucket's all-reduce
    can start once its backward is done, and next iteration's forward needs
    bucket 0's update first (the reordering ByteScheduler's LIFO exploits)."""
    everyone = range(ranks)
    buckets = model.buckets
    index_block = max(1, model.batch * model.tables * model.pooling * 2 // ranks)   # int64 indices
    embedding_block = max(1, model.batch * model.tables * model.dim // ranks)
    lookup = model.batch * model.tables * model.pooling * model.dim * DEFAULT_ELEMENT_BYTES / HBM
    fwd_top = model.batch * model.mlp_flops * model.top_share / FLOPS
    fwd_bottom = model.batch * model.mlp_flops * (1 - model.top_share) / FLOPS / buckets
    bucket_params = model.bottom_params // buckets
    nodes: list[Node] = [
        comm("a2a-data-prep", Collective.ALL_TO_ALL, everyone, index_block, issued_after_previous=["bwd-emb"]),
        compute("fwd-emb", lookup, "a2a-data-prep", previous=["bwd-emb"]),
        comm("a2a-emb-fwd", Collective.ALL_TO_ALL, everyone, embedding_block, "fwd-emb"),
    ]
    for k in range(buckets):
        nodes.append(compute(f"fwd-bott{k}", fwd_bottom, *([f"fwd-bott{k - 1}"] if k else []),
                             previous=[f"ar-bott{k}"]))
    nodes += [
        compute("fwd-top", fwd_top, "a2a-emb-fwd", f"fwd-bott{buckets - 1}", previous=["ar-top"]),
        compute("bwd-top", 2 * fwd_top, "fwd-top"),
        comm("ar-top", Collective.ALL_REDUCE, everyone, model.top_params, "bwd-top"),
        comm("a2a-emb-bwd", Collective.ALL_TO_ALL, everyone, embedding_block, "bwd-top"),
    ]
    for k in reversed(range(buckets)):
        nodes.append(compute(f"bwd-bott{k}", 2 * fwd_bottom, f"bwd-bott{k + 1}" if k + 1 < buckets else "bwd-top"))
        nodes.append(comm(f"ar-bott{k}", Collective.ALL_REDUCE, everyone, bucket_params, f"bwd-bott{k}"))
    nodes.append(compute("bwd-emb", 2 * lookup, "a2a-emb-bwd"))
    return TrainingDAG(name, tuple(nodes), f"{name}: DLRM-like hybrid parallel, {model}")


def fsdp(ranks: int, layers: int = 12, layer_params: int = 25_000_000, batch: int = 8,
         seq: int = 2048) -> TrainingDAG:
    """FSDP over all ranks: every layer's parameters are sharded (flops: 2·params per token)."""
    everyone = range(ranks)
    forward = 2 * layer_params * batch * seq / FLOPS
    nodes: list[Node] = []
    for k in range(layers):
        nodes.append(comm(f"ag-fwd{k}", Collective.ALL_GATHER, everyone, layer_params))
        nodes.append(compute(f"fwd{k}", forward, f"ag-fwd{k}", *([f"fwd{k - 1}"] if k else []),
                             previous=[f"rs{k}"]))
    for k in reversed(range(layers)):
        nodes.append(comm(f"ag-bwd{k}", Collective.ALL_GATHER, everyone, layer_params, f"fwd{k}"))
        after = [f"ag-bwd{k}", f"bwd{k + 1}" if k + 1 < layers else f"fwd{layers - 1}"]
        nodes.append(compute(f"bwd{k}", 2 * forward, *after))
        nodes.append(comm(f"rs{k}", Collective.REDUCE_SCATTER, everyone, layer_params, f"bwd{k}"))
    description = (f"fsdp: {layers} layers x {layer_params / 1e6:g}M parameters sharded over {ranks} ranks, "
                   f"{batch} x {seq} tokens per rank")
    return TrainingDAG("fsdp", tuple(nodes), description)


def transformer_dp_tp(topology: Topology, layers: int = 8, hidden: int = 4096, batch: int = 4,
                      seq: int = 2048) -> TrainingDAG:
    """Tensor parallel over a node's devices, data parallel across nodes (Megatron-style)."""
    tp = topology.devices_per_instance(0) if len(topology.levels) > 1 else topology.device_count
    dp = topology.device_count // tp
    params = 12 * hidden * hidden // tp                       # one layer's shard
    tokens = batch * seq
    forward = 2 * params * tokens / FLOPS
    activations = tokens * hidden
    # Group 0 stands for every TP group and DP group (they run the same ops at once).
    tp_group, dp_group = range(tp), range(0, topology.device_count, tp)
    nodes: list[Node] = []
    previous = None
    for k in range(layers):
        after = [previous] if previous else []
        nodes.append(compute(f"fwd{k}", forward, *after, previous=[f"ar-dp{k}"]))
        nodes.append(comm(f"ar-tp-fwd{k}", Collective.ALL_REDUCE, tp_group, activations, f"fwd{k}"))
        previous = f"ar-tp-fwd{k}"
    for k in reversed(range(layers)):
        nodes.append(compute(f"bwd{k}", 2 * forward, previous))
        nodes.append(comm(f"ar-tp-bwd{k}", Collective.ALL_REDUCE, tp_group, activations, f"bwd{k}"))
        if dp > 1:
            nodes.append(comm(f"ar-dp{k}", Collective.ALL_REDUCE, dp_group, params, f"bwd{k}"))
        else:
            nodes.append(compute(f"ar-dp{k}", 0.0, f"bwd{k}"))
        previous = f"ar-tp-bwd{k}"
    description = (f"transformer-dp-tp: {layers} layers, hidden {hidden}, TP {tp} inside a node x DP {dp} "
                   f"across nodes, {batch} x {seq} tokens per rank")
    return TrainingDAG("transformer-dp-tp", tuple(nodes), description)


def cnn_dp(ranks: int, buckets: int = 8, bucket_params: int = 4_000_000, batch: int = 128,
           flops_per_sample: float = 12e9) -> TrainingDAG:
    """A data-parallel CNN: gradient buckets come out of backward one by one and
    are all-reduced one after another (each waits for the previous one: one
    serial chain, as DDP issues them on one stream); the next forward needs
    them all."""
    everyone = range(ranks)
    forward = batch * flops_per_sample / FLOPS
    nodes: list[Node] = [compute("fwd", forward, previous=[f"ar{buckets - 1}"])]
    for k in range(buckets):
        nodes.append(compute(f"bwd{k}", 2 * forward / buckets, f"bwd{k - 1}" if k else "fwd"))
        nodes.append(comm(f"ar{k}", Collective.ALL_REDUCE, everyone, bucket_params, f"bwd{k}",
                          *([f"ar{k - 1}"] if k else [])))
    description = (f"cnn-dp: data parallel over {ranks} ranks, {buckets} gradient buckets of "
                   f"{bucket_params / 1e6:g}M parameters, all-reduced in one serial chain")
    return TrainingDAG("cnn-dp", tuple(nodes), description)


BUILDERS: dict[str, Callable[[Topology], TrainingDAG]] = {
    **{name: (lambda topology, name=name: dlrm(name, DLRM_MODELS[name], topology.device_count))
       for name in DLRM_MODELS},
    "fsdp": lambda topology: fsdp(topology.device_count),
    "transformer-dp-tp": transformer_dp_tp,
    "cnn-dp": lambda topology: cnn_dp(topology.device_count),
}


def workload_names() -> list[str]:
    return list(BUILDERS)


def build(name: str, topology: Topology) -> TrainingDAG:
    try:
        builder = BUILDERS[name]
    except KeyError:
        raise InvalidInputError(f"unknown workload {name!r}; built-in ones are {', '.join(BUILDERS)} "
                                f"(p2 optimize --list describes them)") from None
    return builder(topology)
