"""The Django app ``mistri_locks.integrations.django`` (label ``mistri_locks``): it
brings the ``mistri_locks`` management command."""

from __future__ import annotations

from django.apps import AppConfig  # type: ignore[import-untyped, import-not-found, unused-ignore]


class MistriLocksConfig(AppConfig):  # type: ignore[misc]
    name = "mistri_locks.integrations.django"
    label = "mistri_locks"
    verbose_name = "mistri_locks"
