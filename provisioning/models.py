"""Provisioning jobs, host backends and validation reports arrive with the provisioning issue."""
