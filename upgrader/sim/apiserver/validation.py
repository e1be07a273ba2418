"""Label keys and values checked on every write, answered as kube-apiserver answers them.

Whether a key or value is valid is `upgrader.core.model.labels`' rule (the one the controller and its
policy use); what a refusal says is apimachinery's (`IsQualifiedName`, `IsValidLabelValue`), word
for word, in a 422 Invalid Status with one cause per broken rule, as kubectl prints it.
"""

from __future__ import annotations

import re
from typing import Any

from upgrader.core.model.labels import label_key_error, label_value_error
from upgrader.sim.apiserver import errors
from upgrader.sim.apiserver.registry import ResourceType

Obj = dict[str, Any]
FIELD = "metadata.labels"

QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = f"({QUALIFIED_NAME_FMT})?"
DNS1123_SUBDOMAIN_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_GO_JSON_TYPES = {bool: "bool", int: "number", float: "number", dict: "object", list: "array"}


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """apimachinery's RegexError, its double spaces included."""
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def key_messages(key: str) -> list[str]:
    """What IsQualifiedName says of a label key (nothing when it is valid)."""
    name_rule = regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
    parts = key.split("/")
    if len(parts) > 2:
        prefixed = "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        return [f"a qualified name {name_rule} {prefixed}"]
    out = []
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            out.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                out.append(f"prefix part {_max_len(253)}")
            if not re.fullmatch(DNS1123_SUBDOMAIN_FMT, prefix):
                out.append("prefix part " + regex_error(DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    name = parts[-1]
    if not name:
        out.append("name part must be non-empty")
    elif len(name) > 63:
        out.append(f"name part {_max_len(63)}")
    if not re.fullmatch(QUALIFIED_NAME_FMT, name):
        out.append(f"name part {name_rule}")
    return out


def value_messages(value: str) -> list[str]:
    """What IsValidLabelValue says of a label value (nothing when it is valid)."""
    out = [_max_len(63)] if len(value) > 63 else []
    if not re.fullmatch(LABEL_VALUE_FMT, value):
        out.append(regex_error(LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return out


def go_quote(text: str) -> str:
    """A string as Go's %q prints it (how a field error shows the bad value)."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return '"' + "".join(escapes.get(c) or (c if c.isprintable() else _go_escape(c)) for c in text) + '"'


def _go_escape(c: str) -> str:
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def check_labels(rtype: ResourceType, obj: Obj) -> None:
    """Refuse an object whose metadata.labels a real API server would refuse (422 Invalid; 400 when
    a value is not a string at all, as its JSON decoding fails)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels")
    if not labels:
        return
    if not isinstance(labels, dict):
        raise _undecodable(rtype, _GO_JSON_TYPES.get(type(labels), "value"), "")
    causes: list[tuple[str, str]] = []  # (bad value, why)
    for key, value in labels.items():
        if value is None:
            labels[key] = value = ""  # JSON null decodes to Go's zero value
        if not isinstance(key, str) or not isinstance(value, str):  # only in process: JSON keys are strings
            raise _undecodable(rtype, _GO_JSON_TYPES.get(type(value), "value"), ".labels")
        if label_key_error(key) is not None:
            causes += [(key, why) for why in key_messages(key) or [str(label_key_error(key))]]
        if label_value_error(value) is not None:
            causes += [(value, why) for why in value_messages(value) or [str(label_value_error(value))]]
    if causes:
        raise invalid(rtype, str(meta.get("name") or ""), causes)


def invalid(rtype: ResourceType, name: str, causes: list[tuple[str, str]]) -> errors.ApiError:
    """NewInvalid: `Kind[.group] "name" is invalid: ...`, one cause per field error."""
    bodies = [f"Invalid value: {go_quote(bad)}: {why}" for bad, why in causes]
    lines = list(dict.fromkeys(f"{FIELD}: {body}" for body in bodies))  # the message lists each once
    kind = f"{rtype.kind}.{rtype.group}" if rtype.group else rtype.kind
    details: Obj = {"name": name, "kind": rtype.kind}
    if rtype.group:
        details["group"] = rtype.group
    details["causes"] = [{"reason": "FieldValueInvalid", "message": body, "field": FIELD} for body in bodies]
    listed = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    return errors.ApiError(422, f'{kind} "{name}" is invalid: {listed}', details=details)


def _undecodable(rtype: ResourceType, json_type: str, field: str) -> errors.ApiError:
    target = "string" if field else "map[string]string"
    return errors.bad_request(
        f'{rtype.kind} in version "{rtype.version}" cannot be handled as a {rtype.kind}: json: cannot unmarshal '
        f"{json_type} into Go struct field ObjectMeta.metadata.labels of type {target}"
    )
