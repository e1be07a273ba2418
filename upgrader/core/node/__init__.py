"""One node: its state machine (machine.py), its step each pass, what is read and derived of it.
May import: core.report, core.model, core.policy."""
