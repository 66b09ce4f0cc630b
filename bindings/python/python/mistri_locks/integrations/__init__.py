"""The framework integrations, each imported only when asked for (nothing
here is imported by ``import mistri_locks``):

- ``mistri_locks.integrations.celery``: ``LeasedTask``, ``stop``, ``stop_key``
- ``mistri_locks.integrations.django``: the Django app (``INSTALLED_APPS``),
  its settings' backend, ``leased`` and the ``mistri_locks`` command
- ``mistri_locks.integrations.dramatiq``: the ``Leased`` middleware
- ``mistri_locks.integrations.web``: the operator's page as a WSGI app
  (``app``) and Django URLs (``django_urls``)

RQ needs none: ``mistri_locks.leased`` wraps an RQ job function as is.
"""
