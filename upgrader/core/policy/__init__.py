"""The policy and its verdicts: its keys (policy.py), maintenance windows, the alert gate, notices.
May import: core.model, core.compat."""
