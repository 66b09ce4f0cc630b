/* Demo worker, C side: asks for the lease KEY and WAITS for it (woken by
 * its release, not by polling) — prints WAITING, then HELD <fence>
 * <monotonic time> once it has it — works until the stop flag STOP is
 * raised, then releases and prints RELEASED.
 *
 * Usage: worker URL KEY STOP   (URL: redis://… or a Local database path)
 */
#define _POSIX_C_SOURCE 200809L
#include <mistri_locks.h>

#include <stdio.h>
#include <string.h>
#include <time.h>

static int fail(const char *what)
{
    fprintf(stderr, "worker.c: %s: %s\n", what, mistri_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    const char *url = argv[1], *key = argv[2], *stop = argv[3];
    mistri_locks *locks = NULL;
    mistri_status st = strncmp(url, "redis", 5) == 0
                           ? mistri_locks_redis_new(url, "mistri:demo", &locks)
                           : mistri_locks_local_new(url, &locks);
    if (st != MISTRI_OK)
        return fail("open");
    mistri_hold_options_builder *o = NULL;
    if (mistri_hold_options_new(&o) != MISTRI_OK ||
        mistri_hold_options_set_ttl(o, 10) != MISTRI_OK ||
        mistri_hold_options_set_heartbeat(o, 0.1) != MISTRI_OK ||
        mistri_hold_options_set_stop_key(o, stop) != MISTRI_OK ||
        mistri_hold_options_set_wait(o, 30) != MISTRI_OK) /* seconds */
        return fail("options");
    printf("WAITING\n");
    fflush(stdout);
    mistri_hold *hold = NULL;
    st = mistri_hold_start_with(locks, key, o, &hold);
    mistri_hold_options_free(o);
    if (st != MISTRI_OK)
        return fail("hold");
    if (hold == NULL) { /* still held elsewhere after 30 s */
        printf("REFUSED\n");
        mistri_locks_free(locks);
        return 3;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t fence = 0;
    mistri_signal *signal = NULL;
    bool tripped = false;
    mistri_hold_fence(hold, &fence);
    mistri_hold_signal(hold, &signal);
    printf("HELD %llu %.6f\n", (unsigned long long)fence, now.tv_sec + now.tv_nsec / 1e9);
    fflush(stdout);
    while (mistri_signal_wait(signal, 0.5, &tripped) == MISTRI_OK && !tripped)
        ; /* one unit of work per turn */
    char *reason = NULL;
    mistri_signal_reason(signal, &reason);
    printf("STOPPED %s\n", reason ? reason : "");
    mistri_string_free(reason);
    mistri_release_outcome outcome;
    if (mistri_hold_release(hold, &outcome) != MISTRI_OK)
        return fail("release");
    printf("RELEASED\n");
    mistri_hold_free(hold);
    mistri_signal_free(signal);
    mistri_locks_free(locks);
    return 0;
}
