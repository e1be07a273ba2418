"""One node: its state machine (machine.py), its step each pass, what is read and derived of it.
May import: core.model, core.policy."""
