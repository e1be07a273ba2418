"""The policy and its verdicts: its keys (policy.py), maintenance windows, the alert gate, notices.
May import: core.report, core.model, core.compat."""
