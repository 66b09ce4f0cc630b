"""``manage.py mistri_locks status|list|stop KEY|clear KEY|stop-task TASK_ID``
on the backend the settings choose (see ``mistri_locks.integrations.django``): what the
``mistri-locks`` operator command does, without a URL to pass."""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
    BaseCommand,
    CommandError,
    CommandParser,
)

from mistri_locks import FLAG_TTL, Error
from mistri_locks import job_stop_key
from mistri_locks.integrations.django import locks


def _seconds(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}s"


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "Leases and stop flags on the mistri_locks backend of these settings: "
        "status [KEY...], list [PREFIX], stop FLAG, clear FLAG, stop-task TASK_ID."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        status = sub.add_parser("status", help="who holds the KEYs (default: every lease), and raised flags")
        status.add_argument("keys", nargs="*")
        status.add_argument("--json", action="store_true")
        listing = sub.add_parser("list", help="live leases and raised flags whose keys start with PREFIX")
        listing.add_argument("prefix", nargs="?", default="")
        listing.add_argument("--json", action="store_true")
        stop = sub.add_parser("stop", help="raise the flag FLAG (the stop key a holder watches)")
        stop.add_argument("flag")
        stop.add_argument("--ttl", type=float, default=float(FLAG_TTL))
        clear = sub.add_parser("clear", help="lower the flag FLAG")
        clear.add_argument("flag")
        task = sub.add_parser("stop-task", help="stop the leased task TASK_ID (its job stop key)")
        task.add_argument("task_id")
        task.add_argument("--ttl", type=float, default=float(FLAG_TTL))

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        try:
            handle = locks()
            if action in ("status", "list"):
                self._show(handle, action, options)
            elif action == "stop":
                handle.set_flag(options["flag"], options["ttl"])
                self.stdout.write(f"raised {options['flag']} for {options['ttl']:g} s")
            elif action == "clear":
                handle.clear_flag(options["flag"])
                self.stdout.write(f"lowered {options['flag']}")
            elif action == "stop-task":
                flag = job_stop_key(options["task_id"])
                handle.set_flag(flag, options["ttl"])
                self.stdout.write(f"raised {flag} for {options['ttl']:g} s")
        except (Error, ValueError) as e:
            raise CommandError(f"mistri_locks {action}: {e}") from e

    def _show(self, handle: Any, action: str, options: dict[str, Any]) -> None:
        if action == "status" and options["keys"]:
            infos = [handle.info(k) for k in options["keys"]]
            listing = {"leases": [i for i in infos if i is not None], "flags": []}
            missing = [k for k, i in zip(options["keys"], infos) if i is None]
        else:
            listing = handle.list(options.get("prefix", ""))
            missing = []
        if options["json"]:
            self.stdout.write(json.dumps(listing, indent=2, sort_keys=True))
        else:
            now = time.time()
            for lease in listing["leases"]:
                acquired = lease["acquired_at"]
                held = "-" if acquired is None else f"{now - acquired:.1f}s"
                self.stdout.write(
                    f"lease {lease['key']}  holder={lease['holder']}  fence={lease['fence']}  "
                    f"left={_seconds(lease['time_left'])}  held={held}"
                )
            for flag in listing["flags"]:
                self.stdout.write(f"flag  {flag['key']}  left={_seconds(flag['time_left'])}")
            if not listing["leases"] and not listing["flags"]:
                self.stdout.write("nothing held, no flags raised")
        for key in missing:
            self.stdout.write(f"not held: {key}")
        if missing:
            raise CommandError(f"not held: {', '.join(missing)}")
