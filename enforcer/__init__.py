"""The enforcer: the data plane that runs plans on torch.distributed.

Importing this package registers the ``p2enforcer`` backend with
torch.distributed; torch also imports it by itself through the
``torch.backends`` entry point (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), so
training scripts only change ``backend="p2enforcer"``.

* :mod:`enforcer.group.native` — the C++ backend (``enforcer._native``, the default when built):
  passthrough and trace in C++, plans through the same runtime;
* :mod:`enforcer.group.python` — the Python process group (``P2_ENFORCER_IMPL=python``);
* :mod:`enforcer.trace` — what it saw, exported as JSON;
* :mod:`enforcer.group.bypass` — counts ops that reach the inner backend directly;
* :mod:`optimizer_service.plan.op_plan` — the plan it installs (pure);
* :mod:`enforcer.runtime.plan_runtime` — ordered dispatch of motifs over channels;
* :mod:`enforcer.link` — the link to the optimizer service (``P2_SERVICE``): two-phase commit of plans,
  switched at agreed iterations;
* :mod:`enforcer.register` — registration with torch and its creator hook: builds the group, installs
  ``P2_PLAN_FILE``, starts the link;
* :mod:`enforcer.comm.sendrecv`, :mod:`enforcer.programs.executor` (with the pure :mod:`optimizer_service.plan.layout`) —
  P² reduction programs on a flat tensor.
"""



def _autoload() -> None:
    """The ``torch.backends`` entry point. Importing the package registers the
    backend (at the end of this file); this is defined first so torch finds it
    even when torch's own import was started by importing this package."""


from enforcer.api import (  # noqa: E402
    attach,
    bypass_counts,
    export_trace,
    group_of,
    idle,
    install_plan,
    metrics_text,
    plan_version,
    remove_plan,
    step,
    trace,
)
from enforcer.register import implementation, register  # noqa: E402

__all__ = ["attach", "bypass_counts", "export_trace", "group_of", "idle", "implementation", "install_plan",
           "metrics_text", "plan_version", "register", "remove_plan", "step", "trace"]

register()
