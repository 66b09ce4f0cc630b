/*
 * The Cluster and Sentinel URL forms reach C through the core's one URL
 * dispatcher: mistri_locks_redis_new accepts them (connecting lazily), the
 * first operation on an unreachable topology is MISTRI_CONNECTION, and a
 * sentinel URL without a service name is MISTRI_CONFIG. Exits non-zero on
 * failure.
 */
#include "mistri_locks.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

static void expect(bool ok, const char *what) {
  printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) {
    printf("     last error: %s\n", mistri_last_error());
    failures++;
  }
}

static void unreachable(const char *url, const char *says) {
  struct mistri_locks *locks = NULL;
  bool held = false;
  expect(mistri_locks_redis_new(url, "ns", &locks) == MISTRI_OK, url);
  expect(mistri_locks_held(locks, "job", &held) == MISTRI_CONNECTION &&
             strstr(mistri_last_error(), says) != NULL,
         says);
  mistri_locks_free(locks);
}

int main(void) {
  unreachable("redis+cluster://127.0.0.1:1,127.0.0.1:2", "CLUSTER SLOTS");
  unreachable("redis+sentinel://127.0.0.1:1/mymaster/0", "sentinel");
  struct mistri_locks *locks = NULL;
  expect(mistri_locks_redis_new("redis+sentinel://127.0.0.1:1", "ns", &locks) == MISTRI_CONFIG &&
             locks == NULL,
         "a sentinel URL without a service is MISTRI_CONFIG");
  printf("C scale-out tests: %d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
