"""Settlement receipts through the API (docs/settlement-signatures.md#receipts).

``POST /api/v1/receipts/verify`` is for anyone — a third party holds no key of
ours: it takes a receipt and says whether both signatures hold, fetching each
party's public key set from where the receipt's settlement says it lives.
Our side's own receipt is ``GET /api/v1/negotiations/{id}/receipt``
(:mod:`api.negotiations`). The rule is :mod:`negotiations.services.signatures`'.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.schema import ERROR_SCHEMA
from negotiations import receipts
from negotiations.services import signatures
from negotiations.throttles import ReceiptCheckThrottle


class ReceiptSerializer(serializers.Serializer[Any]):
    """A receipt: the canonical ``settlement`` — ``{taskId, contextId, parties: {user, agent}, terms,
    offerId, verdict, basis}``, each party ``{name, partyId, jwks}`` as its card states it — and
    each side's signature by its A2A role (``user`` sent the Task's requests, ``agent`` answered)."""

    settlement = serializers.DictField(help_text="the canonical settlement both sides signed")
    signatures = serializers.DictField(
        help_text="by role (`user`, `agent`): `{jws, jwks}`, the side's compact JWS (ES256) over the "
        "settlement's RFC 8785 form and the URL of the key set its key is in"
    )

    def validate_signatures(self, value: dict[str, Any]) -> dict[str, Any]:
        for role, entry in value.items():
            if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("jws", "jwks")):
                raise serializers.ValidationError(f"The {role} signature must be an object {{jws, jwks}}.")
        return value


class ReceiptCheckSerializer(serializers.Serializer[Any]):
    """Whether a receipt holds: ``valid`` when both signatures do; ``signatures`` gives each role
    null (it holds) or why not; ``reason`` a sentence for the whole."""

    valid = serializers.BooleanField()
    reason = serializers.CharField()
    signatures = serializers.DictField(child=serializers.CharField(allow_null=True))


class ReceiptVerifyView(APIView):
    """Check a receipt against the parties' public key sets; no API key needed."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes = [ReceiptCheckThrottle]

    @extend_schema(
        summary="Check a settlement receipt",
        request=ReceiptSerializer,
        responses={
            200: ReceiptCheckSerializer,
            400: OpenApiResponse(ERROR_SCHEMA, description="the body is no receipt"),
            429: OpenApiResponse(
                ERROR_SCHEMA,
                description="too many checks from this address this minute (`RECEIPT_CHECKS_PER_MINUTE`); "
                "`Retry-After` says when to ask again",
            ),
        },
        auth=[],
        description="Anyone may ask: the answer rests on nothing but the receipt and the public key sets its "
        "parties name, fetched now. 200 says whether both signatures hold (`valid`), and for each side "
        "why not: no signature, a key set that cannot be fetched or lacks the key, a signature that does "
        "not hold, or one over another settlement (naming the fields that differ).",
    )
    def post(self, request: Request) -> Response:
        ReceiptSerializer(data=request.data).is_valid(raise_exception=True)
        try:
            check = signatures.receipt_check(request.data)
        except receipts.ReceiptError as exc:
            raise ValidationError({"settlement": [str(exc)]}) from exc
        return Response(
            ReceiptCheckSerializer(
                {"valid": check.valid, "reason": check.reason, "signatures": check.signatures}
            ).data
        )
