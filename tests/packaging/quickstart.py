"""The README's Python quick start, against the backend at argv[1].

Holds "nightly-report" watching "stop:nightly-report", has another process
raise that flag (as README says: from any process), and works until the
hold's signal trips. Prints HELD <fence>, then STOPPED. Run by
tests/packaging/run.sh with the installed wheel.
"""

import subprocess
import sys

import mistri_locks

url = sys.argv[1]
mistri_locks.configure(mistri_locks.open(url, namespace="mistri:locks"))

hold = mistri_locks.hold("nightly-report", ttl=60, heartbeat=10, stop_key="stop:nightly-report")
if hold is None:
    sys.exit("another worker is on it")
with hold:  # renewed on a heartbeat, released on exit
    print("HELD", hold.fence, flush=True)
    # from any process, any language:
    subprocess.run(
        [sys.executable, "-c",
         "import sys, mistri_locks; mistri_locks.open(sys.argv[1], namespace='mistri:locks')"
         ".set_flag('stop:nightly-report', ttl=300)", url],
        check=True)
    # The signal trips within a tick (1 s) of the flag; the wait is bounded
    # only so that a broken install ends the run instead of hanging it.
    for _ in range(600):
        if hold.signal.aborted:
            break
        hold.signal.wait(0.1)
    assert hold.signal.aborted, "the stop flag did not trip the hold's signal"
    print("STOPPED", hold.signal.reason, flush=True)
assert not mistri_locks.locks().held("nightly-report")
mistri_locks.locks().clear_flag("stop:nightly-report")
