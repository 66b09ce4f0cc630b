"""Raises a job's stop flag from Python: job_stop.py URL NAMESPACE JOB_ID.

With the Python extension (bindings/python/.venv, built by
bindings/python/test.sh): mistri_locks.Redis(...).set_flag("job:ID:stop"),
the key Python's celery face computes too. Without it, the same flag
through the C ABI (libmistri_locks.so, path in MISTRI_LOCKS_LIB) with
ctypes. Prints which it used.
"""

import ctypes
import os
import sys

url, namespace, job_id = sys.argv[1:4]
key = f"job:{job_id}:stop"
try:
    import mistri_locks
except ImportError:
    lib = ctypes.CDLL(os.environ["MISTRI_LOCKS_LIB"])
    handle = ctypes.c_void_p()
    lib.mistri_locks_redis_new.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.mistri_locks_set_flag.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double]
    lib.mistri_locks_free.argtypes = [ctypes.c_void_p]
    status = lib.mistri_locks_redis_new(url.encode(), namespace.encode(), ctypes.byref(handle))
    if status != 0:
        sys.exit(f"mistri_locks_redis_new: status {status}")
    status = lib.mistri_locks_set_flag(handle, key.encode(), 300.0)
    lib.mistri_locks_free(handle)
    if status != 0:
        sys.exit(f"mistri_locks_set_flag: status {status}")
    print("C ABI (ctypes)")
else:
    mistri_locks.Redis(url=url, namespace=namespace).set_flag(key)
    print("Python extension")
