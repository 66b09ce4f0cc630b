/* Interop agent, C side. Usage:
 *   agent hold  URL NS KEY   hold KEY with stop flag stop:KEY until stopped
 *   agent stop  URL NS KEY   check KEY is held, raise stop:KEY
 *   agent check URL NS KEY   print whether KEY is held; lower stop:KEY
 */
#include <mistri_locks.h>

#include <stdio.h>
#include <string.h>

static int fail(const char *what)
{
    fprintf(stderr, "agent.c: %s: %s\n", what, mistri_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *cmd = argv[1], *url = argv[2], *ns = argv[3], *key = argv[4];
    char stop[256];
    snprintf(stop, sizeof stop, "stop:%s", key);
    mistri_locks *locks = NULL;
    bool postgres = strncmp(url, "postgres://", 11) == 0 || strncmp(url, "postgresql://", 13) == 0;
    if (strncmp(url, "mysql://", 8) == 0 || strncmp(url, "mariadb://", 10) == 0) {
        /* no constructor of its own: the one entry point with a namespace */
        mistri_open_options *o = NULL;
        mistri_status s = mistri_open_options_new(&o);
        if (s == MISTRI_OK)
            s = mistri_open_options_set_namespace(o, ns);
        if (s == MISTRI_OK)
            s = mistri_locks_open(url, o, &locks);
        mistri_open_options_free(o);
        if (s != MISTRI_OK)
            return fail("locks_open");
    } else if ((postgres ? mistri_locks_postgres_new(url, ns, &locks)
                         : mistri_locks_redis_new(url, ns, &locks)) != MISTRI_OK)
        return fail(postgres ? "postgres_new" : "redis_new");
    int rc = 2;
    bool held = false;
    if (strcmp(cmd, "hold") == 0) {
        mistri_hold_options_builder *o = NULL;
        mistri_hold *hold = NULL;
        if (mistri_hold_options_new(&o) != MISTRI_OK || mistri_hold_options_set_ttl(o, 5) != MISTRI_OK ||
            mistri_hold_options_set_heartbeat(o, 0.2) != MISTRI_OK ||
            mistri_hold_options_set_stop_key(o, stop) != MISTRI_OK)
            return fail("hold_options");
        mistri_status started = mistri_hold_start_with(locks, key, o, &hold);
        mistri_hold_options_free(o);
        if (started != MISTRI_OK)
            return fail("hold_start_with");
        if (hold == NULL) {
            printf("REFUSED\n");
            mistri_locks_free(locks);
            return 3;
        }
        uint64_t fence = 0;
        mistri_signal *signal = NULL;
        bool tripped = false;
        char *reason = NULL;
        mistri_hold_fence(hold, &fence);
        mistri_hold_signal(hold, &signal);
        printf("HELD %llu\n", (unsigned long long)fence);
        fflush(stdout);
        if (mistri_signal_wait(signal, 10, &tripped) != MISTRI_OK)
            return fail("wait");
        mistri_signal_reason(signal, &reason);
        printf("%s %s\n", tripped ? "STOPPED" : "TIMEOUT", reason ? reason : "");
        mistri_string_free(reason);
        mistri_release_outcome outcome;
        if (mistri_hold_release(hold, &outcome) != MISTRI_OK)
            return fail("release");
        printf("RELEASED\n");
        mistri_hold_free(hold);
        mistri_signal_free(signal);
        rc = tripped ? 0 : 4;
    } else if (strcmp(cmd, "stop") == 0) {
        if (mistri_locks_held(locks, key, &held) != MISTRI_OK)
            return fail("held");
        printf("HELD? %s\n", held ? "true" : "false");
        if (mistri_locks_set_flag(locks, stop, 30) != MISTRI_OK)
            return fail("set_flag");
        rc = held ? 0 : 5;
    } else if (strcmp(cmd, "info") == 0) {
        mistri_lease_info *info = NULL;
        if (mistri_locks_info(locks, key, &info) != MISTRI_OK)
            return fail("info");
        if (info == NULL) {
            printf("INFO none\n");
        } else {
            const char *label = NULL;
            uint64_t fence = 0;
            if (mistri_lease_info_label(info, &label) != MISTRI_OK ||
                mistri_lease_info_fence(info, &fence) != MISTRI_OK)
                return fail("info getters");
            printf("INFO %llu %s\n", (unsigned long long)fence, label ? label : "(none)");
            mistri_lease_info_free(info);
        }
        rc = 0;
    } else if (strcmp(cmd, "check") == 0) {
        if (mistri_locks_held(locks, key, &held) != MISTRI_OK)
            return fail("held");
        printf("held=%s\n", held ? "true" : "false");
        if (mistri_locks_clear_flag(locks, stop) != MISTRI_OK)
            return fail("clear_flag");
        rc = 0;
    }
    mistri_locks_free(locks);
    return rc;
}
