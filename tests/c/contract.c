/*
 * The C contract tests of mistri_locks, against the committed header and
 * the built library.
 *
 *   contract [REDIS_URL [POSTGRES_URL [MYSQL_URL]]]
 *
 * Runs, once per backend in BACKENDS (Memory, Redis at REDIS_URL or
 * $MISTRI_TEST_REDIS_URL, Local in $MISTRI_TEST_LOCAL_DIR, Postgres at
 * POSTGRES_URL or $MISTRI_TEST_POSTGRES_URL, MySQL/MariaDB at MYSQL_URL or
 * $MISTRI_TEST_MYSQL_URL): every case of
 * tests/contract/cases.txt (shared with the Rust, Python and Ruby suites;
 * $MISTRI_CONTRACT_CASES overrides the path), then the cases only C can
 * state (NULL and non-UTF-8 arguments, C callbacks and their threads, fork,
 * two processes); then the backend-independent tests (signals, callbacks,
 * bad input). Prints one line per case and "C tests: N passed, M failed";
 * exits non-zero on failure. $MISTRI_TEST_ONLY runs the cases whose name
 * contains it.
 *
 * A backend is a pair of factories (a first owner on a fresh backend,
 * another owner on the same backend): adding one is one line in BACKENDS.
 *
 * The two-process test re-executes this program as a holder:
 *   contract --holder BACKEND PARAM NAMESPACE KEY STOP_KEY
 */
#define _POSIX_C_SOURCE 200809L

#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ---------------------------------------------------------------- backends */

typedef struct backend {
    const char *name;
    const char *param; /* Redis, Postgres: the URL; Local: a folder; Memory: unused */
    bool cross_process;
    /* A first owner on a fresh backend (a fresh namespace on Redis). */
    mistri_status (*open)(const struct backend *b, const char *ns, mistri_locks **out);
    /* Another owner on the same backend, as another process would be. */
    mistri_status (*owner)(const struct backend *b, const char *ns, const mistri_locks *first,
                           mistri_locks **out);
} backend;

static mistri_status memory_open(const backend *b, const char *ns, mistri_locks **out)
{
    (void)b;
    (void)ns;
    return mistri_locks_memory_new(out);
}

static mistri_status memory_owner(const backend *b, const char *ns, const mistri_locks *first,
                                  mistri_locks **out)
{
    (void)b;
    (void)ns;
    return mistri_locks_new_owner(first, out);
}

static mistri_status redis_open(const backend *b, const char *ns, mistri_locks **out)
{
    return mistri_locks_redis_new(b->param, ns, out);
}

static mistri_status redis_owner(const backend *b, const char *ns, const mistri_locks *first,
                                 mistri_locks **out)
{
    (void)first; /* a separate handle: its own connections too */
    return mistri_locks_redis_new(b->param, ns, out);
}

/* Postgres: a fresh namespace per fixture in one database, as on Redis. */
static mistri_status postgres_open(const backend *b, const char *ns, mistri_locks **out)
{
    return mistri_locks_postgres_new(b->param, ns, out);
}

static mistri_status postgres_owner(const backend *b, const char *ns, const mistri_locks *first,
                                    mistri_locks **out)
{
    (void)first; /* a separate handle: its own connections too */
    return mistri_locks_postgres_new(b->param, ns, out);
}

/* MySQL/MariaDB: a fresh namespace per fixture in one database, opened by
 * its mysql:// URL through mistri_locks_open (no constructor of its own). */
static mistri_status mysql_open(const backend *b, const char *ns, mistri_locks **out)
{
    mistri_open_options *o = NULL;
    mistri_status s = mistri_open_options_new(&o);
    if (s == MISTRI_OK)
        s = mistri_open_options_set_namespace(o, ns);
    if (s == MISTRI_OK)
        s = mistri_locks_open(b->param, o, out);
    mistri_open_options_free(o);
    return s;
}

static mistri_status mysql_owner(const backend *b, const char *ns, const mistri_locks *first,
                                 mistri_locks **out)
{
    (void)first; /* a separate handle: its own connections too */
    return mysql_open(b, ns, out);
}

/* Local: one database file per fixture, named after its namespace, in the
 * folder given as the backend's param. */
static mistri_status local_open(const backend *b, const char *ns, mistri_locks **out)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.db", b->param, ns);
    for (char *c = path + strlen(b->param) + 1; *c; c++)
        if (*c == ':')
            *c = '-';
    return mistri_locks_local_new(path, out);
}

static mistri_status local_owner(const backend *b, const char *ns, const mistri_locks *first,
                                 mistri_locks **out)
{
    (void)first; /* a separate handle on the same file */
    return local_open(b, ns, out);
}

static backend BACKENDS[] = {
    {"memory", NULL, false, memory_open, memory_owner},
    {"redis", NULL /* URL, from argv */, true, redis_open, redis_owner},
    {"local", NULL /* a folder, from MISTRI_TEST_LOCAL_DIR */, true, local_open, local_owner},
    {"postgres", NULL /* URL, from argv */, true, postgres_open, postgres_owner},
    {"mysql", NULL /* URL, from argv */, true, mysql_open, mysql_owner},
};
#define N_BACKENDS (sizeof BACKENDS / sizeof BACKENDS[0])

/* ---------------------------------------------------------------- fixture */

#define MAX_OWNERS 16

typedef struct fixture {
    const backend *b;
    char ns[128];
    mistri_locks *first;
    mistri_locks *owners[MAX_OWNERS];
    int n_owners;
} fixture;

static int fixture_counter;

static bool fixture_open(fixture *f, const backend *b)
{
    memset(f, 0, sizeof *f);
    f->b = b;
    snprintf(f->ns, sizeof f->ns, "mistri:ctest:%ld:%d", (long)getpid(), ++fixture_counter);
    mistri_status s = b->open(b, f->ns, &f->first);
    if (s != MISTRI_OK) {
        harness_fail_status(__FILE__, __LINE__, "backend open", s, MISTRI_OK);
        return false;
    }
    return true;
}

/* Another owner on the fixture's backend, freed by fixture_close. */
static mistri_locks *fixture_owner(fixture *f)
{
    mistri_locks *o = NULL;
    mistri_status s = f->b->owner(f->b, f->ns, f->first, &o);
    if (s != MISTRI_OK || f->n_owners == MAX_OWNERS) {
        harness_fail_status(__FILE__, __LINE__, "backend owner", s, MISTRI_OK);
        mistri_locks_free(o);
        return NULL;
    }
    f->owners[f->n_owners++] = o;
    return o;
}

static void fixture_close(fixture *f)
{
    for (int i = 0; i < f->n_owners; i++)
        mistri_locks_free(f->owners[i]);
    mistri_locks_free(f->first);
    memset(f, 0, sizeof *f);
}

#define OPEN_FIXTURE(f, arg)                                                                       \
    fixture f;                                                                                     \
    if (!fixture_open(&f, (const backend *)(arg)))                                                 \
        return;

/* Small wrappers that make the tests read like the contract. */
static bool acquire(const mistri_locks *l, const char *key, double ttl)
{
    bool got = false;
    CHECK_OK(mistri_locks_acquire(l, key, ttl, &got));
    return got;
}

static bool release(const mistri_locks *l, const char *key)
{
    bool got = false;
    CHECK_OK(mistri_locks_release(l, key, &got));
    return got;
}

static bool held(const mistri_locks *l, const char *key)
{
    bool got = false;
    CHECK_OK(mistri_locks_held(l, key, &got));
    return got;
}

/* A hold's options as this test's steps name them, started through the
 * builder (mistri_hold_options_new, _set_*, mistri_hold_start_with). */
typedef struct {
    double ttl;
    double heartbeat;
    const char *stop_key;
    const mistri_signal *signal;
} hold_opts;

static hold_opts hold_opts_default(void)
{
    hold_opts o = {MISTRI_LEASE_TTL, MISTRI_HEARTBEAT, NULL, NULL};
    return o;
}

/* mistri_hold_start_with (configured: _configured_with) with *o (NULL:
 * the defaults); the first failing setter's status, else the start's. */
static mistri_status hold_begin_on(const mistri_locks *l, bool configured, const char *key,
                                   const hold_opts *o, mistri_hold **out)
{
    hold_opts d = hold_opts_default();
    if (o == NULL)
        o = &d;
    mistri_hold_options_builder *b = NULL;
    mistri_status s = mistri_hold_options_new(&b);
    if (s != MISTRI_OK)
        return s;
    if ((s = mistri_hold_options_set_ttl(b, o->ttl)) == MISTRI_OK &&
        (s = mistri_hold_options_set_heartbeat(b, o->heartbeat)) == MISTRI_OK &&
        (o->stop_key == NULL || (s = mistri_hold_options_set_stop_key(b, o->stop_key)) == MISTRI_OK) &&
        (o->signal == NULL || (s = mistri_hold_options_set_signal(b, o->signal)) == MISTRI_OK))
        s = configured ? mistri_hold_start_configured_with(key, b, out) : mistri_hold_start_with(l, key, b, out);
    mistri_hold_options_free(b);
    return s;
}

static mistri_status hold_begin(const mistri_locks *l, const char *key, const hold_opts *o, mistri_hold **out)
{
    return hold_begin_on(l, false, key, o, out);
}

static mistri_status hold_begin_configured(const char *key, const hold_opts *o, mistri_hold **out)
{
    return hold_begin_on(NULL, true, key, o, out);
}

static hold_opts opts(double ttl, double heartbeat)
{
    hold_opts o = hold_opts_default();
    o.ttl = ttl;
    o.heartbeat = heartbeat;
    return o;
}

static mistri_hold *start(const mistri_locks *l, const char *key, hold_opts o)
{
    mistri_hold *h = NULL;
    CHECK_OK(hold_begin(l, key, &o, &h));
    return h;
}

static bool hold_lost(const mistri_hold *h)
{
    bool lost = true;
    CHECK_OK(mistri_hold_lost(h, &lost));
    return lost;
}

static mistri_release_outcome hold_release(mistri_hold *h)
{
    mistri_release_outcome outcome = (mistri_release_outcome)0;
    CHECK_OK(mistri_hold_release(h, &outcome));
    return outcome;
}

/* Copies a signal's reason into buf ("" if none). */
static const char *reason_of(const mistri_signal *s, char *buf, size_t len)
{
    char *reason = NULL;
    buf[0] = '\0';
    CHECK_OK(mistri_signal_reason(s, &reason));
    if (reason) {
        snprintf(buf, len, "%s", reason);
        mistri_string_free(reason);
    }
    return buf;
}

static bool wait_for(const mistri_signal *s, double timeout)
{
    bool aborted = false;
    CHECK_OK(mistri_signal_wait(s, timeout, &aborted));
    return aborted;
}

/* ------------------------------------------------- callback bookkeeping */

typedef struct probe {
    atomic_int calls;
    atomic_int finalized;
    atomic_llong called_at_ns; /* CLOCK_MONOTONIC of the first call */
    atomic_int on_caller_thread;
    pthread_t caller;
    char reason[256];
    char thread_name[17]; /* of the thread that ran the first call */
} probe;

static void probe_init(probe *p)
{
    memset(p, 0, sizeof *p);
    atomic_init(&p->calls, 0);
    atomic_init(&p->finalized, 0);
    atomic_init(&p->called_at_ns, 0);
    atomic_init(&p->on_caller_thread, 0);
    p->caller = pthread_self();
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void probe_callback(void *userdata, const char *reason)
{
    probe *p = userdata;
    snprintf(p->reason, sizeof p->reason, "%s", reason ? reason : "(null)");
    atomic_store(&p->on_caller_thread, pthread_equal(pthread_self(), p->caller) ? 1 : 0);
    if (prctl(PR_GET_NAME, p->thread_name, 0, 0, 0) != 0)
        p->thread_name[0] = '\0';
    atomic_store(&p->called_at_ns, now_ns());
    atomic_fetch_add(&p->calls, 1);
}

static void probe_finalizer(void *userdata)
{
    probe *p = userdata;
    atomic_fetch_add(&p->finalized, 1);
}

/* Waits up to `timeout` s for an atomic counter to reach `want`. */
static bool await_count(atomic_int *counter, int want, double timeout)
{
    double end = now_s() + timeout;
    while (atomic_load(counter) < want) {
        if (now_s() > end)
            return false;
        sleep_s(0.001);
    }
    return true;
}

/* ============================================ the contract, from the data
 *
 * The cases of tests/contract/cases.txt (format: tests/contract/README.md),
 * shared with the Rust, Python and Ruby suites. */

#define MAX_LINES 2048
#define MAX_CASES 128
#define MAX_WORDS 24
#define MAX_NAMES 16

typedef struct data_case {
    const char *name;
    int first, end; /* its steps: lines[first..end) */
} data_case;

static char *g_cases_text;
static const char *g_cases_path;
static char *g_lines[MAX_LINES];
static int g_n_lines;
static data_case g_cases[MAX_CASES];
static int g_n_cases;

/* Splits `s` in place into words: spaces separate, quotes group (and may
 * make an empty word), `#` starts a comment. Returns the count, -1 if more
 * than `max`. */
static int split_words(char *s, char **w, int max)
{
    int n = 0;
    char *r = s, *o = s;
    for (;;) {
        while (*r == ' ' || *r == '\t' || *r == '\r' || *r == '\n')
            r++;
        if (*r == '\0' || *r == '#')
            return n;
        if (n == max)
            return -1;
        w[n++] = o;
        bool quoted = false;
        while (*r && (quoted || !(*r == ' ' || *r == '\t' || *r == '\r' || *r == '\n'))) {
            if (*r == '"')
                quoted = !quoted;
            else
                *o++ = *r;
            r++;
        }
        bool end = *r == '\0';
        *o++ = '\0';
        if (end)
            return n;
        r++;
    }
}

/* Reads the cases file: $MISTRI_CONTRACT_CASES, else ../contract/cases.txt
 * next to this source file. */
static bool load_cases(void)
{
    static char path[1024];
    const char *env = getenv("MISTRI_CONTRACT_CASES");
    if (env && env[0]) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        const char *slash = strrchr(__FILE__, '/');
        int dir = slash ? (int)(slash - __FILE__) : 1;
        snprintf(path, sizeof path, "%.*s/../contract/cases.txt", dir, slash ? __FILE__ : ".");
    }
    g_cases_path = path;
    FILE *in = fopen(path, "rb");
    if (in == NULL) {
        fprintf(stderr, "cannot read the contract cases %s\n", path);
        return false;
    }
    size_t cap = 1 << 16, len = 0;
    g_cases_text = malloc(cap);
    size_t got;
    while (g_cases_text && (got = fread(g_cases_text + len, 1, cap - len - 1, in)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *bigger = realloc(g_cases_text, cap *= 2);
            if (bigger == NULL)
                free(g_cases_text);
            g_cases_text = bigger;
        }
    }
    fclose(in);
    if (g_cases_text == NULL)
        return false;
    g_cases_text[len] = '\0';
    for (char *line = g_cases_text; line && *line && g_n_lines < MAX_LINES;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        g_lines[g_n_lines++] = line;
        line = nl ? nl + 1 : NULL;
    }
    for (int i = 0; i < g_n_lines; i++) {
        char copy[1024], *w[2];
        snprintf(copy, sizeof copy, "%s", g_lines[i]);
        if (split_words(copy, w, 2) == 2 && strcmp(w[0], "case") == 0 && g_n_cases < MAX_CASES) {
            if (g_n_cases > 0)
                g_cases[g_n_cases - 1].end = i;
            /* the name, in place in the file's text */
            char *name = strstr(g_lines[i], w[1]);
            name[strlen(w[1])] = '\0';
            g_cases[g_n_cases++] = (data_case){name, i + 1, g_n_lines};
        }
    }
    return g_n_cases > 0;
}

typedef struct named {
    char name[32];
    void *handle;
} named;

/* One case's world: its owners, holds, signals, the fences it saw. */
typedef struct run {
    fixture *f;
    named owners[MAX_NAMES], holds[MAX_NAMES], signals[MAX_NAMES];
    int n_owners, n_holds, n_signals;
    char fence_keys[MAX_NAMES][64];
    uint64_t fences[MAX_NAMES];
    int n_fences;
    double mark;
    bool configured;
    const char *where; /* "cases.txt:LINE: the step", for messages */
    int line;
} run;

static void step_fail(run *r, const char *detail)
{
    harness_fail(g_cases_path, r->line, r->where, detail);
}

static named *lookup(named *list, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(list[i].name, name) == 0)
            return &list[i];
    return NULL;
}

static mistri_locks *run_owner(run *r, const char *name)
{
    named *o = lookup(r->owners, r->n_owners, name);
    if (o)
        return o->handle;
    if (r->n_owners == MAX_NAMES)
        return NULL;
    o = &r->owners[r->n_owners++];
    snprintf(o->name, sizeof o->name, "%s", name);
    o->handle = strcmp(name, "A") == 0 ? r->f->first : fixture_owner(r->f);
    return o->handle;
}

static mistri_hold *run_hold(run *r, const char *name)
{
    named *h = lookup(r->holds, r->n_holds, name);
    return h ? h->handle : NULL;
}

/* A new handle on a named signal, or on a hold's signal; free it. */
static mistri_signal *run_signal(run *r, const char *name)
{
    mistri_signal *out = NULL;
    named *s = lookup(r->signals, r->n_signals, name);
    if (s)
        mistri_signal_clone(s->handle, &out);
    else if (run_hold(r, name))
        mistri_hold_signal(run_hold(r, name), &out);
    return out;
}

static void expect_bool(run *r, bool got, const char *want)
{
    if (want && strcmp(want, got ? "true" : "false") != 0)
        step_fail(r, got ? "got true" : "got false");
}

/* greater: above the last fence seen for key (then recorded); same: equal
 * to it; none: no lease (fence 0). */
static void expect_fence(run *r, const char *key, uint64_t got, const char *want)
{
    int i = 0;
    while (i < r->n_fences && strcmp(r->fence_keys[i], key) != 0)
        i++;
    if (i == r->n_fences && r->n_fences < MAX_NAMES) {
        snprintf(r->fence_keys[i], sizeof r->fence_keys[i], "%s", key);
        r->fences[r->n_fences++] = 0;
    }
    uint64_t last = r->fences[i];
    bool ok = want == NULL || (strcmp(want, "none") == 0 && got == 0) ||
              (strcmp(want, "same") == 0 && got != 0 && got == last) ||
              (strcmp(want, "greater") == 0 && got > last);
    if (want && strcmp(want, "greater") == 0)
        r->fences[i] = got;
    if (!ok) {
        char detail[96];
        snprintf(detail, sizeof detail, "fence %llu, the last one %llu", (unsigned long long)got,
                 (unsigned long long)last);
        step_fail(r, detail);
    }
}

/* Hold options from name=value words; *sig is a handle to free after. */
static bool hold_options(run *r, char **w, int n, hold_opts *o, mistri_signal **sig)
{
    *o = hold_opts_default();
    *sig = NULL;
    for (int i = 0; i < n; i++) {
        char *eq = strchr(w[i], '=');
        if (eq == NULL)
            return false;
        *eq = '\0';
        const char *value = eq + 1;
        if (strcmp(w[i], "ttl") == 0)
            o->ttl = strtod(value, NULL);
        else if (strcmp(w[i], "heartbeat") == 0)
            o->heartbeat = strtod(value, NULL);
        else if (strcmp(w[i], "stop") == 0)
            o->stop_key = value;
        else if (strcmp(w[i], "signal") == 0 && *sig == NULL)
            o->signal = *sig = run_signal(r, value);
        else
            return false;
    }
    return true;
}

static void bind_hold(run *r, mistri_hold *h, const char *want)
{
    if (want == NULL || strcmp(want, "none") == 0) {
        if (want && h != NULL)
            step_fail(r, "got a hold, wanted none");
        mistri_hold_free(h);
        return;
    }
    if (h == NULL) {
        step_fail(r, "refused, wanted a hold");
        return;
    }
    named *slot = lookup(r->holds, r->n_holds, want);
    if (slot == NULL && r->n_holds < MAX_NAMES) {
        slot = &r->holds[r->n_holds++];
        snprintf(slot->name, sizeof slot->name, "%s", want);
        slot->handle = NULL;
    }
    if (slot == NULL) {
        mistri_hold_free(h);
        return;
    }
    mistri_hold_free(slot->handle);
    slot->handle = h;
}

static const char *outcome_name(mistri_release_outcome o)
{
    switch (o) {
    case MISTRI_RELEASE_RELEASED:
        return "released";
    case MISTRI_RELEASE_NOT_HELD:
        return "not_held";
    case MISTRI_RELEASE_LOST:
        return "lost";
    case MISTRI_RELEASE_ALREADY_RELEASED:
        return "already_released";
    case MISTRI_RELEASE_OTHER_PROCESS:
        return "other_process";
    case MISTRI_RELEASE_EXPIRED:
        return "expired";
    }
    return "?";
}

/* Runs one step (words w[0..n), expectation `want` or NULL: `want2` is the
 * word after it). Returns the library's status; checks run only on OK. */
static mistri_status run_step(run *r, char **w, int n, const char *want, const char *want2)
{
    const char *op = w[0];
    bool b = false;
    mistri_status s = MISTRI_OK;
#define ARGS(k)                                                                                    \
    do {                                                                                           \
        if (n < (k)) {                                                                             \
            step_fail(r, "too few words");                                                         \
            return MISTRI_OK;                                                                      \
        }                                                                                          \
    } while (0)
#define LIB(call)                                                                                  \
    do {                                                                                           \
        s = (call);                                                                                \
        if (s != MISTRI_OK)                                                                        \
            return s;                                                                              \
    } while (0)
    if (strcmp(op, "acquire") == 0 || strcmp(op, "renew") == 0) {
        ARGS(4);
        mistri_locks *o = run_owner(r, w[1]);
        double ttl = strtod(w[3], NULL);
        LIB(op[0] == 'a' ? mistri_locks_acquire(o, w[2], ttl, &b)
                         : mistri_locks_renew(o, w[2], ttl, &b));
        expect_bool(r, b, want);
    } else if (strcmp(op, "release") == 0 || strcmp(op, "held") == 0 ||
               strcmp(op, "flag") == 0 || strcmp(op, "break_lease") == 0) {
        ARGS(3);
        mistri_locks *o = run_owner(r, w[1]);
        LIB(op[0] == 'r'   ? mistri_locks_release(o, w[2], &b)
            : op[0] == 'h' ? mistri_locks_held(o, w[2], &b)
            : op[0] == 'f' ? mistri_locks_flag(o, w[2], &b)
                           : mistri_locks_break_lease(o, w[2], &b));
        expect_bool(r, b, want);
    } else if (strcmp(op, "set_flag") == 0) {
        ARGS(3);
        LIB(mistri_locks_set_flag(run_owner(r, w[1]), w[2],
                                  n > 3 ? strtod(w[3], NULL) : MISTRI_FLAG_TTL));
    } else if (strcmp(op, "clear_flag") == 0) {
        ARGS(3);
        LIB(mistri_locks_clear_flag(run_owner(r, w[1]), w[2]));
    } else if (strcmp(op, "fence") == 0) {
        ARGS(3);
        uint64_t fence = 0;
        LIB(mistri_locks_fence(run_owner(r, w[1]), w[2], &fence));
        expect_fence(r, w[2], fence, want);
    } else if (strcmp(op, "hold") == 0 || strcmp(op, "hold_configured") == 0) {
        bool configured = op[4] == '_';
        int first_opt = configured ? 2 : 3;
        ARGS(first_opt);
        hold_opts o;
        mistri_signal *sig = NULL;
        mistri_hold *h = NULL;
        if (!hold_options(r, w + first_opt, n - first_opt, &o, &sig)) {
            step_fail(r, "bad hold option");
            mistri_signal_free(sig);
            return MISTRI_OK;
        }
        s = configured ? hold_begin_configured(w[1], &o, &h)
                       : hold_begin(run_owner(r, w[1]), w[2], &o, &h);
        mistri_signal_free(sig);
        if (s != MISTRI_OK)
            return s;
        bind_hold(r, h, want);
    } else if (strcmp(op, "configure") == 0) {
        ARGS(2);
        if (strcmp(w[1], "none") == 0) {
            LIB(mistri_configure_clear());
        } else {
            LIB(mistri_configure(run_owner(r, w[1])));
            r->configured = true;
        }
    } else if (strncmp(op, "hold.", 5) == 0) {
        ARGS(2);
        mistri_hold *h = run_hold(r, w[1]);
        if (h == NULL) {
            step_fail(r, "no such hold");
            return MISTRI_OK;
        }
        if (strcmp(op, "hold.release") == 0) {
            mistri_release_outcome out = (mistri_release_outcome)0;
            LIB(mistri_hold_release(h, &out));
            if (want && strcmp(want, outcome_name(out)) != 0)
                step_fail(r, outcome_name(out));
        } else if (strcmp(op, "hold.lost") == 0) {
            LIB(mistri_hold_lost(h, &b));
            expect_bool(r, b, want);
        } else if (strcmp(op, "hold.fence") == 0) {
            uint64_t fence = 0;
            const char *key = NULL;
            LIB(mistri_hold_fence(h, &fence));
            LIB(mistri_hold_key(h, &key));
            expect_fence(r, key, fence, want);
        } else if (strcmp(op, "hold.key") == 0) {
            const char *key = NULL;
            LIB(mistri_hold_key(h, &key));
            if (want && strcmp(want, key) != 0)
                step_fail(r, key);
        } else {
            step_fail(r, "unknown step");
        }
    } else if (strcmp(op, "signal") == 0) {
        ARGS(2);
        mistri_signal *sig = NULL;
        LIB(mistri_signal_new(&sig));
        if (r->n_signals == MAX_NAMES) {
            mistri_signal_free(sig);
            step_fail(r, "too many signals");
            return MISTRI_OK;
        }
        named *slot = &r->signals[r->n_signals++];
        snprintf(slot->name, sizeof slot->name, "%s", w[1]);
        slot->handle = sig;
    } else if (strcmp(op, "abort") == 0 || strcmp(op, "aborted") == 0 ||
               strcmp(op, "wait") == 0 || strcmp(op, "reason") == 0 ||
               strcmp(op, "same_signal") == 0) {
        ARGS(op[0] == 'r' ? 4 : op[0] == 'a' ? 2 : 3);
        bool same_signal = op[0] == 's';
        mistri_signal *sig = run_signal(r, w[same_signal ? 2 : 1]);
        if (sig == NULL) {
            step_fail(r, "no such signal");
            return MISTRI_OK;
        }
        char buf[256];
        if (strcmp(op, "abort") == 0) {
            s = mistri_signal_abort(sig, n > 2 ? w[2] : NULL, NULL);
        } else if (strcmp(op, "aborted") == 0) {
            s = mistri_signal_aborted(sig, &b);
        } else if (strcmp(op, "wait") == 0) {
            s = mistri_signal_wait(sig, strtod(w[2], NULL), &b);
        } else if (strcmp(op, "reason") == 0) {
            if (strstr(reason_of(sig, buf, sizeof buf), w[3]) == NULL)
                step_fail(r, buf[0] ? buf : "no reason");
        } else {
            mistri_signal *of_hold = NULL;
            s = run_hold(r, w[1]) ? mistri_hold_signal(run_hold(r, w[1]), &of_hold)
                                  : MISTRI_NULL_ARGUMENT;
            if (s == MISTRI_OK)
                s = mistri_signal_same(of_hold, sig, &b);
            mistri_signal_free(of_hold);
        }
        mistri_signal_free(sig);
        if (s != MISTRI_OK)
            return s;
        if (strcmp(op, "aborted") == 0 || strcmp(op, "wait") == 0 || same_signal)
            expect_bool(r, b, want);
    } else if (strcmp(op, "sleep") == 0) {
        ARGS(2);
        sleep_s(strtod(w[1], NULL));
    } else if (strcmp(op, "mark") == 0) {
        r->mark = now_s();
    } else if (strcmp(op, "elapsed") == 0) {
        ARGS(3);
        double took = now_s() - r->mark;
        if (took > strtod(w[2], NULL)) {
            char detail[64];
            snprintf(detail, sizeof detail, "%.3f s", took);
            step_fail(r, detail);
        }
    } else if (strcmp(op, "error") == 0) {
        ARGS(2);
        if (want == NULL || want2 == NULL || strcmp(want, "InvalidArgument") != 0) {
            step_fail(r, "error steps name InvalidArgument and a text");
            return MISTRI_OK;
        }
        mistri_status got = run_step(r, w + 1, n - 1, NULL, NULL);
        if (got != MISTRI_INVALID_ARGUMENT) {
            char detail[256];
            snprintf(detail, sizeof detail, "returned %s, wanted MISTRI_INVALID_ARGUMENT",
                     mistri_status_name((int)got));
            step_fail(r, detail);
        } else if (strstr(mistri_last_error(), want2) == NULL) {
            step_fail(r, mistri_last_error());
        }
    } else {
        step_fail(r, "unknown step");
    }
#undef ARGS
#undef LIB
    return MISTRI_OK;
}

typedef struct data_run {
    const backend *b;
    const data_case *c;
} data_run;

static void run_data_case(const void *arg)
{
    const data_run *d = arg;
    OPEN_FIXTURE(f, d->b);
    run r;
    memset(&r, 0, sizeof r);
    r.f = &f;
    r.mark = now_s();
    for (int i = d->c->first; i < d->c->end && !harness_case_failed; i++) {
        char buf[1024], text[1024], *w[MAX_WORDS];
        snprintf(buf, sizeof buf, "%s", g_lines[i]);
        int n = split_words(buf, w, MAX_WORDS);
        if (n == 0)
            continue;
        snprintf(text, sizeof text, "%s", g_lines[i]);
        r.where = text;
        r.line = i + 1;
        if (n < 0) {
            step_fail(&r, "too many words");
            break;
        }
        int arrow = 0;
        while (arrow < n && strcmp(w[arrow], "->") != 0)
            arrow++;
        mistri_status s = run_step(&r, w, arrow, arrow + 1 < n ? w[arrow + 1] : NULL,
                                   arrow + 2 < n ? w[arrow + 2] : NULL);
        if (s != MISTRI_OK) {
            char detail[1024];
            snprintf(detail, sizeof detail, "returned %s: %s", mistri_status_name((int)s),
                     mistri_last_error());
            step_fail(&r, detail);
        }
    }
    if (r.configured)
        mistri_configure_clear();
    for (int i = 0; i < r.n_holds; i++)
        mistri_hold_free(r.holds[i].handle);
    for (int i = 0; i < r.n_signals; i++)
        mistri_signal_free(r.signals[i].handle);
    fixture_close(&f);
}

/* ======================================== what only the C face can say */

static void freeing_a_hold_releases_it(const void *arg)
{
    OPEN_FIXTURE(f, arg);
    const mistri_locks *a = f.first;
    mistri_hold *h = start(a, "scoped", opts(5, 1));
    REQUIRE(h != NULL);
    CHECK(held(a, "scoped"));
    size_t active = 0;
    CHECK_OK(mistri_locks_active_holds(a, &active));
    CHECK(active == 1);
    mistri_hold_free(h);
    CHECK(!held(a, "scoped"));
    CHECK_OK(mistri_locks_active_holds(a, &active));
    CHECK(active == 0);
    /* a refused hold is NULL, not an error, and counts nowhere */
    h = start(a, "one", opts(5, 1));
    REQUIRE(h != NULL);
    const mistri_locks *b = fixture_owner(&f);
    static char sentinel;
    mistri_hold *refused = (mistri_hold *)(void *)&sentinel;
    hold_opts o = opts(5, 1);
    CHECK_OK(hold_begin(b, "one", &o, &refused));
    CHECK(refused == NULL);
    active = 99;
    CHECK_OK(mistri_locks_active_holds(b, &active));
    CHECK(active == 0);
    mistri_hold_free(h);
    fixture_close(&f);
}

/* The C callback of a stopped hold runs once, on the library's notifier
 * thread (never the heartbeat's), then its finalizer; the signal handle
 * outlives the hold. */
static void c_callbacks_of_a_stopped_hold_run_on_the_notifier_thread(const void *arg)
{
    OPEN_FIXTURE(f, arg);
    const mistri_locks *a = f.first, *b = fixture_owner(&f);
    mistri_signal *sig = NULL;
    REQUIRE_OK(mistri_signal_new(&sig));
    probe p;
    probe_init(&p);
    uint64_t handle = 0;
    CHECK_OK(mistri_signal_on_abort(sig, probe_callback, &p, probe_finalizer, &handle));
    hold_opts o = opts(2, 0.1);
    o.stop_key = "stop:worker";
    o.signal = sig;
    mistri_hold *h = start(a, "worker", o);
    REQUIRE(h != NULL);
    CHECK_OK(mistri_locks_set_flag(b, "stop:worker", 30));
    CHECK(wait_for(sig, 1.0));
    CHECK(await_count(&p.calls, 1, 1.0));
    CHECK(await_count(&p.finalized, 1, 1.0));
    CHECK(atomic_load(&p.on_caller_thread) == 0);
    CHECK(strcmp(p.thread_name, "mistri-notifier") == 0);
    CHECK(strstr(p.reason, "stop:worker") != NULL);
    mistri_signal *of_hold = NULL;
    CHECK_OK(mistri_hold_signal(h, &of_hold));
    mistri_hold_free(h);
    bool aborted = false; /* the signal handle outlives the hold */
    CHECK_OK(mistri_signal_aborted(of_hold, &aborted));
    CHECK(aborted);
    mistri_signal_free(of_hold);
    mistri_signal_free(sig);
    CHECK(atomic_load(&p.calls) == 1 && atomic_load(&p.finalized) == 1);
    fixture_close(&f);
}

/* A callback may release the hold that tripped it, on the heartbeat thread. */
typedef struct self_release {
    mistri_hold *hold;
    atomic_int done;
    mistri_status status;
    mistri_release_outcome outcome;
} self_release;

static void release_from_callback(void *userdata, const char *reason)
{
    self_release *r = userdata;
    (void)reason;
    r->status = mistri_hold_release(r->hold, &r->outcome);
    atomic_store(&r->done, 1);
}

static void a_callback_may_release_its_hold_from_the_notifier_thread(const void *arg)
{
    OPEN_FIXTURE(f, arg);
    const mistri_locks *a = f.first, *b = fixture_owner(&f);
    hold_opts o = opts(2, 0.05);
    o.stop_key = "stop:self";
    mistri_hold *h = start(a, "self", o);
    REQUIRE(h != NULL);
    self_release r;
    memset(&r, 0, sizeof r);
    r.hold = h;
    atomic_init(&r.done, 0);
    mistri_signal *sig = NULL;
    CHECK_OK(mistri_hold_signal(h, &sig));
    uint64_t handle = 0;
    CHECK_OK(mistri_signal_on_abort(sig, release_from_callback, &r, NULL, &handle));
    CHECK_OK(mistri_locks_set_flag(b, "stop:self", 30));
    CHECK(await_count(&r.done, 1, 2.0)); /* no deadlock */
    CHECK(r.status == MISTRI_OK && r.outcome == MISTRI_RELEASE_RELEASED);
    CHECK(!held(b, "self"));
    mistri_hold_free(h);
    mistri_signal_free(sig);
    fixture_close(&f);
}

/* Contending threads: never two holders at once. */
#define THREADS 6
#define WINS_EACH 3

typedef struct contender {
    const mistri_locks *locks;
    atomic_int *inside;
    atomic_int *overlaps;
    atomic_int *go;
    int wins, refusals, errors;
} contender;

static void *contend(void *arg)
{
    contender *c = arg;
    while (!atomic_load(c->go)) {
    }
    double end = now_s() + 20;
    while (c->wins < WINS_EACH && now_s() < end) {
        mistri_hold *h = NULL;
        hold_opts o = opts(5, 1);
        if (hold_begin(c->locks, "contended", &o, &h) != MISTRI_OK) {
            c->errors++;
            continue;
        }
        if (h == NULL) {
            c->refusals++;
            continue;
        }
        if (atomic_fetch_add(c->inside, 1) != 0)
            atomic_fetch_add(c->overlaps, 1);
        sleep_s(0.003); /* long enough that the others really contend */
        atomic_fetch_sub(c->inside, 1);
        mistri_release_outcome out = (mistri_release_outcome)0;
        if (mistri_hold_release(h, &out) != MISTRI_OK || out != MISTRI_RELEASE_RELEASED)
            c->errors++;
        mistri_hold_free(h);
        c->wins++;
    }
    return NULL;
}

static void contending_threads_never_both_hold(const void *arg)
{
    OPEN_FIXTURE(f, arg);
    atomic_int inside, overlaps, go;
    atomic_init(&inside, 0);
    atomic_init(&overlaps, 0);
    atomic_init(&go, 0);
    contender cs[THREADS];
    pthread_t ts[THREADS];
    for (int i = 0; i < THREADS; i++) {
        cs[i] = (contender){fixture_owner(&f), &inside, &overlaps, &go, 0, 0, 0};
        REQUIRE(cs[i].locks != NULL);
    }
    for (int i = 0; i < THREADS; i++)
        REQUIRE(pthread_create(&ts[i], NULL, contend, &cs[i]) == 0);
    atomic_store(&go, 1);
    int refusals = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(ts[i], NULL);
        CHECK(cs[i].wins == WINS_EACH);
        CHECK(cs[i].errors == 0);
        refusals += cs[i].refusals;
    }
    CHECK(atomic_load(&overlaps) == 0);
    CHECK(refusals > 0); /* there was contention */
    fixture_close(&f);
}

/* The configured handle (the data covers configured holds). */
static void configure_read_back_and_clear(const void *arg)
{
    OPEN_FIXTURE(f, arg);
    mistri_locks *configured = NULL;
    mistri_hold *h = NULL;
    CHECK_OK(mistri_configure_clear());
    CHECK_OK(mistri_configured(&configured));
    CHECK(configured == NULL);
    CHECK_OK(mistri_configure(f.first));
    CHECK_OK(mistri_configured(&configured));
    REQUIRE(configured != NULL);
    CHECK_OK(hold_begin_configured("global", NULL /* defaults */, &h));
    REQUIRE(h != NULL);
    CHECK(held(f.first, "global"));
    /* the configured handle is the same owner as f.first */
    CHECK(acquire(configured, "plain", 5));
    CHECK(release(f.first, "plain"));
    mistri_hold_free(h);
    CHECK_OK(mistri_configure_clear());
    mistri_locks *after = NULL;
    CHECK_OK(mistri_configured(&after));
    CHECK(after == NULL);
    CHECK(acquire(configured, "still-usable", 5)); /* handles outlive the configuration */
    mistri_locks_free(configured);
    fixture_close(&f);
}

/* A forked child's copy of a hold neither renews nor releases. */
static void a_forked_child_leaves_the_parents_lease_alone(const void *arg)
{
    OPEN_FIXTURE(f, arg);
    const mistri_locks *a = f.first;
    mistri_hold *h = start(a, "forked", opts(5, 0.5));
    REQUIRE(h != NULL);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        mistri_release_outcome out = (mistri_release_outcome)0;
        mistri_status s = mistri_hold_release(h, &out);
        _exit(s == MISTRI_OK && out == MISTRI_RELEASE_OTHER_PROCESS ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(held(a, "forked"));
    CHECK(!hold_lost(h));
    CHECK(hold_release(h) == MISTRI_RELEASE_RELEASED);
    mistri_hold_free(h);
    fixture_close(&f);
}

/* ---------------------------------------------- bad input, per backend */

enum op { ACQUIRE, RENEW, RELEASE, HELD, SET_FLAG, FLAG, CLEAR_FLAG, BREAK, FENCE, N_OPS };
static const char *OP_NAMES[N_OPS] = {"acquire", "renew",      "release", "held", "set_flag",
                                      "flag",    "clear_flag", "break",   "fence"};

static mistri_status run_op(enum op op, const mistri_locks *l, const char *key, double ttl,
                            bool *out)
{
    uint64_t fence = 0;
    switch (op) {
    case ACQUIRE:
        return mistri_locks_acquire(l, key, ttl, out);
    case RENEW:
        return mistri_locks_renew(l, key, ttl, out);
    case RELEASE:
        return mistri_locks_release(l, key, out);
    case HELD:
        return mistri_locks_held(l, key, out);
    case SET_FLAG:
        return mistri_locks_set_flag(l, key, ttl);
    case FLAG:
        return mistri_locks_flag(l, key, out);
    case CLEAR_FLAG:
        return mistri_locks_clear_flag(l, key);
    case BREAK:
        return mistri_locks_break_lease(l, key, out);
    case FENCE:
        return mistri_locks_fence(l, key, out ? &fence : NULL);
    case N_OPS:
        break;
    }
    return MISTRI_OTHER_ERROR;
}

static bool op_has_out(enum op op)
{
    return op != SET_FLAG && op != CLEAR_FLAG;
}

/* NULL, non-UTF-8 and missing out-params (the data covers empty keys and
 * bad durations). */
static void bad_input_is_a_status_never_a_crash(const void *arg)
{
    OPEN_FIXTURE(f, arg);
    const mistri_locks *a = f.first;
    const char *not_utf8 = "bad\xff\xfekey";
    for (int i = 0; i < N_OPS; i++) {
        enum op op = (enum op)i;
        bool out = true;
        CHECK_STATUS(run_op(op, NULL, "k", 1, &out), MISTRI_NULL_ARGUMENT);
        CHECK_LAST_ERROR_HAS("locks must not be NULL");
        CHECK_STATUS(run_op(op, a, NULL, 1, &out), MISTRI_NULL_ARGUMENT);
        CHECK_LAST_ERROR_HAS("key must not be NULL");
        CHECK_STATUS(run_op(op, a, not_utf8, 1, &out), MISTRI_INVALID_UTF8);
        CHECK_LAST_ERROR_HAS("UTF-8");
        if (op_has_out(op))
            CHECK_STATUS(run_op(op, a, "k", 1, NULL), MISTRI_NULL_ARGUMENT);
        CHECK(out == true); /* out-params untouched on errors */
        if (harness_case_failed) {
            fprintf(stderr, "    (op %s)\n", OP_NAMES[i]);
            break;
        }
    }
    CHECK_STATUS(mistri_locks_acquire(a, "k", NAN, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_acquire(a, "k", 0, (bool *)NULL), MISTRI_NULL_ARGUMENT);
    mistri_locks_acquire(a, "k", -1, (bool[]){false});
    CHECK_LAST_ERROR_HAS("mistri_locks_acquire: invalid argument: ttl");

    /* holds */
    static char sentinel;
    mistri_hold *h = (mistri_hold *)(void *)&sentinel;
    hold_opts o = opts(1, 1);
    CHECK_STATUS(hold_begin(NULL, "k", &o, &h), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(hold_begin(a, NULL, &o, &h), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(hold_begin(a, not_utf8, &o, &h), MISTRI_INVALID_UTF8);
    CHECK_STATUS(hold_begin(a, "k", &o, NULL), MISTRI_NULL_ARGUMENT);
    o.stop_key = not_utf8;
    CHECK_STATUS(hold_begin(a, "k", &o, &h), MISTRI_INVALID_UTF8);
    CHECK_LAST_ERROR_HAS("stop_key");
    CHECK(h == (mistri_hold *)(void *)&sentinel); /* untouched */
    bool is_held = true;
    CHECK_OK(mistri_locks_held(a, "k", &is_held));
    CHECK(!is_held); /* a refused call took nothing */

    /* hold getters and release on NULL */
    bool b = false;
    uint64_t fence = 0;
    const char *key = NULL;
    mistri_signal *sig = NULL;
    mistri_release_outcome outcome = (mistri_release_outcome)0;
    CHECK_STATUS(mistri_hold_release(NULL, &outcome), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_lost(NULL, &b), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_fence(NULL, &fence), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_key(NULL, &key), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_signal(NULL, &sig), MISTRI_NULL_ARGUMENT);
    mistri_hold *real = start(a, "real", opts(5, 1));
    REQUIRE(real != NULL);
    CHECK_STATUS(mistri_hold_lost(real, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_fence(real, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_key(real, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_hold_signal(real, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_OK(mistri_hold_release(real, NULL)); /* outcome is optional */
    mistri_hold_free(real);

    /* handle makers and helpers */
    mistri_locks *l = NULL;
    size_t n = 0;
    CHECK_STATUS(mistri_locks_new_owner(NULL, &l), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_new_owner(a, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_active_holds(NULL, &n), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_active_holds(a, NULL), MISTRI_NULL_ARGUMENT);
    CHECK(l == NULL);
    fixture_close(&f);
}

/* =========================================== two processes on one backend */

static const char *g_self; /* this program, to re-execute as a holder */

/* The holder: holds KEY with STOP_KEY and a signal, reports on stdout. */
static int holder_main(const char *backend_name, const char *param, const char *ns,
                       const char *key, const char *stop_key)
{
    const backend *b = NULL;
    for (size_t i = 0; i < N_BACKENDS; i++)
        if (strcmp(BACKENDS[i].name, backend_name) == 0)
            b = &BACKENDS[i];
    if (b == NULL)
        return 10;
    backend chosen = *b;
    chosen.param = param;
    mistri_locks *locks = NULL;
    mistri_signal *sig = NULL;
    mistri_hold *h = NULL;
    if (chosen.open(&chosen, ns, &locks) != MISTRI_OK || mistri_signal_new(&sig) != MISTRI_OK) {
        fprintf(stderr, "holder: %s\n", mistri_last_error());
        return 11;
    }
    probe p;
    probe_init(&p);
    uint64_t handle = 0;
    if (mistri_signal_on_abort(sig, probe_callback, &p, probe_finalizer, &handle) != MISTRI_OK)
        return 12;
    hold_opts o = hold_opts_default();
    o.ttl = 5;
    o.heartbeat = 0.2;
    o.stop_key = stop_key;
    o.signal = sig;
    if (hold_begin(locks, key, &o, &h) != MISTRI_OK || h == NULL) {
        fprintf(stderr, "holder: no hold: %s\n", mistri_last_error());
        return 13;
    }
    uint64_t fence = 0;
    mistri_hold_fence(h, &fence);
    printf("HELD %llu\n", (unsigned long long)fence);
    fflush(stdout);
    bool aborted = false;
    if (mistri_signal_wait(sig, 10, &aborted) != MISTRI_OK || !aborted)
        return 14;
    long long tripped = now_ns();
    await_count(&p.calls, 1, 2.0);
    bool lost = true;
    mistri_hold_lost(h, &lost);
    char *reason = NULL;
    mistri_signal_reason(sig, &reason);
    printf("TRIPPED %lld %lld %d %d %s\n", tripped, (long long)atomic_load(&p.called_at_ns),
           atomic_load(&p.calls), lost ? 1 : 0, reason ? reason : "(none)");
    mistri_string_free(reason);
    mistri_release_outcome outcome = (mistri_release_outcome)0;
    mistri_status s = mistri_hold_release(h, &outcome);
    printf("RELEASED %d %d\n", (int)s, (int)outcome);
    fflush(stdout);
    mistri_hold_free(h);
    mistri_signal_free(sig);
    mistri_locks_free(locks);
    return atomic_load(&p.finalized) == 1 ? 0 : 15;
}

static void two_processes_holder_is_stopped_by_another(const void *arg)
{
    OPEN_FIXTURE(f, arg);
    const backend *b = f.b;
    char key[96], stop_key[128];
    snprintf(key, sizeof key, "shared-%ld", (long)getpid());
    snprintf(stop_key, sizeof stop_key, "stop:%s", key);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    char *child_argv[] = {(char *)g_self, "--holder",     (char *)b->name,  (char *)b->param,
                          f.ns,           key,            stop_key,         NULL};
    pid_t pid;
    int spawned = posix_spawn(&pid, g_self, &actions, NULL, child_argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    REQUIRE(spawned == 0);
    FILE *from_child = fdopen(fds[0], "r");
    REQUIRE(from_child != NULL);
    char line[512];
    unsigned long long fence = 0;
    CHECK(fgets(line, sizeof line, from_child) != NULL);
    CHECK(sscanf(line, "HELD %llu", &fence) == 1 && fence >= 1);

    /* this process sees the lease held and cannot take it */
    CHECK(held(f.first, key));
    CHECK(!acquire(f.first, key, 5));
    sleep_s(0.3); /* a few ticks pass without a trip */
    double raised_s = now_s();
    long long raised = now_ns();
    CHECK_OK(mistri_locks_set_flag(f.first, stop_key, 30));

    long long tripped = 0, called = 0;
    int calls = 0, lost = -1;
    char reason[256] = "";
    CHECK(fgets(line, sizeof line, from_child) != NULL);
    CHECK(sscanf(line, "TRIPPED %lld %lld %d %d %255[^\n]", &tripped, &called, &calls, &lost,
                 reason) == 5);
    double took = (double)(tripped - raised) / 1e9;
    CHECK(took >= 0 && took <= 0.2 + 0.25); /* within a tick (0.2 s) plus slack */
    if (took > 0.45)
        fprintf(stderr, "    tripped %.3fs after the flag\n", took);
    CHECK(calls == 1 && called >= raised);
    CHECK(lost == 0);
    CHECK(strstr(reason, stop_key) != NULL);
    int s = -1, outcome = -1;
    CHECK(fgets(line, sizeof line, from_child) != NULL);
    CHECK(sscanf(line, "RELEASED %d %d", &s, &outcome) == 2);
    CHECK(s == MISTRI_OK && outcome == MISTRI_RELEASE_RELEASED);
    fclose(from_child);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* afterwards the lease is free */
    CHECK(!held(f.first, key));
    CHECK(acquire(f.first, key, 5));
    (void)raised_s;
    fixture_close(&f);
}

/* ================================================ backend-independent tests */

static void signal_abort_is_one_way_and_first_reason_wins(const void *arg)
{
    (void)arg;
    mistri_signal *s = NULL;
    REQUIRE_OK(mistri_signal_new(&s));
    bool aborted = true, tripped = false;
    char *reason = (char *)"sentinel";
    CHECK_OK(mistri_signal_aborted(s, &aborted));
    CHECK(!aborted);
    CHECK_OK(mistri_signal_reason(s, &reason));
    CHECK(reason == NULL);
    CHECK_OK(mistri_signal_abort(s, "first", &tripped));
    CHECK(tripped);
    CHECK_OK(mistri_signal_abort(s, "second", &tripped));
    CHECK(!tripped);
    CHECK_OK(mistri_signal_abort(s, NULL, NULL)); /* tripped is optional */
    CHECK_OK(mistri_signal_aborted(s, &aborted));
    CHECK(aborted);
    char buf[64];
    CHECK(strcmp(reason_of(s, buf, sizeof buf), "first") == 0);
    mistri_signal_free(s);

    /* no reason */
    REQUIRE_OK(mistri_signal_new(&s));
    CHECK_OK(mistri_signal_abort(s, NULL, &tripped));
    CHECK(tripped);
    reason = (char *)"sentinel";
    CHECK_OK(mistri_signal_reason(s, &reason));
    CHECK(reason == NULL);
    mistri_signal_free(s);
}

static void signal_wait_times_out_and_sees_aborts(const void *arg)
{
    (void)arg;
    mistri_signal *s = NULL;
    REQUIRE_OK(mistri_signal_new(&s));
    double t0 = now_s();
    CHECK(!wait_for(s, 0)); /* zero: just look */
    CHECK(now_s() - t0 < 0.05);
    t0 = now_s();
    CHECK(!wait_for(s, 0.05));
    CHECK(now_s() - t0 >= 0.05);
    bool aborted = true;
    /* INFINITY and > 1e9 mean "no timeout" now (tests/c/options.c). */
    const double bad[] = {NAN, -1.0, -0.001, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(mistri_signal_wait(s, bad[i], &aborted), MISTRI_INVALID_ARGUMENT);
        CHECK_LAST_ERROR_HAS("timeout");
    }
    CHECK(aborted == true); /* untouched */
    CHECK_STATUS(mistri_signal_wait(s, 1, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_wait(NULL, 1, &aborted), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_wait_forever(NULL), MISTRI_NULL_ARGUMENT);
    mistri_signal_free(s);
}

typedef struct aborter {
    mistri_signal *signal;
    double delay;
} aborter;

static void *abort_later(void *arg)
{
    aborter *a = arg;
    sleep_s(a->delay);
    mistri_signal_abort(a->signal, "from another thread", NULL);
    return NULL;
}

static void signal_wait_wakes_on_abort_from_another_thread(const void *arg)
{
    (void)arg;
    mistri_signal *s = NULL, *other = NULL;
    REQUIRE_OK(mistri_signal_new(&s));
    REQUIRE_OK(mistri_signal_clone(s, &other));
    aborter a = {other, 0.05};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, abort_later, &a) == 0);
    double t0 = now_s();
    CHECK(wait_for(s, 10));
    CHECK(now_s() - t0 < 5);
    pthread_join(t, NULL);
    mistri_signal_free(other);
    CHECK_OK(mistri_signal_wait_forever(s)); /* returns at once: aborted */

    mistri_signal *s2 = NULL;
    REQUIRE_OK(mistri_signal_new(&s2));
    aborter b = {s2, 0.05};
    REQUIRE(pthread_create(&t, NULL, abort_later, &b) == 0);
    CHECK_OK(mistri_signal_wait_forever(s2));
    pthread_join(t, NULL);
    char buf[64];
    CHECK(strcmp(reason_of(s2, buf, sizeof buf), "from another thread") == 0);
    mistri_signal_free(s2);
    mistri_signal_free(s);
}

static void callback_fires_once_on_abort_with_the_reason(const void *arg)
{
    (void)arg;
    mistri_signal *s = NULL;
    REQUIRE_OK(mistri_signal_new(&s));
    probe p, q;
    probe_init(&p);
    probe_init(&q);
    uint64_t hp = 0, hq = 0;
    CHECK_OK(mistri_signal_on_abort(s, probe_callback, &p, probe_finalizer, &hp));
    CHECK_OK(mistri_signal_on_abort(s, probe_callback, &q, NULL /* no finalizer */, &hq));
    CHECK(hp != hq);
    CHECK(atomic_load(&p.calls) == 0);
    CHECK_OK(mistri_signal_abort(s, "why", NULL));
    CHECK(atomic_load(&p.calls) == 1 && atomic_load(&q.calls) == 1);
    CHECK(atomic_load(&p.finalized) == 1 && atomic_load(&q.finalized) == 0);
    CHECK(atomic_load(&p.on_caller_thread) == 1); /* runs on the aborting thread */
    CHECK(strcmp(p.reason, "why") == 0);
    CHECK_OK(mistri_signal_abort(s, "again", NULL));
    CHECK(atomic_load(&p.calls) == 1);
    bool removed = true;
    CHECK_OK(mistri_signal_remove_callback(s, hp, &removed));
    CHECK(!removed); /* already ran */
    /* registered after the abort: runs at once, on this thread */
    probe late;
    probe_init(&late);
    uint64_t hl = 0;
    CHECK_OK(mistri_signal_on_abort(s, probe_callback, &late, probe_finalizer, &hl));
    CHECK(atomic_load(&late.calls) == 1 && atomic_load(&late.finalized) == 1);
    CHECK(strcmp(late.reason, "why") == 0);
    mistri_signal_free(s);
    CHECK(atomic_load(&p.finalized) == 1); /* exactly once */

    /* aborted without a reason: the callback sees NULL */
    REQUIRE_OK(mistri_signal_new(&s));
    probe n;
    probe_init(&n);
    CHECK_OK(mistri_signal_on_abort(s, probe_callback, &n, NULL, &hl));
    CHECK_OK(mistri_signal_abort(s, NULL, NULL));
    CHECK(strcmp(n.reason, "(null)") == 0);
    mistri_signal_free(s);
}

static void callback_can_be_removed(const void *arg)
{
    (void)arg;
    mistri_signal *s = NULL;
    REQUIRE_OK(mistri_signal_new(&s));
    probe removed_p, kept_p;
    probe_init(&removed_p);
    probe_init(&kept_p);
    uint64_t hr = 0, hk = 0;
    CHECK_OK(mistri_signal_on_abort(s, probe_callback, &removed_p, probe_finalizer, &hr));
    CHECK_OK(mistri_signal_on_abort(s, probe_callback, &kept_p, probe_finalizer, &hk));
    bool removed = false;
    CHECK_OK(mistri_signal_remove_callback(s, hr, &removed));
    CHECK(removed);
    CHECK(atomic_load(&removed_p.finalized) == 1); /* finalizer runs on removal */
    CHECK_OK(mistri_signal_remove_callback(s, hr, &removed));
    CHECK(!removed);
    CHECK_OK(mistri_signal_remove_callback(s, 987654, NULL)); /* unknown handle; out optional */
    CHECK_OK(mistri_signal_abort(s, "stop", NULL));
    CHECK(atomic_load(&removed_p.calls) == 0);
    CHECK(atomic_load(&removed_p.finalized) == 1);
    CHECK(atomic_load(&kept_p.calls) == 1 && atomic_load(&kept_p.finalized) == 1);
    mistri_signal_free(s);
}

/* A finalizer that re-enters the signal must not deadlock. */
static void noop_callback(void *userdata, const char *reason)
{
    (void)userdata;
    (void)reason;
}

typedef struct reentrant {
    mistri_signal *signal;
    atomic_int finalized;
    bool aborted_seen;
} reentrant;

static void reentrant_finalizer(void *userdata)
{
    reentrant *r = userdata;
    bool aborted = true;
    uint64_t h = 0;
    /* touches the signal's own lock: would deadlock if run under it */
    mistri_signal_aborted(r->signal, &aborted);
    mistri_signal_on_abort(r->signal, noop_callback, NULL, NULL, &h);
    mistri_signal_remove_callback(r->signal, h, NULL);
    r->aborted_seen = aborted;
    atomic_fetch_add(&r->finalized, 1);
}

static void callbacks_and_finalizers_run_outside_library_locks(const void *arg)
{
    (void)arg;
    mistri_signal *s = NULL;
    REQUIRE_OK(mistri_signal_new(&s));
    reentrant r;
    r.signal = s;
    r.aborted_seen = true;
    atomic_init(&r.finalized, 0);
    uint64_t h = 0;
    CHECK_OK(mistri_signal_on_abort(s, noop_callback, &r, reentrant_finalizer, &h));
    CHECK_OK(mistri_signal_remove_callback(s, h, NULL));
    CHECK(atomic_load(&r.finalized) == 1);
    CHECK(!r.aborted_seen);
    mistri_signal_free(s);
}

static void freeing_an_unaborted_signal_runs_pending_finalizers(const void *arg)
{
    (void)arg;
    mistri_signal *s = NULL, *other = NULL;
    REQUIRE_OK(mistri_signal_new(&s));
    REQUIRE_OK(mistri_signal_clone(s, &other));
    probe p;
    probe_init(&p);
    uint64_t h = 0;
    CHECK_OK(mistri_signal_on_abort(s, probe_callback, &p, probe_finalizer, &h));
    mistri_signal_free(s);
    CHECK(atomic_load(&p.finalized) == 0); /* `other` keeps the signal alive */
    mistri_signal_free(other);
    CHECK(atomic_load(&p.calls) == 0 && atomic_load(&p.finalized) == 1);
}

static void derived_signals_hear_the_parent_never_the_reverse(const void *arg)
{
    (void)arg;
    mistri_signal *parent = NULL, *child = NULL, *grandchild = NULL, *sibling = NULL;
    REQUIRE_OK(mistri_signal_new(&parent));
    CHECK_OK(mistri_signal_derive(parent, &child));
    CHECK_OK(mistri_signal_derive(child, &grandchild));
    CHECK_OK(mistri_signal_derive(parent, &sibling));
    CHECK_OK(mistri_signal_abort(sibling, "sibling", NULL));
    CHECK(!wait_for(parent, 0));
    CHECK(!wait_for(child, 0));
    CHECK_OK(mistri_signal_abort(parent, "parent", NULL));
    char buf[64];
    CHECK(strcmp(reason_of(child, buf, sizeof buf), "parent") == 0);
    CHECK(strcmp(reason_of(grandchild, buf, sizeof buf), "parent") == 0);
    CHECK(strcmp(reason_of(sibling, buf, sizeof buf), "sibling") == 0);
    mistri_signal *late = NULL;
    CHECK_OK(mistri_signal_derive(parent, &late));
    CHECK(wait_for(late, 0));
    bool same = true;
    CHECK_OK(mistri_signal_same(parent, late, &same));
    CHECK(!same);
    mistri_signal_free(late);
    mistri_signal_free(sibling);
    mistri_signal_free(grandchild);
    mistri_signal_free(child);
    mistri_signal_free(parent);
}

static void signal_bad_input_is_a_status(const void *arg)
{
    (void)arg;
    mistri_signal *s = NULL;
    REQUIRE_OK(mistri_signal_new(&s));
    mistri_signal *out = NULL;
    bool b = true;
    uint64_t h = 42;
    char *reason = NULL;
    CHECK_STATUS(mistri_signal_new(NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_clone(NULL, &out), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_clone(s, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_derive(NULL, &out), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_derive(s, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_abort(NULL, "r", &b), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_abort(s, "bad\xff", &b), MISTRI_INVALID_UTF8);
    CHECK_LAST_ERROR_HAS("reason");
    CHECK_STATUS(mistri_signal_aborted(NULL, &b), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_aborted(s, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_reason(NULL, &reason), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_reason(s, NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_same(NULL, s, &b), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_same(s, NULL, &b), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_same(s, s, NULL), MISTRI_NULL_ARGUMENT);
    probe p;
    probe_init(&p);
    CHECK_STATUS(mistri_signal_on_abort(NULL, probe_callback, &p, probe_finalizer, &h),
                 MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_signal_on_abort(s, NULL, &p, probe_finalizer, &h), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("callback must not be NULL");
    CHECK_STATUS(mistri_signal_on_abort(s, probe_callback, &p, probe_finalizer, NULL),
                 MISTRI_NULL_ARGUMENT);
    CHECK(atomic_load(&p.finalized) == 0); /* failed registrations keep userdata */
    CHECK(h == 42);
    CHECK_STATUS(mistri_signal_remove_callback(NULL, 1, &b), MISTRI_NULL_ARGUMENT);
    CHECK(b == true);
    CHECK_OK(mistri_signal_aborted(s, &b));
    CHECK(!b); /* the rejected abort did nothing */
    mistri_signal_free(s);
}

static void handles_and_process_wide_calls_reject_bad_input(const void *arg)
{
    (void)arg;
    static char sentinel;
    mistri_locks *l = (mistri_locks *)(void *)&sentinel;
    CHECK_STATUS(mistri_locks_memory_new(NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_redis_new(NULL, NULL, &l), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("url must not be NULL");
    CHECK_STATUS(mistri_locks_redis_new("redis://127.0.0.1:1/0", NULL, NULL),
                 MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_redis_new("not a url", NULL, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("mistri_locks_redis_new: configuration error");
    CHECK_STATUS(mistri_locks_redis_new("redis://127.0.0.1:6379/0", "bad\xff", &l),
                 MISTRI_INVALID_UTF8);
    CHECK_STATUS(mistri_locks_redis_new("redis://127.0.0.1:6379/0", "", &l),
                 MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_locks_redis_new("redis://127.0.0.1:6379/0", "a{b}", &l),
                 MISTRI_INVALID_ARGUMENT);
    CHECK_LAST_ERROR_HAS("namespace");
    CHECK_STATUS(mistri_locks_postgres_new(NULL, NULL, &l), MISTRI_NULL_ARGUMENT);
    CHECK_LAST_ERROR_HAS("url must not be NULL");
    CHECK_STATUS(mistri_locks_postgres_new("postgres://127.0.0.1:1/db", NULL, NULL),
                 MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_locks_postgres_new("not a url", NULL, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("mistri_locks_postgres_new: configuration error");
    /* another scheme is not a PostgreSQL URL */
    CHECK_STATUS(mistri_locks_postgres_new("redis://127.0.0.1:6379/0", NULL, &l), MISTRI_CONFIG);
    CHECK_STATUS(mistri_locks_postgres_new("postgres://127.0.0.1:1/db", "bad\xff", &l),
                 MISTRI_INVALID_UTF8);
    CHECK_STATUS(mistri_locks_postgres_new("postgres://127.0.0.1:1/db", "", &l),
                 MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_locks_postgres_new("postgres://u:s3cret@127.0.0.1:1/db?sslmode=bogus",
                                           NULL, &l),
                 MISTRI_CONFIG);
    CHECK(strstr(mistri_last_error(), "s3cret") == NULL); /* no password in messages */
    CHECK_STATUS(mistri_locks_local_new("", &l), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_locks_local_new("bad\xff.db", &l), MISTRI_INVALID_UTF8);
    CHECK_STATUS(mistri_locks_local_new(NULL, NULL), MISTRI_NULL_ARGUMENT);
    /* a parent that is a file, not a folder: unusable even for root */
    CHECK_STATUS(mistri_locks_local_new("/etc/hostname/locks.db", &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("/etc/hostname/locks.db");
    CHECK(l == (mistri_locks *)(void *)&sentinel); /* untouched by every failure */
    /* port 1 on loopback: nothing listens there; connecting is lazy */
    l = NULL;
    CHECK_OK(mistri_locks_redis_new("redis://:s3cret@127.0.0.1:1/0", NULL, &l));
    bool b = true;
    CHECK_STATUS(mistri_locks_held(l, "k", &b), MISTRI_CONNECTION);
    CHECK_LAST_ERROR_HAS("mistri_locks_held: connection error");
    CHECK(strstr(mistri_last_error(), "s3cret") == NULL); /* no password in messages */
    mistri_hold *h = NULL;
    CHECK_STATUS(hold_begin(l, "k", NULL, &h), MISTRI_CONNECTION);
    CHECK(b == true && h == NULL);
    mistri_locks_free(l);
    CHECK_STATUS(mistri_configure(NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(mistri_configured(NULL), MISTRI_NULL_ARGUMENT);
    CHECK_STATUS(hold_begin_configured(NULL, NULL, NULL), MISTRI_NULL_ARGUMENT);
    /* every free accepts NULL */
    mistri_locks_free(NULL);
    mistri_hold_free(NULL);
    mistri_signal_free(NULL);
    mistri_string_free(NULL);
}

/* Local refuses a database that another user could tamper with: a folder
 * owned by another uid (tests run as root: given to nobody), a folder others
 * can write, a symbolic link in place of the file. */
static void local_refuses_unsafe_folders_and_symlinks(const void *arg)
{
    (void)arg;
    const char *scratch = getenv("MISTRI_TEST_LOCAL_DIR");
    REQUIRE(scratch != NULL);
    char dir[512], path[600], real[600];
    mistri_locks *l = NULL;

    snprintf(dir, sizeof dir, "%s/writable-%ld", scratch, (long)getpid());
    REQUIRE(mkdir(dir, 0700) == 0 && chmod(dir, 0777) == 0);
    snprintf(path, sizeof path, "%s/locks.db", dir);
    CHECK_STATUS(mistri_locks_local_new(path, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS(path);
    CHECK_LAST_ERROR_HAS("writable by other users");
    CHECK(l == NULL);

    snprintf(dir, sizeof dir, "%s/link-%ld", scratch, (long)getpid());
    REQUIRE(mkdir(dir, 0700) == 0);
    snprintf(real, sizeof real, "%s/real.db", dir);
    snprintf(path, sizeof path, "%s/locks.db", dir);
    REQUIRE(symlink(real, path) == 0);
    CHECK_STATUS(mistri_locks_local_new(path, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("symbolic link");
    CHECK(access(real, F_OK) != 0); /* the link was not followed */
    CHECK(l == NULL);

    if (geteuid() != 0) {
        fprintf(stderr, "    (not root: skipping the folder owned by another uid)\n");
        return;
    }
    snprintf(dir, sizeof dir, "%s/nobody-%ld", scratch, (long)getpid());
    REQUIRE(mkdir(dir, 0700) == 0 && chown(dir, 65534, 65534) == 0);
    snprintf(path, sizeof path, "%s/locks.db", dir);
    CHECK_STATUS(mistri_locks_local_new(path, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("belongs to uid 65534");
    CHECK(access(path, F_OK) != 0); /* nothing created there */
    CHECK(l == NULL);
}

/* The last error is per thread. */
static void *fail_on_another_thread(void *arg)
{
    (void)arg;
    mistri_locks_acquire(NULL, "k", 1, NULL);
    return NULL;
}

static void last_error_is_per_thread_and_status_names_are_stable(const void *arg)
{
    (void)arg;
    mistri_signal_wait(NULL, 1, NULL);
    CHECK_LAST_ERROR_HAS("mistri_signal_wait: null argument");
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, fail_on_another_thread, NULL) == 0);
    pthread_join(t, NULL);
    CHECK_LAST_ERROR_HAS("mistri_signal_wait"); /* not overwritten by the other thread */
    CHECK(strcmp(mistri_status_name(MISTRI_OK), "MISTRI_OK") == 0);
    CHECK(strcmp(mistri_status_name(MISTRI_PANIC), "MISTRI_PANIC") == 0);
    CHECK(strcmp(mistri_status_name(12345), "MISTRI_UNKNOWN_STATUS") == 0);
    CHECK(MISTRI_OK == 0 && MISTRI_NULL_ARGUMENT == 7000 && MISTRI_OTHER_ERROR == 7008);
    CHECK(strcmp(mistri_version(), MISTRI_LOCKS_VERSION) == 0);
    CHECK(MISTRI_LEASE_TTL == 180.0 && MISTRI_HEARTBEAT == 60.0 && MISTRI_FLAG_TTL == 300.0);
}

/* ===================================================================== main */

typedef struct test_case {
    const char *name;
    void (*body)(const void *);
    bool cross_process_only;
} test_case;

#define CASE(fn) {#fn, fn, false}

static const test_case CONTRACT[] = {
    CASE(freeing_a_hold_releases_it),
    CASE(c_callbacks_of_a_stopped_hold_run_on_the_notifier_thread),
    CASE(a_callback_may_release_its_hold_from_the_notifier_thread),
    CASE(contending_threads_never_both_hold),
    CASE(configure_read_back_and_clear),
    CASE(a_forked_child_leaves_the_parents_lease_alone),
    CASE(bad_input_is_a_status_never_a_crash),
    {"two_processes_holder_is_stopped_by_another", two_processes_holder_is_stopped_by_another,
     true},
};

/* One entry point: mistri_locks_open takes every backend's URL with typed
 * options (a lease taken through it is the one the backend's own
 * constructor sees), an unknown scheme's error lists every scheme, and
 * each backend's own constructor refuses another backend's URL. */
static void open_takes_every_scheme_and_constructors_refuse_others(const void *arg)
{
    (void)arg;
    const char *redis_url = BACKENDS[1].param, *pg_url = BACKENDS[3].param;
    char ns[64], key[64];
    snprintf(ns, sizeof ns, "mistri:c-open:%ld", (long)getpid());
    snprintf(key, sizeof key, "open-%ld", (long)getpid());
    mistri_open_options *o = NULL;
    REQUIRE_OK(mistri_open_options_new(&o));
    CHECK_OK(mistri_open_options_set_namespace(o, ns));
    CHECK_OK(mistri_open_options_set_label(o, "c-opener"));
    CHECK_OK(mistri_open_options_set_io_timeout(o, 3.0));
    CHECK_STATUS(mistri_open_options_set_namespace(o, ""), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_open_options_set_io_timeout(o, -1.0), MISTRI_INVALID_ARGUMENT);
    CHECK_STATUS(mistri_open_options_set_label(NULL, "x"), MISTRI_NULL_ARGUMENT);

    const char *urls[] = {redis_url, pg_url};
    for (size_t i = 0; i < 2; i++) {
        mistri_locks *opened = NULL, *own = NULL;
        CHECK_OK(mistri_locks_open(urls[i], o, &opened));
        CHECK_OK(i == 0 ? mistri_locks_redis_new(urls[i], ns, &own)
                        : mistri_locks_postgres_new(urls[i], ns, &own));
        if (opened && own) {
            CHECK(acquire(opened, key, 30));
            CHECK(!acquire(own, key, 30)); /* the same backend, the same namespace */
            CHECK(release(opened, key));
        }
        mistri_locks_free(opened);
        mistri_locks_free(own);
    }

    mistri_locks *l = NULL;
    CHECK_OK(mistri_locks_open("memory://", NULL, &l));
    if (l) {
        CHECK(acquire(l, key, 30));
        CHECK(held(l, key));
    }
    mistri_locks_free(l);
    l = NULL;

    CHECK_STATUS(mistri_locks_open("http://example.com", NULL, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("memory://");
    CHECK_LAST_ERROR_HAS("redis+sentinel://");
    CHECK_LAST_ERROR_HAS("postgresql://");
    CHECK_LAST_ERROR_HAS("DSN");
    CHECK(l == NULL);

    CHECK_STATUS(mistri_locks_redis_new(pg_url, ns, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("Redis constructor takes redis://");
    CHECK_LAST_ERROR_HAS("open(url)");
    CHECK(l == NULL);
    CHECK_STATUS(mistri_locks_postgres_new(redis_url, ns, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("Postgres constructor takes postgres://");
    CHECK(l == NULL);
    CHECK_STATUS(mistri_locks_local_new(redis_url, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("Local constructor takes");
    CHECK(l == NULL);

    /* schema is a Postgres option. */
    CHECK_OK(mistri_open_options_set_schema(o, "c_open"));
    CHECK_STATUS(mistri_locks_open("memory://", o, &l), MISTRI_CONFIG);
    CHECK_LAST_ERROR_HAS("Postgres option");
    CHECK(l == NULL);
    mistri_open_options_free(o);
}

static const test_case GENERAL[] = {
    CASE(open_takes_every_scheme_and_constructors_refuse_others),
    CASE(signal_abort_is_one_way_and_first_reason_wins),
    CASE(signal_wait_times_out_and_sees_aborts),
    CASE(signal_wait_wakes_on_abort_from_another_thread),
    CASE(callback_fires_once_on_abort_with_the_reason),
    CASE(callback_can_be_removed),
    CASE(callbacks_and_finalizers_run_outside_library_locks),
    CASE(freeing_an_unaborted_signal_runs_pending_finalizers),
    CASE(derived_signals_hear_the_parent_never_the_reverse),
    CASE(signal_bad_input_is_a_status),
    CASE(handles_and_process_wide_calls_reject_bad_input),
    CASE(local_refuses_unsafe_folders_and_symlinks),
    CASE(last_error_is_per_thread_and_status_names_are_stable),
};

int main(int argc, char **argv)
{
    g_self = argv[0];
    if (argc == 7 && strcmp(argv[1], "--holder") == 0)
        return holder_main(argv[2], argv[3], argv[4], argv[5], argv[6]);
    const char *url = argc > 1 ? argv[1] : getenv("MISTRI_TEST_REDIS_URL");
    const char *only = getenv("MISTRI_TEST_ONLY"); /* run cases whose name contains this */
    const char *pg_url = argc > 2 ? argv[2] : getenv("MISTRI_TEST_POSTGRES_URL");
    const char *mysql_url = argc > 3 ? argv[3] : getenv("MISTRI_TEST_MYSQL_URL");
    if (url == NULL || url[0] == '\0' || pg_url == NULL || pg_url[0] == '\0' ||
        mysql_url == NULL || mysql_url[0] == '\0') {
        fprintf(stderr,
                "usage: %s REDIS_URL POSTGRES_URL MYSQL_URL (throwaway servers: the tests write "
                "to them)\n",
                argv[0]);
        return 2;
    }
    BACKENDS[1].param = url;
    BACKENDS[3].param = pg_url;
    BACKENDS[4].param = mysql_url;
    const char *local_dir = getenv("MISTRI_TEST_LOCAL_DIR");
    if (local_dir == NULL || local_dir[0] == '\0') {
        fprintf(stderr, "MISTRI_TEST_LOCAL_DIR must name a scratch folder for the Local backend\n");
        return 2;
    }
    BACKENDS[2].param = local_dir;
    if (!load_cases())
        return 2;
    for (size_t b = 0; b < N_BACKENDS; b++) {
        for (int i = 0; i < g_n_cases; i++) {
            if (only && !strstr(g_cases[i].name, only))
                continue;
            data_run d = {&BACKENDS[b], &g_cases[i]};
            harness_run(g_cases[i].name, BACKENDS[b].name, run_data_case, &d);
        }
        for (size_t i = 0; i < sizeof CONTRACT / sizeof CONTRACT[0]; i++) {
            if (CONTRACT[i].cross_process_only && !BACKENDS[b].cross_process)
                continue;
            if (only && !strstr(CONTRACT[i].name, only))
                continue;
            harness_run(CONTRACT[i].name, BACKENDS[b].name, CONTRACT[i].body, &BACKENDS[b]);
        }
    }
    for (size_t i = 0; i < sizeof GENERAL / sizeof GENERAL[0]; i++) {
        if (only && !strstr(GENERAL[i].name, only))
            continue;
        harness_run(GENERAL[i].name, "any", GENERAL[i].body, NULL);
    }
    free(g_cases_text);
    return harness_summary();
}
