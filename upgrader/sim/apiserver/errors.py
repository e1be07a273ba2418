"""API errors shaped like the real API server's `Status` objects."""

from __future__ import annotations

from typing import Any

REASONS = {
    400: "BadRequest",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

PDB_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."


class ApiError(Exception):
    """An error the API answers with; `body()` is the Status object sent to clients."""

    def __init__(
        self,
        code: int,
        message: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            status["details"] = self.details
        return status


def _details(kind: str, name: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": kind}
    if group:
        details["group"] = group
    return details


def not_found(plural: str, group: str, name: str) -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(404, f'{qualified} "{name}" not found', details=_details(plural, name, group))


def already_exists(plural: str, group: str, name: str) -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        f'{qualified} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(plural, name, group),
    )


def conflict(plural: str, group: str, name: str) -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        details=_details(plural, name, group),
    )


def precondition_failed(plural: str, group: str, name: str, what: str) -> ApiError:
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified} "{name}": Precondition failed: {what}',
        details=_details(plural, name, group),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def invalid(kind: str, name: str, message: str) -> ApiError:
    return ApiError(422, f'{kind} "{name}" is invalid: {message}', details={"name": name, "kind": kind})


def expired(since: int, oldest: int) -> ApiError:
    """A watch from a resourceVersion the server no longer has history for (410 Gone)."""
    return ApiError(410, f"too old resource version: {since} ({oldest})", reason="Expired")


def too_large_resource_version(requested: int, current: int) -> ApiError:
    """kube-apiserver's answer to a read at a resourceVersion it has not reached (after its 3 s wait)."""
    return ApiError(
        504,
        f"Timeout: Too large resource version: {requested}, current: {current}",
        reason="Timeout",
        details={
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        headers={"Retry-After": "1"},
    )


def pdb_refusal(pdb_name: str, desired: int, current: int) -> ApiError:
    """The eviction subresource's answer when a PodDisruptionBudget forbids the eviction."""
    return ApiError(
        429,
        PDB_REFUSAL,
        reason="TooManyRequests",
        details={
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {pdb_name} needs {desired} healthy pods "
                    f"and has {current} currently",
                }
            ]
        },
    )
