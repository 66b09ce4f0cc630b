/*
 * C tests of holder inspection: mistri_locks_info and the lease-info getters,
 * labels per handle (mistri_locks_set_label) and per hold
 * (mistri_hold_options_set_label), on Memory, on a Local file and on the
 * throwaway redis-server.
 *
 *   info REDIS_URL
 *
 * Prints one line per case and "C tests: N passed, M failed"; exits
 * non-zero on failure.
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *g_url;

/* The backend `name`, or NULL (the failure is recorded by CHECK_OK). */
static mistri_locks *open_backend(const char *name)
{
    mistri_locks *locks = NULL;
    if (strcmp(name, "memory") == 0) {
        CHECK_OK(mistri_locks_memory_new(&locks));
    } else if (strcmp(name, "redis") == 0) {
        char ns[64];
        snprintf(ns, sizeof ns, "mistri:c-info:%ld", (long)getpid());
        CHECK_OK(mistri_locks_redis_new(g_url, ns, &locks));
    } else {
        /* A private folder (ffi/test.sh makes one): /tmp itself is refused. */
        const char *dir = getenv("MISTRI_TEST_LOCAL_DIR");
        char path[512];
        snprintf(path, sizeof path, "%s/info-%ld.db", dir ? dir : ".", (long)getpid());
        CHECK_OK(mistri_locks_local_new(path, &locks));
    }
    return locks;
}

static void info_describes_the_holder(const void *arg)
{
    const char *backend = arg;
    mistri_locks *locks = open_backend(backend);
    REQUIRE(locks != NULL);
    mistri_lease_info *info = (mistri_lease_info *)1;
    CHECK_OK(mistri_locks_info(locks, "nobody-here", &info));
    CHECK(info == NULL); /* no live lease: NULL, not an error */

    /* A plain acquire carries the process default: "host:pid c". */
    bool got = false;
    CHECK_OK(mistri_locks_acquire(locks, "plain", 30, &got));
    CHECK(got);
    CHECK_OK(mistri_locks_info(locks, "plain", &info));
    REQUIRE(info != NULL);
    bool described = false;
    CHECK_OK(mistri_lease_info_described(info, &described));
    CHECK(described);
    const char *label = NULL;
    CHECK_OK(mistri_lease_info_label(info, &label));
    char want[64];
    snprintf(want, sizeof want, ":%ld c", (long)getpid());
    CHECK(label != NULL && strstr(label, want) != NULL);
    uint64_t fence = 0, plain_fence = 0;
    CHECK_OK(mistri_locks_fence(locks, "plain", &plain_fence));
    CHECK_OK(mistri_lease_info_fence(info, &fence));
    CHECK(fence == plain_fence && fence > 0);
    double left = 0, acquired = 0, renewed = 0, ttl = 0, heartbeat = -1;
    CHECK_OK(mistri_lease_info_time_left(info, &left));
    CHECK(left > 25 && left <= 30.001);
    CHECK_OK(mistri_lease_info_times(info, &acquired, &renewed, &ttl, &heartbeat));
    double now = (double)time(NULL);
    CHECK(fabs(acquired - now) < 5 && renewed >= acquired);
    CHECK(fabs(ttl - 30) < 0.01 && heartbeat == 0);
    CHECK_OK(mistri_lease_info_times(info, NULL, NULL, NULL, NULL)); /* none wanted */
    mistri_lease_info_free(info);

    /* A hold with a label of its own, renewing on a heartbeat. */
    mistri_hold_options_builder *opts = NULL;
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 2));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 0.1));
    CHECK_OK(mistri_hold_options_set_label(opts, "nightly report, worker 7"));
    mistri_hold *hold = NULL;
    CHECK_OK(mistri_hold_start_with(locks, "job", opts, &hold));
    REQUIRE(hold != NULL);
    sleep_s(0.35); /* a few renewals */
    CHECK_OK(mistri_locks_info(locks, "job", &info));
    REQUIRE(info != NULL);
    CHECK_OK(mistri_lease_info_label(info, &label));
    CHECK(label != NULL && strcmp(label, "nightly report, worker 7") == 0);
    uint64_t hold_fence = 0;
    CHECK_OK(mistri_hold_fence(hold, &hold_fence));
    CHECK_OK(mistri_lease_info_fence(info, &fence));
    CHECK(fence == hold_fence);
    CHECK_OK(mistri_lease_info_times(info, &acquired, &renewed, &ttl, &heartbeat));
    CHECK(renewed > acquired); /* renewals stamp their time */
    CHECK(fabs(heartbeat - 0.1) < 0.001 && fabs(ttl - 2) < 0.001);
    mistri_lease_info_free(info);
    mistri_hold_release(hold, NULL);
    mistri_hold_free(hold);
    CHECK_OK(mistri_locks_info(locks, "job", &info));
    CHECK(info == NULL); /* released: gone */

    /* A handle's own label; NULL restores the default. */
    CHECK_OK(mistri_locks_set_label(locks, "operator console"));
    CHECK_OK(mistri_locks_acquire(locks, "labelled", 30, &got));
    CHECK_OK(mistri_locks_info(locks, "labelled", &info));
    REQUIRE(info != NULL);
    CHECK_OK(mistri_lease_info_label(info, &label));
    CHECK(label != NULL && strcmp(label, "operator console") == 0);
    mistri_lease_info_free(info);
    CHECK_OK(mistri_locks_set_label(locks, NULL));

    /* Bad input is a status, never a crash. */
    CHECK_STATUS(mistri_locks_info(locks, "", &info), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_locks_info(locks, NULL, &info), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_info(NULL, "job", &info), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_info(locks, "job", NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_set_label(locks, ""), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_locks_set_label(locks, "\xff\xfe"), MISTRI_INVALID_UTF8);
    CHECK_STATUS(mistri_hold_options_set_label(NULL, "x"), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_lease_info_fence(NULL, &fence), MISTRI_NULL_ARGUMENT);
    mistri_lease_info_free(NULL);

    mistri_locks_release(locks, "plain", &got);
    mistri_locks_release(locks, "labelled", &got);
    mistri_hold_options_free(opts);
    mistri_locks_free(locks);
}

/* A job's stop flag, stop-the-holders and the typed interruption: the core's
 * one implementation (issue 40), no reason text read. */
static void stop_and_interruption(const void *arg)
{
    const char *backend = arg;
    mistri_locks *locks = open_backend(backend);
    REQUIRE(locks != NULL);
    char *key = NULL;
    REQUIRE_OK(mistri_job_stop_key("77", &key));
    CHECK(strcmp(key, "job:77:stop") == 0);
    CHECK_STATUS(mistri_job_stop_key("", &key), MISTRI_INVALID_ARGUMENT);

    mistri_hold_options_builder *opts = NULL;
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 5));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 0.05));
    CHECK_OK(mistri_hold_options_set_stop_key(opts, key));
    mistri_hold *hold = NULL;
    CHECK_OK(mistri_hold_start_with(locks, "c-job", opts, &hold));
    REQUIRE(hold != NULL);
    mistri_interruption kind = MISTRI_INTERRUPTION_LOST;
    char *detail = (char *)1;
    CHECK_OK(mistri_hold_interruption(hold, &kind, &detail));
    CHECK(kind == MISTRI_INTERRUPTION_NONE && detail == NULL);

    size_t raised = 99;
    CHECK_OK(mistri_locks_stop_holders(locks, "nobody-holds-this", 60, &raised));
    CHECK(raised == 0);
    CHECK_OK(mistri_locks_stop_holders(locks, "c-job", 60, &raised));
    CHECK(raised == 1);
    mistri_signal *signal = NULL;
    REQUIRE_OK(mistri_hold_signal(hold, &signal));
    bool aborted = false;
    /* The protocol's bound: a tick (50 ms) plus a renewal; 10 s of room. */
    CHECK_OK(mistri_signal_wait(signal, 10, &aborted));
    CHECK(aborted);
    CHECK_OK(mistri_hold_interruption(hold, &kind, &detail));
    CHECK(kind == MISTRI_INTERRUPTION_STOPPED);
    CHECK(detail != NULL && strcmp(detail, "job:77:stop") == 0);
    mistri_string_free(detail);
    CHECK_OK(mistri_hold_interruption(hold, &kind, NULL)); /* no detail wanted */
    CHECK_STATUS(mistri_hold_interruption(hold, NULL, NULL), MISTRI_NULL_ARGUMENT);

    CHECK_OK(mistri_locks_clear_flag(locks, key));
    CHECK_OK(mistri_locks_stop_job(locks, "77", 60));
    bool up = false;
    CHECK_OK(mistri_locks_flag(locks, key, &up));
    CHECK(up);
    CHECK_OK(mistri_locks_clear_flag(locks, key));
    mistri_string_free(key);
    mistri_signal_free(signal);
    CHECK_OK(mistri_hold_release(hold, NULL));
    mistri_hold_free(hold);
    mistri_hold_options_free(opts);
    mistri_locks_free(locks);
}

int main(int argc, char **argv)
{
    g_url = argc > 1 ? argv[1] : getenv("MISTRI_TEST_REDIS_URL");
    if (g_url == NULL || g_url[0] == '\0') {
        fprintf(stderr, "usage: %s REDIS_URL\n", argv[0]);
        return 2;
    }
    static const char *const BACKENDS[] = {"memory", "local", "redis"};
    for (size_t i = 0; i < sizeof BACKENDS / sizeof BACKENDS[0]; i++)
        harness_run("info_describes_the_holder", BACKENDS[i], info_describes_the_holder,
                    BACKENDS[i]);
    for (size_t i = 0; i < sizeof BACKENDS / sizeof BACKENDS[0]; i++)
        harness_run("stop_and_interruption", BACKENDS[i], stop_and_interruption, BACKENDS[i]);
    return harness_summary();
}
