/* Demo worker, C side: holds the lease KEY, prints HELD <fence>, works until
 * the stop flag STOP is raised, then releases and prints RELEASED.
 *
 * Usage: worker URL KEY STOP   (URL: redis://… or a Local database path)
 */
#include <mistri_locks.h>

#include <stdio.h>
#include <string.h>

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
    mistri_hold_options o = mistri_hold_options_default();
    o.ttl = 10;
    o.heartbeat = 0.1;
    o.stop_key = stop;
    mistri_hold *hold = NULL;
    if (mistri_hold_start(locks, key, &o, &hold) != MISTRI_OK)
        return fail("hold");
    if (hold == NULL) {
        printf("REFUSED\n");
        mistri_locks_free(locks);
        return 3;
    }
    uint64_t fence = 0;
    mistri_signal *signal = NULL;
    bool tripped = false;
    mistri_hold_fence(hold, &fence);
    mistri_hold_signal(hold, &signal);
    printf("HELD %llu\n", (unsigned long long)fence);
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
