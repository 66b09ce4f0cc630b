/*
 * worker.c: a worker loop that holds a lease while it works and stops when
 * asked, from any process (C, Python, Ruby, an operator), via a stop flag.
 * Copy it and put your work where `do_one_unit_of_work` is.
 *
 * Build:  cc worker.c $(pkg-config --cflags --libs mistri_locks) -o worker
 * Run:    ./worker redis://127.0.0.1:6379/0 [KEY]         (works until stopped)
 * Stop:   ./worker redis://127.0.0.1:6379/0 --stop [KEY]  (from anywhere)
 *
 * KEY defaults to "example-worker"; the stop flag is "stop:KEY". Set
 * MISTRI_NAMESPACE to use a namespace other than "mistri:locks".
 * Exit status: 0 stopped cleanly, 1 error, 3 another worker holds KEY,
 * 4 the lease was lost (the work may have overlapped another holder's).
 */
#include <mistri_locks.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints what failed and why. */
static int fail(const char *what)
{
    fprintf(stderr, "worker: %s failed: %s\n", what, mistri_last_error());
    return 1;
}

/* One small piece of work. It checks the signal between steps: here it
 * just waits up to 0.1 s, waking at once when the signal trips. */
static mistri_status do_one_unit_of_work(const mistri_signal *signal)
{
    bool aborted = false;
    return mistri_signal_wait(signal, 0.1, &aborted);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s REDIS_URL [KEY] | %s REDIS_URL --stop [KEY]\n", argv[0],
                argv[0]);
        return 1;
    }
    const char *url = argv[1];
    int stop_mode = argc > 2 && strcmp(argv[2], "--stop") == 0;
    const char *key = argc > 2 + stop_mode ? argv[2 + stop_mode] : "example-worker";
    char stop_key[256];
    snprintf(stop_key, sizeof stop_key, "stop:%s", key);

    mistri_locks *locks = NULL;
    if (mistri_locks_redis_new(url, getenv("MISTRI_NAMESPACE"), &locks) != MISTRI_OK)
        return fail("connecting to Redis");

    if (stop_mode) {
        /* Ask whoever holds KEY to stop. The flag expires on its own. */
        int rc = 0;
        if (mistri_locks_set_flag(locks, stop_key, 60) != MISTRI_OK)
            rc = fail("raising the stop flag");
        else
            printf("worker: asked the holder of %s to stop\n", key);
        mistri_locks_free(locks);
        return rc;
    }

    /* Hold KEY: renewed every heartbeat, stop flag read every tick (1 s);
     * told the lease may be lost 5 s before it could expire unrenewed. */
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *hold = NULL;
    if (mistri_hold_options_new(&opts) != MISTRI_OK ||
        mistri_hold_options_set_ttl(opts, 30) != MISTRI_OK ||
        mistri_hold_options_set_heartbeat(opts, 1) != MISTRI_OK ||
        mistri_hold_options_set_stop_key(opts, stop_key) != MISTRI_OK ||
        mistri_hold_options_set_safety_margin(opts, 5) != MISTRI_OK ||
        mistri_hold_start_with(locks, key, opts, &hold) != MISTRI_OK) {
        int rc = fail("holding the lease");
        mistri_hold_options_free(opts);
        mistri_locks_free(locks);
        return rc;
    }
    mistri_hold_options_free(opts); /* the hold keeps what it needs */
    if (hold == NULL) { /* a refusal, not an error */
        printf("worker: %s is held by another worker\n", key);
        mistri_locks_free(locks);
        return 3;
    }
    uint64_t fence = 0;
    mistri_signal *signal = NULL;
    mistri_hold_fence(hold, &fence);
    mistri_hold_signal(hold, &signal);
    printf("worker: holding %s (fence %llu)\n", key, (unsigned long long)fence);
    fflush(stdout);

    /* The work loop: runs until the signal trips (stop flag, or lease lost). */
    unsigned long units = 0;
    bool aborted = false;
    int rc = 0;
    while (mistri_signal_aborted(signal, &aborted) == MISTRI_OK && !aborted) {
        if (do_one_unit_of_work(signal) != MISTRI_OK) {
            rc = fail("working");
            break;
        }
        units++;
    }

    char *reason = NULL;
    bool lost = false;
    mistri_signal_reason(signal, &reason);
    mistri_hold_lost(hold, &lost);
    printf("worker: stopping after %lu units: %s\n", units, reason ? reason : "(no reason)");
    mistri_string_free(reason);

    mistri_release_outcome outcome;
    if (mistri_hold_release(hold, &outcome) != MISTRI_OK)
        rc = fail("releasing the lease"); /* it expires on its own within its ttl */
    else
        printf("worker: released %s\n", outcome == MISTRI_RELEASE_RELEASED ? "the lease" : "nothing");
    if (!lost && rc == 0)
        mistri_locks_clear_flag(locks, stop_key); /* so the next worker may start */
    mistri_hold_free(hold);
    mistri_signal_free(signal);
    mistri_locks_free(locks);
    return rc != 0 ? rc : lost ? 4 : 0;
}
