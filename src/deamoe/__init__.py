"""DeaMoE: department-structured Mixture-of-Experts, and the pipeline that reproduces its paper.

Layers (lower never imports higher): config -> routing -> model -> analysis / kernels ->
train / serve -> eval / bench -> report -> cli.  See README.md.
"""

__version__ = "0.1.0"
