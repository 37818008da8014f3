"""The REST API (v1): the catalogue, availability, the advisor, a researcher's orders,
their provisioning and validation reports.

Every view parses, calls the same service as the booking pages, and shapes the answer.

One module over 600 lines, on purpose: each view is a few lines plus its OpenAPI schema
(``extend_schema``), and the schema's examples and error answers belong beside the view.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.core.exceptions import RequestDataTooBig
from django.db import connection, models, transaction
from django.db.models import Prefetch
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import User
from api import serializers as s
from api.errors import IdempotencyConflict, IdempotencyKeyReused, ReportNotReady
from api.models import IdempotentRequest
from api.parsers import SplitTestParser
from payments import claims, invoicing, nodes, receipts, refund_due, refunds
from payments.models import Asset, Invoice
from payments.rpc import RpcError, RpcUnavailable
from payments.views import pdf_response
from provisioning import split_tests
from provisioning.models import ProvisioningJob
from reservations import availability, campaign, extensions, fairness, incidents, services
from reservations.advisor import AdvisorError, advise
from reservations.errors import MESSAGES, BookingRefused, refusal
from reservations.models import Checkpoint, Credit, Environment, HardwareKind, Order, Price
from reservations.notifications import enqueue_order_placed
from reservations.order_state import owned
from reservations.validation import OrderRequest

ORDER_SECONDS = 60
"""How long an order's answer is kept under its exact state (any change is a new key)."""
ORDER_SHAPE = hashlib.sha256(repr(s.OrderSerializer.Meta.fields).encode()).hexdigest()[:12]
"""The answer's fields in the key: a release that changes them never serves the old shape."""

ERROR = inline_serializer(
    "Error",
    {
        "code": serializers.CharField(),
        "detail": serializers.CharField(),
        "fields": serializers.DictField(required=False),
        "next_start": serializers.DateTimeField(required=False, allow_null=True),
        "retry_at": serializers.DateTimeField(required=False, allow_null=True),
    },
)

IDEMPOTENCY_KEY = OpenApiParameter(
    "Idempotency-Key",
    str,
    OpenApiParameter.HEADER,
    description="Retried with the same key and body, the first response is returned and "
    "nothing more is booked or held",
)

ERRORS = {
    400: OpenApiResponse(ERROR, "Bad input: `code` says which rule, `fields` which field"),
    401: OpenApiResponse(ERROR, "No token, or an unknown or revoked one"),
    404: OpenApiResponse(ERROR, "No such order among this token's"),
    429: OpenApiResponse(ERROR, "Throttled; see Retry-After"),
}


class KindsView(APIView):
    permission_classes = (AllowAny,)

    @extend_schema(
        responses={200: s.KindSerializer(many=True)}, summary="Hardware kinds and prices"
    )
    def get(self, request: Request) -> Response:
        kinds = HardwareKind.objects.filter(is_offered=True).prefetch_related(
            Prefetch("prices", queryset=Price.objects.order_by("window_days"))
        )
        return Response(s.KindSerializer(kinds, many=True).data)


class EnvironmentsView(APIView):
    permission_classes = (AllowAny,)

    @extend_schema(responses={200: s.EnvironmentSerializer(many=True)}, summary="Environments")
    def get(self, request: Request) -> Response:
        environments = Environment.objects.filter(is_offered=True).prefetch_related(
            "compatible_kinds"
        )
        return Response(s.EnvironmentSerializer(environments, many=True).data)


class AvailabilityView(APIView):
    permission_classes = (AllowAny,)

    @extend_schema(
        parameters=[s.AvailabilityQuery],
        responses={200: s.AvailabilitySerializer, 400: ERRORS[400], 429: ERRORS[429]},
        summary="Free lots for a window, and the earliest start when too few",
    )
    def get(self, request: Request) -> Response:
        query = s.AvailabilityQuery(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = query.validated_data
        kind = HardwareKind.objects.filter(slug=data["kind"], is_offered=True).first()
        if kind is None:
            raise BookingRefused({"kind": [refusal("unknown_kind")]})
        window, starts_at, lots = int(data["window_days"]), data["starts_at"], data["lot_count"]
        free = availability.free_lots(kind, starts_at, window).count()
        bookable = availability.bookable_lots(kind).count()
        next_start = (
            None
            if free >= lots
            else availability.earliest_start(kind, window, lots, max(starts_at, timezone.now()))
        )
        body = {
            "kind": kind.slug,
            "window_days": window,
            "starts_at": starts_at,
            "lot_count": lots,
            "free_lots": free,
            "bookable_lots": bookable,
            "available": free >= lots,
            "next_start": starts_at if free >= lots else next_start,
        }
        return Response(s.AvailabilitySerializer(body).data)


class AdvisorView(APIView):
    permission_classes = (AllowAny,)

    @extend_schema(
        parameters=[s.AdvisorQuery],
        responses={200: s.AdviceSerializer, 400: ERRORS[400], 429: ERRORS[429]},
        summary="Memory per card, replicated vs sharded, and which kinds fit",
    )
    def get(self, request: Request) -> Response:
        query = s.AdvisorQuery(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        data = query.validated_data
        try:
            advice = advise(
                data["params_billion"],
                data["precision"],
                data["workload"],
                seq_len=data.get("seq_len"),
                micro_batch=data.get("micro_batch"),
            )
        except AdvisorError as exc:
            raise BookingRefused({"params_billion": [refusal(exc.code)]}) from None
        body = {
            **advice.__dict__,
            "fits": [{**f.__dict__, "verdict": f.verdict} for f in advice.fits],
        }
        return Response(s.AdviceSerializer(body).data)


def _user(request: Request) -> User:
    """The token's owner (every order view requires authentication)."""
    assert isinstance(request.user, User)
    return request.user


def _own_order(request: Request, reference: str) -> Order:
    """An order of this token's owner, or 404 — never someone else's."""
    orders = Order.objects.select_related("kind", "environment", "extends")
    return get_object_or_404(orders, reference=reference, user=_user(request))


def _idempotent(request: Request, act: Callable[[], Response], scope: str = "") -> Response:
    """``act()``'s answer, once per Idempotency-Key: retried with the same key and body, the
    first answer again and nothing done twice; the same key with another body, 422.
    ``scope`` tells apart requests to different resources (the path) that share keys."""
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        return act()
    if len(key) > 255:
        raise BookingRefused({"Idempotency-Key": [refusal("too_long", limit=255)]})
    fingerprint = hashlib.sha256(
        json.dumps(
            [scope, request.data] if scope else request.data, sort_keys=True, default=str
        ).encode()
    ).hexdigest()
    with transaction.atomic():
        # Locks: this user's key, for this transaction; a concurrent duplicate gets 409
        # at once instead of waiting.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_try_advisory_xact_lock(hashtext(%s))",
                [f"idem:{request.user.pk}:{key}"],
            )
            if not cursor.fetchone()[0]:
                raise IdempotencyConflict()
        earlier = IdempotentRequest.objects.filter(user=_user(request), key=key).first()
        if earlier is not None:
            if earlier.request_hash != fingerprint:
                raise IdempotencyKeyReused()
            return Response(earlier.response_body, status=earlier.response_status)
        response = act()
        IdempotentRequest.objects.create(
            user=_user(request),
            key=key,
            request_hash=fingerprint,
            response_status=response.status_code,
            response_body=json.loads(json.dumps(response.data, default=str)),
        )
        return response


class OrdersView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        responses={200: s.OrderSerializer(many=True), 401: ERRORS[401], 429: ERRORS[429]},
        summary="Your orders",
    )
    def get(self, request: Request) -> Response:
        orders = (
            Order.objects.filter(user=_user(request))
            .select_related("kind", "environment")
            .prefetch_related(*s.ORDER_PREFETCH)
            .select_related("extends")
        )
        return Response(s.OrderSerializer(orders, many=True).data)

    @extend_schema(
        request=s.OrderCreateSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: s.OrderSerializer,
            400: ERRORS[400],
            401: ERRORS[401],
            409: OpenApiResponse(
                ERROR, "lot_unavailable (with next_start), or request_in_progress"
            ),
            422: OpenApiResponse(ERROR, "idempotency_key_reused"),
            429: OpenApiResponse(
                ERROR,
                "Throttled, or unpaid_orders_limit / unpaid_share_limit: this client, mailbox "
                "or account holds as much unpaid as it may; `retry_at` (and Retry-After) says "
                "when its first unpaid hold ends",
            ),
        },
        summary="Place an order (holds the lots while you pay)",
    )
    def post(self, request: Request) -> Response:
        return _idempotent(request, lambda: self._place(request))

    def _place(self, request: Request) -> Response:
        body = s.OrderCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        data["ssh_public_keys"] = "\n".join(data["ssh_public_keys"])
        user = _user(request)
        party = fairness.Party.of_request(request._request, user)
        order = services.place_order(OrderRequest(**data), user=user, party=party)
        enqueue_order_placed(order)
        return Response(s.OrderSerializer(order).data, status=status.HTTP_201_CREATED)


class OrderView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        responses={200: s.OrderSerializer, 401: ERRORS[401], 404: ERRORS[404]},
        summary="One of your orders",
    )
    def get(self, request: Request, reference: str) -> Response:
        # What it answers is the database's state only (no clock): kept under the exact state
        # of the rows it reads (reservations.order_page), so never older than them.
        found = owned(reference, _user(request).pk)
        if found is None:
            raise Http404
        key = "api:order:{}:{}:{}".format(ORDER_SHAPE, *found)
        data = cache.get(key)
        if data is None:
            data = dict(s.OrderSerializer(_own_order(request, reference)).data)
            cache.set(key, data, ORDER_SECONDS)
        return Response(data)


def _campaign_refusal(exc: campaign.CampaignRefused) -> Response:
    """400 for what was written (empty, too long, hidden controls, no such outcome), 409 for
    what the campaign's state refuses."""
    refused_input = exc.code in ("required", "too_long", "bidi_control", "invalid_choice")
    return Response(
        {"code": exc.code, "detail": str(exc)},
        status=status.HTTP_400_BAD_REQUEST if refused_input else status.HTTP_409_CONFLICT,
    )


class CheckpointOutcomeView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        request=s.OutcomeSerializer,
        responses={
            200: s.CheckpointSerializer,
            400: ERRORS[400],
            401: ERRORS[401],
            404: OpenApiResponse(ERROR, "No such order among this token's, or no such checkpoint"),
            409: OpenApiResponse(
                ERROR,
                "campaign_not_running, checkpoint_not_yet (its day has not come) or "
                "outcome_recorded (once per checkpoint)",
            ),
        },
        summary="Record a checkpoint's outcome (30-day campaigns)",
    )
    def post(self, request: Request, reference: str, position: int) -> Response:
        order = _own_order(request, reference)
        checkpoint = get_object_or_404(
            Checkpoint.objects.select_related("order"), order=order, position=position
        )
        body = s.OutcomeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            checkpoint = campaign.record_outcome(
                checkpoint,
                outcome=body.validated_data["outcome"],
                note=body.validated_data["note"],
                actor=services.Actor.of(_user(request)),
            )
        except campaign.CampaignRefused as exc:
            return _campaign_refusal(exc)
        return Response(s.CheckpointSerializer(checkpoint).data)


class EarlyEndView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        request=s.EarlyEndAskSerializer,
        responses={
            201: s.EarlyEndRequestSerializer,
            400: ERRORS[400],
            401: ERRORS[401],
            404: ERRORS[404],
            409: OpenApiResponse(
                ERROR,
                "campaign_not_running (only a running 30-day campaign) or early_end_open "
                "(one request waits for the operator already)",
            ),
        },
        summary="Ask to end a running 30-day campaign early (the operator answers)",
    )
    def post(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        body = s.EarlyEndAskSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            asked = campaign.request_early_end(
                order, reason=body.validated_data["reason"], actor=services.Actor.of(_user(request))
            )
        except campaign.CampaignRefused as exc:
            return _campaign_refusal(exc)
        return Response(s.EarlyEndRequestSerializer(asked).data, status=status.HTTP_201_CREATED)


class ExtensionsView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        responses={200: s.ExtensionOffersSerializer, 401: ERRORS[401], 404: ERRORS[404]},
        summary="What the order can be extended by, on the same lots",
    )
    def get(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        offered = extensions.offers(order)
        body = {
            "refused": offered.refused,
            "pay_by": offered.pay_by,
            "free_until": offered.free_until,
            "offers": offered.offers,
            "extensions": offered.extensions or order.extensions.all(),
        }
        return Response(s.ExtensionOffersSerializer(body).data)

    @extend_schema(
        request=s.ExtensionCreateSerializer,
        parameters=[IDEMPOTENCY_KEY],
        responses={
            201: s.OrderSerializer,
            400: ERRORS[400],
            401: ERRORS[401],
            404: ERRORS[404],
            409: OpenApiResponse(
                ERROR,
                "not_extendable, too_late_to_extend, extension_pending, or "
                "lots_not_free_until (with `free_until`): nothing was held",
            ),
            422: OpenApiResponse(ERROR, "idempotency_key_reused"),
        },
        summary="Extend on the same lots: an extension to pay (an order of its own)",
    )
    def post(self, request: Request, reference: str) -> Response:
        return _idempotent(request, lambda: self._extend(request, reference), scope=reference)

    def _extend(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        body = s.ExtensionCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            extension = extensions.place_extension(
                order,
                int(data["days"]),
                actor=services.Actor.of(_user(request)),
                checkpoints=[
                    {"date": c["date"].isoformat(), "check": c["check"]}
                    for c in data.get("checkpoints", [])
                ],
                abort_criteria=data.get("abort_criteria", ""),
            )
        except extensions.ExtensionRefused as exc:
            answer: dict[str, Any] = {"code": exc.code, "detail": str(exc)}
            if "free_until" in exc.params:
                answer["free_until"] = exc.params["free_until"]
            conflict = exc.code in extensions.CONFLICTS
            return Response(
                answer,
                status=status.HTTP_409_CONFLICT if conflict else status.HTTP_400_BAD_REQUEST,
            )
        enqueue_order_placed(extension)
        extension = _own_order(request, extension.reference)
        return Response(s.OrderSerializer(extension).data, status=status.HTTP_201_CREATED)


class CreditView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        request=s.CreditTakeSerializer,
        responses={
            200: s.CreditSerializer,
            400: ERRORS[400],
            401: ERRORS[401],
            404: ERRORS[404],
            409: OpenApiResponse(
                ERROR,
                "credit_decided (taken or refused already), lots_not_free (the lots are "
                "booked right after the window: take it as money) or credit_window_over "
                "(the window is over: money only); nothing changed",
            ),
        },
        summary="Take a credit as time (the window ends later) or as money (refunded)",
    )
    def post(self, request: Request, reference: str, credit: int) -> Response:
        order = _own_order(request, reference)
        found = get_object_or_404(Credit.objects.select_related("order"), pk=credit, order=order)
        body = s.CreditTakeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        actor = services.Actor.of(_user(request))
        try:
            if body.validated_data["take"] == "time":
                incidents.take_as_time(found, actor=actor)
            else:
                incidents.take_as_money(found, actor=actor)
        except incidents.CreditRefused as exc:
            return Response(
                {"code": exc.code, "detail": exc.message}, status=status.HTTP_409_CONFLICT
            )
        found.refresh_from_db()
        return Response(s.CreditSerializer(found).data)


class CancelView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        request=s.CancelSerializer,
        responses={
            200: s.OrderSerializer,
            400: ERRORS[400],
            404: ERRORS[404],
            409: OpenApiResponse(ERROR, "Not cancellable any more"),
        },
        summary="Cancel before payment",
    )
    def post(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        body = s.CancelSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if order.status != Order.STATUS_AWAITING_PAYMENT:
            raise services.InvalidTransition(order.status, Order.STATUS_CANCELLED)
        actor = services.Actor.of(_user(request))
        services.cancel_order(order, actor=actor, reason=body.validated_data["reason"])
        order.refresh_from_db()
        return Response(s.OrderSerializer(order).data)


class SshKeysView(APIView):
    permission_classes = (IsAuthenticated,)

    @staticmethod
    def _answer(order: Order) -> Response:
        keys = order.ssh_keys.values("algorithm", "fingerprint", "public_key")
        body = {"ssh_keys": list(keys), "changeable": services.can_change_keys(order)}
        return Response(s.SshKeysSerializer(body).data)

    @extend_schema(
        responses={200: s.SshKeysSerializer, 401: ERRORS[401], 404: ERRORS[404]},
        summary="The order's SSH keys",
    )
    def get(self, request: Request, reference: str) -> Response:
        return self._answer(_own_order(request, reference))

    @extend_schema(
        request=s.SshKeysChangeSerializer,
        responses={
            200: s.SshKeysSerializer,
            400: ERRORS[400],
            401: ERRORS[401],
            404: ERRORS[404],
            409: OpenApiResponse(ERROR, "keys_locked: the window has ended, or it was cancelled"),
        },
        summary="Replace the order's SSH keys (installed on the hosts once access is open)",
    )
    def put(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        body = s.SshKeysChangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        text = "\n".join(body.validated_data["ssh_public_keys"])
        services.change_ssh_keys(order, text, actor=services.Actor.of(_user(request)))
        return self._answer(order)


class BillingView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        responses={200: s.BillingSerializer, 401: ERRORS[401], 404: ERRORS[404]},
        summary="Whom the order's receipt is made out to",
    )
    def get(self, request: Request, reference: str) -> Response:
        billing = receipts.billing_of(_own_order(request, reference))
        return Response(s.BillingSerializer(billing).data)

    @extend_schema(
        request=s.BillingSerializer,
        responses={200: s.BillingSerializer, 400: ERRORS[400], 401: ERRORS[401], 404: ERRORS[404]},
        summary="Set whom the order's receipt is made out to (as the order page's form does)",
    )
    def put(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        body = s.BillingSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        billing = receipts.save_billing(order, **body.validated_data)
        return Response(s.BillingSerializer(billing).data)


class InvoiceView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        responses={200: s.InvoiceSerializer, 401: ERRORS[401], 404: ERRORS[404]},
        summary="The order's invoice",
    )
    def get(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        invoice = get_object_or_404(
            Invoice.objects.select_related("asset__chain", "deposit_address"),
            order=order,
            is_current=True,
        )
        return Response(s.InvoiceSerializer(invoice).data)

    @extend_schema(
        request=s.InvoiceCreateSerializer,
        responses={
            201: s.InvoiceSerializer,
            400: ERRORS[400],
            404: ERRORS[404],
            429: OpenApiResponse(ERROR, "The coin was changed too often; see Retry-After"),
            503: OpenApiResponse(ERROR, "The chain cannot be reached"),
        },
        summary="Choose the coin: an invoice with its own deposit address (the same coin, "
        "or one chosen before, gets its invoice again)",
    )
    def post(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        body = s.InvoiceCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        assets = Asset.objects.filter(
            symbol=body.validated_data["asset"], is_active=True, chain__is_active=True
        )
        if "chain_id" in body.validated_data:
            assets = assets.filter(chain__chain_id=body.validated_data["chain_id"])
        asset = assets.select_related("chain").first()
        if asset is None:
            raise BookingRefused({"asset": [refusal("invalid_choice")]})
        try:
            invoice = invoicing.create_invoice(order, asset)
        except (RpcUnavailable, RpcError, nodes.ChainMismatch):
            return Response(
                {"code": "chain_unreachable", "detail": str(MESSAGES["chain_unreachable"])},
                status=503,
            )
        return Response(s.InvoiceSerializer(invoice).data, status=status.HTTP_201_CREATED)


class ClaimView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        request=s.ClaimSerializer,
        responses={202: s.InvoiceSerializer, 400: ERRORS[400], 404: ERRORS[404]},
        summary="I've paid: check the chain now (the transaction hash is optional)",
    )
    def post(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        body = s.ClaimSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        invoice = get_object_or_404(Invoice, order=order, is_current=True)
        invoice = claims.claim_payment(invoice, body.validated_data.get("tx_hash", ""))
        invoice = Invoice.objects.select_related("asset__chain", "deposit_address").get(
            pk=invoice.pk
        )
        return Response(s.InvoiceSerializer(invoice).data, status=status.HTTP_202_ACCEPTED)


class RefundsView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        responses={
            200: s.RefundLineSerializer(many=True),
            401: ERRORS[401],
            404: ERRORS[404],
            429: ERRORS[429],
        },
        summary="Money to send back: per invoice, what is owed, the refund address, the refunds "
        "sent (empty: nothing to send back)",
    )
    def get(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        return Response(s.RefundLineSerializer(refund_due.lines_for(order), many=True).data)


class RefundAddressView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        request=s.RefundAddressSerializer,
        responses={
            200: s.RefundLineSerializer(many=True),
            400: OpenApiResponse(
                ERROR,
                "invalid_refund_address, refund_address_checksum, refund_address_zero, "
                "refund_address_ours, refund_address_contract, nothing_to_refund, "
                "refund_in_flight (a refund is on its way: the address is final for it)",
            ),
            401: ERRORS[401],
            404: OpenApiResponse(ERROR, "No such order (or invoice of it) among this token's"),
            429: ERRORS[429],
        },
        summary="Give the address to send the money back to (changeable until a refund is sent)",
    )
    def post(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        body = s.RefundAddressSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            refunds.set_order_refund_address(
                order,
                body.validated_data["address"],
                actor=services.Actor.of(_user(request)),
                invoice_id=body.validated_data.get("invoice"),
            )
        except Invoice.DoesNotExist:
            raise exceptions.NotFound() from None
        return Response(s.RefundLineSerializer(refund_due.lines_for(order), many=True).data)


def _jobs(request: Request, order: Order) -> models.QuerySet[ProvisioningJob]:
    """The provisioning jobs of one of this token owner's orders, one per booked lot (none
    before approval)."""
    return ProvisioningJob.objects.filter(order=order, order__user=_user(request)).select_related(
        "order", "lot__host", "grant"
    )


class ProvisioningView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        responses={
            200: s.ProvisioningSerializer,
            401: ERRORS[401],
            404: ERRORS[404],
            429: ERRORS[429],
        },
        summary="Provisioning per lot: steps, and the ssh lines once ready",
    )
    def get(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        jobs = _jobs(request, order).defer("report")
        body = {
            "order": order,
            "lots": [s.lot_access(job) for job in jobs],
        }
        return Response(s.ProvisioningSerializer(body).data)


class ReportView(APIView):
    permission_classes = (IsAuthenticated,)

    @extend_schema(
        responses={
            200: s.ReportsSerializer,
            401: ERRORS[401],
            404: ERRORS[404],
            409: OpenApiResponse(ERROR, "report_not_ready: no lot has a report yet"),
            429: ERRORS[429],
        },
        summary="The validation reports (the benchmark's JSON), per lot",
    )
    def get(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        # As on the order page: a lot's report once it is delivered (ready, later revoked),
        # not while it is prepared, failed or held by the operator.
        lots = [
            {
                "lot": str(job.lot),
                "host": job.lot.host.name,
                "report": job.report if job.status in ProvisioningJob.DELIVERED else None,
            }
            for job in _jobs(request, order)
        ]
        if all(lot["report"] is None for lot in lots):
            raise ReportNotReady()
        body = {"order": order, "lots": lots}
        return Response(s.ReportsSerializer(body).data)


class SplitTestsView(APIView):
    """The researcher's own job on one card, then two: ``gpulots split-test --upload``."""

    permission_classes = (IsAuthenticated,)
    parser_classes = (SplitTestParser,)

    @extend_schema(
        responses={
            200: s.SplitTestSerializer(many=True),
            401: ERRORS[401],
            404: ERRORS[404],
            429: ERRORS[429],
        },
        summary="The split tests of your own job uploaded to the order, newest first "
        "(without their reports: see `report_url`)",
    )
    def get(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        listed = split_tests.summarised(order.split_tests.all())
        for split_test in listed:
            split_test.order = order  # one query for the list, not one per row
        return Response(s.SplitTestSerializer(listed, many=True).data)

    @extend_schema(
        request=s.SplitTestReportSerializer,
        responses={
            201: s.SplitTestSerializer,
            400: OpenApiResponse(
                ERROR,
                "not_a_split_test, unsupported_version (version 2 is), split_test_too_large "
                f"(a body over {split_tests.MAX_REPORT_BYTES // 1024} KiB), "
                "malformed_split_test (a part not an object, a NUL character, a number out of "
                "range), job_not_in_order, other_order (`order.reference` names another one); "
                "or the body is not JSON: nothing is stored",
            ),
            401: ERRORS[401],
            404: ERRORS[404],
            429: ERRORS[429],
        },
        summary="Attach the report of `gpulots split-test` (your own job on one card, then "
        f"two) to the order; the newest {split_tests.KEPT_PER_ORDER} are kept",
    )
    def post(self, request: Request, reference: str) -> Response:
        order = _own_order(request, reference)
        try:
            report = request.data
        except RequestDataTooBig:  # the site reads no bigger body (DATA_UPLOAD_MAX_MEMORY_SIZE)
            raise split_tests.SplitTestRefused("split_test_too_large") from None
        split_test = split_tests.attach_split_test(
            order, report, actor=services.Actor.of(_user(request))
        )
        return Response(s.SplitTestSerializer(split_test).data, status=status.HTTP_201_CREATED)


class ReceiptView(APIView):
    permission_classes = (IsAuthenticated,)

    def perform_content_negotiation(
        self, request: Request, force: bool = False
    ) -> tuple[BaseRenderer, str]:
        """The receipt is a PDF whatever Accept asks for; errors are JSON, as everywhere."""
        return JSONRenderer(), JSONRenderer.media_type

    @extend_schema(
        responses={
            (200, "application/pdf"): OpenApiResponse(
                OpenApiTypes.BINARY,
                "The receipt (numbered at its first issue), in the order's language",
            ),
            401: ERRORS[401],
            404: OpenApiResponse(ERROR, "No such order among this token's, or not paid yet"),
            429: ERRORS[429],
        },
        summary="The receipt of a paid order, as a PDF",
    )
    def get(self, request: Request, reference: str) -> HttpResponse:
        issued = receipts.issue_receipt(_own_order(request, reference))
        if issued is None:
            raise exceptions.NotFound()
        return pdf_response(issued)


@extend_schema(exclude=True)
class NoSuchEndpoint(APIView):
    """An address under /api/v1/ that names no endpoint (or a malformed one, e.g. a negative
    checkpoint number): a JSON 404 with its code, like every other API error — never the
    site's HTML page."""

    permission_classes = (AllowAny,)

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        raise exceptions.NotFound()

    post = put = patch = delete = get
