"""The webhooks' REST API (/api/v1/webhooks/): a token's own endpoints, their secrets,
their delivery logs, "send a test event" and "redeliver" — the same services as the account
page and the desk. An endpoint of another account is a 404, never shown."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import User
from api.errors import refusal_body
from api.serializers import StrictSerializer
from api.views import ERROR, ERRORS
from webhooks import catalogue, services
from webhooks.models import Attempt, Delivery, Endpoint

DELIVERIES_SHOWN = 100


class EventTypeSerializer(serializers.Serializer):
    name = serializers.CharField()
    meaning = serializers.CharField()
    operators_only = serializers.BooleanField()


class EndpointSerializer(serializers.ModelSerializer):
    id = serializers.CharField(source="public_id", read_only=True)
    event_types = serializers.ListField(
        child=serializers.CharField(),
        help_text="The events it hears of; empty: every event it may receive",
    )
    previous_secret_until = serializers.DateTimeField(
        read_only=True,
        help_text="After a rotation: the old secret also signs until then (else null)",
    )
    failing_since = serializers.DateTimeField(
        read_only=True, help_text="The first failed attempt since the last success, or null"
    )
    disabled_reason = serializers.CharField(
        read_only=True, help_text="Why it was turned off by itself (failing for days), or empty"
    )

    class Meta:
        model = Endpoint
        fields: tuple[str, ...] = (
            "id",
            "url",
            "description",
            "event_types",
            "enabled",
            "all_orders",
            "created_at",
            "previous_secret_until",
            "failing_since",
            "disabled_reason",
        )


class NewSecretSerializer(EndpointSerializer):
    secret = serializers.CharField(
        help_text="The signing secret (`whsec_…`), shown this once: keep it now"
    )

    class Meta(EndpointSerializer.Meta):
        fields = (*EndpointSerializer.Meta.fields, "secret")


class EndpointWriteSerializer(StrictSerializer):
    url = serializers.CharField(max_length=500, help_text="https:// and a public host")
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    event_types = serializers.ListField(
        child=serializers.CharField(max_length=40),
        required=False,
        max_length=len(catalogue.EVENT_TYPES),
        help_text="Names from /api/v1/webhooks/event-types/; empty or left out: all",
    )
    enabled = serializers.BooleanField(required=False)
    all_orders = serializers.BooleanField(
        required=False, help_text="Every order and the operators' events: operators only"
    )


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attempt
        fields = (
            "number",
            "started_at",
            "duration_ms",
            "status_code",
            "response",
            "error",
            "by_hand",
        )


class DeliverySerializer(serializers.ModelSerializer):
    event_type = serializers.CharField(source="message.event_type")
    webhook_id = serializers.CharField(
        source="message.public_id", help_text="The `webhook-id` header: the same on every attempt"
    )
    order = serializers.CharField(source="message.order.reference", allow_null=True, default=None)
    payload = serializers.JSONField(source="message.payload", help_text="The body sent")
    attempt_log = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = (
            "id",
            "event_type",
            "webhook_id",
            "order",
            "status",
            "attempts",
            "next_attempt_at",
            "created_at",
            "payload",
            "attempt_log",
        )


def _user(request: Request) -> User:
    assert isinstance(request.user, User)
    return request.user


def _mine(request: Request, endpoint_id: str) -> Endpoint:
    return get_object_or_404(Endpoint, public_id=endpoint_id, owner=_user(request))


def _refused(exc: ValidationError) -> Response:
    return Response(refusal_body(exc), status=status.HTTP_400_BAD_REQUEST)


NOT_FOUND = OpenApiResponse(ERROR, "No such endpoint (or delivery) among this token's")
REFUSED = OpenApiResponse(ERROR, "Refused: `code` says which rule, `fields` which field")
MINE = {401: ERRORS[401], 404: NOT_FOUND, 429: ERRORS[429]}
"""What every call on one endpoint may also answer."""


class EventTypesView(APIView):
    @extend_schema(
        responses={200: EventTypeSerializer(many=True), 401: ERRORS[401], 429: ERRORS[429]},
        summary="Webhook events",
    )
    def get(self, request: Request) -> Response:
        events = catalogue.offered(operator=_user(request).is_staff)
        return Response(EventTypeSerializer(events, many=True).data)


class EndpointsView(APIView):
    @extend_schema(
        responses={200: EndpointSerializer(many=True), 401: ERRORS[401], 429: ERRORS[429]},
        summary="Your endpoints",
    )
    def get(self, request: Request) -> Response:
        mine = Endpoint.objects.filter(owner=_user(request))
        return Response(EndpointSerializer(mine, many=True).data)

    @extend_schema(
        request=EndpointWriteSerializer,
        responses={201: NewSecretSerializer, 400: REFUSED, 401: ERRORS[401], 429: ERRORS[429]},
        summary="Register an endpoint (its secret is in this answer only)",
    )
    def post(self, request: Request) -> Response:
        given = EndpointWriteSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        fields: dict[str, Any] = {"event_types": [], **given.validated_data}
        try:
            endpoint, secret = services.create_endpoint(_user(request), **fields)
        except ValidationError as exc:
            return _refused(exc)
        body = dict(EndpointSerializer(endpoint).data, secret=secret)
        return Response(body, status=status.HTTP_201_CREATED)


class EndpointView(APIView):
    @extend_schema(responses={200: EndpointSerializer, **MINE}, summary="An endpoint")
    def get(self, request: Request, endpoint_id: str) -> Response:
        return Response(EndpointSerializer(_mine(request, endpoint_id)).data)

    @extend_schema(
        request=EndpointWriteSerializer,
        responses={200: EndpointSerializer, 400: REFUSED, **MINE},
        summary="Change an endpoint (turned on again: what is pending follows)",
    )
    def patch(self, request: Request, endpoint_id: str) -> Response:
        endpoint = _mine(request, endpoint_id)
        given = EndpointWriteSerializer(data=request.data, partial=True)
        given.is_valid(raise_exception=True)
        try:
            endpoint = services.update_endpoint(endpoint, **given.validated_data)
        except ValidationError as exc:
            return _refused(exc)
        return Response(EndpointSerializer(endpoint).data)

    @extend_schema(responses={204: None, **MINE}, summary="Delete an endpoint")
    def delete(self, request: Request, endpoint_id: str) -> Response:
        services.delete_endpoint(_mine(request, endpoint_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class RotateView(APIView):
    @extend_schema(
        request=None,
        responses={200: NewSecretSerializer, **MINE},
        summary="A new secret (the old one signs too for 24 hours)",
    )
    def post(self, request: Request, endpoint_id: str) -> Response:
        endpoint = _mine(request, endpoint_id)
        secret = services.rotate_secret(endpoint)
        return Response(dict(EndpointSerializer(endpoint).data, secret=secret))


class TestEventView(APIView):
    @extend_schema(
        request=None,
        responses={202: DeliverySerializer, **MINE},
        summary="Send a test event (`webhook.test`) to this endpoint",
    )
    def post(self, request: Request, endpoint_id: str) -> Response:
        delivery = services.send_test(_mine(request, endpoint_id))
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)


def deliveries_of(endpoint: Endpoint) -> list[Delivery]:
    """The endpoint's latest deliveries, with their attempts (the log)."""
    return list(
        Delivery.objects.filter(endpoint=endpoint)
        .select_related("message__order")
        .prefetch_related("attempt_log")[:DELIVERIES_SHOWN]
    )


class DeliveriesView(APIView):
    @extend_schema(
        responses={200: DeliverySerializer(many=True), **MINE},
        summary=f"The delivery log: the latest {DELIVERIES_SHOWN}, newest first",
    )
    def get(self, request: Request, endpoint_id: str) -> Response:
        shown = deliveries_of(_mine(request, endpoint_id))
        return Response(DeliverySerializer(shown, many=True).data)


class RedeliverView(APIView):
    @extend_schema(
        request=None,
        responses={
            202: DeliverySerializer,
            **MINE,
            409: OpenApiResponse(ERROR, "endpoint_disabled: turn it on first"),
        },
        summary="Redeliver: one more attempt now, with the same webhook-id",
    )
    def post(self, request: Request, endpoint_id: str, delivery_id: int) -> Response:
        endpoint = _mine(request, endpoint_id)
        delivery = get_object_or_404(Delivery, pk=delivery_id, endpoint=endpoint)
        if not services.redeliver(delivery):
            body = {"code": "endpoint_disabled", "detail": "Turn the endpoint on first."}
            return Response(body, status=status.HTTP_409_CONFLICT)
        delivery.refresh_from_db()
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)
