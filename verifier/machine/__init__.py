"""This machine: its facts (``verifier.machine.facts``: CPU model, compiler target, fingerprint, what
prompts say), its caches and the flush that evicts them (``verifier.machine.caches``), the machine-wide
timing lock (``verifier.machine.lock``), the priority of what it runs (``verifier.machine.priority``) and
its roofline (``verifier.machine.roofline``)."""
