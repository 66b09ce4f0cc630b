/* The README's C quick start, against the backend in argv[1] instead of
 * memory:// (so another process can stop it): holds "report" watching
 * "stop:report" until someone raises that flag (tests/packaging/run.sh
 * does, with the tarball's mistri-locks). Prints the library's version,
 * HELD, then STOPPED. Compiled against the unpacked tarball via pkg-config. */
#include <mistri_locks.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    mistri_locks *locks = NULL;
    mistri_hold_options_builder *opts = NULL;
    mistri_hold *hold = NULL;
    mistri_signal *signal = NULL;
    bool aborted = false;
    int turns = 0;
    if (argc != 2)
        return fprintf(stderr, "usage: quickstart URL\n"), 2;
    printf("VERSION %s %s\n", mistri_version(), MISTRI_LOCKS_VERSION);
    if (strcmp(mistri_version(), MISTRI_LOCKS_VERSION) != 0)
        return fprintf(stderr, "header and library disagree\n"), 1;
    if (mistri_locks_open(argv[1], NULL, &locks) != MISTRI_OK || mistri_hold_options_new(&opts) != MISTRI_OK ||
        mistri_hold_options_set_stop_key(opts, "stop:report") != MISTRI_OK ||
        mistri_hold_start_with(locks, "report", opts, &hold) != MISTRI_OK || hold == NULL)
        return fprintf(stderr, "no hold: %s\n", mistri_last_error()), 1;
    mistri_hold_options_free(opts);
    mistri_hold_signal(hold, &signal);
    printf("HELD\n");
    fflush(stdout);
    /* One unit of work per turn until someone raises stop:report; bounded
       so that a broken install ends instead of hanging the run. */
    while (turns++ < 120 && mistri_signal_wait(signal, 0.5, &aborted) == MISTRI_OK && !aborted)
        ;
    mistri_hold_free(hold);
    mistri_signal_free(signal);
    mistri_locks_free(locks);
    printf(aborted ? "STOPPED\n" : "NOT STOPPED\n");
    return aborted ? 0 : 1;
}
