"""Django settings for test_django.py's ``django-admin`` runs: the default
database is the session's throwaway PostgreSQL (from the environment),
and MISTRI_LOCKS names no URL, so mistri_locks uses that database."""

import os

SECRET_KEY = "test"
USE_TZ = True
INSTALLED_APPS = ["mistri_locks.integrations.django"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["MISTRI_TEST_PG_DB"],
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": os.environ["MISTRI_TEST_PG_PORT"],
    }
}
MISTRI_LOCKS = {"NAMESPACE": os.environ["MISTRI_TEST_NS"]}
