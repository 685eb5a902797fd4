"""Turning a candidate's sources into a library: where the compilers and SDKs are (``discovery``, with its
probes and the CUDA and CANN rules), the build itself (``build``), the link check (``linkage``), and the
C readers both the build and the runtime use (``csource``, ``cdecl``)."""
