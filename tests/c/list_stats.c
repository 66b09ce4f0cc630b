/*
 * C tests of the reads every face shares (issue 22, "the faces agree"):
 * mistri_locks_list and the mistri_listing getters (leases read as
 * mistri_lease_info, flags), mistri_locks_stats (the sized struct of every
 * counter) next to mistri_locks_stat and mistri_stat_name (the by-name
 * form), mistri_locks_active_holds, and the process-wide handle
 * (mistri_configure, mistri_configured, mistri_configure_clear), on
 * Memory, on a Local file and on the throwaway redis-server.
 *
 *   list_stats REDIS_URL
 *
 * Prints one line per case and "C tests: N passed, M failed"; exits
 * non-zero on failure.
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static const char *g_url;
static int g_fixture; /* a fresh namespace or file per case */

/* A fresh backend `name` (its own namespace or file), or NULL (the
 * failure is recorded by CHECK_OK). */
static mistri_locks *open_backend(const char *name)
{
    mistri_locks *locks = NULL;
    g_fixture++;
    if (strcmp(name, "memory") == 0) {
        CHECK_OK(mistri_locks_memory_new(&locks));
    } else if (strcmp(name, "redis") == 0) {
        char ns[64];
        snprintf(ns, sizeof ns, "mistri:c-list:%ld:%d", (long)getpid(), g_fixture);
        CHECK_OK(mistri_locks_redis_new(g_url, ns, &locks));
    } else {
        /* A private folder (ffi/test.sh makes one): /tmp itself is refused. */
        const char *dir = getenv("MISTRI_TEST_LOCAL_DIR");
        char path[512];
        snprintf(path, sizeof path, "%s/list-%ld-%d.db", dir ? dir : ".", (long)getpid(),
                 g_fixture);
        CHECK_OK(mistri_locks_local_new(path, &locks));
    }
    return locks;
}

static mistri_hold *start_hold(const mistri_locks *locks, const char *key, const char *label)
{
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *hold = NULL;
    CHECK_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 2));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 0.05));
    if (label)
        CHECK_OK(mistri_hold_options_set_label(opts, label));
    CHECK_OK(mistri_hold_start_with(locks, key, opts, &hold));
    mistri_hold_options_free(opts);
    return hold;
}

/* The key of lease `i` of `listing`, or "" (the failure is recorded). */
static const char *lease_key(const mistri_listing *listing, size_t i)
{
    const mistri_lease_info *info = NULL;
    const char *key = NULL;
    CHECK_OK(mistri_listing_lease(listing, i, &info));
    if (info == NULL)
        return "";
    CHECK_OK(mistri_lease_info_key(info, &key));
    return key ? key : "";
}

static const char *flag_key(const mistri_listing *listing, size_t i)
{
    const char *key = NULL;
    CHECK_OK(mistri_listing_flag(listing, i, &key, NULL));
    return key ? key : "";
}

static void list_shows_leases_and_flags(const void *arg)
{
    const char *backend = arg;
    mistri_locks *locks = open_backend(backend);
    REQUIRE(locks != NULL);
    mistri_locks *other = NULL;
    REQUIRE_OK(mistri_locks_new_owner(locks, &other));
    mistri_listing *listing = NULL;
    size_t leases = 99, flags = 99;

    /* Nothing yet: an empty listing, not NULL and not an error. */
    REQUIRE_OK(mistri_locks_list(locks, NULL, &listing));
    REQUIRE(listing != NULL);
    CHECK_OK(mistri_listing_lease_count(listing, &leases));
    CHECK_OK(mistri_listing_flag_count(listing, &flags));
    CHECK(leases == 0 && flags == 0);
    mistri_listing_free(listing);

    bool got = false;
    CHECK_OK(mistri_locks_acquire(locks, "jobs:a", 30, &got));
    CHECK(got);
    CHECK_OK(mistri_locks_acquire(other, "other", 30, &got));
    CHECK(got);
    mistri_hold *hold = start_hold(locks, "jobs:b", "lister test, worker 2");
    REQUIRE(hold != NULL);
    /* An N-holder lease with two of its three slots taken. */
    mistri_acquire_options *aopts = NULL;
    REQUIRE_OK(mistri_acquire_options_new(&aopts));
    CHECK_OK(mistri_acquire_options_set_limit(aopts, 3));
    CHECK_OK(mistri_locks_acquire_with(locks, "jobs:pool", 30, aopts, &got));
    CHECK(got);
    CHECK_OK(mistri_locks_acquire_with(other, "jobs:pool", 30, aopts, &got));
    CHECK(got);
    mistri_acquire_options_free(aopts);
    CHECK_OK(mistri_locks_set_flag(other, "jobs:flag", 60));
    CHECK_OK(mistri_locks_set_flag(other, "stop:jobs:a", 60));

    /* A prefix: only the keys that start with it, each list sorted by key. */
    REQUIRE_OK(mistri_locks_list(other, "jobs:", &listing));
    REQUIRE(listing != NULL);
    CHECK_OK(mistri_listing_lease_count(listing, &leases));
    CHECK_OK(mistri_listing_flag_count(listing, &flags));
    CHECK(leases == 3);
    CHECK(flags == 1);
    if (leases == 3) {
        CHECK(strcmp(lease_key(listing, 0), "jobs:a") == 0);
        CHECK(strcmp(lease_key(listing, 1), "jobs:b") == 0);
        CHECK(strcmp(lease_key(listing, 2), "jobs:pool") == 0);

        /* A listed lease reads as mistri_locks_info's would. */
        const mistri_lease_info *info = NULL;
        CHECK_OK(mistri_listing_lease(listing, 0, &info));
        REQUIRE(info != NULL);
        bool described = false;
        uint64_t fence = 0, want_fence = 0;
        double left = 0, acquired = 0, renewed = 0, ttl = 0, heartbeat = -1;
        const char *label = NULL;
        CHECK_OK(mistri_lease_info_described(info, &described));
        CHECK(described);
        CHECK_OK(mistri_lease_info_fence(info, &fence));
        CHECK_OK(mistri_locks_fence(locks, "jobs:a", &want_fence));
        CHECK(fence == want_fence && fence > 0);
        CHECK_OK(mistri_lease_info_time_left(info, &left));
        CHECK(left > 25 && left <= 30.001);
        CHECK_OK(mistri_lease_info_times(info, &acquired, &renewed, &ttl, &heartbeat));
        CHECK(fabs(ttl - 30) < 0.01 && heartbeat == 0);
        CHECK_OK(mistri_lease_info_label(info, &label));
        char want[64];
        snprintf(want, sizeof want, ":%ld c", (long)getpid());
        CHECK(label != NULL && strstr(label, want) != NULL);

        /* The hold's lease: its label, fence and heartbeat. */
        CHECK_OK(mistri_listing_lease(listing, 1, &info));
        REQUIRE(info != NULL);
        CHECK_OK(mistri_lease_info_label(info, &label));
        CHECK(label != NULL && strcmp(label, "lister test, worker 2") == 0);
        CHECK_OK(mistri_hold_fence(hold, &want_fence));
        CHECK_OK(mistri_lease_info_fence(info, &fence));
        CHECK(fence == want_fence);
        CHECK_OK(mistri_lease_info_times(info, NULL, NULL, &ttl, &heartbeat));
        CHECK(fabs(ttl - 2) < 0.001 && fabs(heartbeat - 0.05) < 0.001);

        /* The N-holder lease: its limit and both holders. */
        uint32_t limit = 0;
        size_t holders = 0;
        CHECK_OK(mistri_listing_lease(listing, 2, &info));
        REQUIRE(info != NULL);
        CHECK_OK(mistri_lease_info_limit(info, &limit));
        CHECK(limit == 3);
        CHECK_OK(mistri_lease_info_holder_count(info, &holders));
        CHECK(holders == 2);
    }
    if (flags == 1) {
        const char *key = NULL;
        double left = 0;
        CHECK_OK(mistri_listing_flag(listing, 0, &key, &left));
        CHECK(key != NULL && strcmp(key, "jobs:flag") == 0);
        CHECK(left > 55 && left <= 60.001);
        CHECK_OK(mistri_listing_flag(listing, 0, NULL, NULL)); /* none wanted */
    }

    /* Out of range: a status and a message, the out-param untouched. */
    const mistri_lease_info *untouched = (const mistri_lease_info *)&leases;
    CHECK_STATUS(mistri_listing_lease(listing, leases, &untouched), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("out of range");
    CHECK(untouched == (const mistri_lease_info *)&leases);
    CHECK_STATUS(mistri_listing_flag(listing, flags, NULL, NULL), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("flag index");

    /* A listing is a snapshot: it outlives what it lists. */
    mistri_hold_release(hold, NULL);
    mistri_hold_free(hold);
    hold = NULL;
    CHECK(strcmp(lease_key(listing, 1), "jobs:b") == 0);
    mistri_listing_free(listing);

    /* NULL and "" are the whole namespace (or file); the hold is gone. */
    const char *const prefixes[] = {NULL, ""};
    for (size_t p = 0; p < 2; p++) {
        REQUIRE_OK(mistri_locks_list(locks, prefixes[p], &listing));
        REQUIRE(listing != NULL);
        CHECK_OK(mistri_listing_lease_count(listing, &leases));
        CHECK_OK(mistri_listing_flag_count(listing, &flags));
        CHECK(leases == 3 && flags == 2);
        if (leases == 3) {
            CHECK(strcmp(lease_key(listing, 0), "jobs:a") == 0);
            CHECK(strcmp(lease_key(listing, 1), "jobs:pool") == 0);
            CHECK(strcmp(lease_key(listing, 2), "other") == 0);
        }
        if (flags == 2) {
            CHECK(strcmp(flag_key(listing, 0), "jobs:flag") == 0);
            CHECK(strcmp(flag_key(listing, 1), "stop:jobs:a") == 0);
        }
        mistri_listing_free(listing);
    }

    /* A prefix nothing starts with. */
    REQUIRE_OK(mistri_locks_list(locks, "nothing-here:", &listing));
    CHECK_OK(mistri_listing_lease_count(listing, &leases));
    CHECK_OK(mistri_listing_flag_count(listing, &flags));
    CHECK(leases == 0 && flags == 0);
    mistri_listing_free(listing);

    CHECK_OK(mistri_locks_release(locks, "jobs:a", &got));
    CHECK_OK(mistri_locks_release(locks, "jobs:pool", &got));
    CHECK_OK(mistri_locks_release(other, "jobs:pool", &got));
    CHECK_OK(mistri_locks_release(other, "other", &got));
    CHECK_OK(mistri_locks_clear_flag(other, "jobs:flag"));
    CHECK_OK(mistri_locks_clear_flag(other, "stop:jobs:a"));
    mistri_locks_free(other);
    mistri_locks_free(locks);
}

static void list_rejects_bad_input(const void *arg)
{
    mistri_locks *locks = open_backend(arg);
    REQUIRE(locks != NULL);
    mistri_listing *listing = NULL;
    size_t count = 0;
    const mistri_lease_info *info = NULL;
    const char *key = NULL;
    double left = 0;
    CHECK_STATUS(mistri_locks_list(NULL, "", &listing), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("locks");
    CHECK_STATUS(mistri_locks_list(locks, "", NULL), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("listing");
    CHECK_STATUS(mistri_locks_list(locks, "\xff\xfe", &listing), MISTRI_INVALID_UTF8);
    CHECK_LAST_ERROR_HAS("prefix");
    CHECK(listing == NULL); /* written only on MISTRI_OK */
    CHECK_STATUS(mistri_listing_lease_count(NULL, &count), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_listing_flag_count(NULL, &count), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_listing_lease(NULL, 0, &info), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_listing_flag(NULL, 0, &key, &left), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_lease_info_key(NULL, &key), MISTRI_NULL_ARGUMENT);
    REQUIRE_OK(mistri_locks_list(locks, NULL, &listing));
    CHECK_STATUS(mistri_listing_lease_count(listing, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_listing_flag_count(listing, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_listing_lease(listing, 0, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_listing_lease(listing, 0, &info), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("lease index 0 is out of range");
    mistri_listing_free(listing);
    mistri_listing_free(NULL);
    mistri_locks_free(locks);
}

static void stats_fill_the_struct(const void *arg)
{
    mistri_locks *locks = open_backend(arg);
    REQUIRE(locks != NULL);
    mistri_locks *other = NULL;
    REQUIRE_OK(mistri_locks_new_owner(locks, &other));

    mistri_stats stats = {.size = sizeof stats};
    REQUIRE_OK(mistri_locks_stats(locks, &stats));
    CHECK(stats.size == sizeof stats); /* left alone */
    CHECK(stats.holds_active == 0 && stats.holds_acquired == 0 && stats.beats == 0);
    CHECK(isnan(stats.beat_rtt_p50) && isnan(stats.beat_rtt_p99));

    mistri_hold *hold = start_hold(locks, "job", NULL);
    REQUIRE(hold != NULL);
    double until = now_s() + 5;
    do {
        CHECK_OK(mistri_locks_stats(locks, &stats));
        if (stats.renewals_confirmed >= 2)
            break;
        sleep_s(0.01);
    } while (now_s() < until);
    CHECK(stats.renewals_confirmed >= 2);
    CHECK(stats.renewals_sent >= stats.renewals_confirmed);
    CHECK(stats.holds_active == 1 && stats.holds_acquired == 1);
    CHECK(stats.beats >= 2 && stats.beats_failed == 0);
    CHECK(!isnan(stats.beat_rtt_p50) && stats.beat_rtt_p99 >= stats.beat_rtt_p50);
    CHECK(stats.lost_not_held == 0 && stats.lost_too_late == 0 && stats.lost_deadline == 0);
    CHECK(stats.lost_max_hold == 0 && stats.lost_stalled == 0 && stats.stop_flags_seen == 0);
    size_t active = 99;
    CHECK_OK(mistri_locks_active_holds(locks, &active));
    CHECK(active == 1);

    /* The by-name form reads the same counters. */
    double value = -1;
    CHECK_OK(mistri_locks_stat(locks, "holds_acquired", &value));
    CHECK(value == 1);
    CHECK_OK(mistri_locks_stat(locks, "lost_max_hold", &value));
    CHECK(value == 0);

    /* Another owner: its own counters. */
    CHECK(start_hold(other, "job", NULL) == NULL);
    mistri_stats theirs = {.size = sizeof theirs};
    CHECK_OK(mistri_locks_stats(other, &theirs));
    CHECK(theirs.holds_refused == 1 && theirs.holds_acquired == 0);

    mistri_release_outcome outcome = MISTRI_RELEASE_LOST;
    CHECK_OK(mistri_hold_release(hold, &outcome));
    CHECK(outcome == MISTRI_RELEASE_RELEASED);
    mistri_hold_free(hold);
    CHECK_OK(mistri_locks_stats(locks, &stats));
    CHECK(stats.holds_released == 1 && stats.holds_active == 0);
    CHECK_OK(mistri_locks_active_holds(locks, &active));
    CHECK(active == 0);

    /* A caller built against a newer header (a bigger struct): the fields
     * this library knows are written, the rest is left alone. */
    struct {
        mistri_stats known;
        uint64_t newer;
    } bigger;
    memset(&bigger, 0, sizeof bigger);
    bigger.known.size = sizeof bigger;
    bigger.newer = 0xfeedfacecafebeefu;
    CHECK_OK(mistri_locks_stats(locks, &bigger.known));
    CHECK(bigger.known.holds_released == 1 && bigger.known.size == sizeof bigger);
    CHECK(bigger.newer == 0xfeedfacecafebeefu);

    /* size not set: an error naming it, and nothing written. */
    mistri_stats unset;
    memset(&unset, 0, sizeof unset);
    CHECK_STATUS(mistri_locks_stats(locks, &unset), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("sizeof(mistri_stats)");
    CHECK(unset.holds_released == 0);
    unset.size = offsetof(mistri_stats, pushes_received); /* too small */
    CHECK_STATUS(mistri_locks_stats(locks, &unset), MISTRI_INVALID_ARGUMENT);
    CHECK(unset.holds_released == 0);

    CHECK_STATUS(mistri_locks_stats(NULL, &stats), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("locks");
    CHECK_STATUS(mistri_locks_stats(locks, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("stats");
    CHECK_STATUS(mistri_locks_active_holds(NULL, &active), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_active_holds(locks, NULL), MISTRI_NULL_ARGUMENT);

    mistri_locks_free(other);
    mistri_locks_free(locks);
}

static void stat_names_cover_the_struct(const void *arg)
{
    mistri_locks *locks = open_backend(arg);
    REQUIRE(locks != NULL);
    static const char *const WANT[] = {
        "holds_active",    "holds_acquired", "holds_refused",      "holds_released",
        "renewals_sent",   "renewals_confirmed", "renewals_failed", "renewals_late",
        "beats",           "beats_failed",   "beat_rtt_p50",       "beat_rtt_p99",
        "lost_not_held",   "lost_too_late",  "lost_deadline",      "lost_max_hold",
        "lost_stalled",    "stop_flags_seen", "pushes_received",    "safe_margin_min",
        "settings_checks_failed",
    };
    size_t n = 0;
    const char *name;
    while ((name = mistri_stat_name(n)) != NULL) {
        double value = -1;
        CHECK_OK(mistri_locks_stat(locks, name, &value));
        if (n < sizeof WANT / sizeof WANT[0])
            CHECK(strcmp(name, WANT[n]) == 0);
        n++;
    }
    /* One name per counter field of the struct (all 8 bytes wide). */
    CHECK(n == sizeof WANT / sizeof WANT[0]);
    CHECK(n == (sizeof(mistri_stats) - offsetof(mistri_stats, holds_active)) / 8);
    CHECK(mistri_stat_name((size_t)-1) == NULL);
    double value = 0;
    CHECK_STATUS(mistri_locks_stat(locks, "no_such_counter", &value), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("no_such_counter");
    mistri_locks_free(locks);
}

static void the_configured_handle_is_the_same_owner(const void *arg)
{
    mistri_locks *locks = open_backend(arg);
    REQUIRE(locks != NULL);
    mistri_locks *configured = (mistri_locks *)1;
    CHECK_OK(mistri_configure_clear());
    CHECK_OK(mistri_configured(&configured));
    CHECK(configured == NULL);

    REQUIRE_OK(mistri_configure(locks));
    REQUIRE_OK(mistri_configured(&configured));
    REQUIRE(configured != NULL);

    /* A hold on the process-wide handle is renewed by `locks`' engine and
     * counted in its stats; the listing of either handle shows it. */
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *hold = NULL;
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 2));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 0.05));
    CHECK_OK(mistri_hold_start_configured_with("configured-job", opts, &hold));
    mistri_hold_options_free(opts);
    REQUIRE(hold != NULL);
    size_t active = 0;
    CHECK_OK(mistri_locks_active_holds(locks, &active));
    CHECK(active == 1);
    CHECK_OK(mistri_locks_active_holds(configured, &active));
    CHECK(active == 1);
    mistri_stats stats = {.size = sizeof stats};
    CHECK_OK(mistri_locks_stats(locks, &stats));
    CHECK(stats.holds_acquired == 1 && stats.holds_active == 1);
    mistri_listing *listing = NULL;
    size_t leases = 0;
    REQUIRE_OK(mistri_locks_list(configured, "configured-", &listing));
    CHECK_OK(mistri_listing_lease_count(listing, &leases));
    CHECK(leases == 1);
    if (leases == 1)
        CHECK(strcmp(lease_key(listing, 0), "configured-job") == 0);
    mistri_listing_free(listing);

    mistri_hold_free(hold);
    CHECK_OK(mistri_locks_active_holds(locks, &active));
    CHECK(active == 0);

    /* Cleared: configured holds are refused (NULL), not errors. */
    CHECK_OK(mistri_configure_clear());
    mistri_locks *after = (mistri_locks *)1;
    CHECK_OK(mistri_configured(&after));
    CHECK(after == NULL);
    REQUIRE_OK(mistri_hold_options_new(&opts));
    hold = (mistri_hold *)1;
    CHECK_OK(mistri_hold_start_configured_with("configured-job", opts, &hold));
    CHECK(hold == NULL);
    mistri_hold_options_free(opts);
    CHECK_STATUS(mistri_configure(NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_configured(NULL), MISTRI_NULL_ARGUMENT);

    mistri_locks_free(configured);
    mistri_locks_free(locks);
}

/* Release is bounded by the lease too: the server frozen (SIGSTOP) right
 * after a confirmed renewal, mistri_hold_release returns MISTRI_OK with
 * MISTRI_RELEASE_EXPIRED by the lease's end (ttl 2 s), not after the
 * adapter's 5 s timeout. */
static void release_expires_at_the_lease_end(const void *arg)
{
    (void)arg;
    const char *pid_text = getenv("MISTRI_TEST_REDIS_PID");
    REQUIRE(pid_text != NULL && pid_text[0] != '\0');
    pid_t pid = (pid_t)strtol(pid_text, NULL, 10);
    mistri_locks *locks = open_backend("redis");
    REQUIRE(locks != NULL);
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *hold = NULL;
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 2));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 0.5));
    REQUIRE_OK(mistri_hold_start_with(locks, "expiring", opts, &hold));
    mistri_hold_options_free(opts);
    REQUIRE(hold != NULL);
    mistri_stats stats = {.size = sizeof stats};
    REQUIRE_OK(mistri_locks_stats(locks, &stats));
    uint64_t before = stats.renewals_confirmed;
    double until = now_s() + 3;
    while (stats.renewals_confirmed == before && now_s() < until) {
        sleep_s(0.001);
        CHECK_OK(mistri_locks_stats(locks, &stats));
    }
    REQUIRE(stats.renewals_confirmed > before);
    sleep_s(0.03);
    REQUIRE(kill(pid, SIGSTOP) == 0);
    double start = now_s();
    mistri_release_outcome outcome = MISTRI_RELEASE_LOST;
    mistri_status s = mistri_hold_release(hold, &outcome);
    double took = now_s() - start;
    kill(pid, SIGCONT);
    printf("  release with the server frozen: %.3f s\n", took);
    CHECK_STATUS(s, MISTRI_OK);
    CHECK(outcome == MISTRI_RELEASE_EXPIRED);
    CHECK(took > 1.6 && took < 2.5); /* the old release waited 5 s */
    CHECK_OK(mistri_hold_release(hold, &outcome));
    CHECK(outcome == MISTRI_RELEASE_ALREADY_RELEASED);
    mistri_hold_free(hold);
    mistri_locks_free(locks);
}

struct waiter {
    const mistri_locks *locks;
    bool acquired;
    mistri_status status;
};

/* Waits up to 30 s for "w:job", then releases it. */
static void *wait_for_job(void *arg)
{
    struct waiter *w = arg;
    mistri_acquire_options *opts = NULL;
    w->status = mistri_acquire_options_new(&opts);
    if (w->status == MISTRI_OK)
        w->status = mistri_acquire_options_set_wait(opts, 30);
    if (w->status == MISTRI_OK)
        w->status = mistri_locks_acquire_with(w->locks, "w:job", 30, opts, &w->acquired);
    bool released = false;
    if (w->status == MISTRI_OK && w->acquired)
        w->status = mistri_locks_release(w->locks, "w:job", &released);
    mistri_acquire_options_free(opts);
    return NULL;
}

static double monotonic_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A waiter on a held key: the listing shows its line (key, 1 line, an
 * oldest wait no longer than it has waited) until it has the lease. */
static void list_shows_waiting_lines(const void *arg)
{
    mistri_locks *locks = open_backend(arg);
    REQUIRE(locks != NULL);
    mistri_locks *other = NULL;
    REQUIRE_OK(mistri_locks_new_owner(locks, &other));
    bool acquired = false;
    CHECK_OK(mistri_locks_acquire(locks, "w:job", 30, &acquired));
    CHECK(acquired);
    struct waiter w = {other, false, MISTRI_OK};
    double started = monotonic_s();
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, wait_for_job, &w) == 0);
    size_t count = 0;
    mistri_listing *listing = NULL;
    /* Its first try queues the line: bounded by 20 s on a busy machine. */
    while (monotonic_s() < started + 20) {
        CHECK_OK(mistri_locks_list(locks, "w:", &listing));
        CHECK_OK(mistri_listing_waiting_count(listing, &count));
        if (count > 0)
            break;
        mistri_listing_free(listing);
        listing = NULL;
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    CHECK(count == 1);
    if (listing != NULL && count == 1) {
        const char *key = NULL;
        uint32_t lines = 0;
        double oldest = -1;
        CHECK_OK(mistri_listing_waiting(listing, 0, &key, &lines, &oldest));
        CHECK(key != NULL && strcmp(key, "w:job") == 0);
        CHECK(lines == 1);
        CHECK(oldest >= 0 && oldest <= monotonic_s() - started + 0.002);
        CHECK_OK(mistri_listing_waiting(listing, 0, NULL, NULL, NULL)); /* none wanted */
        CHECK_STATUS(mistri_listing_waiting(listing, 1, &key, NULL, NULL),
                     MISTRI_INVALID_ARGUMENT);
        CHECK_LAST_ERROR_HAS("waiting key index");
    }
    mistri_listing_free(listing);
    bool released = false;
    CHECK_OK(mistri_locks_release(locks, "w:job", &released));
    CHECK(released);
    pthread_join(thread, NULL);
    CHECK(w.status == MISTRI_OK && w.acquired);
    /* It had its turn and left the queue. */
    CHECK_OK(mistri_locks_list(locks, "w:", &listing));
    CHECK_OK(mistri_listing_waiting_count(listing, &count));
    CHECK(count == 0);
    mistri_listing_free(listing);
    mistri_locks_free(other);
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
    for (size_t i = 0; i < sizeof BACKENDS / sizeof BACKENDS[0]; i++) {
        const char *b = BACKENDS[i];
        harness_run("list shows leases and flags", b, list_shows_leases_and_flags, b);
        harness_run("list rejects bad input", b, list_rejects_bad_input, b);
        harness_run("list shows waiting lines", b, list_shows_waiting_lines, b);
        harness_run("stats fill the struct", b, stats_fill_the_struct, b);
        harness_run("stat names cover the struct", b, stat_names_cover_the_struct, b);
        harness_run("the configured handle is the same owner", b,
                    the_configured_handle_is_the_same_owner, b);
    }
    harness_run("release expires at the lease's end", "redis", release_expires_at_the_lease_end,
                NULL);
    return harness_summary();
}
