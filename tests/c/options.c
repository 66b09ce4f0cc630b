/*
 * C tests of the hold options builder (mistri_hold_options_new, _set_*,
 * mistri_hold_start_with) and of
 * the wait-timeout rule every face shares.
 *
 *   options REDIS_URL
 *
 * The safety-margin case pauses the throwaway redis-server (CLIENT PAUSE)
 * so that no renewal is confirmed, and checks that a hold with a larger
 * margin is told it lost its lease earlier. Prints one line per case and
 * "C tests: N passed, M failed"; exits non-zero on failure.
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *g_url;

static bool aborted_now(const mistri_signal *s)
{
    bool aborted = false;
    CHECK_OK(mistri_signal_aborted(s, &aborted));
    return aborted;
}

/* Seconds until `s` aborts (checked every millisecond), or -1 after `limit`. */
static double seconds_until_aborted(const mistri_signal *s, double t0, double limit)
{
    while (now_s() - t0 < limit) {
        if (aborted_now(s))
            return now_s() - t0;
        sleep_s(0.001);
    }
    return -1;
}

static bool reason_starts_with(const mistri_signal *s, const char *prefix)
{
    char *reason = NULL;
    CHECK_OK(mistri_signal_reason(s, &reason));
    bool yes = reason != NULL && strncmp(reason, prefix, strlen(prefix)) == 0;
    if (!yes)
        fprintf(stderr, "    reason: %s\n", reason ? reason : "(none)");
    mistri_string_free(reason);
    return yes;
}

/* ------------------------------------------------------------- the builder */

static void builder_options_reach_the_hold(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    mistri_hold_options_builder *opts = NULL;
    mistri_signal *sig = NULL, *got = NULL;
    mistri_hold *hold = NULL, *again = NULL, *other = NULL;
    bool same = false;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    REQUIRE_OK(mistri_signal_new(&sig));
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 0.3));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 0.02));
    char stop_key[] = "stop:builder";
    CHECK_OK(mistri_hold_options_set_stop_key(opts, stop_key));
    stop_key[0] = 'X'; /* the builder copied it */
    CHECK_OK(mistri_hold_options_set_signal(opts, sig));
    REQUIRE_OK(mistri_hold_start_with(locks, "builder", opts, &hold));
    REQUIRE(hold != NULL);
    /* One builder starts more holds; a second hold of a held key is refused. */
    CHECK_OK(mistri_hold_start_with(locks, "builder", opts, &again));
    CHECK(again == NULL);
    REQUIRE_OK(mistri_hold_start_with(locks, "builder-2", opts, &other));
    CHECK(other != NULL);
    mistri_hold_options_free(opts); /* holds do not need it */

    REQUIRE_OK(mistri_hold_signal(hold, &got));
    CHECK_OK(mistri_signal_same(got, sig, &same));
    CHECK(same);
    sleep_s(0.5); /* beyond the ttl of 0.3: renewed on the 0.02 s heartbeat */
    bool held = false;
    CHECK_OK(mistri_locks_held(locks, "builder", &held));
    CHECK(held);
    CHECK(!aborted_now(sig));
    CHECK_OK(mistri_locks_set_flag(locks, "stop:builder", 5));
    double t0 = now_s();
    double took = seconds_until_aborted(sig, t0, 2);
    CHECK(took >= 0 && took < 0.5); /* within a tick of 0.02 s, with slack */
    CHECK(reason_starts_with(sig, "stop"));
    mistri_release_outcome outcome = (mistri_release_outcome)0;
    CHECK_OK(mistri_hold_release(hold, &outcome));
    CHECK(outcome == MISTRI_RELEASE_RELEASED);
    mistri_hold_free(hold);
    mistri_hold_free(other);
    mistri_signal_free(got);
    mistri_signal_free(sig);
    mistri_locks_free(locks);
}

static void builder_bad_values_are_statuses_with_messages(const void *arg)
{
    (void)arg;
    mistri_hold_options_builder *opts = NULL;
    mistri_locks *locks = NULL;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    REQUIRE_OK(mistri_hold_options_new(&opts));
    const double bad[] = {NAN, -1.0, 0.0, -0.0, INFINITY, -INFINITY, 2e9};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(mistri_hold_options_set_ttl(opts, bad[i]), MISTRI_INVALID_ARGUMENT);
        CHECK_LAST_ERROR_HAS("mistri_hold_options_set_ttl: invalid argument: ttl");
        CHECK_STATUS(mistri_hold_options_set_heartbeat(opts, bad[i]), MISTRI_INVALID_ARGUMENT);
        CHECK_LAST_ERROR_HAS("heartbeat");
        CHECK_STATUS(mistri_hold_options_set_safety_margin(opts, bad[i]),
                     MISTRI_INVALID_ARGUMENT);
        CHECK_LAST_ERROR_HAS("mistri_hold_options_set_safety_margin: invalid argument: "
                             "safety_margin");
    }
    CHECK_STATUS(mistri_hold_options_set_stop_key(opts, ""), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("stop_key must not be empty");
    CHECK_STATUS(mistri_hold_options_set_stop_key(opts, "stop:\xff"), MISTRI_INVALID_UTF8);
    CHECK_LAST_ERROR_HAS("stop_key is not valid UTF-8");

    /* A refused value leaves the option as it was: the ttl stays 2, so a
     * margin of 1.5 (not below half of it) is refused when the hold starts,
     * naming the margin, and the out-param is left alone. */
    CHECK_OK(mistri_hold_options_set_ttl(opts, 2));
    CHECK_STATUS(mistri_hold_options_set_ttl(opts, NAN), MISTRI_INVALID_ARGUMENT);
    CHECK_OK(mistri_hold_options_set_safety_margin(opts, 1.5));
    mistri_hold *sentinel = (mistri_hold *)&opts; /* any non-NULL address */
    mistri_hold *hold = sentinel;
    CHECK_STATUS(mistri_hold_start_with(locks, "margin", opts, &hold), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("safety_margin must be less than half the ttl");
    CHECK(hold == sentinel);
    bool held = true;
    CHECK_OK(mistri_locks_held(locks, "margin", &held));
    CHECK(!held); /* refused before acquiring */
    /* Fixing the margin makes the same builder good. */
    CHECK_OK(mistri_hold_options_set_safety_margin(opts, 0.9));
    CHECK_OK(mistri_hold_start_with(locks, "margin", opts, &hold));
    CHECK(hold != NULL && hold != sentinel);
    if (hold != sentinel)
        mistri_hold_free(hold);
    /* A ttl below a hold's minimum (0.01 s) is refused at start too. */
    CHECK_OK(mistri_hold_options_set_ttl(opts, 0.005));
    hold = sentinel;
    CHECK_STATUS(mistri_hold_start_with(locks, "short", opts, &hold), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("at least 0.01");
    CHECK(hold == sentinel);
    mistri_hold_options_free(opts);
    mistri_locks_free(locks);
}

static void null_builder_is_a_status_and_free_null_is_fine(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    mistri_signal *sig = NULL;
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *hold = NULL;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    REQUIRE_OK(mistri_signal_new(&sig));
    CHECK_STATUS(mistri_hold_options_new(NULL), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("mistri_hold_options_new: null argument: out must not be NULL");
    CHECK_STATUS(mistri_hold_options_set_ttl(NULL, 1), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("options must not be NULL");
    CHECK_STATUS(mistri_hold_options_set_heartbeat(NULL, 1), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_options_set_stop_key(NULL, "k"), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_options_set_signal(NULL, sig), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_options_set_safety_margin(NULL, 1), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("mistri_hold_options_set_safety_margin: null argument");
    CHECK_STATUS(mistri_hold_start_with(locks, "k", NULL, &hold), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("mistri_hold_start_with: null argument: options must not be NULL");
    CHECK_STATUS(mistri_hold_start_configured_with("k", NULL, &hold), MISTRI_NULL_ARGUMENT);
    mistri_hold_options_free(NULL);

    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_STATUS(mistri_hold_start_with(NULL, "k", opts, &hold), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("locks must not be NULL");
    CHECK_STATUS(mistri_hold_start_with(locks, NULL, opts, &hold), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("key must not be NULL");
    CHECK_STATUS(mistri_hold_start_with(locks, "k", opts, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("out must not be NULL");
    CHECK_STATUS(mistri_hold_start_with(locks, "", opts, &hold), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_hold_start_with(locks, "\xc3(", opts, &hold), MISTRI_INVALID_UTF8);
    CHECK(hold == NULL);
    /* NULL clears the stop key and the signal: each hold gets a fresh one. */
    CHECK_OK(mistri_hold_options_set_stop_key(opts, NULL));
    CHECK_OK(mistri_hold_options_set_signal(opts, sig));
    CHECK_OK(mistri_hold_options_set_signal(opts, NULL));
    REQUIRE_OK(mistri_hold_start_with(locks, "k", opts, &hold));
    REQUIRE(hold != NULL);
    mistri_signal *got = NULL;
    bool same = true;
    REQUIRE_OK(mistri_hold_signal(hold, &got));
    CHECK_OK(mistri_signal_same(got, sig, &same));
    CHECK(!same);
    mistri_signal_free(got);
    mistri_hold_free(hold);
    mistri_hold_options_free(opts);
    mistri_signal_free(sig);
    mistri_locks_free(locks);
}

static void builder_on_the_configured_handle(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *hold = (mistri_hold *)&opts, *refused = (mistri_hold *)&opts;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 1));
    CHECK_OK(mistri_configure_clear());
    CHECK_OK(mistri_hold_start_configured_with("conf", opts, &hold));
    CHECK(hold == NULL); /* nothing configured: a refusal */
    REQUIRE_OK(mistri_configure(locks));
    CHECK_OK(mistri_hold_start_configured_with("conf", opts, &hold));
    CHECK(hold != NULL);
    CHECK_OK(mistri_hold_start_with(locks, "conf", opts, &refused));
    CHECK(refused == NULL);
    mistri_hold_free(hold);
    CHECK_OK(mistri_configure_clear());
    mistri_hold_options_free(opts);
    mistri_locks_free(locks);
}

/* ------------------------------------------------------- wait timeout rule */

typedef struct aborter {
    mistri_signal *signal;
    double delay;
} aborter;

static void *abort_later(void *arg)
{
    aborter *a = arg;
    sleep_s(a->delay);
    mistri_signal_abort(a->signal, "later", NULL);
    return NULL;
}

static void wait_timeouts_follow_the_one_rule(const void *arg)
{
    (void)arg;
    /* Above 1e9 seconds, and +inf, mean "no timeout": the wait returns only
     * when another thread aborts the signal. */
    const double forever[] = {INFINITY, 2e9, 1e300};
    for (size_t i = 0; i < sizeof forever / sizeof forever[0]; i++) {
        mistri_signal *s = NULL;
        REQUIRE_OK(mistri_signal_new(&s));
        aborter a = {s, 0.1};
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, abort_later, &a) == 0);
        bool aborted = false;
        double t0 = now_s();
        CHECK_OK(mistri_signal_wait(s, forever[i], &aborted));
        CHECK(aborted);
        CHECK(now_s() - t0 >= 0.09);
        pthread_join(t, NULL);
        mistri_signal_free(s);
    }
    mistri_signal *s = NULL;
    REQUIRE_OK(mistri_signal_new(&s));
    bool aborted = true;
    double t0 = now_s();
    CHECK_OK(mistri_signal_wait(s, 0, &aborted)); /* zero: just look */
    CHECK(!aborted && now_s() - t0 < 0.05);
    CHECK_OK(mistri_signal_wait(s, 1e-3, &aborted));
    CHECK(!aborted);
    aborted = true;
    const double bad[] = {NAN, -1e-9, -1.0, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(mistri_signal_wait(s, bad[i], &aborted), MISTRI_INVALID_ARGUMENT);
        CHECK_LAST_ERROR_HAS("mistri_signal_wait: invalid argument: timeout");
    }
    CHECK(aborted); /* untouched on error */
    mistri_signal_free(s);
}

/* -------------------------------------------------- the margin, on Redis */

/* Sends one inline command to the Redis server of g_url; true on "+OK". */
static bool redis_command(const char *command)
{
    char host[64] = "";
    int port = 0;
    if (sscanf(g_url, "redis://%63[^:]:%d", host, &port) != 2)
        return false;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return false;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    char reply[64] = "";
    bool ok = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
              write(fd, command, strlen(command)) == (ssize_t)strlen(command) &&
              read(fd, reply, sizeof reply - 1) > 0 && strncmp(reply, "+OK", 3) == 0;
    close(fd);
    return ok;
}

static void a_larger_safety_margin_tells_the_holder_earlier(const void *arg)
{
    (void)arg;
    char ns[64];
    snprintf(ns, sizeof ns, "mistri:c-options:%ld", (long)getpid());
    mistri_locks *locks = NULL;
    mistri_hold_options_builder *early_opts = NULL, *late_opts = NULL;
    mistri_hold *early = NULL, *late = NULL;
    mistri_signal *early_sig = NULL, *late_sig = NULL;
    REQUIRE_OK(mistri_locks_redis_new(g_url, ns, &locks));
    REQUIRE_OK(mistri_hold_options_new(&early_opts));
    REQUIRE_OK(mistri_hold_options_new(&late_opts));
    /* ttl 2, renewals every 0.2 s: the safe deadline is the send time of
     * the last confirmed renewal (at most 0.2 s before the pause) + 2 s -
     * margin, so margin 0.9 trips 0.9..1.1 s into the pause and margin 0.1
     * trips 1.7..1.9 s into it. */
    CHECK_OK(mistri_hold_options_set_ttl(early_opts, 2));
    CHECK_OK(mistri_hold_options_set_heartbeat(early_opts, 0.2));
    CHECK_OK(mistri_hold_options_set_safety_margin(early_opts, 0.9));
    CHECK_OK(mistri_hold_options_set_ttl(late_opts, 2));
    CHECK_OK(mistri_hold_options_set_heartbeat(late_opts, 0.2));
    CHECK_OK(mistri_hold_options_set_safety_margin(late_opts, 0.1));
    REQUIRE_OK(mistri_hold_start_with(locks, "early", early_opts, &early));
    REQUIRE_OK(mistri_hold_start_with(locks, "late", late_opts, &late));
    REQUIRE(early != NULL && late != NULL);
    REQUIRE_OK(mistri_hold_signal(early, &early_sig));
    REQUIRE_OK(mistri_hold_signal(late, &late_sig));
    sleep_s(0.5); /* a few confirmed renewals */
    CHECK(!aborted_now(early_sig) && !aborted_now(late_sig));

    double t0 = now_s();
    REQUIRE(redis_command("CLIENT PAUSE 3000\r\n"));
    double early_at = seconds_until_aborted(early_sig, t0, 2.8);
    double late_at = seconds_until_aborted(late_sig, t0, 2.8);
    printf("    told after %.3f s (margin 0.9) and %.3f s (margin 0.1)\n", early_at, late_at);
    CHECK(early_at > 0 && late_at > 0);
    CHECK(early_at < 1.5);
    CHECK(late_at > 1.5);
    CHECK(late_at - early_at > 0.4);
    CHECK(reason_starts_with(early_sig, "lease lost"));
    CHECK(reason_starts_with(late_sig, "lease lost"));
    bool lost = false;
    CHECK_OK(mistri_hold_lost(early, &lost));
    CHECK(lost);
    /* Let the pause end before releasing (release is bounded anyway). */
    double left = 3.1 - (now_s() - t0);
    if (left > 0)
        sleep_s(left);
    mistri_hold_free(early);
    mistri_hold_free(late);
    mistri_signal_free(early_sig);
    mistri_signal_free(late_sig);
    mistri_hold_options_free(early_opts);
    mistri_hold_options_free(late_opts);
    mistri_locks_free(locks);
}

typedef struct test_case {
    const char *name;
    void (*body)(const void *);
} test_case;

#define CASE(fn) {#fn, fn}

static const test_case CASES[] = {
    CASE(builder_options_reach_the_hold),
    CASE(builder_bad_values_are_statuses_with_messages),
    CASE(null_builder_is_a_status_and_free_null_is_fine),
    CASE(builder_on_the_configured_handle),
    CASE(wait_timeouts_follow_the_one_rule),
    CASE(a_larger_safety_margin_tells_the_holder_earlier),
};

int main(int argc, char **argv)
{
    g_url = argc > 1 ? argv[1] : getenv("MISTRI_TEST_REDIS_URL");
    if (g_url == NULL || g_url[0] == '\0') {
        fprintf(stderr, "usage: %s REDIS_URL (a throwaway server: the tests pause it)\n",
                argv[0]);
        return 2;
    }
    const char *only = getenv("MISTRI_TEST_ONLY");
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        if (only && !strstr(CASES[i].name, only))
            continue;
        harness_run(CASES[i].name, "options", CASES[i].body, NULL);
    }
    return harness_summary();
}
