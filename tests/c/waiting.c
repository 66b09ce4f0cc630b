/*
 * C tests of issue 14's options: waiting acquires and holds
 * (mistri_acquire_options_*, mistri_locks_acquire_with,
 * mistri_hold_options_set_wait), interrupting a waiter by aborting its
 * signal from another thread, the hung-holder guard (set_max_hold,
 * set_progress_timeout, mistri_hold_touch), and their argument checks.
 *
 *   waiting [REDIS_URL]
 *
 * Memory always; with a URL, the waiting acquire and hold also on Redis.
 * Prints one line per case and "C tests: N passed, M failed"; exits
 * non-zero on failure.
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *g_url;

/* Makes the handle a case runs on: Memory (arg NULL) or Redis (arg a URL). */
static mistri_status make_locks(const void *arg, mistri_locks **out)
{
    if (arg == NULL)
        return mistri_locks_memory_new(out);
    char ns[64];
    snprintf(ns, sizeof ns, "mistri:c-waiting:%ld:%f", (long)getpid(), now_s());
    return mistri_locks_redis_new((const char *)arg, ns, out);
}

/* ------------------------------------------------------ helper threads */

struct later {
    double after;
    mistri_locks *locks; /* release `key` on it ... */
    const char *key;
    mistri_hold *hold;     /* ... or release this hold ... */
    mistri_signal *signal; /* ... or abort this signal */
};

static void *do_later(void *p)
{
    struct later *l = p;
    sleep_s(l->after);
    bool released = false;
    mistri_release_outcome outcome;
    if (l->locks)
        mistri_locks_release(l->locks, l->key, &released);
    if (l->hold)
        mistri_hold_release(l->hold, &outcome);
    bool tripped = false;
    if (l->signal)
        mistri_signal_abort(l->signal, "enough", &tripped);
    return NULL;
}

/* ----------------------------------------------------------------- cases */

static void acquire_waits_for_a_release(const void *arg)
{
    mistri_locks *holder = NULL, *waiter = NULL;
    mistri_acquire_options *opts = NULL;
    bool got = false;
    REQUIRE_OK(make_locks(arg, &holder));
    REQUIRE_OK(mistri_locks_new_owner(holder, &waiter));
    REQUIRE_OK(mistri_acquire_options_new(&opts));
    CHECK_OK(mistri_locks_acquire(holder, "job", 30, &got));
    CHECK(got);
    CHECK_OK(mistri_acquire_options_set_wait(opts, 20));
    struct later l = {.after = 0.3, .locks = holder, .key = "job"};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, do_later, &l) == 0);
    double t0 = now_s();
    got = false;
    CHECK_OK(mistri_locks_acquire_with(waiter, "job", 30, opts, &got));
    double took = now_s() - t0;
    pthread_join(t, NULL);
    CHECK(got);
    CHECK(took >= 0.2 && took < 10);
    CHECK_OK(mistri_locks_release(waiter, "job", &got));
    CHECK(got);
    mistri_acquire_options_free(opts);
    mistri_locks_free(waiter);
    mistri_locks_free(holder);
}

static void acquire_is_refused_at_the_end_of_its_wait(const void *arg)
{
    (void)arg;
    mistri_locks *holder = NULL, *waiter = NULL;
    mistri_acquire_options *opts = NULL;
    bool got = false;
    REQUIRE_OK(mistri_locks_memory_new(&holder));
    REQUIRE_OK(mistri_locks_new_owner(holder, &waiter));
    REQUIRE_OK(mistri_acquire_options_new(&opts));
    /* NULL options: exactly mistri_locks_acquire. */
    CHECK_OK(mistri_locks_acquire_with(holder, "job", 30, NULL, &got));
    CHECK(got);
    CHECK_OK(mistri_acquire_options_set_wait(opts, 0));
    double t0 = now_s();
    got = true;
    CHECK_OK(mistri_locks_acquire_with(waiter, "job", 30, opts, &got));
    CHECK(!got);
    CHECK(now_s() - t0 < 1);
    CHECK_OK(mistri_acquire_options_set_wait(opts, 0.3));
    t0 = now_s();
    got = true;
    CHECK_OK(mistri_locks_acquire_with(waiter, "job", 30, opts, &got));
    double took = now_s() - t0;
    CHECK(!got);
    CHECK(took >= 0.25 && took < 5);
    mistri_acquire_options_free(opts);
    mistri_locks_free(waiter);
    mistri_locks_free(holder);
}

static void aborting_the_signal_interrupts_a_waiter(const void *arg)
{
    (void)arg;
    mistri_locks *holder = NULL, *waiter = NULL;
    mistri_acquire_options *opts = NULL;
    mistri_hold_options_builder *hopts = NULL;
    mistri_signal *sig = NULL, *hsig = NULL;
    mistri_hold *hold = NULL;
    bool got = false;
    REQUIRE_OK(mistri_locks_memory_new(&holder));
    REQUIRE_OK(mistri_locks_new_owner(holder, &waiter));
    REQUIRE_OK(mistri_signal_new(&sig));
    REQUIRE_OK(mistri_signal_new(&hsig));
    REQUIRE_OK(mistri_acquire_options_new(&opts));
    REQUIRE_OK(mistri_hold_options_new(&hopts));
    CHECK_OK(mistri_locks_acquire(holder, "job", 30, &got));
    CHECK_OK(mistri_acquire_options_set_wait(opts, INFINITY));
    CHECK_OK(mistri_acquire_options_set_signal(opts, sig));
    struct later l = {.after = 0.3, .signal = sig};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, do_later, &l) == 0);
    double t0 = now_s();
    got = true;
    CHECK_OK(mistri_locks_acquire_with(waiter, "job", 30, opts, &got));
    double took = now_s() - t0;
    pthread_join(t, NULL);
    CHECK(!got);
    CHECK(took >= 0.2 && took < 5);
    /* A waiting hold: its own signal ends the wait (a NULL hold). */
    CHECK_OK(mistri_hold_options_set_wait(hopts, 600));
    CHECK_OK(mistri_hold_options_set_signal(hopts, hsig));
    struct later h = {.after = 0.3, .signal = hsig};
    REQUIRE(pthread_create(&t, NULL, do_later, &h) == 0);
    t0 = now_s();
    CHECK_OK(mistri_hold_start_with(waiter, "job", hopts, &hold));
    took = now_s() - t0;
    pthread_join(t, NULL);
    CHECK(hold == NULL);
    CHECK(took >= 0.2 && took < 5);
    mistri_hold_free(hold);
    mistri_hold_options_free(hopts);
    mistri_acquire_options_free(opts);
    mistri_signal_free(hsig);
    mistri_signal_free(sig);
    mistri_locks_free(waiter);
    mistri_locks_free(holder);
}

static void hold_waits_for_a_release(const void *arg)
{
    mistri_locks *locks = NULL;
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *first = NULL, *second = NULL;
    REQUIRE_OK(make_locks(arg, &locks));
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 30));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 1));
    REQUIRE_OK(mistri_hold_start_with(locks, "job", opts, &first));
    REQUIRE(first != NULL);
    /* Refused at the end of a short wait. */
    CHECK_OK(mistri_hold_options_set_wait(opts, 0.3));
    double t0 = now_s();
    CHECK_OK(mistri_hold_start_with(locks, "job", opts, &second));
    CHECK(second == NULL);
    CHECK(now_s() - t0 >= 0.25);
    /* Gets it when the holder releases. */
    CHECK_OK(mistri_hold_options_set_wait(opts, INFINITY));
    struct later l = {.after = 0.3, .hold = first};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, do_later, &l) == 0);
    t0 = now_s();
    CHECK_OK(mistri_hold_start_with(locks, "job", opts, &second));
    double took = now_s() - t0;
    pthread_join(t, NULL);
    CHECK(second != NULL);
    CHECK(took >= 0.2 && took < 10);
    uint64_t f1 = 0, f2 = 0;
    CHECK_OK(mistri_hold_fence(first, &f1));
    if (second) {
        CHECK_OK(mistri_hold_fence(second, &f2));
        CHECK(f2 > f1);
    }
    mistri_hold_free(second);
    mistri_hold_free(first);
    mistri_hold_options_free(opts);
    mistri_locks_free(locks);
}

static void slots_share_a_lease(const void *arg)
{
    mistri_locks *owners[4] = {NULL, NULL, NULL, NULL};
    mistri_acquire_options *opts = NULL;
    mistri_lease_info *info = NULL;
    REQUIRE_OK(make_locks(arg, &owners[0]));
    for (int i = 1; i < 4; i++)
        REQUIRE_OK(mistri_locks_new_owner(owners[0], &owners[i]));
    REQUIRE_OK(mistri_acquire_options_new(&opts));
    CHECK_OK(mistri_acquire_options_set_limit(opts, 3));
    bool got[4] = {false, false, false, true};
    for (int i = 0; i < 4; i++)
        CHECK_OK(mistri_locks_acquire_with(owners[i], "pool", 30, opts, &got[i]));
    CHECK(got[0] && got[1] && got[2] && !got[3]);
    REQUIRE_OK(mistri_locks_info(owners[0], "pool", &info));
    REQUIRE(info != NULL);
    uint32_t limit = 0;
    size_t count = 0;
    bool described = true;
    CHECK_OK(mistri_lease_info_limit(info, &limit));
    CHECK(limit == 3);
    CHECK_OK(mistri_lease_info_holder_count(info, &count));
    CHECK(count == 3);
    CHECK_OK(mistri_lease_info_described(info, &described));
    CHECK(!described); /* an N-holder lease: read its holders one by one */
    uint64_t fences[3] = {0, 0, 0};
    for (size_t i = 0; i < count && i < 3; i++) {
        const char *label = NULL;
        double acquired = 0;
        CHECK_OK(mistri_lease_info_holder(info, i, &label, &fences[i], &acquired, NULL));
        CHECK(label != NULL && strstr(label, " c") != NULL);
        CHECK(acquired > 1e9);
    }
    CHECK(fences[0] < fences[1] && fences[1] < fences[2]);
    const char *label = NULL;
    CHECK_STATUS(mistri_lease_info_holder(info, 3, &label, NULL, NULL, NULL),
                 MISTRI_INVALID_ARGUMENT);
    CHECK(label == NULL);
    mistri_lease_info_free(info);
    /* A freed slot goes to a waiter. */
    CHECK_OK(mistri_acquire_options_set_wait(opts, 20));
    bool released = false;
    CHECK_OK(mistri_locks_release(owners[0], "pool", &released));
    CHECK(released);
    CHECK_OK(mistri_locks_acquire_with(owners[3], "pool", 30, opts, &got[3]));
    CHECK(got[3]);
    mistri_acquire_options_free(opts);
    for (int i = 0; i < 4; i++)
        mistri_locks_free(owners[i]);
}

static bool reason_has(mistri_hold *hold, const char *needle)
{
    mistri_signal *sig = NULL;
    char *reason = NULL;
    if (mistri_hold_signal(hold, &sig) != MISTRI_OK)
        return false;
    mistri_signal_reason(sig, &reason);
    bool yes = reason != NULL && strstr(reason, needle) != NULL;
    if (!yes)
        fprintf(stderr, "    reason: %s\n", reason ? reason : "(none)");
    mistri_string_free(reason);
    mistri_signal_free(sig);
    return yes;
}

static void the_guard_stops_hung_holders(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *capped = NULL, *stalled = NULL;
    mistri_signal *sig = NULL;
    bool aborted = false, lost = false;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 0.6));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 0.1));
    CHECK_OK(mistri_hold_options_set_max_hold(opts, 1.2));
    REQUIRE_OK(mistri_hold_start_with(locks, "capped", opts, &capped));
    REQUIRE(capped != NULL);
    REQUIRE_OK(mistri_hold_signal(capped, &sig));
    sleep_s(0.8); /* renewed past its first ttl */
    CHECK_OK(mistri_signal_aborted(sig, &aborted));
    CHECK(!aborted);
    CHECK_OK(mistri_signal_wait(sig, 10, &aborted));
    CHECK(aborted);
    CHECK(reason_has(capped, "max_hold"));
    CHECK_OK(mistri_hold_lost(capped, &lost));
    CHECK(lost);
    mistri_signal_free(sig);
    sig = NULL;

    mistri_hold_options_free(opts);
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 3));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 0.1));
    CHECK_OK(mistri_hold_options_set_progress_timeout(opts, 0.3));
    REQUIRE_OK(mistri_hold_start_with(locks, "stalled", opts, &stalled));
    REQUIRE(stalled != NULL);
    REQUIRE_OK(mistri_hold_signal(stalled, &sig));
    double until = now_s() + 0.9;
    while (now_s() < until) {
        CHECK_OK(mistri_hold_touch(stalled));
        sleep_s(0.05);
    }
    CHECK_OK(mistri_signal_aborted(sig, &aborted));
    CHECK(!aborted);
    CHECK_OK(mistri_signal_wait(sig, 10, &aborted));
    CHECK(aborted);
    CHECK(reason_has(stalled, "stalled"));
    mistri_signal_free(sig);
    mistri_hold_free(stalled);
    mistri_hold_free(capped);
    mistri_hold_options_free(opts);
    mistri_locks_free(locks);
}

static void bad_arguments_are_refused(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    mistri_acquire_options *opts = NULL;
    mistri_hold_options_builder *hopts = NULL;
    bool got = false;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    REQUIRE_OK(mistri_acquire_options_new(&opts));
    REQUIRE_OK(mistri_hold_options_new(&hopts));
    CHECK_STATUS(mistri_acquire_options_set_wait(opts, -1), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("wait");
    CHECK_STATUS(mistri_acquire_options_set_wait(opts, NAN), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_acquire_options_set_limit(opts, 0), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("limit");
    CHECK_STATUS(mistri_acquire_options_set_limit(opts, MISTRI_MAX_LIMIT + 1),
                 MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_hold_options_set_wait(hopts, -1), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_hold_options_set_limit(hopts, 0), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_hold_options_set_max_hold(hopts, 0), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("max_hold");
    CHECK_STATUS(mistri_hold_options_set_max_hold(hopts, INFINITY), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_hold_options_set_progress_timeout(hopts, -1), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("progress_timeout");
    CHECK_STATUS(mistri_hold_options_set_progress_timeout(hopts, NAN), MISTRI_INVALID_ARGUMENT);
    /* A bad value left the options as they were: one try, acquired. */
    CHECK_OK(mistri_locks_acquire_with(locks, "k", 5, opts, &got));
    CHECK(got);
    /* NULL handles and out-params are statuses, not crashes. */
    CHECK_STATUS(mistri_acquire_options_new(NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_acquire_options_set_wait(NULL, 1), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_acquire_options_set_limit(NULL, 1), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_acquire_options_set_signal(NULL, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_acquire_with(NULL, "k", 5, opts, &got), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_acquire_with(locks, NULL, 5, opts, &got), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_acquire_with(locks, "k", 5, opts, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_acquire_with(locks, "k", NAN, opts, &got),
                 MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_hold_touch(NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_options_set_wait(NULL, 1), MISTRI_NULL_ARGUMENT);
    mistri_acquire_options_free(NULL);
    mistri_hold_options_free(hopts);
    mistri_acquire_options_free(opts);
    mistri_locks_free(locks);
}

static const struct {
    const char *name;
    void (*body)(const void *);
    bool both; /* also on Redis */
} CASES[] = {
    {"acquire_waits_for_a_release", acquire_waits_for_a_release, true},
    {"acquire_is_refused_at_the_end_of_its_wait", acquire_is_refused_at_the_end_of_its_wait, false},
    {"aborting_the_signal_interrupts_a_waiter", aborting_the_signal_interrupts_a_waiter, false},
    {"hold_waits_for_a_release", hold_waits_for_a_release, true},
    {"slots_share_a_lease", slots_share_a_lease, true},
    {"the_guard_stops_hung_holders", the_guard_stops_hung_holders, false},
    {"bad_arguments_are_refused", bad_arguments_are_refused, false},
};

int main(int argc, char **argv)
{
    g_url = argc > 1 ? argv[1] : getenv("MISTRI_TEST_REDIS_URL");
    const char *only = getenv("MISTRI_TEST_ONLY");
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        if (only && !strstr(CASES[i].name, only))
            continue;
        harness_run(CASES[i].name, "memory", CASES[i].body, NULL);
        if (CASES[i].both && g_url && g_url[0])
            harness_run(CASES[i].name, "redis", CASES[i].body, g_url);
    }
    return harness_summary();
}
