"""This machine: its facts (``verifier.machine.facts``: CPU model, compiler target, fingerprint, what
prompts say), its caches and the flush that evicts them (``verifier.machine.caches``), the machine-wide
timing lock (``verifier.machine.lock``) and its roofline (``verifier.machine.roofline``). The priority of the
processes it runs is ``verifier.priority``'s. Below the backends: what it reads of one is ``facts.Target``."""
