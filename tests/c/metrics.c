/*
 * C tests of mistri_locks_stats_prometheus: the handle's counters as
 * Prometheus text (the same text every face serves), sized like snprintf,
 * accepted by `promtool check metrics`, and NULL arguments refused.
 *
 *   metrics
 *
 * Prints one line per case and "C tests: N passed, M failed"; exits
 * non-zero on failure. Needs promtool (Debian's prometheus package).
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text of `locks`, malloc'd (NULL on failure). */
static char *prometheus_text(const mistri_locks *locks)
{
    size_t needed = 0;
    if (mistri_locks_stats_prometheus(locks, NULL, 0, &needed) != MISTRI_OK || needed < 2)
        return NULL;
    /* Slack: the counters may move between the two calls. */
    size_t len = needed + 256;
    char *text = malloc(len);
    if (text == NULL)
        return NULL;
    if (mistri_locks_stats_prometheus(locks, text, len, &needed) != MISTRI_OK || needed > len) {
        free(text);
        return NULL;
    }
    return text;
}

static void counts_holds_and_passes_promtool(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    mistri_hold_options_builder *opts = NULL;
    REQUIRE_OK(mistri_hold_options_new(&opts));
    CHECK_OK(mistri_hold_options_set_ttl(opts, 10));
    CHECK_OK(mistri_hold_options_set_heartbeat(opts, 1));
    mistri_hold *hold = NULL, *refused = NULL;
    CHECK_OK(mistri_hold_start_with(locks, "report:42", opts, &hold));
    CHECK(hold != NULL);
    CHECK_OK(mistri_hold_start_with(locks, "report:42", opts, &refused));
    CHECK(refused == NULL);

    sleep_s(0.01); /* a moment held: the same text whatever the timing */
    char *text = prometheus_text(locks);
    REQUIRE(text != NULL);
    CHECK(strstr(text, "\nmistri_locks_holds_active 1\n") != NULL);
    CHECK(strstr(text, "mistri_locks_acquisitions_total{outcome=\"acquired\"} 1\n") != NULL);
    CHECK(strstr(text, "mistri_locks_acquisitions_total{outcome=\"refused\"} 1\n") != NULL);
    CHECK(strstr(text, "# TYPE mistri_locks_holds_lost_total counter\n") != NULL);

    FILE *promtool = popen("promtool check metrics", "w");
    REQUIRE(promtool != NULL);
    fputs(text, promtool);
    CHECK(pclose(promtool) == 0);

    /* Too small: `needed` says how much, and the buffer is left alone. */
    char small[8] = "unset";
    size_t needed = 0;
    CHECK_OK(mistri_locks_stats_prometheus(locks, small, sizeof small, &needed));
    CHECK(needed == strlen(text) + 1);
    CHECK(strcmp(small, "unset") == 0);

    free(text);
    mistri_hold_free(hold);
    mistri_hold_options_free(opts);
    mistri_locks_free(locks);
}

static void refuses_null_arguments(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    REQUIRE_OK(mistri_locks_memory_new(&locks));
    size_t needed = 0;
    char buf[16];
    CHECK_STATUS(mistri_locks_stats_prometheus(NULL, buf, sizeof buf, &needed), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_stats_prometheus(locks, buf, sizeof buf, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_stats_prometheus(locks, NULL, 16, &needed), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("buf");
    mistri_locks_free(locks);
}

int main(void)
{
    harness_run("stats_prometheus counts holds and passes promtool", "memory",
                counts_holds_and_passes_promtool, NULL);
    harness_run("stats_prometheus refuses NULL arguments", "memory", refuses_null_arguments, NULL);
    return harness_summary();
}
