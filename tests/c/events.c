/*
 * C tests of counters and hold events: mistri_locks_stat (a counter by
 * name), mistri_locks_on_event / mistri_locks_remove_event_hook and the
 * mistri_event getters, on Memory. Callbacks must run on the notifier
 * thread ("mistri-notifier"), never a heartbeat thread.
 *
 *   events
 *
 * Prints one line per case and "C tests: N passed, M failed"; exits
 * non-zero on failure.
 */
#define _GNU_SOURCE

#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENTS 64

/* What a callback saw; guarded by `lock`. */
struct recorder {
    pthread_mutex_t lock;
    int count;
    char kinds[MAX_EVENTS][16];
    char causes[MAX_EVENTS][16];
    char keys[MAX_EVENTS][32];
    uint64_t fences[MAX_EVENTS];
    bool has_reason[MAX_EVENTS];
    bool wrong_thread;
    bool finalized;
};

static void on_event(void *userdata, const mistri_event *event)
{
    struct recorder *r = userdata;
    char name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    const char *kind = NULL, *key = NULL, *reason = NULL, *cause = NULL;
    uint64_t fence = 0;
    bool ok = mistri_event_kind(event, &kind) == MISTRI_OK &&
              mistri_event_key(event, &key) == MISTRI_OK &&
              mistri_event_fence(event, &fence) == MISTRI_OK &&
              mistri_event_reason(event, &reason) == MISTRI_OK &&
              mistri_event_cause(event, &cause) == MISTRI_OK;
    pthread_mutex_lock(&r->lock);
    if (strcmp(name, "mistri-notifier") != 0 || !ok)
        r->wrong_thread = true;
    if (r->count < MAX_EVENTS) {
        int i = r->count++;
        snprintf(r->kinds[i], sizeof r->kinds[i], "%s", kind ? kind : "?");
        snprintf(r->causes[i], sizeof r->causes[i], "%s", cause ? cause : "");
        snprintf(r->keys[i], sizeof r->keys[i], "%s", key ? key : "?");
        r->fences[i] = fence;
        r->has_reason[i] = reason != NULL;
    }
    pthread_mutex_unlock(&r->lock);
}

static void finalize(void *userdata)
{
    struct recorder *r = userdata;
    pthread_mutex_lock(&r->lock);
    r->finalized = true;
    pthread_mutex_unlock(&r->lock);
}

/* Waits up to 5 s for an event of `kind`; its index, or -1. */
static int wait_event(struct recorder *r, const char *kind)
{
    double until = now_s() + 5;
    while (now_s() < until) {
        pthread_mutex_lock(&r->lock);
        for (int i = 0; i < r->count; i++) {
            if (strcmp(r->kinds[i], kind) == 0) {
                pthread_mutex_unlock(&r->lock);
                return i;
            }
        }
        pthread_mutex_unlock(&r->lock);
        sleep_s(0.005);
    }
    return -1;
}

static double stat(const mistri_locks *locks, const char *name)
{
    double v = -1;
    CHECK_OK(mistri_locks_stat(locks, name, &v));
    return v;
}

static mistri_hold *start(const mistri_locks *locks, const char *key, const char *stop_key)
{
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *hold = NULL;
    CHECK_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 0.3));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 0.02));
    if (stop_key)
        CHECK_OK(mistri_hold_options_set_stop_key(opts, stop_key));
    CHECK_OK(mistri_hold_start_with(locks, key, opts, &hold));
    mistri_hold_options_free(opts);
    return hold;
}

static void events_and_counters(const void *arg)
{
    (void)arg;
    struct recorder r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.lock, NULL);
    mistri_locks *locks = NULL, *other = NULL;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    REQUIRE_OK(mistri_locks_new_owner(locks, &other));
    uint64_t handle = 0;
    REQUIRE_OK(mistri_locks_on_event(locks, on_event, &r, finalize, &handle));
    CHECK(isnan(stat(locks, "beat_rtt_p50")));

    /* acquired; renewals counted */
    mistri_hold *hold = start(locks, "job", NULL);
    REQUIRE(hold != NULL);
    int i = wait_event(&r, "acquired");
    CHECK(i >= 0 && strcmp(r.keys[i], "job") == 0 && r.fences[i] > 0);
    CHECK(stat(locks, "holds_active") == 1);
    double until = now_s() + 5;
    while (stat(locks, "renewals_sent") < 2 && now_s() < until)
        sleep_s(0.01);
    CHECK(stat(locks, "renewals_sent") >= 2);
    CHECK(stat(locks, "beats") >= 2);
    CHECK(stat(locks, "beat_rtt_p99") >= stat(locks, "beat_rtt_p50"));

    /* refused (on a hook-less owner: counted only) */
    CHECK(start(other, "job", NULL) == NULL);
    CHECK(stat(other, "holds_refused") == 1);

    /* a broken lease: lost, cause not_held */
    bool broken = false;
    CHECK_OK(mistri_locks_break_lease(other, "job", &broken));
    CHECK(broken);
    i = wait_event(&r, "lost");
    CHECK(i >= 0 && strcmp(r.causes[i], "not_held") == 0 && r.has_reason[i]);
    CHECK(stat(locks, "lost_not_held") == 1);
    CHECK(stat(locks, "lost_deadline") == 0);
    mistri_hold_free(hold);

    /* a stop flag: stopped */
    hold = start(locks, "worker", "stop:worker");
    REQUIRE(hold != NULL);
    CHECK_OK(mistri_locks_set_flag(other, "stop:worker", 5));
    i = wait_event(&r, "stopped");
    CHECK(i >= 0 && strcmp(r.keys[i], "worker") == 0 && r.has_reason[i]);
    CHECK(stat(locks, "stop_flags_seen") == 1);
    mistri_release_outcome outcome;
    CHECK_OK(mistri_hold_release(hold, &outcome));
    CHECK(wait_event(&r, "released") >= 0);
    mistri_hold_free(hold);

    /* removing the hook: finalizer runs, no more events */
    bool removed = false;
    CHECK_OK(mistri_locks_remove_event_hook(locks, handle, &removed));
    CHECK(removed);
    pthread_mutex_lock(&r.lock);
    CHECK(r.finalized);
    int seen = r.count;
    pthread_mutex_unlock(&r.lock);
    hold = start(locks, "after", NULL);
    mistri_hold_free(hold);
    sleep_s(0.1);
    pthread_mutex_lock(&r.lock);
    CHECK(r.count == seen);
    CHECK(!r.wrong_thread);
    pthread_mutex_unlock(&r.lock);
    CHECK_OK(mistri_locks_remove_event_hook(locks, handle, &removed));
    CHECK(!removed);

    mistri_locks_free(other);
    mistri_locks_free(locks);
    pthread_mutex_destroy(&r.lock);
}

static void bad_input_is_a_status(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    double v = 0;
    uint64_t handle = 0;
    CHECK_STATUS(mistri_locks_stat(NULL, "beats", &v), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_stat(locks, NULL, &v), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_stat(locks, "beats", NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_stat(locks, "no_such_counter", &v), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("no_such_counter");
    CHECK_STATUS(mistri_locks_on_event(locks, NULL, NULL, NULL, &handle), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("callback");
    CHECK_STATUS(mistri_locks_on_event(NULL, on_event, NULL, NULL, &handle), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_on_event(locks, on_event, NULL, NULL, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_remove_event_hook(NULL, 1, NULL), MISTRI_NULL_ARGUMENT);
    const char *s = NULL;
    uint64_t fence = 0;
    CHECK_STATUS(mistri_event_kind(NULL, &s), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_event_key(NULL, &s), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_event_fence(NULL, &fence), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_event_reason(NULL, &s), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_event_cause(NULL, &s), MISTRI_NULL_ARGUMENT);
    mistri_locks_free(locks);
}

int main(void)
{
    harness_run("events and counters", "memory", events_and_counters, NULL);
    harness_run("bad input is a status", "memory", bad_input_is_a_status, NULL);
    return harness_summary();
}
