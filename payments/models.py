"""Chains, assets, invoices and transfers arrive with the payment issue."""
