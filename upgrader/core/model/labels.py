"""Label keys and values, checked as the Kubernetes API server checks them (apimachinery's
IsQualifiedName and IsValidLabelValue), so what we accept a node could actually carry.

Pure and dependency-free: the policy model and the emulator's 422 answers both use it. Each check
returns None for a good input, else the first rule broken, as one line without the input itself
(the caller names the field and quotes the value).
"""

from __future__ import annotations

import re

MAX_NAME = 63  # the name part of a key, and a value
MAX_PREFIX = 253  # a DNS-1123 subdomain

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

_NAME_RULE = "must consist of letters, digits, '-', '_' or '.', and start and end with a letter or digit"


def label_key_error(key: str) -> str | None:
    """`[prefix/]name`: prefix a lower-case DNS subdomain of at most 253 characters, name at most 63."""
    if key.count("/") > 1:
        return "must be a name with an optional DNS subdomain prefix and one '/' (e.g. 'example.com/zone')"
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > MAX_PREFIX:
            return f"prefix part must be no more than {MAX_PREFIX} characters"
        if not _DNS_SUBDOMAIN.fullmatch(prefix):
            return (
                "prefix part must be a DNS subdomain: lower-case letters, digits, '-' or '.', "
                "each dot-separated part starting and ending with a letter or digit"
            )
    if not name:
        return "name part must be non-empty"
    if len(name) > MAX_NAME:
        return f"name part must be no more than {MAX_NAME} characters"
    if not _NAME.fullmatch(name):
        return f"name part {_NAME_RULE}"
    return None


def label_value_error(value: str) -> str | None:
    """Empty, or at most 63 characters of the name alphabet."""
    if len(value) > MAX_NAME:
        return f"must be no more than {MAX_NAME} characters"
    if value and not _NAME.fullmatch(value):
        return f"must be empty or {_NAME_RULE.removeprefix('must ')}"
    return None
