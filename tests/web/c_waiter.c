/*
 * c_waiter.c: the browser test's waiting C process (tests/web/browser.mjs).
 * Waits up to 60 s for KEY (a hold with a wait: it queues a waiting line),
 * prints "held FENCE" once it holds, then works until its stop key is
 * raised (or 60 s pass), releases and exits 0.
 *
 *   c_waiter URL NAMESPACE KEY LABEL STOP_KEY
 *
 * Exit status: 0 held, stopped and released; 1 an error; 3 never got it.
 */
#include <mistri_locks.h>

#include <stdio.h>

static int fail(const char *what)
{
    fprintf(stderr, "c_waiter: %s failed: %s\n", what, mistri_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s URL NAMESPACE KEY LABEL STOP_KEY\n", argv[0]);
        return 1;
    }
    mistri_open_options *open = NULL;
    mistri_locks *locks = NULL;
    if (mistri_open_options_new(&open) != MISTRI_OK ||
        mistri_open_options_set_namespace(open, argv[2]) != MISTRI_OK ||
        mistri_locks_open(argv[1], open, &locks) != MISTRI_OK) {
        mistri_open_options_free(open);
        return fail("opening the backend");
    }
    mistri_open_options_free(open);

    mistri_hold_options_builder *opts = NULL;
    mistri_hold *hold = NULL;
    if (mistri_hold_options_new(&opts) != MISTRI_OK ||
        mistri_hold_options_set_ttl(opts, 10) != MISTRI_OK ||
        mistri_hold_options_set_heartbeat(opts, 1) != MISTRI_OK ||
        mistri_hold_options_set_wait(opts, 60) != MISTRI_OK ||
        mistri_hold_options_set_label(opts, argv[4]) != MISTRI_OK ||
        mistri_hold_options_set_stop_key(opts, argv[5]) != MISTRI_OK ||
        mistri_hold_start_with(locks, argv[3], opts, &hold) != MISTRI_OK) {
        int rc = fail("holding with a wait");
        mistri_hold_options_free(opts);
        mistri_locks_free(locks);
        return rc;
    }
    mistri_hold_options_free(opts);
    if (hold == NULL) {
        printf("c_waiter: never got %s\n", argv[3]);
        mistri_locks_free(locks);
        return 3;
    }
    uint64_t fence = 0;
    mistri_signal *signal = NULL;
    bool aborted = false;
    mistri_hold_fence(hold, &fence);
    mistri_hold_signal(hold, &signal);
    printf("held %llu\n", (unsigned long long)fence);
    fflush(stdout);
    int rc = 0;
    if (mistri_signal_wait(signal, 60, &aborted) != MISTRI_OK)
        rc = fail("waiting on the signal");
    mistri_release_outcome outcome;
    if (mistri_hold_release(hold, &outcome) != MISTRI_OK)
        rc = fail("releasing");
    mistri_hold_free(hold);
    mistri_signal_free(signal);
    mistri_locks_free(locks);
    return rc;
}
