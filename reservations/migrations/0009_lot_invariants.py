"""The inventory's invariants, in the database (issue 10, item 8).

- No two lots that are not retired share a card on a host: an exclusion constraint over
  (host, the lot's two cards as a multirange), replacing the two unique keys, which let
  lot (0, 1) and lot (1, 2) live side by side.
- A host's name is DNS labels (a check constraint; the local backend makes a folder of it).
- Triggers keep bookings on cards of their kind: a lot carrying live bookings keeps its
  host, a host whose lots carry live bookings keeps its kind, a lot that is not retired
  takes no card of a retired lot still carrying live bookings, and a counting hold is only
  ever written on a lot of its order's kind. A live booking is a counting hold (held or
  booked) whose period has not ended or whose order still holds (``models.live_holds``).

Existing rows that break the new rules stop the migration with a list of what to fix.
"""

from typing import Any

import django.contrib.postgres.constraints
import django.contrib.postgres.fields.ranges
import django.core.validators
import django.db.models.expressions
from django.db import migrations, models

HOST_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"

TRIGGERS = """
CREATE FUNCTION reservations_lot_is_live(lot bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM reservations_hold AS hold
          JOIN reservations_order AS o ON o.id = hold.order_id
         WHERE hold.lot_id = lot AND hold.status IN ('held', 'booked')
           AND (upper(hold.period) > now()
                OR o.status IN ('awaiting_payment', 'paid', 'approved', 'active')))
$$;

CREATE FUNCTION reservations_lot_invariants() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.host_id IS DISTINCT FROM OLD.host_id
       AND reservations_lot_is_live(OLD.id) THEN
        RAISE EXCEPTION 'lot % carries live bookings: it cannot move to another host', OLD.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'lot_host_kept_while_booked';
    END IF;
    IF NEW.status <> 'retired' AND EXISTS (
        SELECT 1 FROM reservations_lot AS other
         WHERE other.host_id = NEW.host_id AND other.id <> NEW.id AND other.status = 'retired'
           AND (other.gpu_a IN (NEW.gpu_a, NEW.gpu_b) OR other.gpu_b IN (NEW.gpu_a, NEW.gpu_b))
           AND reservations_lot_is_live(other.id)) THEN
        RAISE EXCEPTION 'lot % would take cards of a retired lot that still carries bookings',
            NEW.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'lot_cards_of_booked_retired_lot';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER lot_invariants
    BEFORE INSERT OR UPDATE OF host_id, gpu_a, gpu_b, status ON reservations_lot
    FOR EACH ROW EXECUTE FUNCTION reservations_lot_invariants();

CREATE FUNCTION reservations_host_kind_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.kind_id IS DISTINCT FROM OLD.kind_id THEN
        -- The lots' row locks, in id order as placing takes them: a placement on this host
        -- either committed before (its hold is seen below) or waits and then meets the
        -- hold trigger's check of the new kind.
        PERFORM 1 FROM reservations_lot WHERE host_id = OLD.id ORDER BY id FOR UPDATE;
        IF EXISTS (SELECT 1 FROM reservations_lot
                    WHERE host_id = OLD.id AND reservations_lot_is_live(id)) THEN
            RAISE EXCEPTION 'host % has lots carrying live bookings: its kind cannot change',
                OLD.name
                USING ERRCODE = 'check_violation', CONSTRAINT = 'host_kind_kept_while_booked';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER host_kind_kept
    BEFORE UPDATE OF kind_id ON reservations_host
    FOR EACH ROW EXECUTE FUNCTION reservations_host_kind_kept();

CREATE FUNCTION reservations_hold_of_order_kind() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IN ('held', 'booked') AND NOT EXISTS (
        SELECT 1 FROM reservations_lot AS lot
          JOIN reservations_host AS host ON host.id = lot.host_id
          JOIN reservations_order AS o ON o.id = NEW.order_id
         WHERE lot.id = NEW.lot_id AND host.kind_id = o.kind_id) THEN
        RAISE EXCEPTION 'hold on lot % is not of its order''s kind', NEW.lot_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'hold_lot_of_order_kind';
    END IF;
    RETURN NULL;
END
$$;

-- AFTER, at the end of the statement: placing inserts the order and its holds in one.
CREATE TRIGGER hold_of_order_kind
    AFTER INSERT OR UPDATE OF lot_id, order_id, status ON reservations_hold
    FOR EACH ROW EXECUTE FUNCTION reservations_hold_of_order_kind();
"""

DROP_TRIGGERS = """
DROP TRIGGER hold_of_order_kind ON reservations_hold;
DROP FUNCTION reservations_hold_of_order_kind();
DROP TRIGGER host_kind_kept ON reservations_host;
DROP FUNCTION reservations_host_kind_kept();
DROP TRIGGER lot_invariants ON reservations_lot;
DROP FUNCTION reservations_lot_invariants();
DROP FUNCTION reservations_lot_is_live(bigint);
"""


def refuse_rows_that_break_the_rules(apps: Any, schema_editor: Any) -> None:
    """Stop with the list of hosts and lots to fix first, rather than a bare SQL error."""
    import re

    Host = apps.get_model("reservations", "Host")
    Lot = apps.get_model("reservations", "Lot")
    problems = [
        f"host {name!r}: not a valid host name (DNS labels: a-z, 0-9, inner hyphens, dots)"
        for name in Host.objects.values_list("name", flat=True)
        if not re.fullmatch(HOST_NAME_PATTERN, name)
    ]
    owned: dict[tuple[int, int], int] = {}
    for lot in Lot.objects.exclude(status="retired").order_by("pk"):
        for card in (lot.gpu_a, lot.gpu_b):
            other = owned.setdefault((lot.host_id, card), lot.pk)
            if other != lot.pk:
                problems.append(f"lots {other} and {lot.pk}: both own GPU {card} of one host")
    if problems:
        raise RuntimeError(
            "Fix these in the admin before migrating (issue 10, item 8):\n  "
            + "\n  ".join(problems)
        )


class Migration(migrations.Migration):
    dependencies = [
        ("reservations", "0008_order_fairness"),
    ]

    operations = [
        migrations.RunPython(refuse_rows_that_break_the_rules, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="lot",
            constraint=django.contrib.postgres.constraints.ExclusionConstraint(
                condition=models.Q(("status", "retired"), _negated=True),
                expressions=[
                    ("host", "="),
                    (
                        models.Func(
                            models.Func(
                                models.F("gpu_a"),
                                django.db.models.expressions.CombinedExpression(
                                    models.F("gpu_a"), "+", models.Value(1)
                                ),
                                function="int4range",
                                output_field=django.contrib.postgres.fields.ranges.IntegerRangeField(),
                            ),
                            models.Func(
                                models.F("gpu_b"),
                                django.db.models.expressions.CombinedExpression(
                                    models.F("gpu_b"), "+", models.Value(1)
                                ),
                                function="int4range",
                                output_field=django.contrib.postgres.fields.ranges.IntegerRangeField(),
                            ),
                            function="int4multirange",
                            output_field=django.contrib.postgres.fields.ranges.IntegerRangeField(),
                        ),
                        "&&",
                    ),
                ],
                name="lot_cards_not_shared",
                violation_error_message="One of these GPUs already belongs to another lot on "
                "this host that is not retired.",
            ),
        ),
        migrations.RemoveConstraint(
            model_name="lot",
            name="lot_gpu_a_unique",
        ),
        migrations.RemoveConstraint(
            model_name="lot",
            name="lot_gpu_b_unique",
        ),
        migrations.AlterField(
            model_name="host",
            name="name",
            field=models.CharField(
                help_text="Also its folder in the local sandbox: DNS labels, e.g. gpu-h200-1",
                max_length=80,
                unique=True,
                validators=[
                    django.core.validators.RegexValidator(
                        HOST_NAME_PATTERN,
                        "Lowercase letters, digits and hyphens, in labels joined by single dots "
                        "(e.g. gpu-h200-1 or gpu1.lab); a label starts and ends with a letter "
                        "or digit.",
                    )
                ],
            ),
        ),
        migrations.AddConstraint(
            model_name="host",
            constraint=models.CheckConstraint(
                condition=models.Q(("name__regex", HOST_NAME_PATTERN)),
                name="host_name_is_dns_labels",
                violation_error_message="This is not a valid host name.",
            ),
        ),
        migrations.RunSQL(TRIGGERS, DROP_TRIGGERS),
    ]
