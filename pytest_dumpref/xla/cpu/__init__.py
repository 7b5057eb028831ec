"""XLA:CPU's room: what holds for modules XLA:CPU compiled and for nothing else.

Its fusion policy restated as a model of the pass (``fusion_policy``, ``fusion``), the kernel
cost model and the rates it is priced at (``cost_model``, ``calibrate``, ``cost_cli``), the
kernels' code and perf samples (``kernel_code``, ``kernel_perf``), and the fusion study's
programs and timed runs (``fusion_programs``, ``fusion_timing``).  Each refuses another
backend's module by name (``naming.require_backend``).
"""
