"""The hardware: topologies and what moving bytes over them costs (pure).

* :mod:`~optimizer_service.hardware.topology` — hierarchy levels and links
  (bandwidth, latency, sharing, channels), validated, with a YAML text form;
* :mod:`~optimizer_service.hardware.cost_model` — P² §5's topology-aware
  simulator of ring and tree collectives over those links, with our
  additions (incast, reduction rate; README "Topologies");
* :mod:`~optimizer_service.hardware.calibration` — link fits through the
  simulator from measured probes;
* :mod:`~optimizer_service.hardware.accuracy` — how well predictions rank
  measurements (MAPE, Spearman, top-k);
* ``presets/`` — the papers' systems as YAML (read by the shell's catalog).

May import: ``plan`` (and ``errors``, ``units``).
"""
