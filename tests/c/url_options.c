/*
 * C tests of the URL options (issue 39, findings 3 and 15): an option the
 * backend does not know is MISTRI_INVALID_ARGUMENT from the open call,
 * before anything connects (every URL points at a closed port), and
 * mistri_last_error() names the option and the nearest known one, with the
 * password masked. A file:// URL's query is refused the same way and makes
 * no file.
 *
 *   url_options
 *
 * Prints one line per case and "C tests: N passed, M failed"; exits
 * non-zero on failure.
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *const TYPO_URL = "redis://admin:s3cret@127.0.0.1:1/0?min_replica=all";
static const char *const TYPO_SAYS =
    "unknown option \"min_replica\" in redis://admin:***@127.0.0.1:1/0; "
    "did you mean \"min_replicas\"?";

/* Frees a handle an open should not have made (so a failure is one line,
 * not a leak report too). */
static void drop(mistri_locks **locks)
{
    if (*locks != NULL)
        mistri_locks_free(*locks);
    *locks = NULL;
}

static void no_password_in_the_error(void)
{
    const char *msg = mistri_last_error();
    if (strstr(msg, "s3cret") != NULL)
        harness_fail(__FILE__, __LINE__, "the password is masked", msg);
}

static void a_mistyped_redis_option_is_refused_at_open(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    CHECK_STATUS(mistri_locks_open(TYPO_URL, NULL, &locks), MISTRI_INVALID_ARGUMENT);
    CHECK(locks == NULL);
    CHECK_LAST_ERROR_HAS(TYPO_SAYS);
    no_password_in_the_error();
    drop(&locks);

    CHECK_STATUS(mistri_locks_redis_new(TYPO_URL, "ns", &locks), MISTRI_INVALID_ARGUMENT);
    CHECK(locks == NULL);
    CHECK_LAST_ERROR_HAS(TYPO_SAYS);
    no_password_in_the_error();
    drop(&locks);

    CHECK_STATUS(mistri_locks_open("redis://127.0.0.1:1/0?MIN_REPLICAS=all", NULL, &locks),
                 MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("did you mean \"min_replicas\"?");
    drop(&locks);
    CHECK_STATUS(mistri_locks_open("redis+cluster://127.0.0.1:1?timeout=abc", NULL, &locks),
                 MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("unknown option \"timeout\"");
    CHECK_LAST_ERROR_HAS("takes: min_replicas, replica_timeout, eviction, settings_check");
    CHECK(locks == NULL);
    drop(&locks);
}

static void the_known_options_open(const void *arg)
{
    (void)arg;
    /* Redis connects on first use: a closed port opens. */
    mistri_locks *locks = NULL;
    REQUIRE_OK(mistri_locks_open(
        "redis://127.0.0.1:1/0?min_replicas=all&replica_timeout=0.25&eviction=accept", NULL,
        &locks));
    CHECK(locks != NULL);
    mistri_locks_free(locks);
}

static void postgres_refuses_the_same_way(const void *arg)
{
    (void)arg;
    mistri_locks *locks = NULL;
    CHECK_STATUS(
        mistri_locks_postgres_new("postgres://u:s3cret@127.0.0.1:1/db?sslmod=require", "ns", &locks),
        MISTRI_INVALID_ARGUMENT);
    CHECK(locks == NULL);
    CHECK_LAST_ERROR_HAS(
        "unknown option \"sslmod\" in postgres://u:***@127.0.0.1:1/db; did you mean \"sslmode\"?");
    no_password_in_the_error();
    drop(&locks);
}

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

static void a_file_url_query_is_refused(const void *arg)
{
    (void)arg;
    char dir[] = "/tmp/mistri-c-url-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char url[256];
    snprintf(url, sizeof url, "file://%s/x.db?mode=ro", dir);
    mistri_locks *locks = NULL;
    CHECK_STATUS(mistri_locks_local_new(url, &locks), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("unknown option \"mode\"");
    CHECK_LAST_ERROR_HAS("file:// takes no options");
    drop(&locks);
    CHECK_STATUS(mistri_locks_open(url, NULL, &locks), MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("unknown option \"mode\"");
    CHECK(locks == NULL);
    drop(&locks);
    CHECK(entries(dir) == 0);
    rmdir(dir);
}

int main(void)
{
    (void)sleep_s; /* the harness's, unused here */
    harness_run("a_mistyped_redis_option_is_refused_at_open", "redis",
                a_mistyped_redis_option_is_refused_at_open, NULL);
    harness_run("the_known_options_open", "redis", the_known_options_open, NULL);
    harness_run("postgres_refuses_the_same_way", "postgres", postgres_refuses_the_same_way, NULL);
    harness_run("a_file_url_query_is_refused", "local", a_file_url_query_is_refused, NULL);
    return harness_summary();
}
