"""Webhooks: labs and operators hear what happened, signed (Standard Webhooks) and delivered
with retries from PostgreSQL, each event a receiver of a domain event (webhooks.receivers)."""
