/* The quick start of ffi/README.md, raising its own stop flag so that it
 * ends; compiled and run by ffi/test.sh against the build tree and the
 * installed library (pkg-config). Memory backend: needs no server. */
#include <mistri_locks.h>
#include <stdio.h>

int main(void)
{
    mistri_locks *locks = NULL;
    mistri_hold *hold = NULL;
    mistri_signal *signal = NULL;
    bool aborted = false;
    mistri_hold_options_builder *opts = NULL;
    if (mistri_locks_memory_new(&locks) != MISTRI_OK || mistri_hold_options_new(&opts) != MISTRI_OK ||
        mistri_hold_options_set_heartbeat(opts, 0.1) != MISTRI_OK ||
        mistri_hold_options_set_stop_key(opts, "stop:report") != MISTRI_OK ||
        mistri_hold_start_with(locks, "report", opts, &hold) != MISTRI_OK || hold == NULL)
        return fprintf(stderr, "no hold: %s\n", mistri_last_error()), 1;
    mistri_hold_options_free(opts);
    mistri_hold_signal(hold, &signal);
    mistri_locks_set_flag(locks, "stop:report", MISTRI_FLAG_TTL); /* from anywhere */
    mistri_signal_wait(signal, 5.0, &aborted);                   /* your work loop */
    printf("stopped: %s (library %s)\n", aborted ? "yes" : "no", mistri_version());
    mistri_hold_free(hold); /* releases the lease */
    mistri_signal_free(signal);
    mistri_locks_free(locks);
    return aborted ? 0 : 1;
}
