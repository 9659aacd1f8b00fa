"""kernbench: run Triton-like kernels on a discrete-event model of an HBM
near-memory accelerator (rack > SIP > cube > PE) and report where the time went."""

__version__ = "0.1.0"
