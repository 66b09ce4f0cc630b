/*
 * A tiny test harness for the C tests of mistri_locks: cases, checks that
 * report file:line with the library's last error, and one summary line
 * ("C tests: N passed, M failed") that the test script looks for.
 */
#ifndef MISTRI_TEST_HARNESS_H
#define MISTRI_TEST_HARNESS_H

#include "mistri_locks.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static int harness_case_failed;
static int harness_passed;
static int harness_failed;

static void harness_fail(const char *file, int line, const char *what, const char *detail)
{
    harness_case_failed = 1;
    fprintf(stderr, "    %s:%d: check failed: %s%s%s\n", file, line, what,
            detail[0] ? " -- " : "", detail);
}

static void harness_fail_status(const char *file, int line, const char *call, mistri_status got,
                                mistri_status want)
{
    char detail[1024];
    snprintf(detail, sizeof detail, "returned %s, wanted %s; last error: %s",
             mistri_status_name((int)got), mistri_status_name((int)want), mistri_last_error());
    harness_fail(file, line, call, detail);
}

/* Soft check: records the failure and goes on. */
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            harness_fail(__FILE__, __LINE__, #cond, "");                                           \
    } while (0)

/* Hard check: records the failure and leaves the test function. */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            harness_fail(__FILE__, __LINE__, #cond, "");                                           \
            return;                                                                                \
        }                                                                                          \
    } while (0)

#define CHECK_STATUS(call, want)                                                                   \
    do {                                                                                           \
        mistri_status got_ = (call);                                                               \
        if (got_ != (want))                                                                        \
            harness_fail_status(__FILE__, __LINE__, #call, got_, (want));                          \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, MISTRI_OK)

#define REQUIRE_OK(call)                                                                           \
    do {                                                                                           \
        mistri_status got_ = (call);                                                               \
        if (got_ != MISTRI_OK) {                                                                   \
            harness_fail_status(__FILE__, __LINE__, #call, got_, MISTRI_OK);                       \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* The last error mentions `needle`. */
#define CHECK_LAST_ERROR_HAS(needle)                                                               \
    do {                                                                                           \
        const char *msg_ = mistri_last_error();                                                    \
        if (strstr(msg_, (needle)) == NULL)                                                        \
            harness_fail(__FILE__, __LINE__, "last error mentions " #needle, msg_);                \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Runs one case and tallies it. */
static void harness_run(const char *name, const char *variant, void (*body)(const void *),
                        const void *arg)
{
    double t0 = now_s();
    harness_case_failed = 0;
    body(arg);
    if (harness_case_failed)
        harness_failed++;
    else
        harness_passed++;
    printf("%s %s [%s] (%.2fs)\n", harness_case_failed ? "FAIL" : "ok  ", name, variant,
           now_s() - t0);
    fflush(stdout);
}

/* Prints the summary line; returns the process exit status. */
static int harness_summary(void)
{
    printf("C tests: %d passed, %d failed\n", harness_passed, harness_failed);
    fflush(stdout);
    return harness_failed == 0 && harness_passed > 0 ? 0 : 1;
}

#endif
